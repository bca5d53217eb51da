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
sequences), and are computed once at the end. IsoScore* needs no spectrum, only the trace and the
Frobenius norm of each covariance; the effective rank needs every eigenvalue (and PC1 share the
largest), from batched eigendecompositions (two calls: the shallower layers, the deeper half's
replicates). The accumulator (:class:`condensation.lens_extraction.LensAccumulator`, torch) reads
the unit rows the cosines read (:func:`condensation.cosine.accumulate`): on a GPU a batch adds a
few operations whatever the depth. This module holds what the lenses are, their formulas on
eigenvalues and their stored values, and imports no torch: the reporting jobs read it.

Intervals: sequences are dealt into ``groups`` groups (sequence ``n`` into group ``n mod G``) and
each lens is recomputed with one group left out (a delete-a-group jackknife), which gives the
standard error of any linear summary over layers. For the spectral lenses the jackknife runs on
the deeper ``ceil((L + 1) / 2)`` layers only, the ones the deeper-half summary reads (any trend
convention), which keeps their cost down (:data:`JACKKNIFE_GROUPS`); it is still the effective
rank's ``ceil((L + 1) / 2) x G`` more eigendecompositions (GPT2-small: 42 of its 55), a fixed cost
per call that benchmarks/extraction.py times apart from the per-batch cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from condensation.config.specs import ExtractionConfig

if TYPE_CHECKING:  # the stored values load without torch: reporting jobs never import it
    import torch


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
    It reads only their sum and the sum of their squares (:func:`isoscore_of_moments`). NaN when
    the variance is zero."""
    lam = np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None)
    return float(isoscore_of_moments(lam.sum(), (lam**2).sum(), lam.size, zeta))


def isoscore_of_moments(trace: np.ndarray | float, squared_norm: np.ndarray | float, width: int,
                        zeta: float = ISOSCORE_ZETA) -> np.ndarray:
    """IsoScore* of covariances from their trace and squared Frobenius norm alone, no spectrum.
    The shrunk covariance's ``d`` eigenvalues sum to the trace, and their squares to ``S = (1 -
    zeta)^2 ||C||_F^2 + (2 zeta - zeta^2) trace^2 / d``; the package's formula (normalise the
    eigenvalues to norm sqrt(d), measure their distance to the all-ones vector, rescale) then
    reduces to ``(trace^2 / S - 1) / (d - 1)``. NaN where the variance is zero."""
    trace, squared_norm = np.asarray(trace, dtype=np.float64), np.asarray(squared_norm, dtype=np.float64)
    spread = (1.0 - zeta) ** 2 * squared_norm + (2.0 * zeta - zeta**2) * trace**2 / width
    with np.errstate(divide="ignore", invalid="ignore"):
        score = (trace**2 / spread - 1.0) / (width - 1)
    return np.where((trace > 0) & (width >= 2), score, math.nan)


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


def floored_eigenvalues(values: np.ndarray, width: int) -> np.ndarray:
    """Eigenvalues padded with zeros to ``width``; below RELATIVE_FLOOR of the largest they are
    rounding, not directions (the sample is float32), and their square roots would otherwise add
    a spurious sliver to the effective rank."""
    values = np.asarray(values, dtype=np.float64).copy()
    values[values < RELATIVE_FLOOR * max(values.max(), 0.0)] = 0.0
    return np.concatenate([values, np.zeros(width - values.size)]) if values.size < width else values


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
