"""Training baselines that the paper compares the dispersion loss against, as hooks into ``train()``.

    NoisyEmbedding     NEFTune (Jain et al. 2023): uniform noise on the input embeddings of every
                       training forward; validation sees the clean embeddings
    ActiveForgetting   Chen et al. 2023: every K optimizer steps, re-initialise the input embedding
                       matrix and its AdamW moments, so the body must learn to work with new embeddings

A baseline is a ``training.terms.TrainingTerm`` that adds no loss and changes training through
its three hooks, all no-ops in ``TrainingBaseline``:

    prepare(model)                        once, before the optimizer is built
    inputs_embeds(model, input_ids)       every training micro-batch: embeddings to feed instead of ids
    after_step(step, model, optimizer)    after every optimizer update, with the new global step

Both baselines are exactly resumable: the noise comes from the global torch RNG (saved and restored
by ``train``), and a reset from a generator seeded by (run seed, step) alone, which also gives every
DDP rank the same new embeddings.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from condensation.config.objectives import (
    OBJECTIVES,
    ActiveForgettingConfig,
    NoisyEmbeddingConfig,
    resolve_method,
)
from condensation.training.terms import TrainingTerm

# ----------------------------------------------------------------------------- the hooks


class TrainingBaseline(TrainingTerm):
    """Base class: a baseline that changes nothing. Subclasses override the hooks they need."""

    name = "none"
    config: Any = None
    hooks_the_model = True

    def describe(self) -> dict[str, Any]:
        """Name and options, as recorded in the resume identity and ``train_summary.json``."""
        options = dataclasses.asdict(self.config) if self.config is not None else {}
        return {"name": self.name} | options

    def identity(self) -> dict[str, Any]:
        return {"aux_weight": 0.0, "baseline": self.describe()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"


def noise_magnitude(alpha: float, seq_len: int, hidden_size: int) -> float:
    """NEFTune's bound m = alpha / sqrt(T * H): the noise vector of a whole sequence then has a
    norm of about alpha / sqrt(3), whatever its length and width."""
    return alpha / math.sqrt(seq_len * hidden_size)


class NoisyEmbedding(TrainingBaseline):
    name = "noisy_embedding"

    def __init__(self, config: NoisyEmbeddingConfig | None = None) -> None:
        self.config = config or NoisyEmbeddingConfig()

    def inputs_embeds(self, model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
        # Token embeddings only: the model adds its position embeddings (GPT2) or rotations (Qwen3)
        # to whatever it is given, as NEFTune does. Gradients flow to the embeddings through `embeds`.
        embeds = model.get_input_embeddings()(input_ids)
        bound = noise_magnitude(self.config.alpha, input_ids.shape[1], embeds.shape[-1])
        # The global RNG: train() saves and restores it, so a resumed run draws the same noise.
        return embeds + torch.zeros_like(embeds).uniform_(-bound, bound)


class ActiveForgetting(TrainingBaseline):
    name = "active_forgetting"

    def __init__(self, config: ActiveForgettingConfig | None = None) -> None:
        self.config = config or ActiveForgettingConfig()

    def prepare(self, model: nn.Module) -> None:
        if self.config.tied_head == "untie" and _head_is_tied(model):
            untie_output_head(model)

    @torch.no_grad()
    def after_step(
        self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, *, seed: int = 0, final: bool = False
    ) -> None:
        # No reset after the last update: nothing would relearn the embeddings, and the final model
        # (the one the geometry is measured on) would be left with random ones.
        if step % self.config.every != 0 or final:
            return
        if self.config.tied_head == "untie" and _head_is_tied(model):
            raise RuntimeError("ActiveForgetting(tied_head='untie'): call prepare(model) before the optimizer is built")
        embedding = model.get_input_embeddings()
        weight = embedding.weight
        std = self.config.std or getattr(model.config, "initializer_range", None) or 0.02
        # Drawn on the CPU from (seed, step) alone: the same on every rank and device, and on a
        # resume, whatever the global RNG state.
        generator = torch.Generator().manual_seed(reset_seed(seed, step))
        fresh = torch.empty(weight.shape, dtype=torch.float32).normal_(0.0, std, generator=generator)
        if embedding.padding_idx is not None:
            fresh[embedding.padding_idx] = 0.0  # as nn.Embedding initialises it
        weight.copy_(fresh)
        # Stale moments would keep pushing the new embeddings along the old ones' gradients; with
        # its step at 0 too, Adam's bias correction restarts as for a fresh parameter.
        for value in optimizer.state.get(weight, {}).values():
            if torch.is_tensor(value):
                value.zero_()  # exp_avg, exp_avg_sq (max_exp_avg_sq with amsgrad) and the step


def reset_seed(seed: int, step: int) -> int:
    """One well-mixed 64-bit seed per (run seed, step): resets of nearby steps or seeds draw
    unrelated matrices."""
    return int(np.random.SeedSequence([seed, step]).generate_state(1, dtype=np.uint64)[0])


def _head_is_tied(model: nn.Module) -> bool:
    head = model.get_output_embeddings()
    return head is not None and head.weight is model.get_input_embeddings().weight


def untie_output_head(model: nn.Module) -> None:
    """Give the output head its own parameter, a copy of the input embeddings, and record it in the
    config so that ``save_pretrained`` writes both and ``from_pretrained`` does not tie them again."""
    head = model.get_output_embeddings()
    head.weight = nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    model.config.tie_word_embeddings = False
    text_config = model.config.get_text_config()  # multimodal models keep the flag there
    if text_config is not model.config:
        text_config.tie_word_embeddings = False
    if hasattr(model, "all_tied_weights_keys"):  # transformers >= 5 caches the tying plan
        model.all_tied_weights_keys = model.get_expanded_tied_weights_keys(all_submodels=True)


# ----------------------------------------------------------------------------- by name


def make_baseline(name: str, **options: Any) -> TrainingBaseline:
    """A baseline from its objective name and options, e.g. ``make_baseline("noisy_embedding", alpha=5.0)``:
    the term of the method ``{"objective": name, **options}`` (names, options and classes come from
    the registry ``config.objectives.OBJECTIVES``)."""
    objective = OBJECTIVES.get(name)
    if objective is None or objective.kind != "baseline":
        known = [n for n, o in OBJECTIVES.items() if o.kind == "baseline"]
        raise ValueError(f"unknown training baseline {name!r} (known: {', '.join(known)})")
    return resolve_method({"objective": name, **options}).build()


__all__ = (
    "ActiveForgetting",
    "ActiveForgettingConfig",
    "NoisyEmbedding",
    "NoisyEmbeddingConfig",
    "TrainingBaseline",
    "make_baseline",
    "noise_magnitude",
    "reset_seed",
    "untie_output_head",
)
