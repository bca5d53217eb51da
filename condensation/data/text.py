"""Text for the pipeline: a dataset's rows (a built-in corpus, your files, a hub dataset) and the
seeded sampling of the sequences whose hidden states are measured.

Sampling follows the paper: for sequence ``r`` pick a random starting row in the first 95 % of
the dataset and join consecutive rows until at least ``min_words`` words are gathered. Samples
are stored as text, tokenizer-independent; each model's tokenizer then cuts exactly ``T`` tokens
(:func:`condensation.data.packing.tokenize_exactly`). A subword tokenizer gives at least one token per word, so
``min_words >= T`` guarantees the length; a shorter sequence is an error, never padding.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from condensation.config.datasets import local_files, too_short
from condensation.config.specs import DatasetSpec, SamplingConfig
from condensation.data.corpus import paragraphs
from condensation.runtime.hub_retry import with_hub_retries
from condensation.runtime.io import (
    atomic_path,
    manifest_path,
    verify_manifest,
    write_manifest,
)

START_FRACTION = 0.95
"""Starting rows are drawn from the first 95 % so a window rarely runs off the end."""


class DatasetError(ValueError):
    """A dataset cannot provide what was asked of it (empty, too short, unreadable)."""


def read_local_documents(spec: DatasetSpec, corpus_dir: str | Path | None) -> dict[str, str]:
    """Documents of a local dataset: ``files`` globs, or the ``.txt`` files of a built corpus dir."""
    if spec.source == "files":
        paths = local_files(spec.files)
        if not paths:
            raise DatasetError(f"no file matches {spec.files}")
    else:
        if corpus_dir is None or not Path(corpus_dir).is_dir():
            raise DatasetError(f"corpus directory missing: {corpus_dir}")
        if manifest_path(corpus_dir).exists():  # built by the pipeline: check it is whole
            verify_manifest(corpus_dir)
        paths = sorted(str(p) for p in Path(corpus_dir).glob("*.txt"))
    documents = {Path(p).stem: Path(p).read_text(encoding="utf-8", errors="replace") for p in paths}
    excluded, chosen = set(spec.exclude), set(spec.documents or documents)
    for key, names in (("exclude", excluded), ("documents", chosen)):
        unknown = names - documents.keys()
        if unknown:
            raise DatasetError(f"{key} names unknown documents {sorted(unknown)} (have: {sorted(documents)[:10]} ...)")
    return {name: text for name, text in documents.items() if name in chosen and name not in excluded}


def load_hub_dataset(spec: DatasetSpec):
    """The hub dataset's split as an Arrow table (memory-mapped), checked to hold the configured
    text column. Downloads (or reads the Hugging Face cache), retrying the Hub's transient faults."""
    # deferred: datasets, of the workflow extra, is slow; hub datasets only
    import datasets  # noqa: PLC0415

    try:
        table = with_hub_retries(
            lambda: datasets.load_dataset(spec.path, spec.name, split=spec.split, data_files=spec.data_files),
            f"dataset '{spec.dataset}': fetching {spec.path}")
    except (FileNotFoundError, ValueError, ConnectionError) as error:
        raise DatasetError(f"dataset '{spec.dataset}': cannot load {spec.path} ({spec.name}): {error}") from error
    if spec.field not in table.column_names:
        raise DatasetError(f"dataset '{spec.dataset}' has no column '{spec.field}' (columns: {table.column_names})")
    return table


def fetch_hub_dataset(spec: DatasetSpec, out_dir: str | Path) -> int:
    """Download a hub dataset (where the network is) and keep its text column as an Arrow
    dataset in ``out_dir``, with a manifest: the jobs that read it need no network and no
    Hugging Face cache (whose offline lookup fails for datasets loaded with ``data_files``).
    Returns the number of rows."""
    table = load_hub_dataset(spec).select_columns([spec.field])
    source = {key: value for key, value in dataclasses.asdict(spec).items() if key != "dataset"}
    with atomic_path(out_dir) as tmp:
        table.save_to_disk(str(tmp))
        write_manifest(tmp, kind="hub_dataset", dataset=spec.dataset, source=source, num_rows=table.num_rows)
    return table.num_rows


def iter_rows(spec: DatasetSpec, corpus_dir: str | Path | None = None, batch_size: int = 1000) -> Iterator[list[str]]:
    """The dataset's non-empty text rows (hub rows, or local paragraphs), in order, in batches.
    ``corpus_dir`` is the built corpus, or for a hub dataset the Arrow dataset its fetch wrote,
    memory-mapped and read a batch at a time, never whole."""
    if spec.source != "hub":
        rows = [p for text in read_local_documents(spec, corpus_dir).values() for p in paragraphs(text)]
        yield from (rows[start : start + batch_size] for start in range(0, len(rows), batch_size))
        return
    # deferred: datasets, of the workflow extra, is slow; hub datasets only
    import datasets  # noqa: PLC0415

    if corpus_dir is None:
        raise DatasetError(f"dataset '{spec.dataset}' has not been fetched (no directory given)")
    verify_manifest(corpus_dir)
    for batch in datasets.load_from_disk(str(corpus_dir)).iter(batch_size):
        yield [text for text in batch[spec.field] if isinstance(text, str) and text.strip()]


def read_documents(spec: DatasetSpec, corpus_dir: str | Path | None = None) -> dict[str, str]:
    """The dataset's documents by name: a local dataset's files or corpus documents; a hub
    dataset's rows joined into one document named after the dataset (paragraphs between rows)."""
    if spec.source != "hub":
        return read_local_documents(spec, corpus_dir)
    return {spec.dataset: "\n\n".join(row for batch in iter_rows(spec, corpus_dir) for row in batch)}


def load_rows(spec: DatasetSpec, corpus_dir: str | Path | None = None) -> list[str]:
    """The dataset as an ordered list of non-empty text rows (hub rows, or local paragraphs)."""
    rows = [row for batch in iter_rows(spec, corpus_dir) for row in batch]
    if not rows:
        raise DatasetError(f"dataset '{spec.dataset}' has no non-empty text rows")
    return rows


OVERLAP_WARNING_FRACTION = 0.1
"""Above this share of sampled rows that repeat rows of other sequences, sampling warns: the
sequences are then far from independent, while the intervals over them count them so (a text set
of a few times ``num_sequences x min_words`` words exceeds it; the built-in corpora stay near 0)."""


def sample_sequences(rows: list[str], sampling: SamplingConfig) -> list[dict[str, Any]]:
    """``num_sequences`` windows of consecutive rows holding at least ``min_words`` words each.
    DatasetError when the rows hold fewer than ``num_sequences x min_words`` words."""
    word_counts = np.array([len(row.split()) for row in rows])
    problem = too_short(int(word_counts.sum()), sampling.num_sequences, sampling.min_words)
    if problem:
        raise DatasetError(problem)
    samples = []
    for index in range(sampling.num_sequences):
        rng = np.random.default_rng([sampling.seed, index])
        start = int(rng.integers(0, max(1, int(len(rows) * START_FRACTION))))
        taken, words, row = [], 0, start
        while words < sampling.min_words:  # wraps around at the end: the total is large enough
            taken.append(rows[row])
            words += int(word_counts[row])
            row = (row + 1) % len(rows)
        samples.append({"index": index, "start_row": start, "num_rows": len(taken), "num_words": words,
                        "text": "\n".join(taken)})
    return samples


def repeated_fraction(samples: list[dict[str, Any]], num_rows: int) -> float:
    """The share of the sampled rows that another sequence (or the same one, wrapped) also holds:
    0 for disjoint windows, near 1 when every sequence reads the same few paragraphs."""
    counts = np.zeros(num_rows, dtype=np.int64)
    for sample in samples:
        np.add.at(counts, (sample["start_row"] + np.arange(sample["num_rows"])) % num_rows, 1)
    used = int(counts.sum())
    return float(counts[counts > 1].sum() / used) if used else 0.0


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


