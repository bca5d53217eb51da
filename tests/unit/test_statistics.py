"""The statistics of the results on hand-made inputs whose answers are known on paper: resampling
over items, the estimates over runs and units (each noise once), verdicts and multiplicity."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from condensation.reporting.statistics.decisions import (
    AGREES,
    DEPENDS,
    DISAGREES,
    INCONCLUSIVE,
    UNTESTED,
    EvidencePiece,
    decide,
    holm,
    over_statistics,
    read_equivalence,
)
from condensation.reporting.statistics.panel import (
    Estimate,
    Run,
    contrast,
    difference,
    fieller,
    gap_share,
    panel_from_profiles,
    panel_from_replicates,
    panel_from_units,
    slope,
)
from condensation.reporting.statistics.resampling import bootstrap_mean_ci, mcnemar, paired_bootstrap
from condensation.reporting.tables.profiles import deep_half, kendall_with_depth, spearman_with_depth

R = 10_000


# ---------------------------------------------------------------------------------------------
# paired_bootstrap
# ---------------------------------------------------------------------------------------------


def test_identical_results_differ_by_nothing():
    a = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1, 1], dtype=float)
    result = paired_bootstrap(a, a.copy())
    # Every resampled difference is exactly 0: it lies on both sides of zero, so p = 1.
    assert ((result.difference, result.ci_low, result.ci_high, result.p_value, result.n_items)
            == (0.0, 0.0, 0.0, 1.0, 10))


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
# estimates over runs and units
# ---------------------------------------------------------------------------------------------


def _two_arm_panel(first: np.ndarray, second: np.ndarray, fixed=()):
    """Runs ``[k, units]`` of two arms, seeds 0..k-1 in each (one row and ``fixed``: a given model)."""
    runs = [Run("a", None if "a" in fixed else s, 0.0) for s in range(len(first))]
    runs += [Run("b", None if "b" in fixed else s, 0.0) for s in range(len(second))]
    return panel_from_units(runs, [*first, *second], units="sequences", fixed=fixed)


def test_a_paired_difference_is_the_two_way_analysis_of_variance_of_the_per_unit_differences():
    rng = np.random.default_rng(3)
    k, n = 3, 40
    a = 0.5 + rng.normal(0, 0.05, (k, 1)) + rng.normal(0, 0.1, n) + rng.normal(0, 0.05, (k, n))
    b = a - 0.02 + rng.normal(0, 0.03, (k, n))
    result = difference(_two_arm_panel(a, b), "a", "b")
    d = a - b  # seed x unit table of the paired differences
    per_seed = d.mean(axis=1)
    unit_means = d.mean(axis=0)
    ms_unit = k * unit_means.var(ddof=1)
    residual = d - per_seed[:, None] - unit_means[None, :] + d.mean()
    ms_residual = (residual**2).sum() / ((k - 1) * (n - 1))
    expected = per_seed.var(ddof=1) / k + max(ms_unit - ms_residual, 0) / (k * n)
    assert result.estimate == pytest.approx(d.mean())
    assert result.se**2 == pytest.approx(expected)
    assert result.dof == pytest.approx(k - 1) and result.per_seed == pytest.approx(tuple(per_seed))
    low, high = result.interval()
    assert high - result.estimate == pytest.approx(stats.t.ppf(0.975, k - 1) * result.se)
    assert result.covers == "seeds and sequences"


def test_the_units_main_effect_counts_once_and_a_shared_one_cancels():
    rng = np.random.default_rng(4)
    main = rng.normal(0, 0.2, 30)  # the same sequences move every run alike
    a = 0.6 + main + rng.normal(0, 0.01, (3, 30))
    b = 0.5 + main + rng.normal(0, 0.01, (3, 30))
    paired = difference(_two_arm_panel(a, b), "a", "b")
    assert paired.unit_se < 0.01 < 0.2 / math.sqrt(30)  # cancels in the paired difference
    # against a given model, its sequences' error is all main effect and stays
    given = difference(_two_arm_panel(a, 0.5 + rng.normal(0, 0.2, (1, 30)), fixed=("b",)), "a", "b")
    assert given.unit_se > 0.02 and len(given.per_seed) == 3


def test_one_run_trained_here_leaves_its_noise_unmeasured_and_a_given_model_does_not():
    one = _two_arm_panel(np.full((1, 5), 0.9), np.full((1, 5), 0.5))
    result = difference(one, "a", "b")
    assert not result.measured and "one run of a, b" in result.unmeasured and result.estimate == pytest.approx(0.4)
    assert math.isnan(result.p_value) and all(math.isnan(v) for v in result.interval())
    given = difference(_two_arm_panel(np.array([[0.6] * 4 + [0.7], [0.64] * 5]), np.full((1, 5), 0.5), fixed=("b",)),
                       "a", "b")
    assert given.measured and given.dof == pytest.approx(1) and given.per_seed == pytest.approx((0.12, 0.14))


def test_a_slope_over_sizes_is_a_linear_contrast_with_welch_degrees_of_freedom_bounded_by_hsu():
    x = np.log10([1e6, 2e6, 4e6])
    values = {"S": [0.30, 0.32, 0.31], "M": [0.25, 0.27], "L": [0.20, 0.22, 0.21, 0.23]}
    runs = [Run(arm, f"{arm}{i}", 0.0) for arm, vs in values.items() for i, _ in enumerate(vs)]
    panel = panel_from_units(runs, [np.full(4, v) for vs in values.values() for v in vs], units="sequences")
    result = slope(panel, dict(zip(values, x)))
    assert result.estimate == pytest.approx(np.polyfit(x, [0.31, 0.26, 0.215], 1)[0])
    c = (x - x.mean()) / ((x - x.mean()) ** 2).sum()
    parts = [c[i] ** 2 * np.var(vs, ddof=1) / len(vs) for i, vs in enumerate(values.values())]
    assert result.se**2 == pytest.approx(sum(parts))  # no sequence noise at all here
    welch = sum(parts) ** 2 / sum(p**2 / (len(vs) - 1) for p, vs in zip(parts, values.values()))
    # Hsu's bound, min(k) - 1, over the arms that carry the slope (the middle's c is 0), whose seed
    # counts differ (3 and 4): S's 3 seeds give 2
    assert welch > 2 and result.dof == pytest.approx(2.0)
    assert result.interval()[1] < 0


def test_an_outlier_seed_widens_the_interval_instead_of_deciding_it():
    a = np.array([[0.50] * 10, [0.55] * 10, [4.9] * 10]) + np.linspace(0, 0.01, 10)
    b = np.zeros((3, 10)) + np.linspace(0, 0.01, 10)
    low, high = difference(_two_arm_panel(a, b), "a", "b").interval()
    assert low < 0 < high


def test_rank_statistics_of_mean_profiles_match_scipy():
    rng = np.random.default_rng(5)
    profiles = rng.normal(size=(20, 9))
    profiles[3, 2] = profiles[3, 5]  # a tie
    for row, rho, tau in zip(profiles, spearman_with_depth(profiles), kendall_with_depth(profiles)):
        assert rho == pytest.approx(stats.spearmanr(row, np.arange(9)).statistic)
        assert tau == pytest.approx(stats.kendalltau(row, np.arange(9)).statistic)
    assert deep_half(np.arange(9.0)[None])[0] == pytest.approx(np.mean([4, 5, 6, 7, 8]))


def test_a_statistic_stuck_at_one_is_flagged_not_tested():
    rising = np.tile(np.linspace(0, 1, 6), (16, 1))  # every sequence rises monotonically
    runs = [Run(arm, s, 0.0) for arm in "ab" for s in range(3)]
    profiles = [rising + 0.01 * i for i in range(6)]
    panel = panel_from_profiles(runs, profiles, spearman_with_depth, units="sequences", name="Spearman rho",
                                resamples=50)
    result = difference(panel, "a", "b")
    assert result.saturated and "1.00 for every run" in result.saturated
    reading = decide([EvidencePiece("p", "", result)]).readings[0]
    assert reading.verdict == INCONCLUSIVE and "cannot separate" in reading.reason


def test_runs_all_at_one_with_a_few_resamples_below_it_are_saturated_too():
    """The default's toys: rho of every run's mean profile is exactly 1.00, while a few bootstrap
    resamples of one run's sequences dip below it; the slope's se (a rounding residue of the
    interaction taken out of the units' variance) is then ~1e-11 and the page
    printed an MDE of 7e-10. Runs that all take one value are a statistic stuck, not a test."""
    runs = [Run(f"w{i // 4}", f"w{i // 4}-{i % 4}", 1.0) for i in range(12)]
    replicates = np.ones((12, 2000))
    replicates[0, :3] = 1.0 - 1.0 / 60  # three of one run's 2,000 resamples break a tie
    panel = panel_from_replicates(runs, list(replicates), kind="bootstrap", units="sequences",
                                  statistic="Spearman rho")
    result = slope(panel, {"w0": 6.063, "w1": 6.209, "w2": 6.505})
    assert 1e-12 < result.se < 1e-6 and result.saturated and "1.00 for every run" in result.saturated
    assert decide([EvidencePiece("p", "", result)]).verdict == UNTESTED


def test_models_of_different_depths_share_one_panel_of_profiles():
    """A family whose sizes differ in depth (the paper's families do): each run's statistic on its
    own layers, the same resamples of the sequences for every run; runs on other sequences refused."""
    rng = np.random.default_rng(8)
    shallow, deep = rng.normal(size=(12, 4)), rng.normal(size=(12, 7))
    runs = [Run("small", None, 0.0), Run("large", None, 0.0)]
    panel = panel_from_profiles(runs, [shallow, deep], deep_half, units="sequences", resamples=200)
    assert [run.value for run in panel.runs] == pytest.approx([deep_half(shallow.mean(0, keepdims=True))[0],
                                                                deep_half(deep.mean(0, keepdims=True))[0]])
    alone = panel_from_profiles(runs[1:], [deep], deep_half, units="sequences", resamples=200)
    np.testing.assert_allclose(panel.sampling.values[1], alone.sampling.values[0])
    with pytest.raises(ValueError, match="same units"):
        panel_from_profiles(runs, [shallow, deep[:10]], deep_half, units="sequences")


def test_a_jackknife_over_groups_reads_with_g_minus_1_degrees_of_freedom():
    replicates = np.array([[1.0, 1.2, 0.8, 1.1, 0.9, 1.0]])
    panel = panel_from_replicates([Run("given", None, 1.0)], replicates, kind="jackknife", units="groups of sequences",
                                  fixed=("given",))
    result = contrast(panel, {"given": 1.0})
    g = 6
    se = math.sqrt((g - 1) / g * ((replicates - replicates.mean()) ** 2).sum())
    assert result.se == pytest.approx(se) and result.dof == pytest.approx(g - 1)
    assert result.interval()[1] - 1.0 == pytest.approx(stats.t.ppf(0.975, 5) * se)
    assert result.covers == "groups of sequences"


def test_fieller_and_the_share_of_a_gap_closed():
    # per seed: CE 0.40, distilled closes 20 % of the way to a teacher at 0.20 (noise-free sequences)
    rng = np.random.default_rng(6)
    shifts = rng.normal(0, 0.01, 4)
    arms = {"ce": 0.40, "distilled": 0.36, "teacher": 0.20}
    runs = [Run(arm, s, 0.0) for arm in arms for s in range(4)]
    per_unit = [np.full(8, mean + shifts[s]) + 0.001 * np.arange(8) for mean in arms.values() for s in range(4)]
    panel = panel_from_units(runs, per_unit, units="sequences")
    ratio = fieller(panel, {"distilled": 1.0, "ce": -1.0}, {"teacher": 1.0, "ce": -1.0})
    assert ratio.estimate == pytest.approx(0.2) and ratio.ci_low == pytest.approx(0.2, abs=1e-6)
    share, ratio90 = gap_share(panel, "distilled", "ce", "teacher", margin=0.25)
    assert share.estimate == pytest.approx(0.2)
    assert read_equivalence(EvidencePiece("d", "", share, margin=0.25, ratio=ratio90)).verdict == AGREES
    assert read_equivalence(EvidencePiece("d", "", share, margin=0.10, ratio=ratio90)).verdict == DISAGREES


# ---------------------------------------------------------------------------------------------
# verdicts and multiplicity
# ---------------------------------------------------------------------------------------------


def _piece(estimate: float, se: float, direction: int = 1, dof: float = 10.0) -> EvidencePiece:
    return EvidencePiece(f"{estimate}", "", Estimate(estimate, se, dof, se, 0.0, "seeds and sequences"), direction)


def test_holm_multiplies_by_the_remaining_count_and_keeps_the_order():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    adjusted = holm([0.5, math.nan, 0.001])
    assert math.isnan(adjusted[1]) and adjusted[0] == pytest.approx(0.5) and adjusted[2] == pytest.approx(0.002)
    assert holm([0.4, 0.3]) == pytest.approx([0.6, 0.6]) and holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_a_claim_agrees_when_a_counted_piece_agrees_and_none_disagrees():
    strong, weak, against = _piece(1.0, 0.1), _piece(0.1, 0.1), _piece(-1.0, 0.1)
    assert decide([strong, weak]).verdict == AGREES and "1 of 2 pieces undecided" in decide([strong, weak]).reason
    split = decide([strong, against])
    assert split.verdict == INCONCLUSIVE and split.reason == "the evidence splits: 1 agrees, 1 disagrees"
    assert decide([against]).verdict == DISAGREES
    assert decide([]).verdict == UNTESTED
    # a robustness check is shown, read on its own, never counted
    with_check = decide([weak], robustness=[strong])
    assert with_check.verdict == INCONCLUSIVE and [r.counted for r in with_check.readings] == [True, False]
    assert with_check.readings[1].verdict == AGREES


def test_holm_over_the_pieces_decides_a_piece_significant_alone():
    t = stats.t.isf(0.04 / 2, 10)  # p = 0.04 alone, 0.08 after Holm over two pieces
    decision = decide([_piece(t * 0.1, 0.1), _piece(0.0, 0.1)])
    assert decision.verdict == INCONCLUSIVE and "Holm-adjusted p = 0.08" in decision.readings[0].reason


def test_an_inconclusive_piece_says_what_the_design_could_detect():
    def power(effect: float, level: float) -> float:  # a two-sided t test's, by the noncentral t
        critical = stats.t.isf(level / 2, 4)
        return stats.nct.sf(critical, 4, effect / 0.1) + stats.nct.cdf(-critical, 4, effect / 0.1)

    reading = decide([_piece(0.1, 0.1, dof=4)]).readings[0]
    assert reading.verdict == INCONCLUSIVE and power(reading.detectable, 0.05) == pytest.approx(0.80, abs=1e-6)
    two = decide([_piece(0.1, 0.1, dof=4), _piece(0.0, 0.1, dof=4)]).readings[0]  # tested at 0.025 by Holm's first step
    assert power(two.detectable, 0.025) == pytest.approx(0.80, abs=1e-6) and two.detectable > reading.detectable


def test_a_claim_over_statistics_takes_a_verdict_only_when_they_agree():
    agree, open_ = decide([_piece(1.0, 0.1)], statistic="cosine"), decide([_piece(0.0, 0.1)], statistic="rho")
    both = over_statistics("claim", [agree, decide([_piece(1.0, 0.1)], statistic="rho")])
    assert both.verdict == AGREES
    split = over_statistics("claim", [agree, open_])
    assert split.verdict == DEPENDS and split.reason == "cosine agrees; rho inconclusive"
    assert over_statistics("claim", [decide([]), decide([])]).verdict == UNTESTED
