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
    share of the tokens' variance on their first principal component, about the tokens' mean
    (centred). More is more condensed. An uncentred "top-energy" ratio (the largest squared
    singular value of the raw directions over their sum) counts the shared mean direction as
    variance, so it reads anisotropy and spread at once; docs/measuring.md says why the two differ.
``alpha_req``
    alpha-ReQ (Agrawal et al. 2022; the phases of pre-training in arXiv 2509.23024): the decay
    exponent alpha of the covariance's eigenvalues, ``lambda_i ~ i^-alpha``, fitted by least
    squares in log-log over the larger half of the sample's non-zero eigenvalues (the smaller half
    of a finite sample's spectrum falls below the true one, Marchenko-Pastur, and would steepen
    the fit). More is more condensed: the variance decays faster over fewer directions.
``cosine_without_outliers``
    the within-sequence mean cosine recomputed with the :data:`OUTLIER_DIMENSIONS` coordinates of
    largest variance removed (each token's remaining coordinates renormalised): a few "rogue"
    dimensions can carry most of a cosine (arXiv 2603.00029). Read on the sampled tokens, over
    the pairs of sampled tokens of one sequence. More is more condensed.
``layer_angle``
    each token's angle between consecutive layers' states, ``arccos(cos(h_{l-1}, h_l)) / pi``
    (0: the layer leaves the direction as it was; the angular distance of Gromov et al. 2024), the
    mean over every token; none at layer 0. Small angles in deep layers are the near-identity
    layers of the Curse of Depth (arXiv 2502.05795); a large one at the last layer is the "jump"
    JREG penalises. It does not measure condensation: shown, with no predicted sign.
``massive_ratio``
    the layer's largest ``|activation|`` over every token and coordinate, over the median
    ``|activation|`` of the sampled tokens (massive activations: Sun et al. 2024; arXiv
    2605.08504). No predicted sign.
``sink_share``
    per sequence, the largest token norm over the sum of the sequence's token norms, averaged
    over sequences: the share the attention-sink token holds (``1 / T`` when every norm is equal).
    No predicted sign.

The first seven read token *directions* (unit rows, as the cosine does), so a few tokens of
large norm do not decide them; ``massive_ratio`` and ``sink_share`` read the norms, which is their
point. ``anisotropy``, ``within_excess``, ``layer_angle``, ``sink_share`` and the numerator of
``massive_ratio`` are exact over every token, from running sums and per-sequence values (memory:
one width-sized vector per layer and group, a few numbers per layer and sequence). The other lenses
read a fixed sample of ``sample_tokens`` tokens per layer, the same positions for every layer and
model, held on the model's device (memory: ``sample_tokens x width`` floats per layer, whatever
the number of sequences), and are computed once at the end. IsoScore* needs no spectrum, only the
trace and the Frobenius norm of each covariance; the effective rank and alpha-ReQ need every
eigenvalue (and PC1 share the largest), from batched eigendecompositions (two calls: the shallower
layers, the deeper half's replicates). The accumulator
(:class:`condensation.lens_extraction.LensAccumulator`, torch) reads the unit rows and norms the
cosines read (:func:`condensation.cosine.accumulate`): on a GPU a batch adds a few operations
whatever the depth. This module holds what the lenses are, their formulas on eigenvalues and
their stored values, and imports no torch: the reporting jobs read it.

Intervals: sequences are dealt into ``groups`` groups (sequence ``n`` into group ``n mod G``) and
each lens is recomputed with one group left out (a delete-a-group jackknife), which gives the
standard error of any linear summary over layers (for ``massive_ratio``, whose numerator is a
maximum, the jackknife is a rough guide: a maximum is not a smooth statistic). For the spectral
lenses the jackknife runs on the deeper ``ceil((L + 1) / 2)`` layers only, the ones the deeper-half
summary reads (any trend convention), which keeps their cost down (:data:`JACKKNIFE_GROUPS`); it is
still the effective rank's ``ceil((L + 1) / 2) x G`` more eigendecompositions (GPT2-small: 42 of
its 55), a fixed cost per call that benchmarks/extraction.py times apart from the per-batch cost.
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
    """How tables and the findings name it (no "|": it is a cell of a Markdown table)."""
    short: str
    """How a figure's legend names it."""
    condensed: int
    """+1 when a larger value means more condensed, -1 when a smaller one does: the sign that
    turns the lens into "condensation" for a claim's direction; 0 for a lens that does not measure
    condensation (shown with no predicted sign)."""
    scale: str = "unit"
    """"unit": a value in [-1, 1], drawn on the lens panel's shared axis; "log": positive and
    unbounded, drawn on a logarithmic axis of its own."""


LENSES: tuple[Lens, ...] = (
    Lens("anisotropy", "cosine across sequences (anisotropy)", "anisotropy", +1),
    Lens("within_excess", "within-sequence cosine minus anisotropy", "within excess", +1),
    Lens("isoscore", "IsoScore*", "IsoScore*", -1),
    Lens("effective_rank", "effective rank / width", "eff. rank / width", -1),
    Lens("pc1_share", "variance share of PC 1", "PC1 share", +1),
    Lens("alpha_req", "eigenspectrum decay (alpha-ReQ)", "alpha-ReQ", +1, "log"),
    Lens("cosine_without_outliers", "within-sequence cosine without the outlier dimensions", "cos w/o outliers", +1),
    Lens("layer_angle", "angle to the previous layer / pi", "layer angle", 0),
    Lens("massive_ratio", "largest absolute activation / median", "max |act| / median", 0, "log"),
    Lens("sink_share", "largest token norm's share of its sequence's", "sink share", 0),
)
LENS_NAMES = tuple(lens.name for lens in LENSES)
BY_NAME = {lens.name: lens for lens in LENSES}
SPECTRAL = ("isoscore", "effective_rank", "pc1_share", "alpha_req")
"""The lenses read from the sampled tokens' covariances, in the order their formulas return them."""
CONDENSATION_LENSES = tuple(lens for lens in LENSES if lens.condensed)
"""The lenses that measure condensation: the findings read each claim under each of them."""


def rows(names: Sequence[str]) -> list[int]:
    """Where the lenses ``names`` sit in ``LENS_NAMES`` (the first axis of the stored values)."""
    return [LENS_NAMES.index(name) for name in names]


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

OUTLIER_DIMENSIONS = 3
"""Coordinates ``cosine_without_outliers`` removes: the few of largest variance that arXiv
2603.00029 and Timkey & van Schijndel (2021) find carry most of a cosine in trained models (one to
a handful); the same number for every width, so that it asks the same question of each model."""

ALPHA_MIN_POINTS = 3
"""Eigenvalues the alpha-ReQ fit needs at least (a line through two points has no error to fit)."""


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


def alpha_req(eigenvalues: np.ndarray) -> float:
    """The decay exponent alpha of ``lambda_i ~ i^-alpha``: minus the least-squares slope of
    log lambda_i on log i over the larger half of the non-zero eigenvalues (zeros: below
    :data:`RELATIVE_FLOOR`, rounding). NaN with fewer than :data:`ALPHA_MIN_POINTS` of them."""
    lam = np.sort(np.clip(np.asarray(eigenvalues, dtype=np.float64), 0.0, None))[::-1]
    lam = lam[lam > 0]
    lam = lam[: lam.size // 2]
    if lam.size < ALPHA_MIN_POINTS:
        return math.nan
    log_rank = np.log(np.arange(1, lam.size + 1))
    centred = log_rank - log_rank.mean()
    return float(-(centred * np.log(lam)).sum() / (centred**2).sum())


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
