"""The statistics of the results tables on hand-made inputs whose answers are known on paper."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from condensation.reporting.statistics import (
    bootstrap_mean_ci,
    mcnemar,
    paired_bootstrap,
    seed_effect,
)

R = 10_000


# ---------------------------------------------------------------------------------------------
# paired_bootstrap
# ---------------------------------------------------------------------------------------------


def test_identical_results_differ_by_nothing():
    a = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1, 1], dtype=float)
    result = paired_bootstrap(a, a.copy())
    # Every resampled difference is exactly 0: it lies on both sides of zero, so p = 1.
    assert (result.difference, result.ci_low, result.ci_high, result.p_value, result.n_items) == (0.0, 0.0, 0.0, 1.0, 10)


def test_winning_every_item_gives_the_smallest_p():
    # a beats b on each of 50 items, by 1..50 hundredths: the mean difference is 25.5 hundredths.
    b = np.zeros(50)
    a = np.arange(1, 51) / 100
    result = paired_bootstrap(a, b, n_resamples=R)
    assert result.difference == pytest.approx(25.5)
    assert result.n_items == 50
    # No resampled difference can be <= 0, so p = 2 * (1 + 0) / (R + 1), the smallest possible.
    assert result.p_value == pytest.approx(2 / (R + 1))
    assert 0 < result.ci_low < 25.5 < result.ci_high < 50
    # The reverse comparison mirrors it.
    reverse = paired_bootstrap(b, a, n_resamples=R)
    assert reverse.difference == pytest.approx(-25.5)
    assert reverse.p_value == pytest.approx(2 / (R + 1)) and reverse.ci_high < 0


def test_two_item_bootstrap_p_matches_its_enumeration():
    # Differences +100 and 0 points: a resample draws each item twice with equal chance, so the
    # resampled mean is 0 with probability 1/4, 50 with 1/2, 100 with 1/4. The share at or below
    # 0 is 1/4, so p = 2 * 1/4 = 0.5 up to resampling noise (sd of the share ~0.004); the 95 %
    # interval runs from 0 to 100.
    result = paired_bootstrap([1, 0], [0, 0], n_resamples=R)
    assert result.difference == 50.0
    assert result.p_value == pytest.approx(0.5, abs=0.03)
    assert (result.ci_low, result.ci_high) == (0.0, 100.0)


def test_same_seed_same_answer_and_seed_matters():
    rng = np.random.default_rng(7)
    a, b = rng.integers(0, 2, 80).astype(float), rng.integers(0, 2, 80).astype(float)
    first, again = paired_bootstrap(a, b, seed=3), paired_bootstrap(a, b, seed=3)
    assert first == again
    other = paired_bootstrap(a, b, seed=4)
    assert other.difference == first.difference  # the estimate never depends on the resampling
    assert (other.ci_low, other.ci_high, other.p_value) != (first.ci_low, first.ci_high, first.p_value)


def test_interval_shrinks_with_more_items():
    # The same pattern (12 wins, 4 losses, 4 ties in 20 items) repeated 16 times: 16x the items
    # should narrow the interval about 4-fold (standard error ~ 1 / sqrt(n)).
    a = np.array([1] * 12 + [0] * 4 + [1] * 2 + [0] * 2, dtype=float)
    b = np.array([0] * 12 + [1] * 4 + [1] * 2 + [0] * 2, dtype=float)
    small = paired_bootstrap(a, b)
    large = paired_bootstrap(np.tile(a, 16), np.tile(b, 16))
    assert small.difference == large.difference == pytest.approx(40.0)  # (12 - 4) / 20
    small_width, large_width = small.ci_high - small.ci_low, large.ci_high - large.ci_low
    assert large_width == pytest.approx(small_width / 4, rel=0.2)
    # p inverts the percentile interval: 0 lies outside the 95 % interval exactly when p < 0.05.
    assert small.ci_low > 0 and small.p_value < 0.05
    assert large.p_value == pytest.approx(2 / (R + 1)) and large.ci_low > 0


def test_p_and_interval_agree_when_zero_is_inside():
    # 4 wins, 2 losses, 4 ties in 10 items: +20 points, but the interval reaches below zero.
    a = [1, 1, 1, 0, 0, 1, 0, 0, 1, 1]
    b = [0, 0, 1, 1, 0, 1, 0, 0, 0, 1]
    result = paired_bootstrap(a, b)
    assert result.difference == pytest.approx(20.0)
    assert result.ci_low < 0 < result.ci_high and result.p_value > 0.05


def test_weights_make_a_weighted_mean():
    # Task A: 2 items, a wins both; task B: 4 items, no difference. Equal task weights give a
    # difference of (100 + 0) / 2 = 50 points; pooling the 6 items equally would give 33.3.
    a = [1, 1, 0, 1, 0, 1]
    b = [0, 0, 0, 1, 0, 1]
    weights = [1 / 2, 1 / 2, 1 / 4, 1 / 4, 1 / 4, 1 / 4]
    assert paired_bootstrap(a, b, weights=weights).difference == pytest.approx(50.0)
    assert paired_bootstrap(a, b).difference == pytest.approx(100 / 3)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="pair up"):
        paired_bootstrap([1, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="no values"):
        paired_bootstrap([], [])
    with pytest.raises(ValueError, match="finite"):
        paired_bootstrap([1, math.nan], [1, 0])
    with pytest.raises(ValueError, match="one label per value"):
        paired_bootstrap([1, 0], [1, 0], clusters=[0])
    with pytest.raises(ValueError, match="weights"):
        paired_bootstrap([1, 0], [1, 0], weights=[-1, 1])


# ---------------------------------------------------------------------------------------------
# bootstrap_mean_ci and clusters
# ---------------------------------------------------------------------------------------------


def test_clusters_are_resampled_whole():
    values = [0, 0, 0, 1, 1, 1]
    # Two clusters of identical values: a resample holds cluster b 0, 1 or 2 times, so the mean
    # is 0, 0.5 or 1 with probabilities 1/4, 1/2, 1/4: the 95 % interval is [0, 1].
    clustered = bootstrap_mean_ci(values, clusters=["a", "a", "a", "b", "b", "b"])
    assert (clustered.mean, clustered.ci_low, clustered.ci_high, clustered.n) == (0.5, 0.0, 1.0, 6)
    # Six independent values: the resampled mean is Binomial(6, 1/2) / 6, whose 2.5 % and
    # 97.5 % quantiles are 1/6 and 5/6 (P(0) = P(6) = 1/64 < 2.5 %).
    independent = bootstrap_mean_ci(values)
    assert independent.ci_low == pytest.approx(1 / 6) and independent.ci_high == pytest.approx(5 / 6)


def test_weighted_mean_interval():
    result = bootstrap_mean_ci([1, 0, 0, 0], weights=[3, 1, 1, 1])
    assert result.mean == pytest.approx(0.5)  # 3 / 6
    assert 0 <= result.ci_low < 0.5 < result.ci_high <= 1
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_mean_ci([1, 0], confidence=1.0)


# ---------------------------------------------------------------------------------------------
# McNemar
# ---------------------------------------------------------------------------------------------


def test_mcnemar_by_hand():
    # 10 discordant pairs, 9 won by a and 1 by b, plus 5 ties of each kind (ignored).
    a = [1] * 9 + [0] * 1 + [1] * 5 + [0] * 5
    b = [0] * 9 + [1] * 1 + [1] * 5 + [0] * 5
    # p = 2 * P(X <= 1 | n = 10, 1/2) = 2 * (1 + 10) / 1024 = 0.021484375
    assert mcnemar(a, b) == 0.021484375
    assert mcnemar(b, a) == 0.021484375
    assert mcnemar(a, b) == pytest.approx(stats.binomtest(1, 10, 0.5).pvalue)


def test_mcnemar_edge_cases():
    assert mcnemar([1, 0, 1], [1, 0, 1]) == 1.0  # no discordant pair
    assert mcnemar([1] * 5 + [0] * 5, [0] * 5 + [1] * 5) == 1.0  # 5:5, 2 * P(X <= 5) > 1
    assert mcnemar([1] * 6, [0] * 6) == pytest.approx(2 / 64)  # 6:0, 2 * (1/2)^6
    with pytest.raises(ValueError, match="0 or 1"):
        mcnemar([0.5, 1], [0, 1])


# ---------------------------------------------------------------------------------------------
# seed_effect
# ---------------------------------------------------------------------------------------------


def test_seed_effect_beyond_spread():
    method = {0: 0.80, 1: 0.82}
    reference = {0: 0.70, 1: 0.74}
    effect = seed_effect(method, reference)
    assert effect.difference == pytest.approx(0.09)  # 0.81 - 0.72
    # Squared deviations: 2 x 0.01^2 + 2 x 0.02^2 = 0.001 over 2 degrees of freedom.
    assert effect.pooled_std == pytest.approx(math.sqrt(0.0005))
    assert effect.method_std == pytest.approx(math.sqrt(0.0002)) and effect.reference_std == pytest.approx(math.sqrt(0.0008))
    assert (effect.paired_min, effect.paired_max) == (pytest.approx(0.08), pytest.approx(0.10))
    assert effect.exceeds_spread is True  # 0.09 > 2 x 0.0224
    assert (effect.n_method, effect.n_reference) == (2, 2)


def test_seed_effect_within_spread_and_unknown_spread():
    within = seed_effect({0: 0.79, 1: 0.81, 2: 0.83}, {0: 0.80, 1: 0.78})
    # difference 0.81 - 0.79 = 0.02; SS = 0.0008 + 0.0002 over 3 dof -> pooled 0.0183; 2x = 0.0365
    assert within.difference == pytest.approx(0.02)
    assert within.pooled_std == pytest.approx(math.sqrt(0.001 / 3))
    assert within.exceeds_spread is False
    assert (within.paired_min, within.paired_max) == (pytest.approx(-0.01), pytest.approx(0.03))  # seeds 0, 1 only
    single = seed_effect({0: 0.9}, {1: 0.1})
    assert single.exceeds_spread is None and math.isnan(single.pooled_std)
    assert math.isnan(single.paired_min) and single.difference == pytest.approx(0.8)
    # No spread at all: any difference exceeds it, none does not.
    assert seed_effect({0: 0.5, 1: 0.5}, {0: 0.5, 1: 0.5}).exceeds_spread is False
    assert seed_effect({0: 0.6, 1: 0.6}, {0: 0.5, 1: 0.5}).exceeds_spread is True
