"""Stages of rules/models.smk: tokenizer, from-scratch pre-training, model handles."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

from .. import data, models
from ..settings import RunPlan, plan_run

log = logging.getLogger("condensation")


def prepare_tokenizer(
    *, dataset: str, spec: Mapping[str, Any] | None, corpus_dir: str | Path | None,
    handle_path: str | Path | None, vocab_size: int, out_dir: str | Path,
) -> None:
    """The pre-training tokenizer: a prepared model's (``handle_path``), or a BPE trained on the dataset."""
    if handle_path is not None:
        models.save_tokenizer(models.load_tokenizer(models.ModelHandle.load(handle_path)), out_dir)
    else:
        models.train_bpe_tokenizer(data.load_rows(dataset, spec, corpus_dir), vocab_size, out_dir)


def plan_pretrain(*, model: str, arch: Mapping[str, int], train: Mapping[str, Any], seed: int, out_path: str | Path) -> None:
    """``run.json`` of a from-scratch run: the GPT2 shape, the training settings, cross-entropy only."""
    plan_run("pretrain", model, train, seed, arch=arch).save(out_path)


def pretrain_model(*, plan_path: str | Path, tokenizer_dir: str | Path, blocks_path: str | Path, threads: int = 1) -> None:
    """Pre-train a GPT2-shaped model from scratch with plain cross-entropy, in the plan's directory."""
    import torch
    from transformers import AutoTokenizer

    from ..train import train

    torch.set_num_threads(threads)
    plan = RunPlan.load(plan_path)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    model = models.build_gpt2(plan.arch, tokenizer, seed=plan.train.seed)
    train_blocks, val_blocks = data.read_blocks(blocks_path)
    result = train(model, train_blocks, val_blocks, plan.train, Path(plan_path).parent, tokenizer=tokenizer)
    log.info("pre-trained %s: %s", plan.model, result)


def prepare_model(
    *, name: str, spec: Mapping[str, Any], handle_path: str | Path, weights_dir: str | Path,
    pretrained_dir: str | Path | None = None, tokenizer_dir: str | Path | None = None,
    base_handle_path: str | Path | None = None, arch: Mapping[str, int] | None = None, seed: int = 0,
) -> None:
    """Resolve a model of any source to a handle; GGUF and init models get their own weights dir.

    An ``init`` model is the seeded random initialisation either of a pretrain model's GPT2
    shape (with the pre-training tokenizer) or of a hub model's architecture (with its tokenizer).
    """
    source = spec["source"]
    if source == "hub":
        handle = models.prepare_hub(name, spec["id"], spec.get("revision"), spec.get("trust_remote_code", False))
    elif source == "local":
        handle = models.prepare_local(name, spec["path"], spec.get("trust_remote_code", False))
    elif source == "gguf":
        handle = models.convert_gguf(name, spec["path"], weights_dir)
    elif source == "pretrain":
        handle = models.prepare_local(name, str(pretrained_dir))
    elif source == "init" and base_handle_path is not None:
        base = models.ModelHandle.load(base_handle_path)
        models.save_model_dir(models.build_from_config(base, seed), models.load_tokenizer(base), weights_dir)
        handle = models.prepare_local(name, str(weights_dir), base.trust_remote_code)
    elif source == "init":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        models.save_model_dir(models.build_gpt2(arch, tokenizer, seed), tokenizer, weights_dir)
        handle = models.prepare_local(name, str(weights_dir))
    else:  # the schema admits no other source
        raise ValueError(f"unknown model source {source!r}")
    handle.save(handle_path)
    log.info("prepared %s", handle)
