"""Resampling over test items: a bootstrap interval of a (weighted, clustered) mean, the paired
bootstrap of two methods on the same items, and the exact McNemar test. They treat the training
runs as fixed, so they say how precisely given runs were scored; whether a method helps is a
question over runs too (:mod:`condensation.reporting.statistics.panel`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from condensation.intervals import BOOTSTRAP_SEED, CONFIDENCE, ITEM_RESAMPLES

__all__ = ["MeanInterval", "PairedComparison", "bootstrap_mean_ci", "mcnemar", "paired_bootstrap"]

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


def _cluster_sums(values: np.ndarray, weights: np.ndarray,
                  clusters: Sequence | np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
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
    clusters: Sequence | np.ndarray | None = None, n_resamples: int = ITEM_RESAMPLES, seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
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
    n_resamples: int = ITEM_RESAMPLES, seed: int = BOOTSTRAP_SEED, confidence: float = CONFIDENCE,
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
