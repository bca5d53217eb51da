"""More lenses on the hidden states than the mean pairwise cosine, computed in the same pass.

The paper's measure, the mean cosine between the tokens of one sequence, mixes two things: a
direction that every token of every text shares (anisotropy, Ethayarajh 2019) and the collapse of
one sequence's tokens onto each other. A reviewer asks whether a finding survives when they are
told apart, and under measures of spread that are not cosines at all. Per layer:

``anisotropy``
    mean cosine between tokens of *different* sequences: the shared direction alone.
``within_excess``
    the within-sequence mean cosine (off-diagonal pairs) minus ``anisotropy``: the collapse of a
    sequence beyond what any two unrelated tokens share.
``isoscore``
    IsoScore* (Rudman & Eickhoff 2023; the ``IsoScore`` package): 1 when the tokens' variance is
    spread evenly over every dimension, near 0 when it sits in one. Less is more condensed.
``effective_rank``
    exp of the entropy of the normalised singular values of the centred tokens (Roy & Vetterli
    2007), as a share of the width, so that models of different widths compare. Less is more
    condensed.
``pc1_share``
    share of the tokens' variance on their first principal component. More is more condensed.

Every lens reads token *directions* (unit rows, as the cosine does), so a few tokens of large norm
do not decide it. ``anisotropy`` and ``within_excess`` are exact over every token, from running
sums (memory: one width-sized vector per layer and group). The three spectral lenses read a fixed
sample of ``sample_tokens`` tokens per layer, the same positions for every layer and model, held
on the model's device (memory: ``sample_tokens x width`` floats per layer, whatever the number of
sequences), and are computed once at the end, in one batched eigendecomposition for all layers.

Intervals: sequences are dealt into ``groups`` groups (sequence ``n`` into group ``n mod G``) and
each lens is recomputed with one group left out (a delete-a-group jackknife), which gives the
standard error of any linear summary over layers. For the spectral lenses the jackknife runs on
the deeper ``ceil((L + 1) / 2)`` layers only, the ones the deeper-half summary reads (any trend
convention), which keeps their cost within a tenth of the extraction's (benchmarks/extraction.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from condensation.config.specs import ExtractionConfig
from condensation.cosine import unit_rows


@dataclass(frozen=True)
class Lens:
    name: str
    title: str
    """How tables and the findings name it."""
    short: str
    """How a figure's legend names it."""
    condensed: int
    """+1 when a larger value means more condensed, -1 when a smaller one does: the sign that
    turns the lens into "condensation" for a claim's direction."""


LENSES: tuple[Lens, ...] = (
    Lens("anisotropy", "cosine across sequences (anisotropy)", "anisotropy", +1),
    Lens("within_excess", "within-sequence cosine minus anisotropy", "within excess", +1),
    Lens("isoscore", "IsoScore*", "IsoScore*", -1),
    Lens("effective_rank", "effective rank / width", "eff. rank / width", -1),
    Lens("pc1_share", "variance share of PC 1", "PC1 share", +1),
)
LENS_NAMES = tuple(lens.name for lens in LENSES)
BY_NAME = {lens.name: lens for lens in LENSES}

SAMPLE_TOKENS = ExtractionConfig().lens_tokens
"""Tokens per layer the spectral lenses read (the default and its reason: ``ExtractionConfig``).
Models wider than the sample see IsoScore* lean on its shrinkage (below)."""

JACKKNIFE_GROUPS = 6
"""Groups of sequences for the delete-a-group jackknife; 6 keeps the spectral lenses' cost (one
eigendecomposition per group and deep layer) within a tenth of the extraction's on a CPU
(SmolLM2-135M, 32 x 256 tokens: ~2 s against ~25 s of forward passes on one thread)."""

ISOSCORE_ZETA = 0.1
"""IsoScore*'s shrinkage: the covariance is mixed 9:1 with a scaled identity of the same trace,
which steadies the smallest eigenvalues of a finite sample. The same for every model, so they
compare; the package's author recommends shrinkage whenever samples are few for the width."""

RELATIVE_FLOOR = 1e-6
"""Eigenvalues below this fraction of the largest are set to zero: float32 rounding of the
scatter (relative error ~1e-7 per entry) puts noise there, never signal."""

SAMPLE_SEED = 0
"""Which token positions the spectral lenses read: fixed, so a file always gives the same values."""


def isoscore_star(eigenvalues: np.ndarray, zeta: float = ISOSCORE_ZETA) -> float:
    """IsoScore* from the covariance's eigenvalues (``[d]``, zeros included), shrunk towards the
    scaled identity ``trace / d``: the formula of ``IsoScore.IsoScore_star`` with ``C0 = trace /
    d * I``, whose shrunk covariance has eigenvalues ``(1 - zeta) * lambda + zeta * trace / d``.
    NaN when the variance is zero."""
    lam = np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None)
    n = lam.size
    if n < 2 or lam.sum() <= 0:
        return math.nan
    lam = (1.0 - zeta) * lam + zeta * lam.sum() / n
    normalised = lam * math.sqrt(n) / np.linalg.norm(lam)
    defect = np.linalg.norm(normalised - 1.0) / math.sqrt(2.0 * (n - math.sqrt(n)))
    return float(((n - defect**2 * (n - math.sqrt(n))) ** 2 - n) / (n * (n - 1)))


def effective_rank_share(eigenvalues: np.ndarray, width: int) -> float:
    """exp(entropy of the normalised singular values) / ``width``; the singular values of the
    centred tokens are the square roots of the covariance's eigenvalues. NaN for zero variance."""
    singular = np.sqrt(np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None))
    if singular.sum() <= 0:
        return math.nan
    p = singular[singular > 0] / singular.sum()
    return float(np.exp(-(p * np.log(p)).sum()) / width)


def pc1_share(eigenvalues: np.ndarray) -> float:
    lam = np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None)
    return float(lam.max() / lam.sum()) if lam.sum() > 0 else math.nan


def _floored(values: np.ndarray, width: int) -> np.ndarray:
    """Eigenvalues padded with zeros to ``width``; below RELATIVE_FLOOR of the largest they are
    rounding, not directions (the sample is float32), and their square roots would otherwise add
    a spurious sliver to the effective rank."""
    values = np.asarray(values, dtype=np.float64).copy()
    values[values < RELATIVE_FLOOR * max(values.max(), 0.0)] = 0.0
    return np.concatenate([values, np.zeros(width - values.size)]) if values.size < width else values


def covariance_eigenvalues(tokens: torch.Tensor) -> np.ndarray:
    """Eigenvalues of the sample covariance of ``tokens`` ``[n, d]`` (``d`` of them, zeros
    included), through the smaller of the ``d x d`` scatter and the ``n x n`` Gram matrix."""
    n, d = tokens.shape
    centred = tokens - tokens.mean(dim=0, keepdim=True)
    small = centred @ centred.T if n < d else centred.T @ centred
    return _floored(torch.linalg.eigvalsh(small).double().cpu().numpy() / max(n - 1, 1), d)


def lens_values(eigenvalues: np.ndarray) -> tuple[float, float, float]:
    """(IsoScore*, effective rank share, PC1 share) from a layer's covariance eigenvalues."""
    return isoscore_star(eigenvalues), effective_rank_share(eigenvalues, eigenvalues.size), pc1_share(eigenvalues)


def spectral_lenses(tokens: torch.Tensor, groups: torch.Tensor | None = None) -> np.ndarray:
    """``[3, 1 + G]``: the spectral lenses of the sampled token directions ``[n, d]``, then (with
    ``groups``, each token's group ``0 .. G - 1``, on the host) of the tokens with each of the ``G``
    groups left out. One layer of ``LensAccumulator.finalize``, which batches every layer's
    eigendecompositions into one call."""
    count = 0 if groups is None else int(groups.max()) + 1
    if tokens.shape[0] < tokens.shape[1]:
        return gram_lenses(tokens, groups, count)
    return lenses_of_spectra(covariance_spectra(replicate_covariances(tokens, groups, count)), tokens.shape[1])


def gram_lenses(tokens: torch.Tensor, groups: torch.Tensor | None, count: int) -> np.ndarray:
    """``spectral_lenses`` of a sample narrower than the width, through each replicate's Gram
    matrix (``n x n``, smaller than the ``d x d`` covariance, the same non-zero eigenvalues)."""
    kept = [torch.nonzero(groups != g).squeeze(1).to(tokens.device) for g in range(count)]  # host-side indices
    replicates = [tokens] + [tokens[rows] for rows in kept]
    return np.array([lens_values(covariance_eigenvalues(r)) for r in replicates]).T


def replicate_covariances(tokens: torch.Tensor, groups: torch.Tensor | None, count: int) -> torch.Tensor:
    """``[1 + count, d, d]``: the covariance of the tokens ``[n, d]``, then of the tokens with each
    group left out, from per-group sums and scatters (one pass over the tokens). ``groups`` (each
    token's group, on the host) orders the rows by group there, so nothing is read back from a GPU."""
    n, _ = tokens.shape
    groups = torch.zeros(n, dtype=torch.long) if groups is None else groups.cpu()
    columns = max(count, 1)
    order, sizes = torch.argsort(groups, stable=True), torch.bincount(groups, minlength=columns)
    by_group = torch.split(tokens[order.to(tokens.device)], sizes.tolist())  # each group's rows, in order
    one_hot = torch.nn.functional.one_hot(groups.to(tokens.device), columns).to(tokens.dtype)
    sums = one_hot.T @ tokens  # [G, d]
    scatters = torch.stack([rows.T @ rows for rows in by_group])
    keep = torch.ones(1 + count, columns, dtype=tokens.dtype, device=tokens.device)
    if count:
        keep[1:] -= torch.eye(count, dtype=tokens.dtype, device=tokens.device)  # row 1 + g: all but group g
    kept_n, kept_sum = keep @ sizes.to(keep), keep @ sums  # [1 + G], [1 + G, d]
    kept_scatter = torch.einsum("rg,gij->rij", keep, scatters)
    return ((kept_scatter - kept_sum[:, :, None] * kept_sum[:, None, :] / kept_n[:, None, None])
            / (kept_n - 1)[:, None, None])


def covariance_spectra(covariances: torch.Tensor, device: torch.device | str | None = None) -> np.ndarray:
    """Eigenvalues ``[M, d]`` (float64) of a batch of covariances ``[M, d, d]``, in one call on
    ``device`` (default: where they are), read back once."""
    return torch.linalg.eigvalsh(covariances if device is None else covariances.to(device)).double().cpu().numpy()


def lenses_of_spectra(spectra: np.ndarray, width: int) -> np.ndarray:
    """``[3, M]``: (IsoScore*, effective rank share, PC1 share) of each of ``M`` spectra."""
    return np.array([lens_values(_floored(values, width)) for values in spectra]).T


@dataclass
class LensStatistics:
    """Per-layer lens values ``[lens, L+1]`` (in ``LENS_NAMES`` order) and their leave-one-group-out
    values ``[lens, G, L+1]`` (NaN where not computed)."""

    values: np.ndarray
    jackknife: np.ndarray
    sample_tokens: int
    sample: torch.Tensor | None = None
    """The sampled token directions ``[L+1, K, d]`` (unit rows), in memory only (not saved): what
    :mod:`condensation.similarity` compares between two models measured on the same tokens."""
    sample_sequences: np.ndarray | None = None
    """``[K]``: the sequence each sampled token comes from."""

    def layer_values(self, name: str) -> np.ndarray:
        return self.values[LENS_NAMES.index(name)]

    def summary(self, name: str, layers: Sequence[int] | np.ndarray) -> tuple[float, float]:
        """The lens's mean over ``layers`` and its jackknife standard error (NaN if not computed)."""
        index = LENS_NAMES.index(name)
        layers = np.asarray(layers)
        estimate = float(self.values[index, layers].mean())
        replicates = self.jackknife[index][:, layers].mean(axis=1)
        groups = replicates.size
        if groups < 2 or np.isnan(replicates).any():
            return estimate, math.nan
        return estimate, float(math.sqrt((groups - 1) / groups * ((replicates - replicates.mean()) ** 2).sum()))


class LensAccumulator:
    """Running sums for the lenses over batches of sequences; see the module docstring."""

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
        self._group_sizes = np.bincount(np.arange(num_sequences) % self.groups, minlength=self.groups)
        self._seen = 0

    def update(self, hidden_states: Sequence[torch.Tensor]) -> None:
        """Add one batch of ``[B, T, d]`` hidden states, the next ``B`` sequences in order."""
        batch, seq_len = hidden_states[0].shape[:2]
        if seq_len != self.seq_len:
            raise ValueError(f"sequences have {seq_len} tokens; the accumulator was made for {self.seq_len}")
        first, device = self._seen, hidden_states[0].device
        # the sample's positions are sorted, so this batch's are one run of them: a slice, not a
        # boolean mask (whose indexing reads a count back from a GPU)
        low, high = np.searchsorted(self._sample_flat.numpy(), [first * seq_len, (first + batch) * seq_len])
        # everything stays on the hidden states' device until finalize: no host sync per layer
        rows = (self._sample_flat[low:high] - first * seq_len).to(device)
        one_hot = torch.nn.functional.one_hot(torch.arange(first, first + batch, device=device) % self.groups,
                                              self.groups).double()  # [B, G]
        sums, within, picked = [], [], []
        for hidden in hidden_states:  # a model split over GPUs gives layers on several devices
            unit = unit_rows(hidden.float())[0]
            local = one_hot.to(unit.device)
            sequence_sum = unit.sum(dim=1).double()  # [B, d]
            sums.append((local.T @ sequence_sum).to(device))
            per_sequence = torch.stack([sequence_sum.pow(2).sum(-1), unit.pow(2).sum((-2, -1)).double()], dim=-1)
            within.append((local.T @ per_sequence).to(device))
            picked.append(unit.reshape(-1, unit.shape[-1])[rows.to(unit.device)].to(device))
        batch_sums, batch_within = torch.stack(sums), torch.stack(within)
        if self._sums is None:
            width = hidden_states[0].shape[-1]
            self._sums, self._within = batch_sums, batch_within
            self._sample = torch.empty(len(hidden_states), len(self._sample_flat), width, device=device)
        else:
            self._sums += batch_sums
            self._within += batch_within
        self._sample[:, low:high] = torch.stack(picked)
        self._seen += batch

    def finalize(self, spectra_device: torch.device | str | None = None) -> LensStatistics:
        """The lenses of every sequence seen. ``spectra_device``: where the eigendecompositions
        run (default: the hidden states' device; benchmarks/extraction.py times the choice)."""
        if self._seen != self.num_sequences:
            raise ValueError(f"the lenses saw {self._seen} sequences, {self.num_sequences} expected")
        self._sums, self._within = self._sums.cpu(), self._within.cpu()
        layers, groups, seq_len = self._sums.shape[0], self.groups, self.seq_len
        values = np.full((len(LENSES), layers), np.nan)
        jackknife = np.full((len(LENSES), groups, layers), np.nan)
        # exact lenses: the full sums, then each group left out
        keep = [np.ones(groups, bool)] + [np.arange(groups) != g for g in range(groups)]
        for column, mask in enumerate(keep):
            sequences = int(self._group_sizes[mask].sum())
            total = self._sums[:, torch.from_numpy(mask)].sum(1)  # [L+1, d]
            self_sum, diagonal = self._within[:, torch.from_numpy(mask)].sum(1).unbind(-1)  # [L+1]
            across_pairs = sequences**2 * seq_len**2 - sequences * seq_len**2
            anisotropy = ((total.pow(2).sum(-1) - self_sum) / across_pairs).numpy()
            within = ((self_sum - diagonal) / (sequences * seq_len * (seq_len - 1))).numpy()
            target = values if column == 0 else jackknife[:, column - 1]
            target[0], target[1] = anisotropy, within - anisotropy
        self._spectral_into(values, jackknife, spectra_device)
        return LensStatistics(values, jackknife, int(len(self._sample_flat)), sample=self._sample,
                              sample_sequences=(self._sample_flat // seq_len).numpy())

    def _spectral_into(self, values: np.ndarray, jackknife: np.ndarray,
                       spectra_device: torch.device | str | None) -> None:
        """The spectral lenses: every layer once, the deeper half again with each group left out.
        Every covariance of every layer goes into one batched eigendecomposition (on a GPU each
        call of its own costs a host round trip and a solver launch); they are held at once,
        ``d x d`` floats each (GPT2-small: 55 of 768 x 768, 130 MB)."""
        layers, width = self._sample.shape[0], self._sample.shape[-1]
        deep = range(layers - (layers + 1) // 2, layers)
        batched: list[tuple[int, torch.Tensor]] = []
        for layer in range(layers):
            groups, count = (self._sample_group, self.groups) if layer in deep else (None, 0)
            if self._sample.shape[1] < width:  # narrower than the width: the Gram route, per replicate
                self._store(values, jackknife, layer, gram_lenses(self._sample[layer], groups, count))
            else:
                batched.append((layer, replicate_covariances(self._sample[layer], groups, count)))
        if not batched:
            return
        found = lenses_of_spectra(covariance_spectra(torch.cat([c for _, c in batched]), spectra_device), width)
        first = 0
        for layer, covariances in batched:
            self._store(values, jackknife, layer, found[:, first : first + covariances.shape[0]])
            first += covariances.shape[0]

    @staticmethod
    def _store(values: np.ndarray, jackknife: np.ndarray, layer: int, found: np.ndarray) -> None:
        """One layer's ``[3, 1 + G']`` spectral lenses (``G'`` = 0 without its jackknife)."""
        values[2:, layer] = found[:, 0]
        if found.shape[1] > 1:
            jackknife[2:, :, layer] = found[:, 1:]
