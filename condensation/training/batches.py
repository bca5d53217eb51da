"""Token blocks in training: the order the loop reads them in, the next-token loss of a batch (with
the training forward, as one function to compile), and the validation loss over the fixed
validation blocks."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from accelerate import Accelerator

from condensation.config.runs import TrainConfig


@functools.lru_cache(maxsize=4)
def epoch_permutation(num_blocks: int, seed: int, epoch: int) -> np.ndarray:
    """Order of the blocks in ``epoch``: its own generator, so the order depends on nothing else."""
    generator = torch.Generator().manual_seed(seed + epoch)
    return torch.randperm(num_blocks, generator=generator).numpy()


def block_indices(num_blocks: int, seed: int, start: int, count: int) -> np.ndarray:
    """Blocks ``start .. start + count - 1`` of the endless stream formed by concatenating the
    per-epoch permutations; a batch may straddle two epochs."""
    parts = []
    while count > 0:
        epoch, position = divmod(start, num_blocks)
        take = min(count, num_blocks - position)
        parts.append(epoch_permutation(num_blocks, seed, epoch)[position : position + take])
        start, count = start + take, count - take
    return np.concatenate(parts)


def causal_lm_ce(logits: torch.Tensor, input_ids: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Next-token cross-entropy: position t predicts token t + 1. Computed in float32 even under
    bf16 autocast, since a bf16 log-softmax over a large vocabulary loses precision."""
    # Shift the targets, not the logits: slicing the logits copies the largest activation of the
    # step (B x T x vocab) and its backward allocates another; the ignored last position is free.
    targets = F.pad(input_ids[:, 1:], (0, 1), value=-100)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100, reduction=reduction)


def forward_and_ce(
    model: torch.nn.Module, inputs: dict[str, torch.Tensor], input_ids: torch.Tensor, vocab_size: int,
    output_hidden_states: bool,
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """The training forward and its next-token CE in one function, so that ``torch.compile`` takes
    the loss into the model's graph: compiled, the float32 log-softmax is fused with the logits'
    cast rather than run eagerly over a float32 copy of all B x T x vocab logits. ``inputs`` are
    the model's (``input_ids`` or ``inputs_embeds``); the labels are ``input_ids``. Returns the CE,
    the logits cut to the true ``vocab_size`` (a view: a padded vocabulary's rows never reach a
    loss, so they get no gradient) and the hidden states (None unless ``output_hidden_states``)."""
    out = model(**inputs, output_hidden_states=output_hidden_states, use_cache=False)
    logits = out.logits[..., :vocab_size]
    return causal_lm_ce(logits, input_ids), logits, out.hidden_states


def check_blocks(blocks: np.ndarray, block_size: int, name: str) -> np.ndarray:
    blocks = np.asarray(blocks)
    if blocks.ndim != 2 or blocks.shape[1] != block_size or len(blocks) == 0:
        raise ValueError(f"{name} must be a non-empty [num_blocks, {block_size}] array, got shape {blocks.shape}")
    if not np.issubdtype(blocks.dtype, np.integer):
        raise ValueError(f"{name} must hold integer token ids, got {blocks.dtype}")
    return blocks


def validation_batches(count: int, rank: int, world: int, batch_size: int, lockstep: bool = False) -> list[np.ndarray]:
    """Rank ``rank``'s share of validation blocks ``0 .. count - 1``: every ``world``-th block from
    its own, in batches. ``lockstep``: every rank gets as many batches as the rank with the most,
    padded with empty ones (each forward of a sharded model is a collective that all ranks join)."""
    mine = np.arange(rank, count, world)
    batches = [mine[first : first + batch_size] for first in range(0, len(mine), batch_size)]
    if lockstep:
        most = math.ceil(math.ceil(count / world) / batch_size)
        batches += [mine[:0]] * (most - len(batches))
    return batches


@torch.no_grad()
def validation_loss(
    accelerator: Accelerator,
    module: torch.nn.Module,
    val_blocks: np.ndarray,
    config: TrainConfig,
    autocast: Callable[[], contextlib.AbstractContextManager],
    lockstep: bool = False,
) -> float:
    """Mean next-token CE over the fixed validation blocks, in eval mode (no dropout, so it draws
    nothing from the RNG and does not perturb training). Ranks take interleaved shares and the
    (sum, count) pairs are gathered, so the value does not depend on how blocks split over ranks.
    ``module`` is the unwrapped model: a DDP forward may broadcast buffers, a collective that
    would hang when ranks run different numbers of validation batches. ``lockstep`` (a sharded
    model): a rank out of blocks runs a forward on the first one, uncounted, while others finish."""
    count = min(len(val_blocks), config.val_batches * config.micro_batch_size)
    module.eval()
    totals = torch.zeros(1, 2, dtype=torch.float64, device=accelerator.device)
    rank, world = accelerator.process_index, accelerator.num_processes
    for batch in validation_batches(count, rank, world, config.micro_batch_size, lockstep):
        ids = torch.as_tensor(val_blocks[batch if len(batch) else [0]], dtype=torch.long).to(accelerator.device)
        with autocast():
            logits = module(input_ids=ids, use_cache=False).logits
        if len(batch):
            totals[0, 0] += causal_lm_ce(logits, ids, reduction="sum").double()
            totals[0, 1] += ids.shape[0] * (ids.shape[1] - 1)
    module.train()
    ce_sum, predicted = accelerator.gather(totals).sum(dim=0).tolist()
    return ce_sum / predicted
