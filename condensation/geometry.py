"""Layer-wise cosine geometry of token hidden states, and its trend with depth.

For every layer ``l`` (0 = embedding output, ``L`` = last hidden state as the model returns it)
and every sequence of ``T`` tokens we take the ``T x T`` matrix of pairwise cosine similarities.
Across sequences we keep only running sums, never the per-sequence matrices:

* ``mean_cosine[l]``: the position-wise mean over sequences of the cosine matrices (the paper
  averages matrices before taking the histogram);
* ``hist_of_mean[l]``: density histogram (128 bins over [-1, 1]) of that averaged matrix,
  what the paper's heatmaps show;
* ``hist_pooled[l]``: density histogram of every per-sequence cosine value, pooled; wider,
  since averaging narrows the distribution;
* ``layer_mean[l]``: mean over all ``T^2`` pairs, diagonal included (the paper's mu^(l));
  ``layer_mean_offdiag[l]`` excludes the ``T`` self-pairs;
* ``sequence_layer_mean[n, l]`` (and ``_offdiag``): the same means for each sequence alone, so
  that statistics of the layer means get confidence intervals over sequences. Their mean over
  sequences is ``layer_mean``.

A batch costs a few operations whatever the depth: the unit rows of a stack of layers are computed
once and shared with the other lenses (:func:`condensation.cosine.accumulate`), the cosines of
every layer in the stack come from one batched product, and their histograms from one count. The
histogram of the mean matrix is counted on the model's device too, once per call.

Trend statistics (Spearman rho, Kendall tau of ``layer_mean`` against the layer index) are
positive when similarity grows with depth: condensation. With few layers any rising profile
gives rho = tau = 1, so two statistics that keep the size of the effect come with them: the
mean of the deeper half of the layers and the least-squares slope against layer fraction, each
with a bootstrap confidence interval over sequences.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from condensation import lenses as lens_module
from condensation.config.specs import TrendConfig
from condensation.cosine import accumulate, unit_directions
from condensation.hidden_states import source_of
from condensation.runtime.io import atomic_path, verify_manifest, write_manifest

log = logging.getLogger("condensation")

NUM_BINS = 128
"""Histogram bins over [-1, 1], as in the paper's heatmaps."""


def cosine_matrices(hidden: torch.Tensor) -> torch.Tensor:
    """Pairwise cosine similarity of tokens: ``[B, T, d] -> [B, T, T]`` in float32, clipped to [-1, 1]."""
    z = unit_directions(hidden.float())
    return torch.bmm(z, z.transpose(1, 2)).clamp_(-1.0, 1.0)


def density_histogram(values: torch.Tensor | np.ndarray, bins: int = NUM_BINS,
                      weights: torch.Tensor | None = None) -> np.ndarray:
    """Density histogram over [-1, 1] (integrates to 1), matching ``np.histogram(density=True)``
    (and its ``weights``)."""
    counts = histogram_counts(torch.as_tensor(values), bins, weights)
    return counts_to_density(counts)


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


def counts_to_density(counts: torch.Tensor | np.ndarray) -> np.ndarray:
    counts = np.asarray(counts.cpu() if isinstance(counts, torch.Tensor) else counts, dtype=np.float64)
    width = 2.0 / counts.shape[-1]
    total = counts.sum(axis=-1, keepdims=True)
    return counts / np.maximum(total, 1.0) / width


_SEQUENCE_ARRAYS = ("sequence_layer_mean", "sequence_layer_mean_offdiag")
"""Per-sequence arrays of :class:`CosineStatistics`, optional in a stored file."""


@dataclass
class CosineStatistics:
    """What one extraction (one model on one dataset) produces; saved as one ``.npz``."""

    mean_cosine: np.ndarray  # [L+1, T, T] float32, or [L+1, C, C] block means when T > C (``positions`` set)
    hist_of_mean: np.ndarray  # [L+1, bins] density
    hist_pooled: np.ndarray  # [L+1, bins] density
    layer_mean: np.ndarray  # [L+1], all T^2 pairs (paper)
    layer_mean_offdiag: np.ndarray  # [L+1], i != j only
    num_sequences: int
    meta: dict[str, Any] = field(default_factory=dict)
    # [N, L+1] per-sequence layer means; None in files written before they were stored
    sequence_layer_mean: np.ndarray | None = None
    sequence_layer_mean_offdiag: np.ndarray | None = None
    # the other lenses (condensation.lenses); None in files written before they were measured
    lenses: lens_module.LensStatistics | None = None
    # T when ``mean_cosine`` is block-averaged to fewer cells than T x T; None when it is whole
    positions: int | None = None

    @property
    def num_layers(self) -> int:
        """Number of hidden-state entries, embedding output included (``L + 1``)."""
        return int(self.layer_mean.shape[0])

    @property
    def seq_len(self) -> int:
        """T, the tokens of each sequence."""
        return int(self.positions if self.positions is not None else self.mean_cosine.shape[-1])

    @property
    def bin_edges(self) -> np.ndarray:
        return np.linspace(-1.0, 1.0, self.hist_of_mean.shape[-1] + 1)

    def save(self, path: str | Path) -> None:
        per_sequence = {
            name: values.astype(np.float64)
            for name in _SEQUENCE_ARRAYS
            if (values := getattr(self, name)) is not None
        }
        if self.lenses is not None:
            per_sequence |= {
                "lens_values": self.lenses.values, "lens_jackknife": self.lenses.jackknife,
                "lens_names": np.array(lens_module.LENS_NAMES),
                "lens_sample_tokens": np.int64(self.lenses.sample_tokens),
            }
        if self.positions is not None:  # only then: a file of whole matrices stays as it was
            per_sequence["positions"] = np.int64(self.positions)
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as handle:  # a file object keeps numpy from appending ".npz"
                np.savez_compressed(
                    handle,
                    mean_cosine=self.mean_cosine.astype(np.float32),
                    hist_of_mean=self.hist_of_mean.astype(np.float32),
                    hist_pooled=self.hist_pooled.astype(np.float32),
                    layer_mean=self.layer_mean.astype(np.float64),
                    layer_mean_offdiag=self.layer_mean_offdiag.astype(np.float64),
                    num_sequences=np.int64(self.num_sequences),
                    meta=np.array(json.dumps(self.meta, sort_keys=True)),
                    **per_sequence,
                )
        write_manifest(path, kind="cosine_statistics")

    @classmethod
    def load(cls, path: str | Path) -> CosineStatistics:
        """Load after checking the file against its manifest (``io.CorruptArtifactError`` if not).

        A file written before per-sequence means were stored loads with them set to None.
        """
        verify_manifest(path)
        with np.load(path, allow_pickle=False) as data:
            lenses = None
            if "lens_values" in data.files and tuple(data["lens_names"]) == lens_module.LENS_NAMES:
                lenses = lens_module.LensStatistics(data["lens_values"], data["lens_jackknife"],
                                                    int(data["lens_sample_tokens"]))
            return cls(
                mean_cosine=data["mean_cosine"],
                hist_of_mean=data["hist_of_mean"],
                hist_pooled=data["hist_pooled"],
                layer_mean=data["layer_mean"],
                layer_mean_offdiag=data["layer_mean_offdiag"],
                num_sequences=int(data["num_sequences"]),
                meta=json.loads(str(data["meta"])),
                **{name: data[name] if name in data.files else None for name in _SEQUENCE_ARRAYS},
                lenses=lenses,
                positions=int(data["positions"]) if "positions" in data.files else None,
            )


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

    def add_layers(self, units: torch.Tensor) -> None:
        """The current batch's next layers, as their unit rows ``[m, B, T, d]``
        (:func:`condensation.cosine.unit_layer_stacks`); :meth:`end_batch` adds the batch."""
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
        device = self._batch[0][0].device
        batch_sum, batch_counts, per_sequence = (
            parts[0] if len(parts) == 1 else torch.cat([part.to(device) for part in parts])
            for parts in zip(*self._batch))
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
            hist_of_mean=counts_to_density(closed_counts(edge_counts(mean, self.bins, weights))),
            hist_pooled=counts_to_density(closed_counts(self._pooled)),
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
    lens_tokens: int | None = lens_module.SAMPLE_TOKENS,
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
        lens_sums = lens_module.LensAccumulator(*input_ids.shape, sample_tokens=lens_tokens)
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


# ---------------------------------------------------------------------------------------------
# Trend statistics
# ---------------------------------------------------------------------------------------------

LAST_N = (1, 2, 3, 4, 5)
"""Depth windows for the last-n metrics (the paper's supplementary tables use 1..5 and half)."""

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 0
"""Intervals are percentile bootstraps over sequences with a fixed seed: the same file always
gives the same interval."""

_NO_INTERVAL = (float("nan"), float("nan"))


@dataclass(frozen=True)
class TrendStatistics:
    """A depth trend: rank correlations, last-n means, and two statistics that keep the size of
    the effect when the ranks saturate, each with a ``CONFIDENCE`` interval over sequences (NaN
    when the per-sequence means are unknown)."""

    spearman_rho: float
    kendall_tau: float
    last_n: dict[str, float]  # "last_1".."last_5", "last_half": mean of the last layers' means
    last_half_ci: tuple[float, float] = _NO_INTERVAL
    depth_slope: float = float("nan")  # least-squares slope of the layer means against layer fraction
    depth_slope_ci: tuple[float, float] = _NO_INTERVAL

    @property
    def last_half(self) -> float:
        return self.last_n.get("last_half", float("nan"))

    def as_row(self) -> dict[str, float]:
        """Columns of a trend table: rho, tau, last-n means, then the intervals and the slope."""
        return {
            "spearman_rho": self.spearman_rho, "kendall_tau": self.kendall_tau, **self.last_n,
            "last_half_low": self.last_half_ci[0], "last_half_high": self.last_half_ci[1],
            "depth_slope": self.depth_slope,
            "depth_slope_low": self.depth_slope_ci[0], "depth_slope_high": self.depth_slope_ci[1],
        }


def trend_statistics(
    layer_means: Iterable[float], sequence_means: np.ndarray | None = None,
    layer_fraction: Sequence[float] | np.ndarray | None = None,
) -> TrendStatistics:
    """Spearman rho and Kendall tau (tau-b) of per-layer means against depth, last-n means, and
    the depth slope, with intervals over sequences when ``sequence_means`` is given.

    ``last_half`` averages the deepest ``ceil(n / 2)`` entries of the ``n`` given layer means.
    ``depth_slope`` is the least-squares slope against ``layer_fraction`` (``l / L`` of each
    given layer; default evenly from 0 to 1), so models of different depth compare.
    ``sequence_means`` (``[N, n]``, each sequence's layer means, whose mean over sequences is
    ``layer_means``) gives both a bootstrap interval (:func:`bootstrap_mean_interval`): both
    statistics are linear in the layer means, so each is the mean over sequences of its
    per-sequence value. A constant sequence has no defined rank correlation; it yields NaN.
    """
    means = np.asarray(list(layer_means), dtype=np.float64)
    if means.ndim != 1 or means.size < 2:
        raise ValueError(f"need at least two layer means, got {means.size}")
    fraction = np.linspace(0.0, 1.0, means.size) if layer_fraction is None else np.asarray(layer_fraction, float)
    if fraction.shape != means.shape or np.ptp(fraction) == 0:
        raise ValueError(f"layer_fraction must give {means.size} positions, not all equal; got {fraction}")
    # deferred: extraction jobs import this module and never rank (scipy.stats: 1-2 s)
    from scipy import stats  # noqa: PLC0415

    depth = np.arange(means.size)
    if np.allclose(means, means[0]):
        rho = tau = float("nan")
    else:
        rho = float(stats.spearmanr(means, depth).statistic)
        tau = float(stats.kendalltau(means, depth).statistic)
    last = {f"last_{n}": float(means[-n:].mean()) for n in LAST_N if n <= means.size}
    half = (means.size + 1) // 2
    last["last_half"] = float(means[-half:].mean())
    # both statistics as weights on the layer means: a dot product per sequence
    weights = np.zeros((means.size, 2))
    weights[-half:, 0] = 1.0 / half
    centred = fraction - fraction.mean()
    weights[:, 1] = centred / (centred @ centred)
    intervals = np.full((2, 2), np.nan)
    if sequence_means is not None:
        per_sequence = np.asarray(sequence_means, dtype=np.float64)
        if per_sequence.ndim != 2 or per_sequence.shape[1] != means.size:
            raise ValueError(f"sequence_means must be [N, {means.size}], got shape {per_sequence.shape}")
        intervals = bootstrap_mean_interval(per_sequence @ weights)
    return TrendStatistics(
        spearman_rho=rho, kendall_tau=tau, last_n=last, last_half_ci=_interval(intervals[0]),
        depth_slope=float(means @ weights[:, 1]), depth_slope_ci=_interval(intervals[1]),
    )


def _interval(bounds: np.ndarray) -> tuple[float, float]:
    return _NO_INTERVAL if np.isnan(bounds).any() else (float(bounds[0]), float(bounds[1]))


def bootstrap_mean_interval(
    values: np.ndarray, confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> np.ndarray:
    """Percentile bootstrap interval of the mean over the first axis: ``[N]`` gives ``[2]`` (low,
    high), ``[N, k]`` gives ``[k, 2]``. All columns share the resamples. NaN for fewer than two
    rows, where resampling says nothing about the spread."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape[0] < 2:
        return np.full(values.shape[1:] + (2,), np.nan)
    rows = np.random.default_rng(seed).integers(0, values.shape[0], size=(resamples, values.shape[0]))
    # sequences last, and np.take rather than fancy indexing: about 20x faster (1.5 ms for 4000 x 100)
    means = np.take(np.moveaxis(values, 0, -1), rows, axis=-1).mean(axis=-1)  # [..., resamples]
    tail = (1.0 - confidence) / 2.0
    return np.moveaxis(np.quantile(means, [tail, 1.0 - tail], axis=-1), 0, -1)


def trend_layer_means(stats: CosineStatistics, trend: TrendConfig) -> np.ndarray:
    """The per-layer means a trend is computed from, under the configured conventions."""
    means = stats.layer_mean if trend.include_diagonal else stats.layer_mean_offdiag
    return means if trend.include_embedding_layer else means[1:]


def depth_trend(stats: CosineStatistics, trend: TrendConfig) -> TrendStatistics:
    """The depth trend of one model on one dataset under the configured conventions, with its
    intervals over sequences: what the trend tables and every figure show.

    Layer ``l`` of ``L`` sits at fraction ``l / L`` whether or not the embedding output counts.
    Statistics from a file written without per-sequence means get NaN intervals (and a warning).
    """
    first = 0 if trend.include_embedding_layer else 1
    fraction = np.arange(stats.num_layers) / max(stats.num_layers - 1, 1)
    sequences = sequence_profiles(stats, trend)
    if sequences is None:
        log.warning(
            "%s on %s: no per-sequence layer means (file written before they were stored), so no "
            "confidence intervals; re-run extraction to get them",
            stats.meta.get("model", "a model"), stats.meta.get("dataset", "a dataset"),
        )
    return trend_statistics(trend_layer_means(stats, trend), sequences, fraction[first:])


def sequence_profiles(stats: CosineStatistics, trend: TrendConfig) -> np.ndarray | None:
    """Each sequence's layer means ``[N, n]`` under the trend conventions: the per-sequence data
    whose mean over sequences is what :func:`trend_layer_means` gives (None for a file written
    before they were stored)."""
    sequences = stats.sequence_layer_mean if trend.include_diagonal else stats.sequence_layer_mean_offdiag
    if sequences is None:
        return None
    return sequences if trend.include_embedding_layer else sequences[:, 1:]


def deep_layers(num_layers: int, trend: TrendConfig) -> np.ndarray:
    """Indices (into the ``L + 1`` hidden states) of the deeper half of the layers a trend reads:
    what ``last_half`` averages."""
    first = 0 if trend.include_embedding_layer else 1
    count = num_layers - first
    return np.arange(num_layers - (count + 1) // 2, num_layers)


def lens_summary(stats: CosineStatistics, trend: TrendConfig) -> dict[str, float]:
    """Each lens of :mod:`condensation.lenses` over the deeper half of the layers, with a 95 %
    interval over sequences from its delete-a-group jackknife: ``{lens}``, ``{lens}_low``,
    ``{lens}_high``, estimate +- t x SE with the t of G - 1 degrees of freedom (G groups: 2.571 for
    6), since a jackknife over few groups knows its standard error to G - 1 degrees of freedom.
    Empty for a file written before the lenses were measured."""
    if stats.lenses is None:
        return {}
    # deferred: extraction jobs import this module and never test (scipy.stats: 1-2 s)
    from scipy import stats as distributions  # noqa: PLC0415

    layers = deep_layers(stats.num_layers, trend)
    quantile = float(distributions.t.ppf(0.975, max(stats.lenses.jackknife.shape[1] - 1, 1)))
    columns: dict[str, float] = {}
    for name in lens_module.LENS_NAMES:
        estimate, se = stats.lenses.summary(name, layers)
        columns |= {name: estimate, f"{name}_low": estimate - quantile * se, f"{name}_high": estimate + quantile * se}
    return columns


def deep_lens_replicates(stats: CosineStatistics, trend: TrendConfig) -> tuple[np.ndarray, np.ndarray] | None:
    """Each lens's value over the deeper half of the layers ``[lenses]`` and its delete-a-group
    jackknife replicates ``[lenses, G]`` (``LENS_NAMES`` order); None without lenses."""
    if stats.lenses is None:
        return None
    layers = deep_layers(stats.num_layers, trend)
    return stats.lenses.values[:, layers].mean(axis=1), stats.lenses.jackknife[:, :, layers].mean(axis=2)


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
