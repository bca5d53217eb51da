"""The level of every interval the package reports, and the bootstrap resamples behind each kind.

One home for these numbers: the trend tables, the figures' error bars, the score tables and the
findings page all say "95 %", and each kind of bootstrap takes its count from here. The counts
differ by what one resample costs; each keeps the Monte Carlo error of a 95 % interval's end at
a few percent of a standard error (for a normal statistic about 0.06 sd at 2,000 resamples,
0.04 at 4,000, 0.03 at 10,000), and the fixed seed gives the same interval for the same data.
"""

from __future__ import annotations

import numpy as np

CONFIDENCE = 0.95
"""Two-sided level of every reported interval."""

EQUIVALENCE_CONFIDENCE = 0.90
"""The interval a two one-sided test at 5 % reads (a claim of no difference inside a margin)."""

SEQUENCE_RESAMPLES = 4000
"""Sequences resampled for a model's depth trend (``trend.bootstrap_mean_interval``): one matrix
product of the per-sequence layer means a resample, milliseconds in all."""

PANEL_RESAMPLES = 2000
"""Units (sequences, items) resampled once for every run of a findings panel
(``reporting.statistics.panel``): each resample recomputes the claim's statistic for every run
of the panel, so it costs the most."""

ITEM_RESAMPLES = 10_000
"""Test items resampled (paired, by cluster) for the score tables' differences
(``reporting.statistics.resampling.paired_bootstrap``): a weighted mean a resample."""

BOOTSTRAP_SEED = 0
"""The seed of every bootstrap: the same inputs give the same interval."""


def resampled_units(n: int, resamples: int, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """``[resamples, n]`` indices of ``n`` units drawn with replacement: the one draw behind the
    depth trend's bootstrap and the findings panels' (the same seed, the same resamples)."""
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))
