"""Significance for the results: paired tests over test items, and seed-aware intervals that
cover the training runs as well. Pure NumPy/SciPy.

Two sources of randomness stand behind every comparison of trained models: which training run was
drawn (its seed: initialisation, data order) and which test items or text sequences it was scored
on. Items are many and shared by every run, so an item-level test (:func:`paired_bootstrap`) is
precise, but it treats each run as fixed; training runs are few (2-3 seeds) and differ more than
the items' sampling error, so a claim about a *method* needs both (:func:`contrast`).

Why a t interval over seeds and not a percentile bootstrap over them: with 2 seeds, resampling
seeds gives an interval that is roughly the range of the two per-seed values, which excludes zero
whenever both land on the same side: under no effect, half the time. The seed-level t interval
with k - 1 degrees of freedom keeps the stated 5 % (tests/unit/test_statistics.py simulates it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Hashable, Mapping, Sequence

import numpy as np
from scipy import stats

__all__ = [
    "Arm",
    "MeanInterval",
    "PairedComparison",
    "SeedAwareEstimate",
    "bootstrap_mean_ci",
    "contrast",
    "difference",
    "holm",
    "mcnemar",
    "paired_bootstrap",
]

# Resamples are drawn in blocks so that an index matrix never exceeds ~8M entries (64 MB).
_BLOCK_ENTRIES = 8_000_000

@dataclass(frozen=True)
class MeanInterval:
    """A (weighted) mean with its percentile bootstrap interval; ``n`` values went in."""

    mean: float
    ci_low: float
    ci_high: float
    n: int


@dataclass(frozen=True)
class PairedComparison:
    """Method A against method B on the same items, in percentage points (A - B).

    ``p_value`` is two-sided; ``n_items`` counts the pairs (an item scored under two seeds
    counts twice).
    """

    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    n_items: int
    se: float = math.nan
    """The standard deviation of the resampled differences: the items' sampling error."""


def _as_vector(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    vector = np.asarray(values, dtype=float)
    if vector.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d sequence, got shape {vector.shape}")
    if vector.size == 0:
        raise ValueError(f"{name}: no values")
    if not np.isfinite(vector).all():
        raise ValueError(f"{name}: values must be finite")
    return vector


def _cluster_sums(values: np.ndarray, weights: np.ndarray, clusters: Sequence | np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster, the sum of weight x value and the sum of weights (each value its own cluster
    when ``clusters`` is None)."""
    if clusters is None:
        return weights * values, weights
    labels = np.asarray(clusters)
    if labels.shape != values.shape:
        raise ValueError(f"clusters: expected one label per value ({values.size}), got shape {labels.shape}")
    _, codes = np.unique(labels, return_inverse=True)
    codes = codes.ravel()
    return np.bincount(codes, weights * values), np.bincount(codes, weights)


def _bootstrap(
    values: np.ndarray, weights: Sequence[float] | np.ndarray | None, clusters: Sequence | np.ndarray | None,
    n_resamples: int, seed: int,
) -> tuple[float, np.ndarray]:
    """The weighted mean of ``values`` and its ``n_resamples`` bootstrap replicates, drawing whole
    clusters with replacement (as many as there are)."""
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    w = np.ones_like(values) if weights is None else _as_vector(weights, "weights")
    if w.shape != values.shape or (w < 0).any() or w.sum() <= 0:
        raise ValueError("weights: expected one non-negative weight per value, not all zero")
    weighted, total = _cluster_sums(values, w, clusters)
    k = weighted.size
    rng = np.random.default_rng(seed)
    replicates = np.empty(n_resamples)
    block = max(1, _BLOCK_ENTRIES // k)
    for start in range(0, n_resamples, block):
        draws = rng.integers(0, k, size=(min(block, n_resamples - start), k))
        # A resample whose clusters all weigh 0 has no mean (only possible with zero weights).
        with np.errstate(invalid="ignore", divide="ignore"):
            replicates[start:start + len(draws)] = weighted[draws].sum(axis=1) / total[draws].sum(axis=1)
    return float(weighted.sum() / total.sum()), replicates[np.isfinite(replicates)]


def _percentiles(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    tail = (1 - confidence) / 2
    low, high = np.quantile(replicates, [tail, 1 - tail])
    return float(low), float(high)


def bootstrap_mean_ci(
    values: Sequence[float] | np.ndarray, *, weights: Sequence[float] | np.ndarray | None = None,
    clusters: Sequence | np.ndarray | None = None, n_resamples: int = 10_000, seed: int = 0,
    confidence: float = 0.95,
) -> MeanInterval:
    """The weighted mean of ``values`` with a percentile bootstrap interval.

    ``weights`` (default: all 1) make the mean ``sum(w * v) / sum(w)``. ``clusters`` (one label
    per value) makes the bootstrap draw whole clusters: values that share a label are resampled
    together, which is right when they are not independent (the same test item answered by runs
    of several seeds). Without labels every value is drawn on its own. The same ``seed`` gives
    the same interval.
    """
    vector = _as_vector(values, "values")
    mean, replicates = _bootstrap(vector, weights, clusters, n_resamples, seed)
    return MeanInterval(mean, *_percentiles(replicates, confidence), int(vector.size))


def paired_bootstrap(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
    weights: Sequence[float] | np.ndarray | None = None, clusters: Sequence | np.ndarray | None = None,
    n_resamples: int = 10_000, seed: int = 0, confidence: float = 0.95,
) -> PairedComparison:
    """Paired bootstrap of the difference between two methods' per-item scores.

    ``a[i]`` and ``b[i]`` are the two methods' scores on the same item i, as fractions (0/1
    correctness, or a real score); the difference is ``100 * (mean(a) - mean(b))``, in
    percentage points (weighted means if ``weights`` is given). The pairs' differences are
    resampled with replacement (whole clusters if ``clusters`` is given, see
    :func:`bootstrap_mean_ci`), the interval is the percentile interval of the resampled
    differences, and the two-sided p-value is twice the share of resampled differences on the
    far side of zero, counted with +1 in numerator and denominator,

        p = min(1, 2 * min(1 + #{d* <= 0}, 1 + #{d* >= 0}) / (R + 1)),

    so p is never 0 (the smallest is 2 / (R + 1)) and p < 1 - confidence exactly when zero lies
    outside the interval, up to ties. Identical inputs give difference 0 and p = 1.
    """
    first, second = _as_vector(a, "a"), _as_vector(b, "b")
    if first.shape != second.shape:
        raise ValueError(f"a and b must pair up: {first.size} vs {second.size} values")
    difference, replicates = _bootstrap(100.0 * (first - second), weights, clusters, n_resamples, seed)
    below, above = int((replicates <= 0).sum()), int((replicates >= 0).sum())
    p_value = min(1.0, 2.0 * (1 + min(below, above)) / (replicates.size + 1))
    return PairedComparison(difference, *_percentiles(replicates, confidence), p_value, int(first.size),
                            float(replicates.std(ddof=1)) if replicates.size > 1 else math.nan)


def mcnemar(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Exact two-sided McNemar p-value for paired 0/1 results (a cross-check of
    :func:`paired_bootstrap`).

    Only discordant pairs count: with ``n`` of them, ``k`` won by the rarer side, under the null
    each is won by either side with probability 1/2, so ``p = min(1, 2 * P(X <= k))`` for
    ``X ~ Binomial(n, 1/2)``; p = 1 without discordant pairs. Pairs are taken as independent,
    which items repeated under several seeds are not quite.
    """
    first, second = _as_vector(a, "a"), _as_vector(b, "b")
    if first.shape != second.shape:
        raise ValueError(f"a and b must pair up: {first.size} vs {second.size} values")
    if not (np.isin(first, (0.0, 1.0)).all() and np.isin(second, (0.0, 1.0)).all()):
        raise ValueError("mcnemar: results must be 0 or 1")
    a_only = int(((first == 1) & (second == 0)).sum())
    b_only = int(((first == 0) & (second == 1)).sum())
    n = a_only + b_only
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * stats.binom.cdf(min(a_only, b_only), n, 0.5)))


# --------------------------------------------------------------------------------------------
# Seed-aware intervals: training runs and items (or sequences) together
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arm:
    """The runs of one model or method: seed -> the run's estimate (a score in points, a cosine).

    ``sampling_variance`` is the variance of the mean over runs that comes from the test items or
    text sequences (e.g. the squared standard error of a bootstrap over items); ``fixed`` marks one
    given model that is not a draw from a training procedure here (a published checkpoint): it has
    no training noise, where a single run of a training done here has an unknown one.
    """

    runs: Mapping[Hashable, float]
    sampling_variance: float = 0.0
    fixed: bool = False
    label: str = ""


@dataclass(frozen=True)
class SeedAwareEstimate:
    """A contrast of arms' means with an interval and p-value that cover training seeds and the
    items or sequences. ``unmeasured`` says why there is no interval (an arm of one run whose
    training noise is unknown); then ``ci_low``, ``ci_high`` and ``p_value`` are NaN."""

    estimate: float
    ci_low: float
    ci_high: float
    p_value: float
    dof: float
    seed_se: float
    sampling_se: float
    per_seed: tuple[float, ...] = ()
    """Same-seed differences (paired arms), for the reader to see each run's effect."""
    unmeasured: str = ""

    @property
    def measured(self) -> bool:
        return not self.unmeasured


def _seed_variance(arm: Arm) -> tuple[float, int]:
    """Variance of the arm's mean over runs due to training (s^2 / k) and its degrees of freedom;
    NaN for a single run that is not fixed."""
    values = _as_vector(list(arm.runs.values()), f"runs of {arm.label or 'an arm'}")
    if values.size > 1:
        return float(values.var(ddof=1) / values.size), values.size - 1
    return (0.0, 0) if arm.fixed else (math.nan, 0)


def contrast(arms: Sequence[Arm], coefficients: Sequence[float], *, confidence: float = 0.95) -> SeedAwareEstimate:
    """The contrast ``sum(c_j * mean_j)`` of the arms' means over their runs, with a t interval.

    Its variance adds, per arm, the training part ``c^2 s_j^2 / k_j`` (s: the sample std of the
    arm's runs, k: their number) and the sampling part ``c^2 * sampling_variance_j``. The degrees
    of freedom are Welch-Satterthwaite's over the training parts alone: the seeds' spread is what
    is known least, and letting a small sampling part raise them (as a full Satterthwaite would)
    makes the interval too narrow exactly when two seeds happen to land close together (11 % false
    calls instead of 5 % with 2 seeds, simulated). Only fixed arms: a normal quantile. Two-sided p
    from the same t distribution. A zero total variance (identical runs, no sampling error) gives
    the point as interval and p = 1 for a zero contrast, else 0.
    """
    if len(arms) != len(coefficients) or not arms:
        raise ValueError(f"contrast: {len(arms)} arms and {len(coefficients)} coefficients")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    estimate, seed_var, sampling_var, dof_terms = 0.0, 0.0, 0.0, 0.0
    unknown, seed_dofs = [], []
    for arm, c in zip(arms, coefficients):
        if c == 0:
            continue
        variance, dof = _seed_variance(arm)
        estimate += c * float(np.mean(list(arm.runs.values())))
        if math.isnan(variance):
            unknown.append(arm.label or "an arm")
            continue
        seed_var += c * c * variance
        sampling_var += c * c * float(arm.sampling_variance)
        if dof:
            dof_terms += (c * c * variance) ** 2 / dof
            seed_dofs.append(dof)
    if unknown:
        reason = f"one run of {', '.join(unknown)}: its training noise is unmeasured"
        return SeedAwareEstimate(estimate, math.nan, math.nan, math.nan, math.nan, math.nan,
                                 math.sqrt(sampling_var), unmeasured=reason)
    total = seed_var + sampling_var
    if dof_terms > 0:
        dof = seed_var**2 / dof_terms
    else:  # runs that agree exactly (or only fixed arms): the fewest seeds still bound what is known
        dof = float(min(seed_dofs)) if seed_dofs else math.inf
    if total <= 0:
        return SeedAwareEstimate(estimate, estimate, estimate, 1.0 if estimate == 0 else 0.0, dof, 0.0, 0.0)
    se = math.sqrt(total)
    quantile = float(stats.t.ppf(0.5 + confidence / 2, dof))
    p_value = float(2 * stats.t.sf(abs(estimate) / se, dof))
    return SeedAwareEstimate(estimate, estimate - quantile * se, estimate + quantile * se, p_value, dof,
                             math.sqrt(seed_var), math.sqrt(sampling_var))


def difference(a: Arm, b: Arm, *, sampling_variance: float | None = None, confidence: float = 0.95) -> SeedAwareEstimate:
    """``mean(a) - mean(b)``, seed-aware (:func:`contrast`).

    Arms run with the same seeds (at least two, neither fixed) are paired: a seed is one draw of
    initialisation and data order shared by both, so the per-seed differences form one arm and
    their spread is the training noise of the difference. Otherwise the arms are independent
    (Welch). ``sampling_variance``, when given, is the sampling variance of the difference itself
    (from a paired bootstrap over shared items, smaller than the arms' sum); else the arms' sum.
    ``per_seed`` holds the same-seed differences (a fixed arm's one value against every seed).
    """
    shared = [seed for seed in a.runs if seed in b.runs]
    if b.fixed and len(b.runs) == 1:
        only = next(iter(b.runs.values()))
        per_seed = tuple(float(v - only) for v in a.runs.values())
    elif a.fixed and len(a.runs) == 1:
        only = next(iter(a.runs.values()))
        per_seed = tuple(float(only - v) for v in b.runs.values())
    else:
        per_seed = tuple(float(a.runs[s] - b.runs[s]) for s in shared)
    sampling = a.sampling_variance + b.sampling_variance if sampling_variance is None else sampling_variance
    if len(shared) >= 2 and set(shared) == set(a.runs) == set(b.runs) and not (a.fixed or b.fixed):
        paired = Arm(dict(zip(shared, per_seed)), sampling, label=f"{a.label} - {b.label}")
        result = contrast([paired], [1.0], confidence=confidence)
    else:
        result = contrast([replace(a, sampling_variance=sampling), replace(b, sampling_variance=0.0)],
                          [1.0, -1.0], confidence=confidence)
    return replace(result, per_seed=per_seed)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (NaN entries are not part of it and
    stay NaN): the i-th smallest of m is multiplied by m - i + 1, then made non-decreasing, capped
    at 1. Rejecting where the adjusted p < alpha keeps the chance of any false rejection below
    alpha, whatever the dependence between the tests."""
    values = np.asarray(p_values, dtype=float)
    adjusted = np.full(values.shape, math.nan)
    present = np.flatnonzero(~np.isnan(values))
    order = present[np.argsort(values[present], kind="stable")]
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * values[index]))
        adjusted[index] = running
    return adjusted.tolist()
