"""The trend of a model's cosine geometry with depth, from its stored statistics.

Trend statistics (Spearman rho, Kendall tau of ``layer_mean`` against the layer index) are
positive when similarity grows with depth: condensation. With few layers any rising profile
gives rho = tau = 1, so two statistics that keep the size of the effect come with them: the
mean of the deeper half of the layers and the least-squares slope against layer fraction, each
with a bootstrap confidence interval over sequences. The lenses' summaries over the deeper
layers come from here too.

NumPy only (scipy where a rank is taken), as :mod:`condensation.geometry`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from condensation import lenses as lens_module
from condensation.config.specs import TrendConfig
from condensation.geometry import CosineStatistics
from condensation.intervals import BOOTSTRAP_SEED, CONFIDENCE, SEQUENCE_RESAMPLES, resampled_units

log = logging.getLogger("condensation")

LAST_N = (1, 2, 3, 4, 5)
"""Depth windows for the last-n metrics (the paper's supplementary tables use 1..5 and half)."""


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
    values: np.ndarray, confidence: float = CONFIDENCE, resamples: int = SEQUENCE_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> np.ndarray:
    """Percentile bootstrap interval of the mean over the first axis: ``[N]`` gives ``[2]`` (low,
    high), ``[N, k]`` gives ``[k, 2]``. All columns share the resamples. NaN for fewer than two
    rows, where resampling says nothing about the spread."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape[0] < 2:
        return np.full(values.shape[1:] + (2,), np.nan)
    rows = resampled_units(values.shape[0], resamples, seed)
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
    quantile = float(distributions.t.ppf(0.5 + CONFIDENCE / 2, max(stats.lenses.jackknife.shape[1] - 1, 1)))
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
