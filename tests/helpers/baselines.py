"""The baseline tests' tiny setup: a 2-layer GPT-2 with tied input and output embeddings, random
token blocks, a short config, and each baseline by name (tests/unit/test_baselines.py and the
two-process script it starts)."""

from __future__ import annotations

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from condensation.config.runs import TrainConfig
from condensation.training.baselines import (
    ActiveForgetting,
    ActiveForgettingConfig,
    NoisyEmbedding,
    NoisyEmbeddingConfig,
)

VOCAB, BLOCK, HIDDEN = 97, 16, 32


def make_model(seed: int = 0) -> GPT2LMHeadModel:
    """Tiny GPT-2 with tied input/output embeddings and its default dropout (so resume needs the RNG)."""
    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=2, n_embd=HIDDEN, n_head=2, n_positions=64, vocab_size=VOCAB, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(config)


def make_blocks(num_blocks: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, size=(num_blocks, BLOCK), dtype=np.int64)


TRAIN_BLOCKS, VAL_BLOCKS = make_blocks(20, seed=1), make_blocks(8, seed=2)


def short_config(steps: int, **overrides) -> TrainConfig:
    """``steps`` optimizer steps of 2 micro-batches of 2 blocks; states only when asked (stop)."""
    settings = dict(
        train_tokens=steps * 2 * 2 * BLOCK, block_size=BLOCK, micro_batch_size=2, grad_accum_steps=2,
        lr=1e-2, num_checkpoints=0, checkpoint_every=1000, val_batches=2, seed=3,
    )
    return TrainConfig(**(settings | overrides))


BASELINES = {
    "noisy": lambda: NoisyEmbedding(NoisyEmbeddingConfig(alpha=5.0)),
    "forgetting": lambda: ActiveForgetting(ActiveForgettingConfig(every=3)),
    "forgetting-reset": lambda: ActiveForgetting(ActiveForgettingConfig(every=3, tied_head="reset")),
}
