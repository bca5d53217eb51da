"""Stages of rules/data.smk: offline corpora, samples, packed training blocks."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from condensation import models
from condensation.config.specs import DatasetSpec, SamplingConfig, as_settings
from condensation.data import corpus, packing, text

log = logging.getLogger("condensation")


def build_corpus(*, source: str, deb_path: str | Path, out_dir: str | Path) -> None:
    """Unpack a Debian package into a scratch directory and export its texts, one file each."""
    documents = corpus.build_corpus_dir(source, deb_path, out_dir)
    log.info("exported %d documents (%d characters) to %s", len(documents), sum(map(len, documents.values())), out_dir)


def fetch_dataset(*, name: str, spec: Mapping[str, Any], out_dir: str | Path) -> None:
    """Download a hub dataset's text into ``out_dir`` (this stage runs where the network is)."""
    rows = text.fetch_hub_dataset(DatasetSpec.from_config(name, spec), out_dir)
    log.info("%s: %d rows of %s", name, rows, spec["path"])


@contextlib.contextmanager
def naming_the_dataset(name: str) -> Iterator[None]:
    """A DatasetError raised inside, with the config key of the dataset it is about in front."""
    try:
        yield
    except text.DatasetError as error:
        if str(error).startswith("config."):
            raise
        raise text.DatasetError(f"config.datasets.{name}: {error}") from error


def sample_dataset(
    *, name: str, spec: Mapping[str, Any], sampling: SamplingConfig | Mapping[str, Any], out_path: str | Path,
    corpus_dir: str | Path | None,
) -> None:
    sampling = as_settings(SamplingConfig, sampling)
    with naming_the_dataset(name):
        rows = text.load_rows(DatasetSpec.from_config(name, spec), corpus_dir)
        samples = text.sample_sequences(rows, sampling)
    repeated = text.repeated_fraction(samples, len(rows))
    if repeated > text.OVERLAP_WARNING_FRACTION:
        log.warning(
            "config.datasets.%s: %.0f%% of the sampled text is shared between sequences (over %.0f%%): they are "
            "far from independent, and the intervals treat them as independent; add text, or lower "
            "config.sampling.num_sequences or min_words", name, 100 * repeated, 100 * text.OVERLAP_WARNING_FRACTION,
        )
    text.write_samples(
        out_path,
        samples,
        dataset=name,
        source=dict(spec),
        num_rows=len(rows),
        seq_len=sampling.seq_len,
        min_words=sampling.min_words,
        seed=sampling.seed,
        repeated_fraction=repeated,
    )
    log.info("%s: %d sequences from %d rows", name, len(samples), len(rows))


def pack_training_data(
    *, dataset: str, spec: Mapping[str, Any], corpus_dir: str | Path | None, tokenizer_source: str | Path,
    block_size: int, validation_fraction: float, out_path: str | Path,
) -> None:
    """Tokenise the dataset batch by batch, pack blocks, hold out the last blocks for validation.

    ``tokenizer_source`` is a tokenizer directory or a model's ``handle.json`` (mid-training packs
    with each model's own tokenizer).
    """
    source = Path(tokenizer_source)
    if source.suffix == ".json":
        tokenizer = models.load_tokenizer(models.ModelHandle.load(source))
    else:
        # deferred: transformers is heavy; the other data stages need none
        from transformers import AutoTokenizer  # noqa: PLC0415

        tokenizer = AutoTokenizer.from_pretrained(str(source))
    with naming_the_dataset(dataset):
        batches = text.iter_rows(DatasetSpec.from_config(dataset, spec), corpus_dir)
        num_train, num_val = packing.pack_token_blocks(batches, tokenizer, block_size, validation_fraction, out_path)
    log.info("packed %d train + %d validation blocks of %d tokens", num_train, num_val, block_size)
