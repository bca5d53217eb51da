"""Sampling sequences, exact tokenisation, packing, and checksummed sample files."""

import json

import numpy as np
import pytest

from condensation.config.specs import DatasetSpec, SamplingConfig
from condensation.data.packing import pack_token_blocks, read_blocks, tokenize_exactly
from condensation.data.text import (
    OVERLAP_WARNING_FRACTION,
    DatasetError,
    fetch_hub_dataset,
    load_rows,
    read_samples,
    repeated_fraction,
    sample_sequences,
    write_samples,
)
from condensation.runtime.io import CorruptArtifactError

ROWS = [f"row {i} " + "word " * (i % 7 + 1) for i in range(200)]


def sampling(**changes):
    values = {"num_sequences": 6, "seq_len": 8, "min_words": 30, "seed": 0, **changes}
    return SamplingConfig(**values)


def test_sampling_is_seeded_and_reaches_min_words():
    first = sample_sequences(ROWS, sampling())
    again = sample_sequences(ROWS, sampling())
    other = sample_sequences(ROWS, sampling(seed=1))
    assert first == again
    assert [s["start_row"] for s in first] != [s["start_row"] for s in other]
    for sample in first:
        assert len(sample["text"].split()) == sample["num_words"] >= 30
        assert sample["start_row"] < int(len(ROWS) * 0.95)


def test_each_sequence_is_consecutive_rows_from_its_start():
    for sample in sample_sequences(ROWS, sampling()):
        lines = sample["text"].split("\n")
        start = sample["start_row"]
        assert lines == [ROWS[(start + k) % len(ROWS)] for k in range(len(lines))]


def test_sequence_index_does_not_depend_on_how_many_are_drawn():
    assert sample_sequences(ROWS, sampling(num_sequences=3)) == sample_sequences(ROWS, sampling(num_sequences=6))[:3]


def test_too_little_text_is_a_clear_error():
    with pytest.raises(DatasetError,
                       match=r"holds 9 words, fewer than config.sampling.num_sequences x min_words = 6 x 500"):
        sample_sequences(["a few words"] * 3, sampling(min_words=500))
    # enough for one sequence but not for six of their own: they would share their text
    with pytest.raises(DatasetError, match="= 6 x 30 = 180; add text to it, or lower"):
        sample_sequences(["ten words " * 5] * 3, sampling(min_words=30))


def test_repeated_fraction_measures_text_the_sequences_share():
    rows = ["one two three four five"] * 40
    assert repeated_fraction([{"start_row": 0, "num_rows": 4}, {"start_row": 10, "num_rows": 4}], 40) == 0.0
    # rows 2 and 3 held by both windows: 4 of the 8 rows read
    assert repeated_fraction([{"start_row": 0, "num_rows": 4}, {"start_row": 2, "num_rows": 4}], 40) == 0.5
    # wrapped past the end onto the start of the other
    assert repeated_fraction([{"start_row": 38, "num_rows": 3}, {"start_row": 0, "num_rows": 1}], 40) == 0.5
    few = sample_sequences(rows, sampling(num_sequences=6, min_words=30))  # 200 words for 6 x 30
    assert repeated_fraction(few, len(rows)) > OVERLAP_WARNING_FRACTION
    assert (repeated_fraction(sample_sequences(ROWS * 20, sampling(num_sequences=3)), len(ROWS) * 20)
            < OVERLAP_WARNING_FRACTION)


def test_sampling_a_short_dataset_names_its_key_and_warns_on_overlap(tmp_path, caplog):
    from condensation.stages.data import sample_dataset

    (tmp_path / "short.txt").write_text("Five words and no more.\n")
    spec = {"source": "files", "files": [str(tmp_path / "short.txt")]}
    with pytest.raises(DatasetError, match=r"^config\.datasets\.mine: holds 5 words"):
        sample_dataset(name="mine", spec=spec, sampling=sampling(), out_path=tmp_path / "s.jsonl", corpus_dir=None)
    (tmp_path / "short.txt").write_text("\n\n".join(f"paragraph {i} " + "word " * 8 for i in range(30)))
    with caplog.at_level("WARNING", logger="condensation"):
        sample_dataset(name="mine", spec=spec, sampling=sampling(), out_path=tmp_path / "s.jsonl", corpus_dir=None)
    assert "config.datasets.mine" in caplog.text and "shared between sequences" in caplog.text
    assert json.loads((tmp_path / "s.jsonl.manifest.json").read_text())["repeated_fraction"] > OVERLAP_WARNING_FRACTION


def test_empty_local_dataset_is_a_clear_error(tmp_path):
    (tmp_path / "blank.txt").write_text("\n\n   \n")
    with pytest.raises(DatasetError, match="dataset 'blank' has no non-empty text rows"):
        load_rows(DatasetSpec.from_config("blank", {"source": "files", "files": [str(tmp_path / "*.txt")]}))


def test_missing_files_are_a_clear_error(tmp_path):
    with pytest.raises(DatasetError, match="no file matches"):
        load_rows(DatasetSpec.from_config("x", {"source": "files", "files": [str(tmp_path / "missing*.txt")]}))


def test_local_rows_are_paragraphs_and_exclude_drops_documents(tmp_path):
    (tmp_path / "a.txt").write_text("First paragraph\nwrapped.\n\nSecond one.\n")
    (tmp_path / "b.txt").write_text("Held out.\n")
    spec = {"source": "files", "files": [str(tmp_path / "*.txt")], "exclude": ["b"]}
    assert load_rows(DatasetSpec.from_config("x", spec)) == ["First paragraph wrapped.", "Second one."]
    with pytest.raises(DatasetError, match="unknown documents"):
        load_rows(DatasetSpec.from_config("x", {**spec, "exclude": ["c"]}))


def test_tokenize_exactly_cuts_every_sequence_to_seq_len(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    texts = [sample["text"] for sample in sample_sequences(ROWS, sampling())]
    ids = tokenize_exactly(tokenizer, texts, 8)
    assert ids.shape == (6, 8)
    with pytest.raises(DatasetError, match=r"sequence 1 has \d+ tokens, fewer than seq_len=64"):
        tokenize_exactly(tokenizer, [texts[0] * 20, "too short"], 64)


def test_samples_file_round_trip_and_corruption_is_detected(tmp_path):
    path = tmp_path / "samples" / "rows.jsonl"
    samples = sample_sequences(ROWS, sampling())
    write_samples(path, samples, dataset="rows")
    assert read_samples(path) == [s["text"] for s in samples]
    manifest = json.loads(path.with_name("rows.jsonl.manifest.json").read_text())
    assert manifest["num_sequences"] == 6 and manifest["dataset"] == "rows"

    path.write_text(path.read_text()[:-40])  # a truncated file, as a killed writer might leave
    with pytest.raises(CorruptArtifactError, match="does not match its manifest"):
        read_samples(path)


class CharTokenizer:
    """Each character is a token (its code point); a row ends with eos = 0."""

    eos_token_id = 0

    def __call__(self, rows):
        return {"input_ids": [[ord(c) for c in row] for row in rows]}


def test_pack_token_blocks_streams_rows_into_memory_mapped_blocks(tmp_path):
    batches = [["ab", "c"], ["def"], ["ghijkl"]]  # 16 tokens: a b 0 c 0 d e f 0 g h i j k l 0
    path = tmp_path / "blocks.npy"
    assert pack_token_blocks(iter(batches), CharTokenizer(), 3, 0.25, path) == (4, 1)
    train, validation = read_blocks(path)
    codes = [0 if c == "0" else ord(c) for c in "ab0c0def0ghijkl"]  # the partial block (the last 0) is dropped
    assert np.concatenate([train, validation]).ravel().tolist() == codes
    assert validation.shape == (1, 3) and train.dtype == np.uint32
    assert isinstance(train, np.memmap)
    with pytest.raises(DatasetError, match="too few to hold out validation"):
        pack_token_blocks(iter([["ab"]]), CharTokenizer(), 4, 0.1, tmp_path / "short.npy")
    with open(path, "r+b") as handle:  # damage one token: the reader refuses the file
        handle.seek(-1, 2)
        handle.write(b"\xff")
    with pytest.raises(CorruptArtifactError, match="does not match its manifest"):
        read_blocks(path)


def test_hub_source_is_fetched_once_then_read_from_its_own_copy(tmp_path):
    """The `hub` code path is `datasets.load_dataset(path, name, split)` (a local directory of
    JSON lines goes through the same call that a hub id does), fetched into a directory of its
    own that later jobs read without network or Hugging Face cache."""
    folder = tmp_path / "review_data"
    folder.mkdir()
    rows = [{"review": f"review number {i} " * 3, "label": i % 2} for i in range(5)] + [{"review": "  ", "label": 0}]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    spec = {"source": "hub", "path": str(folder), "name": None, "split": "train", "field": "review"}
    assert fetch_hub_dataset(DatasetSpec.from_config("reviews", spec), tmp_path / "fetched") == 6
    loaded = load_rows(DatasetSpec.from_config("reviews", spec), tmp_path / "fetched")
    assert loaded == [r["review"] for r in rows[:5]]  # blank rows dropped, order kept
    with pytest.raises(DatasetError,
                       match=r"dataset 'reviews' has no column 'text' \(columns: \['review', 'label'\]\)"):
        fetch_hub_dataset(DatasetSpec.from_config("reviews", {**spec, "field": "text"}), tmp_path / "other")
    with pytest.raises(DatasetError, match="has not been fetched"):
        load_rows(DatasetSpec.from_config("reviews", spec))
