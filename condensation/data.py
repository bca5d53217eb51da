"""Text for the pipeline: seeded sampling of evaluation sequences, and packed blocks for training.

Sampling follows the paper: for sequence ``r`` pick a random starting row in the first 95 % of
the dataset and join consecutive rows until at least ``min_words`` words are gathered. Samples
are stored as text, tokenizer-independent; each model's tokenizer then cuts exactly ``T`` tokens
(:func:`tokenize_exactly`). A subword tokenizer gives at least one token per word, so
``min_words >= T`` guarantees the length; a shorter sequence is an error, never padding.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import torch

from .config import SamplingConfig
from .corpus import paragraphs
from .io import atomic_path, manifest_path, verify_manifest, write_manifest

START_FRACTION = 0.95
"""Starting rows are drawn from the first 95 % so a window rarely runs off the end."""


class DatasetError(ValueError):
    """A dataset cannot provide what was asked of it (empty, too short, unreadable)."""


def read_local_documents(spec: Mapping[str, Any], corpus_dir: str | Path | None) -> dict[str, str]:
    """Documents of a local dataset: ``files`` globs, or the ``.txt`` files of a built corpus dir."""
    if spec["source"] == "files":
        paths = sorted({p for pattern in spec["files"] for p in glob.glob(pattern, recursive=True)})
        if not paths:
            raise DatasetError(f"no file matches {spec['files']}")
    else:
        if corpus_dir is None or not Path(corpus_dir).is_dir():
            raise DatasetError(f"corpus directory missing: {corpus_dir}")
        if manifest_path(corpus_dir).exists():  # built by the pipeline: check it is whole
            verify_manifest(corpus_dir)
        paths = sorted(str(p) for p in Path(corpus_dir).glob("*.txt"))
    documents = {Path(p).stem: Path(p).read_text(encoding="utf-8", errors="replace") for p in paths}
    excluded = set(spec.get("exclude", []))
    unknown = excluded - documents.keys()
    if unknown:
        raise DatasetError(f"exclude names unknown documents {sorted(unknown)} (have: {sorted(documents)[:10]} ...)")
    return {name: text for name, text in documents.items() if name not in excluded}


def load_rows(name: str, spec: Mapping[str, Any], corpus_dir: str | Path | None = None) -> list[str]:
    """The dataset as an ordered list of non-empty text rows (hub rows, or local paragraphs)."""
    if spec["source"] == "hub":
        import datasets  # imported here: loading the library is slow and only hub datasets need it

        table = datasets.load_dataset(spec["path"], spec.get("name"), split=spec.get("split", "train"))
        field = spec.get("field", "text")
        if field not in table.column_names:
            raise DatasetError(f"dataset '{name}' has no column '{field}' (columns: {table.column_names})")
        rows = [text for text in table[field] if isinstance(text, str) and text.strip()]
    else:
        rows = [p for text in read_local_documents(spec, corpus_dir).values() for p in paragraphs(text)]
    if not rows:
        raise DatasetError(f"dataset '{name}' has no non-empty text rows")
    return rows


def sample_sequences(rows: list[str], sampling: SamplingConfig) -> list[dict[str, Any]]:
    """``num_sequences`` windows of consecutive rows holding at least ``min_words`` words each."""
    word_counts = np.array([len(row.split()) for row in rows])
    total_words = int(word_counts.sum())
    if total_words < sampling.min_words:
        raise DatasetError(
            f"dataset holds {total_words} words in all, fewer than min_words={sampling.min_words} "
            "needed for one sequence"
        )
    samples = []
    for index in range(sampling.num_sequences):
        rng = np.random.default_rng([sampling.seed, index])
        start = int(rng.integers(0, max(1, int(len(rows) * START_FRACTION))))
        taken, words, row = [], 0, start
        while words < sampling.min_words:  # wraps around at the end: the total is large enough
            taken.append(rows[row])
            words += int(word_counts[row])
            row = (row + 1) % len(rows)
        samples.append({"index": index, "start_row": start, "num_words": words, "text": "\n".join(taken)})
    return samples


def write_samples(path: str | Path, samples: list[dict[str, Any]], **manifest_fields: Any) -> None:
    """Write samples as JSON lines, atomically, with a checksummed manifest beside them."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as handle:
            for sample in samples:
                handle.write(json.dumps(sample, ensure_ascii=False) + "\n")
    write_manifest(path, num_sequences=len(samples), **manifest_fields)


def read_samples(path: str | Path) -> list[str]:
    """Texts of a samples file, after checking it against its manifest."""
    verify_manifest(path)
    with open(path, encoding="utf-8") as handle:
        texts = [json.loads(line)["text"] for line in handle if line.strip()]
    if not texts:
        raise DatasetError(f"{path} holds no sequences")
    return texts


def tokenize_exactly(tokenizer, texts: list[str], seq_len: int, where: str = "") -> torch.Tensor:
    """Token ids ``[N, seq_len]``: each text cut to exactly ``seq_len`` tokens (special tokens included)."""
    rows = []
    for index, text in enumerate(texts):
        ids = tokenizer(text, truncation=True, max_length=seq_len)["input_ids"]
        if len(ids) < seq_len:
            raise DatasetError(
                f"{where}sequence {index} has {len(ids)} tokens, fewer than seq_len={seq_len}: "
                "raise sampling.min_words or lower sampling.seq_len"
            )
        rows.append(ids)
    return torch.tensor(rows, dtype=torch.long)


def pack_blocks(documents: Iterable[list[int]], block_size: int, separator_id: int | None) -> np.ndarray:
    """Concatenate tokenised documents (``separator_id`` after each, if given) and cut the stream
    into ``[num_blocks, block_size]`` int64 blocks; the incomplete tail is dropped."""
    stream: list[int] = []
    for ids in documents:
        stream.extend(ids)
        if separator_id is not None:
            stream.append(separator_id)
    num_blocks = len(stream) // block_size
    if num_blocks == 0:
        raise ValueError(
            f"corpus has {len(stream)} tokens, fewer than one block of {block_size}: "
            "add text or lower the block size"
        )
    return np.asarray(stream[: num_blocks * block_size], dtype=np.int64).reshape(num_blocks, block_size)
