"""The lenses of :mod:`condensation.lenses` measured: their running sums over batches and the
spectral computations at the end (torch, on the model's device). What the lenses are, their
formulas on eigenvalues and their stored values live in :mod:`condensation.lenses`, which the
reporting jobs read without importing torch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from condensation.cosine import NORM_EPS, accumulate, join_stacks
from condensation.lenses import (
    JACKKNIFE_GROUPS,
    LENSES,
    OUTLIER_DIMENSIONS,
    SAMPLE_SEED,
    SAMPLE_TOKENS,
    SPECTRAL,
    LensStatistics,
    alpha_req,
    effective_rank_share,
    floored_eigenvalues,
    isoscore_of_moments,
    pc1_share,
    rows,
)

SPECTRAL_ROWS = rows(SPECTRAL)

MEDIAN_STRIDE = 4
"""``massive_ratio``'s median reads every fourth sampled token (256 of the default 1024, all of
their coordinates): the median of ~10^5 values moves by well under a percent, a ratio that spans
orders of magnitude between models, at a quarter of the cost."""


def covariance_eigenvalues(tokens: torch.Tensor) -> np.ndarray:
    """Eigenvalues of the sample covariance of ``tokens`` ``[n, d]`` (``d`` of them, zeros
    included), through the smaller of the ``d x d`` scatter and the ``n x n`` Gram matrix."""
    small, divisor = _smaller_scatter(tokens)
    return floored_eigenvalues(torch.linalg.eigvalsh(small).double().cpu().numpy() / divisor, tokens.shape[1])


def _smaller_scatter(tokens: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The smaller of the centred tokens' ``d x d`` scatter and ``n x n`` Gram matrix, and ``n - 1``:
    divided by it, either has the covariance's non-zero eigenvalues, trace and Frobenius norm."""
    n, d = tokens.shape
    centred = tokens - tokens.mean(dim=0, keepdim=True)
    return (centred @ centred.T if n < d else centred.T @ centred), max(n - 1, 1)


def spectral_lenses(tokens: torch.Tensor, groups: torch.Tensor | None = None) -> np.ndarray:
    """``[4, 1 + G]``: the spectral lenses (``lenses.SPECTRAL``) of the sampled token directions
    ``[n, d]``, then (with ``groups``, each token's group ``0 .. G - 1``, on the host) of the
    tokens with each of the ``G`` groups left out. One layer of ``LensAccumulator.finalize``,
    which batches the layers."""
    count = 0 if groups is None else int(groups.max()) + 1
    if tokens.shape[0] < tokens.shape[1]:
        return gram_lenses(tokens, groups, count)
    return lenses_of_covariances(replicate_covariances(tokens, groups, count), tokens.shape[1])


def gram_lenses(tokens: torch.Tensor, groups: torch.Tensor | None, count: int) -> np.ndarray:
    """``spectral_lenses`` of a sample narrower than the width, through each replicate's Gram
    matrix (``n x n``, smaller than the ``d x d`` covariance, the same non-zero eigenvalues)."""
    kept = [torch.nonzero(groups != g).squeeze(1).to(tokens.device) for g in range(count)]  # host-side indices
    replicates = [tokens] + [tokens[rows] for rows in kept]
    return np.concatenate([lenses_of_covariances(small[None], tokens.shape[1], divisor)
                           for small, divisor in map(_smaller_scatter, replicates)], axis=1)


def replicate_covariances(tokens: torch.Tensor, groups: torch.Tensor | None, count: int) -> torch.Tensor:
    """``[..., 1 + count, d, d]``: the covariance of the tokens ``[..., n, d]``, then of the tokens
    with each group left out, from per-group sums and scatters (one pass over the tokens). A
    leading axis (layers) shares the groups, so that every layer is done in the same few calls.
    ``groups`` (each token's group, on the host) orders the rows by group there, so nothing is
    read back from a GPU."""
    n = tokens.shape[-2]
    # Covariances do not move with a shift; centred first, scatter - sum sum^T / n no longer cancels
    # the shared direction away in float32 (at a mean cosine of 0.999 that lost three digits: the
    # effective rank off by 1e-3). Each left-out subset's mean is then small, not zero.
    tokens = tokens - tokens.mean(dim=-2, keepdim=True)
    groups = torch.zeros(n, dtype=torch.long) if groups is None else groups.cpu()
    columns = max(count, 1)
    order, sizes = torch.argsort(groups, stable=True), torch.bincount(groups, minlength=columns)
    # each group's rows, in order
    by_group = torch.split(tokens[..., order.to(tokens.device), :], sizes.tolist(), dim=-2)
    one_hot = torch.nn.functional.one_hot(groups.to(tokens.device), columns).to(tokens.dtype)
    sums = one_hot.T @ tokens  # [..., G, d]
    scatters = torch.stack([rows.transpose(-1, -2) @ rows for rows in by_group], dim=-3)  # [..., G, d, d]
    keep = torch.ones(1 + count, columns, dtype=tokens.dtype, device=tokens.device)
    if count:
        keep[1:] -= torch.eye(count, dtype=tokens.dtype, device=tokens.device)  # row 1 + g: all but group g
    kept_n, kept_sum = keep @ sizes.to(keep), keep @ sums  # [1 + G], [..., 1 + G, d]
    kept_scatter = (keep @ scatters.flatten(-2)).view(*scatters.shape[:-3], 1 + count, *scatters.shape[-2:])
    # (scatter - sum sum^T / n) / (n - 1), in place: d x d temporaries are most of the time on a CPU
    outer = (kept_sum[..., :, None] * kept_sum[..., None, :]).div_(kept_n[:, None, None])
    return kept_scatter.sub_(outer).div_((kept_n - 1)[:, None, None])


def covariance_spectra(covariances: torch.Tensor, device: torch.device | str | None = None) -> np.ndarray:
    """Eigenvalues ``[M, k]`` (float64) of a batch of symmetric matrices ``[M, k, k]``, in one call
    on ``device`` (default: where they are), read back once."""
    return torch.linalg.eigvalsh(covariances if device is None else covariances.to(device)).double().cpu().numpy()


def lenses_of_covariances(covariances: torch.Tensor, width: int, divisor: float = 1.0,
                          spectra_device: torch.device | str | None = None) -> np.ndarray:
    """``[4, M]``: (IsoScore*, effective rank share, PC1 share, alpha-ReQ) of ``M`` covariances
    ``[M, k, k]`` of ``width``-wide tokens, or of ``divisor`` times them (scatters, or Gram
    matrices with ``k < width``: the same non-zero eigenvalues). IsoScore* reads the trace and the
    Frobenius norm alone (:func:`isoscore_of_moments`); the effective rank and alpha-ReQ need every
    eigenvalue and PC1 share the largest, from one batched eigendecomposition on ``spectra_device``."""
    trace = covariances.diagonal(dim1=-2, dim2=-1).sum(-1, dtype=torch.float64).cpu().numpy() / divisor
    # each row's dot product in float32 (relative error ~1e-7; a third of the time of a float64 copy
    # on a CPU), their sum in float64
    squared_norm = torch.linalg.vecdot(covariances, covariances).sum(-1, dtype=torch.float64).cpu().numpy() / divisor**2
    spectra = [floored_eigenvalues(values, width)
               for values in covariance_spectra(covariances, spectra_device) / divisor]
    return np.array([isoscore_of_moments(trace, squared_norm, width),
                     [effective_rank_share(values, width) for values in spectra],
                     [pc1_share(values) for values in spectra],
                     [alpha_req(values) for values in spectra]])


def outlier_free_cosines(sample: torch.Tensor, sequences: torch.Tensor, kept: torch.Tensor | None = None,
                         dimensions: int = OUTLIER_DIMENSIONS) -> torch.Tensor:
    """``[L]``: the within-sequence mean cosine of the sampled tokens ``[L, K, d]`` (unit rows;
    ``sequences`` ``[K]``, each token's sequence, on the host) with each layer's ``dimensions``
    coordinates of largest variance (over the tokens ``kept``, a ``[K]`` mask on the host; None:
    all) removed and the rows renormalised, over the pairs of distinct kept tokens of one sequence.
    NaN where no sequence has two kept tokens.

    Without copying the sample: a trimmed row is ``u / r`` off the removed coordinates, ``r`` the
    norm of what is left, so each sequence's sum of trimmed rows is its ``1 / r``-weighted sum of
    rows (one batched product) less the removed coordinates of that sum."""
    if kept is not None:
        index = torch.nonzero(kept).squeeze(1)
        sample, sequences = sample[:, index.to(sample.device)], sequences[index]
    dimensions = min(dimensions, sample.shape[-1] - 1)
    outliers = sample.var(dim=1).topk(dimensions, dim=-1).indices  # [L, k]
    removed = sample.gather(2, outliers[:, None, :].expand(-1, sample.shape[1], -1))  # [L, K, k]
    left = (sample.pow(2).sum(-1) - removed.pow(2).sum(-1)).clamp_min(0.0)  # [L, K] squared norm left
    weights = left.clamp_min(NORM_EPS**2).rsqrt()  # the floor unit_rows puts on a norm
    _, members = torch.unique(sequences, return_inverse=True)
    one_hot = torch.nn.functional.one_hot(members).T.to(sample.device, sample.dtype)  # [N', K]
    counts = one_hot.sum(1).double()
    pairs = float((counts * (counts - 1)).sum())
    sums = (one_hot[None] * weights[:, None, :]) @ sample  # [L, N', d]
    trimmed_sums = sums.double().pow(2).sum(-1) - sums.gather(2, outliers[:, None, :].expand(-1, sums.shape[1], -1)
                                                               ).double().pow(2).sum(-1)
    diagonal = (left.double() * weights.double() ** 2).sum(-1)  # 1 per row with anything left
    total = trimmed_sums.sum(-1) - diagonal
    return total / pairs if pairs else torch.full_like(total, float("nan"))


class LensAccumulator:
    """Running sums for the lenses over batches of sequences; see the module docstring of
    :mod:`condensation.lenses`."""

    def __init__(self, num_sequences: int, seq_len: int, sample_tokens: int = SAMPLE_TOKENS,
                 groups: int = JACKKNIFE_GROUPS, seed: int = SAMPLE_SEED) -> None:
        if num_sequences < 2:
            raise ValueError("the lenses need at least two sequences (anisotropy compares tokens of different ones)")
        self.num_sequences, self.seq_len = num_sequences, seq_len
        self.groups = min(groups, num_sequences)
        total = num_sequences * seq_len
        flat = np.sort(np.random.default_rng(seed).choice(total, size=min(sample_tokens, total), replace=False))
        self._sample_flat = torch.from_numpy(flat)
        self._sample_group = torch.from_numpy((flat // seq_len) % self.groups)
        self._sums: torch.Tensor | None = None  # [L+1, G, d] sum of unit rows per group
        self._within: torch.Tensor | None = None  # [L+1, G, 2]: sum of ||s_n||^2, sum of diagonal (||u||^2)
        self._sample: torch.Tensor | None = None  # [L+1, K, d] float32, on the hidden states' device
        self._sample_norms: torch.Tensor | None = None  # [L+1, K] the sampled tokens' norms
        self._half_angles: list[torch.Tensor] = []  # per batch [L, B]: half-angle sums from layer 1 on
        self._norm_values: list[torch.Tensor] = []  # per batch [L+1, 2, B]: largest |activation|, sink share
        self._previous: torch.Tensor | None = None  # the last layer's unit rows of the batch's previous stack
        self._group_sizes = np.bincount(np.arange(num_sequences) % self.groups, minlength=self.groups)
        self._device_constants: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        self._batch: list[tuple[torch.Tensor, ...]] = []  # the current batch's sums, a stack of layers at a time
        self._batch_size = 0
        self._seen = 0

    def update(self, hidden_states: Sequence[torch.Tensor]) -> None:
        """Add one batch of ``[B, T, d]`` hidden states, the next ``B`` sequences in order."""
        accumulate([self], hidden_states)

    def add_layers(self, units: torch.Tensor, norms: torch.Tensor) -> None:
        """The current batch's next layers, as their unit rows ``[m, B, T, d]`` and norms
        ``[m, B, T]`` (:func:`condensation.cosine.unit_layer_stacks`); :meth:`end_batch` adds the batch."""
        batch, seq_len = units.shape[1:3]
        if seq_len != self.seq_len:
            raise ValueError(f"sequences have {seq_len} tokens; the accumulator was made for {self.seq_len}")
        first = self._seen
        if first + batch > self.num_sequences:
            raise ValueError(f"the lenses were made for {self.num_sequences} sequences; this batch brings them to "
                             f"{first + batch}")
        sample, one_hot = self._on_device(units.device)
        # the sample's positions are sorted, so this batch's are one run of them: a slice, not a
        # boolean mask (whose indexing reads a count back from a GPU)
        low, high = self._batch_span(batch)
        rows = sample[low:high] - first * seq_len
        local = one_hot[first : first + batch].T  # [G, B]
        sequence_sum = units.sum(dim=2).double()  # [m, B, d]
        per_sequence = torch.stack([sequence_sum.pow(2).sum(-1), units.pow(2).sum((-2, -1)).double()], dim=-1)
        self._batch.append((local @ sequence_sum, local @ per_sequence, units.flatten(1, 2)[:, rows],
                            norms.flatten(1, 2)[:, rows], *self._per_sequence_values(units, norms)))
        self._previous = units[-1]
        self._batch_size = int(batch)

    def _per_sequence_values(self, units: torch.Tensor, norms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per sequence: the sum over its tokens of half of each one's angle to the previous layer,
        ``asin(|u - v| / 2)`` (``[m, B]``, or ``[m - 1, B]`` for the stack that starts at the
        embedding layer, which has no layer before it); and ``[m, 2, B]``: the
        largest |activation| (a token's is its norm times its unit row's largest |entry|) and the
        largest norm's share of the sequence's. float32 and few operations: a GPU pays a launch
        for each (test_geometry counts them); finalize scales and casts."""
        before = units[:-1] if self._previous is None else torch.cat([self._previous[None], units[:-1]])
        after = units[1:] if self._previous is None else units
        # asin(|u - v| / 2), half the angle between unit rows, not arccos(u . v): arccos near 1
        # turns float32 rounding of the dot product (~1e-7) into an angle of ~5e-4, as large as a
        # near-identity layer's; the chord keeps small angles exact (and costs one pass fewer)
        half_angles = torch.asin(torch.linalg.vector_norm(after - before, dim=-1).mul_(0.5).clamp_(max=1.0)).sum(-1)
        largest = (units.abs().amax(-1) * norms).amax(-1)  # [m, B]
        return half_angles, torch.stack([largest, norms.amax(-1) / norms.sum(-1)], dim=1)

    def end_batch(self) -> None:
        """Add the batch whose layers :meth:`add_layers` took; everything stays on the first
        stack's device until finalize (no host sync per layer or batch)."""
        batch_sums, batch_within, picked, picked_norms, half_angles, norm_values = join_stacks(self._batch)
        device = batch_sums.device
        self._batch, self._previous = [], None
        if self._sums is None:
            self._sums, self._within = batch_sums, batch_within
            self._sample = torch.empty(picked.shape[0], len(self._sample_flat), picked.shape[-1], device=device)
            self._sample_norms = torch.empty(picked.shape[0], len(self._sample_flat), device=device)
        else:
            self._sums += batch_sums
            self._within += batch_within
        low, high = self._batch_span(self._batch_size)
        self._sample[:, low:high] = picked
        self._sample_norms[:, low:high] = picked_norms
        self._half_angles.append(half_angles)
        self._norm_values.append(norm_values)
        self._seen += self._batch_size

    def _batch_span(self, batch: int) -> tuple[int, int]:
        """Where the next ``batch`` sequences' tokens sit in the sorted sample."""
        first = self._seen * self.seq_len
        low, high = np.searchsorted(self._sample_flat.numpy(), [first, first + batch * self.seq_len])
        return int(low), int(high)

    def _on_device(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The sampled positions ``[K]`` and each sequence's group as a one-hot ``[N, G]`` (float64),
        copied to ``device`` once (pinned and without waiting on a GPU), not once per batch."""
        if device not in self._device_constants:
            one_hot = torch.nn.functional.one_hot(torch.arange(self.num_sequences) % self.groups, self.groups)
            self._device_constants[device] = tuple(
                tensor.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else tensor
                for tensor in (self._sample_flat, one_hot.double()))
        return self._device_constants[device]

    def finalize(self, spectra_device: torch.device | str | None = None) -> LensStatistics:
        """The lenses of every sequence seen. ``spectra_device``: where the eigendecompositions
        run (default: the hidden states' device; benchmarks/extraction.py times the choice)."""
        if self._seen != self.num_sequences:
            raise ValueError(f"the lenses saw {self._seen} sequences, {self.num_sequences} expected")
        self._sums, self._within = self._sums.cpu(), self._within.cpu()
        layers, groups = self._sums.shape[0], self.groups
        values = np.full((len(LENSES), layers), np.nan)
        jackknife = np.full((len(LENSES), groups, layers), np.nan)
        keep = [np.ones(groups, bool)] + [np.arange(groups) != g for g in range(groups)]
        largest = self._exact_into(values, jackknife, keep)
        self._sampled_into(values, jackknife, keep, largest)
        self._spectral_into(values, jackknife, spectra_device)
        return LensStatistics(values, jackknife, int(len(self._sample_flat)), sample=self._sample,
                              sample_sequences=(self._sample_flat // self.seq_len).numpy())

    def _exact_into(self, values: np.ndarray, jackknife: np.ndarray, keep: list[np.ndarray]) -> list[np.ndarray]:
        """The lenses exact over every token, from the full sums, then with each group left out:
        anisotropy, within_excess, layer_angle and sink_share. Returns massive_ratio's numerator,
        each layer's largest |activation| ``[L+1]`` per column of ``keep``, for
        :meth:`_sampled_into` to divide by its median."""
        seq_len = self.seq_len
        half_angles = torch.cat(self._half_angles, dim=-1).double().cpu().numpy()  # [L, N]
        norm_values = torch.cat(self._norm_values, dim=-1).double().cpu().numpy()  # [L+1, 2, N]
        sequence_group = np.arange(self.num_sequences) % self.groups
        largest_by_column = []
        for column, mask in enumerate(keep):
            sequences = int(self._group_sizes[mask].sum())
            total = self._sums[:, torch.from_numpy(mask)].sum(1)  # [L+1, d]
            self_sum, diagonal = self._within[:, torch.from_numpy(mask)].sum(1).unbind(-1)  # [L+1]
            across_pairs = sequences**2 * seq_len**2 - sequences * seq_len**2
            anisotropy = ((total.pow(2).sum(-1) - self_sum) / across_pairs).numpy()
            within = ((self_sum - diagonal) / (sequences * seq_len * (seq_len - 1))).numpy()
            in_kept = mask[sequence_group]
            angle = 2.0 * half_angles[:, in_kept].sum(-1) / (np.pi * sequences * seq_len)
            largest, sink = norm_values[:, :, in_kept].transpose(1, 0, 2)
            found = {"anisotropy": anisotropy, "within_excess": within - anisotropy,
                     "layer_angle": np.concatenate([[np.nan], angle]),  # the embedding layer has no layer before it
                     "sink_share": sink.mean(-1)}
            target = values if column == 0 else jackknife[:, column - 1]
            target[rows(found)] = np.stack(list(found.values()))
            largest_by_column.append(largest.max(-1))
        return largest_by_column

    def _sampled_into(self, values: np.ndarray, jackknife: np.ndarray, keep: list[np.ndarray],
                      largest: list[np.ndarray]) -> None:
        """The lenses read from the sample's tokens on its device, each replicate one call over
        its layers: cosine_without_outliers, and massive_ratio's denominator (the median
        |activation| of every :data:`MEDIAN_STRIDE`-th sampled token, the lower median of an even
        count, under ``largest``, :meth:`_exact_into`'s maxima). As for the spectral lenses, the
        replicates cover the deeper half of the layers (the median of a layer's K x d values is
        most of the cost)."""
        sequences = self._sample_flat // self.seq_len
        outlier_free, massive = rows(["cosine_without_outliers", "massive_ratio"])
        for column, mask in enumerate(keep):
            depth = slice(None) if column == 0 else slice(self._first_deep(), None)
            sample, norms = self._sample[depth], self._sample_norms[depth]
            kept = torch.from_numpy(mask)[self._sample_group]
            # every MEDIAN_STRIDE-th sampled token: a layer's median from K x d values costs more
            # than its spectrum, and a quarter of them pins it to ~0.3 % (the positions are sorted,
            # so a stride spreads over every sequence)
            index = torch.nonzero(kept[::MEDIAN_STRIDE]).squeeze(1).mul_(MEDIAN_STRIDE).to(sample.device)
            median = (sample[:, index] * norms[:, index, None]).abs().flatten(1).median(dim=1).values
            cosine = outlier_free_cosines(sample, sequences, kept).cpu().numpy()
            target = values if column == 0 else jackknife[:, column - 1]
            target[outlier_free, depth] = cosine
            median = median.double().cpu().numpy()
            with np.errstate(divide="ignore", invalid="ignore"):
                target[massive, depth] = np.where(median > 0, largest[column][depth] / median, np.nan)

    def _spectral_into(self, values: np.ndarray, jackknife: np.ndarray,
                       spectra_device: torch.device | str | None) -> None:
        """The spectral lenses: every layer once, the deeper half again with each group left out.
        The shallower layers' covariances come from one call and one batched eigendecomposition,
        the deeper half's replicates from another (on a GPU each call of its own costs a host round
        trip and a solver launch): the effective rank needs every one of their spectra
        (GPT2-small: 6 + 7 x 7 = 55 of 768 x 768, 115 MB held at once), IsoScore* none of them."""
        layers, width = self._sample.shape[0], self._sample.shape[-1]
        first_deep = self._first_deep()
        if self._sample.shape[1] < width:  # narrower than the width: the Gram route, per replicate
            for layer in range(layers):
                groups, count = (self._sample_group, self.groups) if layer >= first_deep else (None, 0)
                self._store(values, jackknife, layer, gram_lenses(self._sample[layer], groups, count))
            return
        if first_deep:
            shallow = replicate_covariances(self._sample[:first_deep], None, 0)  # [first_deep, 1, d, d]
            values[SPECTRAL_ROWS, :first_deep] = lenses_of_covariances(shallow.flatten(0, 1), width,
                                                                       spectra_device=spectra_device)
        deep = replicate_covariances(self._sample[first_deep:], self._sample_group, self.groups)  # [., 1 + G, d, d]
        found = lenses_of_covariances(deep.flatten(0, 1), width, spectra_device=spectra_device)
        per_layer = np.split(found, layers - first_deep, axis=1)  # [4, 1 + G] each
        for layer, replicates in zip(range(first_deep, layers), per_layer):
            self._store(values, jackknife, layer, replicates)

    def _first_deep(self) -> int:
        """The first of the deeper ``ceil((L + 1) / 2)`` layers, the ones the jackknife covers for
        the sampled and spectral lenses (what any trend convention's deeper-half summary reads)."""
        layers = self._sample.shape[0]
        return layers - (layers + 1) // 2

    @staticmethod
    def _store(values: np.ndarray, jackknife: np.ndarray, layer: int, found: np.ndarray) -> None:
        """One layer's ``[4, 1 + G']`` spectral lenses (``G'`` = 0 without its jackknife)."""
        values[SPECTRAL_ROWS, layer] = found[:, 0]
        if found.shape[1] > 1:
            jackknife[SPECTRAL_ROWS, :, layer] = found[:, 1:]
