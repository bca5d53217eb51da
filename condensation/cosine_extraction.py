"""Measuring a model's cosine geometry: its hidden states reduced on the fly, batch by batch, to
the :class:`~condensation.geometry.CosineStatistics` that :mod:`condensation.geometry` stores
and reads (torch, on the model's device), and the condensation probe of the training loop.

A batch costs a few operations whatever the depth: the unit rows of a stack of layers are computed
once and shared with the other lenses (:func:`condensation.cosine.accumulate`), the cosines of
every layer in the stack come from one batched product, and their histograms from one count. The
histogram of the mean matrix is counted on the model's device too, once per call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from condensation.cosine import accumulate, join_stacks, unit_directions
from condensation.geometry import NUM_BINS, CosineStatistics, counts_to_density
from condensation.hidden_states import source_of
from condensation.lens_extraction import LensAccumulator
from condensation.lenses import SAMPLE_TOKENS
from condensation.trend import trend_statistics


def cosine_matrices(hidden: torch.Tensor) -> torch.Tensor:
    """Pairwise cosine similarity of tokens: ``[B, T, d] -> [B, T, T]`` in float32, clipped to [-1, 1]."""
    z = unit_directions(hidden.float())
    return torch.bmm(z, z.transpose(1, 2)).clamp_(-1.0, 1.0)


def density_histogram(values: torch.Tensor | np.ndarray, bins: int = NUM_BINS,
                      weights: torch.Tensor | None = None) -> np.ndarray:
    """Density histogram over [-1, 1] (integrates to 1), matching ``np.histogram(density=True)``
    (and its ``weights``)."""
    counts = histogram_counts(torch.as_tensor(values), bins, weights)
    return counts_to_density(counts.cpu().numpy())


def histogram_counts(values: torch.Tensor, bins: int = NUM_BINS, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Counts in ``bins`` equal bins over [-1, 1], as ``np.histogram`` counts them, edges included:
    a value on an inner edge goes to the bin above, the right edge 1.0 falls in the last bin, and
    values beyond [-1, 1] count in the outer bins. With ``weights`` (one per value), each value
    counts its weight. float64 (exact whole numbers, unweighted)."""
    flat = values.reshape(1, -1).clamp(-1.0, 1.0)
    return closed_counts(edge_counts(flat, bins, None if weights is None else weights.reshape(-1)))[0].double()


def edge_counts(values: torch.Tensor, bins: int = NUM_BINS, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Counts ``[m, bins + 1]`` of each of ``m`` layers' values ``[m, ...]`` in [-1, 1], all layers
    in one call: ``bins`` equal bins, then a column for the values exactly 1.0, which
    :func:`closed_counts` adds to the last bin (so that no clamp pass is needed per batch).
    ``weights`` (``values.shape[1:]``, the same for every layer): each value counts its weight.

    A value ``x`` goes to bin ``floor((x + 1) * bins / 2)``, computed exactly: with ``bins`` a
    power of two, ``x * bins / 2`` and its floor are exact in the values' own dtype (no float64
    copy of float32 cosines), and the whole-number offsets of the bin and the layer are added after
    the floor; other ``bins`` take a float64 pass. Unweighted, ``torch.histc`` counts the whole
    numbers, exactly: in float32 while a count and the kernel's ``position * columns`` stay below
    2^24, else in float64. It fills shared-memory histograms on a GPU (no atomic queue on the few
    bins where cosines crowd) and reads nothing back; the weighted count (``bincount``, once per
    call) reads its size back."""
    layers, columns = values.shape[0], values.shape[0] * (bins + 1)
    exact_float32 = columns**2 <= 2**24 and values[0].numel() <= 2**24
    shape = (layers,) + (1,) * (values.ndim - 1)
    if bins > 1 and bins & (bins - 1) == 0:  # a power of two
        scaled, first = (values * (bins / 2)).floor_(), bins / 2
    else:
        scaled, first = ((values.double() + 1.0) * (bins / 2)).floor_(), 0
    offsets = torch.arange(first, columns, bins + 1, device=values.device,
                           dtype=torch.float32 if exact_float32 else torch.float64)
    positions = scaled + offsets.view(shape)  # layer l's bins at l * (bins + 1) .. l * (bins + 1) + bins
    if weights is None:
        counts = torch.histc(positions, columns, 0, columns)
    else:
        counts = torch.bincount(positions.long().reshape(-1), weights.double().expand(values.shape).reshape(-1),
                                minlength=columns)
    return counts.view(layers, bins + 1)


def closed_counts(counts: torch.Tensor) -> torch.Tensor:
    """``[..., bins + 1]`` counts of :func:`edge_counts` as ``[..., bins]``: the right edge 1.0
    into the last bin."""
    return torch.cat([counts[..., :-2], counts[..., -2:].sum(-1, keepdim=True)], dim=-1)


CHUNK_VALUES = 1 << 18
"""Cosines held at once (1 MB in float32): the ``[B, T, T]`` matrices of a stack of layers are
computed a few whole layers at a time while they fit, else a few whole sequences of one layer while
one sequence's ``T x T`` fits (up to ``T = 512``), and in chunks of rows of one sequence above that,
so that memory grows with ``T``, not ``T^2``. Small chunks stay in the processor's cache: at ``T =
2048`` on a CPU they reduce 3x faster than one ``T x T`` matrix."""

DEVICE_CHUNK_VALUES = 1 << 24
"""Cosines held at once on a GPU (64 MB in float32, about 0.2 GB with the histogram's float32
temporaries): a GPU wants few large matrix products, and cache-sized chunks would make it launch
thousands of small kernels per batch (the first GPU check measured the cosines at 4.6x a bare
forward pass with ``CHUNK_VALUES``; this size awaits the next)."""


def position_blocks(seq_len: int, size: int | None) -> torch.Tensor | None:
    """The block of each of ``seq_len`` positions when the mean matrix is kept at ``size x size``
    (``size`` near-equal runs of consecutive positions); None when it is kept whole."""
    if size is not None and size < 1:
        raise ValueError(f"heatmap size must be a positive number of cells or None (full resolution), got {size}")
    if size is None or seq_len <= size:
        return None
    return torch.arange(seq_len) * size // seq_len


class CosineAccumulator:
    """Running sums of per-layer cosine statistics over batches of equal-length sequences.

    Memory: the mean matrix's cells (``T x T``, or ``heatmap_size^2`` above that length) and a
    histogram per layer, two numbers per sequence and layer, and one chunk of cosines at a time
    (``chunk_values``; None: :data:`CHUNK_VALUES` on a CPU, :data:`DEVICE_CHUNK_VALUES` on a GPU):
    linear in ``T`` and in the number of sequences once ``T`` exceeds ``heatmap_size``. Every
    statistic but the mean matrix is exact at any length; the mean matrix is exact up to
    ``heatmap_size`` and block-averaged above it.

    A batch's layers come as stacks of unit rows (:func:`condensation.cosine.accumulate`, which
    ``update`` calls), and a chunk holds several whole layers when they fit: on a GPU a batch is a
    handful of operations in all, not a handful per layer.
    """

    def __init__(self, bins: int = NUM_BINS, heatmap_size: int | None = None, chunk_values: int | None = None) -> None:
        position_blocks(1, heatmap_size)  # checks the size
        self.bins, self.heatmap_size, self.chunk_values = bins, heatmap_size, chunk_values
        self.count = 0
        self.seq_len: int | None = None
        self._blocks: torch.Tensor | None = None  # [T] block of each position; None: full resolution
        self._device_blocks: dict[torch.device, torch.Tensor] = {}  # the same, copied once to each device
        self._sum: torch.Tensor | None = None  # [L+1, C, C] float64 sums of cosines per cell
        self._pooled: torch.Tensor | None = None  # [L+1, bins + 1] counts (edge_counts)
        self._sequence_sums: list[torch.Tensor] = []  # per batch [L+1, 2, B]: all pairs, diagonal
        self._batch: list[tuple[torch.Tensor, ...]] = []  # the current batch's reductions, a stack at a time
        self._batch_size = 0

    def update(self, hidden_states: Sequence[torch.Tensor]) -> None:
        """Add one batch: ``hidden_states[l]`` is ``[B, T, d]`` for every layer ``l``."""
        accumulate([self], hidden_states)

    def add_layers(self, units: torch.Tensor, norms: torch.Tensor | None = None) -> None:
        """The current batch's next layers, as their unit rows ``[m, B, T, d]``
        (:func:`condensation.cosine.unit_layer_stacks`; the cosines read no norm);
        :meth:`end_batch` adds the batch."""
        seq_len = int(units.shape[2])
        if self.seq_len is None:
            self.seq_len, self._blocks = seq_len, position_blocks(seq_len, self.heatmap_size)
        elif seq_len != self.seq_len:
            raise ValueError(f"batch has sequences of {seq_len} tokens but earlier batches had {self.seq_len}: "
                             "every sequence must have the same length")
        self._batch.append(self._reduce_layers(units))
        self._batch_size = int(units.shape[1])

    def end_batch(self) -> None:
        """Add the batch whose layers :meth:`add_layers` took. Each stack was reduced on its own
        device (a model spread over several GPUs leaves its layers on several); the reductions
        meet on the first's."""
        batch_sum, batch_counts, per_sequence = join_stacks(self._batch)
        self._batch = []
        if self._sum is None:
            self._sum, self._pooled = batch_sum, batch_counts.double()
        else:
            if batch_sum.shape[0] != self._sum.shape[0]:
                raise ValueError(f"batch has {batch_sum.shape[0]} layers but earlier batches had {self._sum.shape[0]}")
            self._sum += batch_sum
            self._pooled += batch_counts
        self._sequence_sums.append(per_sequence)
        self.count += self._batch_size

    def _reduce_layers(self, units: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """A stack of layers' unit rows ``[m, B, T, d]``: the cell sums ``[m, C, C]``, the histogram
        counts ``[m, bins + 1]`` (:func:`edge_counts`) and each sequence's sums ``[m, 2, B]`` (all
        pairs, diagonal)."""
        layers, batch, seq_len = units.shape[:3]
        budget = self.chunk_values or (CHUNK_VALUES if units.device.type == "cpu" else DEVICE_CHUNK_VALUES)
        # whole layers at a time while their T x T matrices fit the budget, else whole sequences of one
        # layer while one's fits, else rows of one (a batched matmul computes each sequence alone, so
        # the values are those of one call over the batch)
        per_chunk = max(1, budget // (batch * seq_len**2))
        sequences = min(batch, max(1, budget // seq_len**2))
        rows = seq_len if seq_len**2 <= budget else max(1, budget // seq_len)
        chunks = [(slice(first, first + per_chunk), slice(sequence, sequence + sequences), slice(row, row + rows))
                  for first in range(0, layers, per_chunk) for sequence in range(0, batch, sequences)
                  for row in range(0, seq_len, rows)]
        if len(chunks) == 1:  # the sums of the one chunk are the stack's: nothing to add up
            return self._reduce_chunk(units, slice(0, seq_len))
        cells = seq_len if self._blocks is None else int(self.heatmap_size)
        cell_sum = torch.zeros(layers, cells, cells, dtype=torch.float64, device=units.device)
        counts = torch.zeros(layers, self.bins + 1, dtype=torch.float64, device=units.device)
        totals = torch.zeros(layers, 2, batch, dtype=torch.float64, device=units.device)
        for layer, sequence, row in chunks:
            chunk_sum, chunk_counts, chunk_totals = self._reduce_chunk(units[layer, sequence], row)
            (cell_sum[layer] if self._blocks is not None else cell_sum[layer, row]).add_(chunk_sum)
            counts[layer].add_(chunk_counts)
            totals[layer, :, sequence].add_(chunk_totals)
        return cell_sum, counts, totals

    def _reduce_chunk(self, units: torch.Tensor, rows: slice) -> tuple[torch.Tensor, ...]:
        """The ``rows`` of the cosine matrices of ``units`` ``[m, b, T, d]``: their sums over the
        ``b`` sequences into cells (``[m, len(rows), T]``, or ``[m, C, C]`` block-averaged), their
        histogram counts ``[m, bins + 1]`` and each sequence's sums ``[m, 2, b]``."""
        cos = torch.matmul(units[:, :, rows], units.transpose(-1, -2)).clamp_(-1.0, 1.0)  # [m, b, rows, T]
        self_cos = torch.diagonal(cos, offset=rows.start, dim1=-2, dim2=-1)  # [m, b, rows]: the pairs (i, i)
        totals = torch.stack([cos.sum(dim=(-2, -1), dtype=torch.float64), self_cos.sum(-1, dtype=torch.float64)],
                             dim=1)
        summed = cos.sum(dim=1, dtype=torch.float64)  # [m, rows, T]
        if self._blocks is not None:  # columns into their blocks, then rows
            blocks = self._device_blocks.get(units.device)
            if blocks is None:
                blocks = self._device_blocks[units.device] = self._blocks.to(units.device)
            cells = int(self.heatmap_size)
            by_column = summed.new_zeros(*summed.shape[:2], cells).index_add_(2, blocks, summed)
            summed = summed.new_zeros(summed.shape[0], cells, cells).index_add_(1, blocks[rows], by_column)
        return summed, edge_counts(cos, self.bins), totals

    def finalize(self, meta: dict[str, Any] | None = None) -> CosineStatistics:
        """The statistics of every sequence seen. The mean matrix's histogram is counted where the
        sums are (on the model's device) and read back with them."""
        if self._sum is None or self.count == 0:
            raise ValueError("no sequences were accumulated")
        seq_len = int(self.seq_len)
        cell_means = self._sum / self.count  # [L+1, C, C]: summed over the pairs in each cell
        # [L+1, 2, N] -> each sequence's sums [N, L+1], all pairs and diagonal
        sequence_total, sequence_diag = torch.cat(self._sequence_sums, dim=-1).cpu().permute(1, 2, 0)
        pairs, offdiag_pairs = seq_len**2, max(seq_len * (seq_len - 1), 1)
        total = cell_means.sum(dim=(-2, -1)).cpu()
        offdiag = (total - sequence_diag.sum(0) / self.count) / offdiag_pairs
        meta = dict(meta or {})
        if self._blocks is None:
            mean, weights = cell_means, None
        else:  # each cell the mean of its block of pairs; the histogram weighs a cell by its pairs
            sizes = torch.bincount(self._blocks, minlength=cell_means.shape[-1]).double().to(cell_means.device)
            weights = sizes[:, None] * sizes[None, :]
            mean = cell_means / weights
            meta["heatmap_cells"] = int(cell_means.shape[-1])
        return CosineStatistics(
            mean_cosine=mean.float().cpu().numpy(),
            hist_of_mean=counts_to_density(closed_counts(edge_counts(mean, self.bins, weights)).cpu().numpy()),
            hist_pooled=counts_to_density(closed_counts(self._pooled).cpu().numpy()),
            layer_mean=(total / pairs).numpy(),
            layer_mean_offdiag=offdiag.numpy(),
            num_sequences=self.count,
            meta=meta,
            sequence_layer_mean=(sequence_total / pairs).numpy(),
            sequence_layer_mean_offdiag=((sequence_total - sequence_diag) / offdiag_pairs).numpy(),
            positions=None if self._blocks is None else seq_len,
        )


@torch.inference_mode()
def extract_cosine_statistics(
    model: Any,
    input_ids: torch.Tensor,
    batch_size: int = 8,
    meta: dict[str, Any] | None = None,
    progress: Callable[[int], object] | None = None,
    lens_tokens: int | None = SAMPLE_TOKENS,
    heatmap_size: int | None = None,
) -> CosineStatistics:
    """Run ``model`` on ``input_ids`` ``[N, T]`` in batches and reduce all hidden states on the fly.

    ``model``: a Hugging Face model, a TransformerLens or nnsight wrapper, or a callable returning
    the per-layer hidden states (:func:`condensation.hidden_states.source_of`). All sequences have
    exactly ``T`` tokens, so batches need no padding and no attention mask. The cosine reductions
    run on the model's device. ``progress`` is called with each batch's number of sequences (e.g.
    ``progress.ProgressLog(...).update``). The other lenses (:mod:`condensation.lenses`) read the
    same hidden states, their spectral ones from a sample of ``lens_tokens`` tokens per layer; None
    (or a single sequence) measures the cosines alone. ``heatmap_size``: keep the mean matrix whole
    up to that ``T`` and block-averaged to that size above it (None: always whole).
    """
    if input_ids.ndim != 2 or input_ids.shape[0] == 0:
        raise ValueError(f"input_ids must be [N, T] with N >= 1, got shape {tuple(input_ids.shape)}")
    source = source_of(model)
    accumulator = CosineAccumulator(heatmap_size=heatmap_size)
    lens_sums = None
    if lens_tokens is not None and input_ids.shape[0] >= 2:
        lens_sums = LensAccumulator(*input_ids.shape, sample_tokens=lens_tokens)
    accumulators = [accumulator] if lens_sums is None else [accumulator, lens_sums]
    for start in range(0, input_ids.shape[0], batch_size):
        batch = input_ids[start : start + batch_size].to(source.device)
        hidden_states = source(batch)
        accumulate(accumulators, hidden_states)  # the unit rows computed once for both
        del hidden_states
        if progress is not None:
            progress(batch.shape[0])
    stats = accumulator.finalize(meta)
    if lens_sums is not None:
        stats.lenses = lens_sums.finalize()
    return stats


@torch.no_grad()
def condensation_probe(
    module: torch.nn.Module, probe_ids: torch.Tensor, batch_size: int,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> dict[str, float]:
    """Condensation of ``module`` on the ``[N, T]`` token ids ``probe_ids``: Spearman ``rho`` and
    Kendall ``tau`` of the per-layer mean pairwise cosine against depth, and ``deep_cos``, that
    mean over the deeper half of the layers (``trend_statistics``' ``last_half``). The
    per-layer mean takes all T^2 pairs of every sequence and the embedding output counts as
    layer 0: the paper's mu, and the trend tables' default conventions.

    Runs in eval mode (no dropout, so nothing is drawn from the RNG) and puts back the mode it
    found: a probe between two steps leaves the training trajectory untouched."""
    was_training = module.training
    module.eval()
    try:
        sums: torch.Tensor | float = 0.0  # per-layer sums of cosines, on the model's device
        for first in range(0, len(probe_ids), batch_size):
            with autocast():
                out = module(input_ids=probe_ids[first : first + batch_size], output_hidden_states=True,
                             use_cache=False)
            # one [B, T, T] matrix at a time, reduced at once: memory of a single layer's cosines
            sums = sums + torch.stack([cosine_matrices(h).sum(dtype=torch.float64) for h in out.hidden_states])
            del out
    finally:
        module.train(was_training)
    layer_means = (sums / (probe_ids.shape[0] * probe_ids.shape[1] ** 2)).tolist()
    trend = trend_statistics(layer_means)
    return {"rho": trend.spearman_rho, "tau": trend.kendall_tau, "deep_cos": trend.last_n["last_half"]}
