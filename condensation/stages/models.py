"""Stages of rules/models.smk: the pre-training tokenizer and run plan, model handles. (The
pre-training itself runs through ``stages.training.train_run``, as every training run does.)"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from condensation import models
from condensation.config.runs import plan_run
from condensation.config.specs import DatasetSpec, ModelSpec
from condensation.data import text

log = logging.getLogger("condensation")


def prepare_tokenizer(
    *, dataset: str, spec: Mapping[str, Any] | None, corpus_dir: str | Path | None,
    handle_path: str | Path | None, vocab_size: int, out_dir: str | Path,
) -> None:
    """The pre-training tokenizer: a prepared model's (``handle_path``), or a BPE trained on the dataset."""
    if handle_path is not None:
        models.save_tokenizer(models.load_tokenizer(models.ModelHandle.load(handle_path)), out_dir)
    else:
        models.train_bpe_tokenizer(text.load_rows(DatasetSpec.from_config(dataset, spec), corpus_dir), vocab_size,
                                   out_dir)


def plan_pretrain(*, model: str, arch: Mapping[str, int], train: Mapping[str, Any], seed: int,
                  out_path: str | Path) -> None:
    """``run.json`` of a from-scratch run: the GPT2 shape, the training settings, cross-entropy only."""
    plan_run("pretrain", model, train, seed, arch=arch).save(out_path)


def prepare_model(
    *, name: str, spec: Mapping[str, Any], handle_path: str | Path, weights_dir: str | Path,
    pretrained_dir: str | Path | None = None, tokenizer_dir: str | Path | None = None,
    base_handle_path: str | Path | None = None, arch: Mapping[str, int] | None = None, seed: int = 0,
) -> None:
    """Resolve a model of any source to a handle; GGUF and init models get their own weights dir.
    A ``pretrain`` or ``run`` model's handle points at its training run's ``final/``.

    An ``init`` model is the seeded random initialisation either of a pretrain model's GPT2
    shape (with the pre-training tokenizer) or of a hub model's architecture (with its tokenizer).
    The init of an LN-scaled pretrain model (``arch`` says ``ln_scaling``, ``config.plan.built_arch``)
    is saved with the constants folded into its norms and ``ln_scaling: true`` in its config, which
    the runs that start from it read (``models.build_from_config``).
    """
    spec = ModelSpec.from_config(name, spec)
    source = spec.source
    if source == "hub":
        handle = models.prepare_hub(name, spec.id, spec.revision, spec.trust_remote_code)
    elif source == "local":
        handle = models.prepare_local(name, spec.path, spec.trust_remote_code)
    elif source == "gguf":
        handle = models.convert_gguf(name, spec.path, weights_dir)
    elif source == "pretrain":
        handle = models.prepare_local(name, str(pretrained_dir))
    elif source == "run":  # a study run's final weights, where the run left them
        handle = models.prepare_local(name, str(pretrained_dir), spec.trust_remote_code)
    elif source == "init" and base_handle_path is not None:
        base = models.ModelHandle.load(base_handle_path)
        model = models.build_from_config(base, seed, tie_word_embeddings=spec.tie_word_embeddings)
        models.save_model_dir(model, models.load_tokenizer(base), weights_dir)
        handle = models.prepare_local(name, str(weights_dir), base.trust_remote_code)
    elif source == "init":
        # deferred: transformers is heavy; other sources need none
        from transformers import AutoTokenizer  # noqa: PLC0415

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        models.save_model_dir(models.build_gpt2(arch, tokenizer, seed), tokenizer, weights_dir)
        handle = models.prepare_local(name, str(weights_dir))
    else:  # the schema admits no other source
        raise ValueError(f"unknown model source {source!r}")
    handle.save(handle_path)
    log.info("prepared %s", handle)
