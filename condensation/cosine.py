"""The one cosine helper: token states as unit rows, with a floored norm.

The measurements (:mod:`condensation.cosine_extraction`, :mod:`condensation.lens_extraction`), the losses and the
loss kernel (:mod:`condensation.training.losses`, :mod:`condensation.training.kernels`) all
normalise through :func:`unit_rows`, so a loss sees the cosines the figures report. It sits below
all of them and imports nothing of the package. The measurements, which need no gradient and no
mask, read :func:`unit_directions`, the same unit rows, a stack of layers at a time
(:func:`accumulate`): computed once per batch and shared by the cosines and the other lenses.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import torch

NORM_EPS = 1e-6
"""Floor on a token's norm: a zero vector gets cosine 0 with everything, not NaN. The measurements,
the losses and the loss kernel all normalise through :func:`unit_rows`, so a loss sees the
cosines the figures report."""


def unit_rows(z: torch.Tensor, eps: float = NORM_EPS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(z / norm, norm, floored)`` along the last dimension: the unit rows, the floored norms
    ``[..., 1]`` and where the floor applied. The floor is on the squared norm (the square root
    of a floored square, not a floored norm), whose gradient stays finite at exactly zero, so one
    form serves the measurements and the losses' backward alike."""
    sq_norm, norm = _squared_and_floored_norm(z, eps)
    floored = sq_norm < eps**2  # clamp_min passes the gradient at equality; so does the loss kernel
    return z / norm, norm, floored


def unit_directions(z: torch.Tensor, eps: float = NORM_EPS) -> torch.Tensor:
    """``unit_rows(z)[0]`` alone, the same values: what the measurements read, without the floor's
    mask (one operation fewer)."""
    return z / _squared_and_floored_norm(z, eps)[1]


def _squared_and_floored_norm(z: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    sq_norm = z.pow(2).sum(-1, keepdim=True)
    return sq_norm, sq_norm.clamp_min(eps**2).sqrt()


STACK_VALUES = 1 << 26
"""Hidden-state values the measurements normalise and reduce at once on a GPU (256 MB in float32):
the consecutive layers of a batch that share a device are stacked ``[m, B, T, d]`` up to this many
values, so that each operation launches once for all of them rather than once per layer
(GPT2-small at 16 x 256 tokens: all 13 hidden states in one stack of 164 MB); a larger model's
come a few layers at a time (at least one), so that memory stays one stack's."""

CPU_STACK_VALUES = 1 << 18
"""The same on a CPU (1 MB in float32), where an operation costs no launch but a stack larger than
the cache costs memory traffic: GPT2-small's layers one at a time (a 13-layer stack of 4 x 128
tokens made a batch's reductions about 1.3x slower on one thread of a busy 2-core machine)."""


def unit_layer_stacks(hidden_states: Sequence[torch.Tensor],
                      budget: int | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The unit rows (:func:`unit_directions`, float32) of each layer's ``[B, T, d]`` states and
    their floored norms ``[m, B, T]``, in order, as stacks ``[m, B, T, d]`` of consecutive layers
    on one device, each of at most ``budget`` values or one layer (None: :data:`STACK_VALUES` on a
    GPU, :data:`CPU_STACK_VALUES` on a CPU). The norms are what the massive-activation lenses read
    (a token's largest entry is its norm times its unit row's)."""
    stack: list[torch.Tensor] = []
    for hidden in hidden_states:
        limit = budget or (CPU_STACK_VALUES if hidden.device.type == "cpu" else STACK_VALUES)
        if stack and (hidden.device != stack[0].device or (len(stack) + 1) * hidden.numel() > limit):
            yield _unit_stack(stack)
            stack = []
        stack.append(hidden)
    if stack:
        yield _unit_stack(stack)


def _unit_stack(layers: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    stacked = (layers[0].unsqueeze(0) if len(layers) == 1 else torch.stack(layers)).float()
    norm = _squared_and_floored_norm(stacked, NORM_EPS)[1]  # the norm unit_directions divides by
    return stacked / norm, norm.squeeze(-1)


class LayerAccumulator(Protocol):
    """A running reduction over batches that reads the unit rows of every layer."""

    def add_layers(self, units: torch.Tensor, norms: torch.Tensor) -> None:
        """The current batch's next layers, as their unit rows ``[m, B, T, d]`` and the states'
        norms ``[m, B, T]``."""

    def end_batch(self) -> None:
        """The batch is complete: add it."""


def accumulate(accumulators: Iterable[LayerAccumulator], hidden_states: Sequence[torch.Tensor]) -> None:
    """Add one batch of hidden states (``[B, T, d]`` per layer) to every accumulator: each stack
    of unit rows is computed once and read by all of them, then dropped."""
    accumulators = list(accumulators)
    for units, norms in unit_layer_stacks(hidden_states):
        for accumulator in accumulators:
            accumulator.add_layers(units, norms)
    for accumulator in accumulators:
        accumulator.end_batch()


def join_stacks(batch: Sequence[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    """An accumulator's reductions of one batch, one tuple per stack of layers (each part
    ``[m, ...]``), joined along the layers on the first stack's device: a model spread over several
    GPUs leaves its stacks on several."""
    device = batch[0][0].device
    return tuple(parts[0] if len(parts) == 1 else torch.cat([part.to(device) for part in parts])
                 for parts in zip(*batch))
