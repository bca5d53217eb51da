"""The statistics of the results tables on hand-made inputs whose answers are known on paper."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from condensation.reporting.statistics import (
    Arm,
    bootstrap_mean_ci,
    contrast,
    difference,
    holm,
    mcnemar,
    paired_bootstrap,
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
# contrast / difference: seed-aware intervals
# ---------------------------------------------------------------------------------------------


def test_paired_difference_is_a_t_interval_over_the_per_seed_differences():
    a, b = Arm({0: 0.80, 1: 0.82, 2: 0.90}), Arm({0: 0.70, 1: 0.74, 2: 0.72})
    result = difference(a, b)
    d = np.array([0.10, 0.08, 0.18])  # same-seed differences
    se = d.std(ddof=1) / math.sqrt(3)
    t = stats.t.ppf(0.975, 2)
    assert result.estimate == pytest.approx(d.mean())
    assert (result.ci_low, result.ci_high) == (pytest.approx(d.mean() - t * se), pytest.approx(d.mean() + t * se))
    assert result.dof == pytest.approx(2) and result.p_value == pytest.approx(2 * stats.t.sf(d.mean() / se, 2))
    assert result.per_seed == pytest.approx(tuple(d))


def test_sampling_variance_adds_with_satterthwaite_degrees_of_freedom():
    seeds = Arm({0: 1.0, 1: 3.0})  # s^2 / k = 2 / 2 = 1, one degree of freedom
    result = contrast([seeds], [1.0])
    assert result.seed_se == pytest.approx(1.0) and result.dof == pytest.approx(1.0)
    both = contrast([replace(seeds, sampling_variance=1.0)], [1.0])
    assert both.sampling_se == pytest.approx(1.0)
    assert both.dof == pytest.approx(1.0)  # the seeds' spread decides what is known
    assert both.ci_high - both.estimate == pytest.approx(stats.t.ppf(0.975, 1) * math.sqrt(2))
    welch = contrast([Arm({0: 1.0, 1: 3.0}), Arm({0: 0.0, 1: 0.0, 2: 3.0})], [1.0, -1.0])
    # parts 1 and 3 / 3 = 1: (1 + 1)^2 / (1 / 1 + 1 / 2)
    assert welch.dof == pytest.approx(4 / 1.5)
    fixed_only = contrast([Arm({"published": 2.0}, sampling_variance=0.25, fixed=True)], [1.0])
    assert fixed_only.dof == math.inf and fixed_only.ci_high == pytest.approx(2.0 + 1.959964 * 0.5)


def test_one_run_that_could_have_been_another_leaves_the_noise_unmeasured():
    result = difference(Arm({0: 0.9}, label="MLP 32"), Arm({0: 0.5}, label="MLP 1024"))
    assert not result.measured and "MLP 32" in result.unmeasured and "unmeasured" in result.unmeasured
    assert math.isnan(result.ci_low) and math.isnan(result.p_value) and result.estimate == pytest.approx(0.4)
    # A published checkpoint is one given model: no training noise to measure on its side.
    fixed = difference(Arm({0: 0.60, 1: 0.64}), Arm({"published": 0.50}, fixed=True))
    assert fixed.measured and fixed.dof == pytest.approx(1) and fixed.per_seed == pytest.approx((0.10, 0.14))


def test_a_slope_over_sizes_is_a_linear_contrast():
    x = np.log10([1e6, 2e6, 4e6])
    c = (x - x.mean()) / ((x - x.mean()) ** 2).sum()
    arms = [Arm({0: 0.30, 1: 0.32}), Arm({0: 0.25, 1: 0.27}), Arm({0: 0.20, 1: 0.22})]
    result = contrast(arms, c)
    assert result.estimate == pytest.approx(np.polyfit(x, [0.31, 0.26, 0.21], 1)[0])
    assert result.ci_high < 0


def _verdict_rate(effect: float, seed_sd: float, seeds: int, trials: int = 2000) -> float:
    """Share of simulated experiments whose paired interval excludes zero."""
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(trials):
        item_noise = rng.normal(0, 0.3, seeds)  # per seed, known sampling error 0.3
        d = effect + rng.normal(0, seed_sd, seeds) + item_noise
        result = contrast([Arm(dict(enumerate(d)), sampling_variance=0.09 / seeds)], [1.0])
        hits += result.ci_low > 0 or result.ci_high < 0
    return hits / trials


@pytest.mark.parametrize("seeds", [2, 3])
def test_no_effect_with_wide_seed_spread_is_rarely_called_a_finding(seeds):
    # A percentile bootstrap over 2 seeds would call about half of these significant.
    assert _verdict_rate(effect=0.0, seed_sd=2.0, seeds=seeds) <= 0.06


def test_a_true_effect_well_beyond_the_seed_spread_is_found():
    assert _verdict_rate(effect=5.0, seed_sd=0.5, seeds=3) >= 0.95


def test_one_outlier_seed_widens_the_interval_instead_of_deciding_it():
    # Per seed -0.1, -0.05 and -4.9 (a run that collapsed): pooled items alone call it significant.
    result = contrast([Arm({0: -0.1, 1: -0.05, 2: -4.9}, sampling_variance=0.04)], [1.0])
    assert result.ci_low < 0 < result.ci_high


def test_holm_multiplies_by_the_remaining_count_and_keeps_the_order():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    adjusted = holm([0.5, math.nan, 0.001])
    assert math.isnan(adjusted[1]) and adjusted[0] == pytest.approx(0.5) and adjusted[2] == pytest.approx(0.002)
    assert holm([0.4, 0.3]) == pytest.approx([0.6, 0.6]) and holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []
