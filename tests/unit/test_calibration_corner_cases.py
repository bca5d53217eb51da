"""The statistics' corner cases a review found, each by simulation or a constructed case that the
code before the fix failed (issue 45, item 4): the minimum detectable effect's power, Fieller's
far bounds, Holm's level on equivalence pieces, findings.json's interval for a share, the
jackknife's degrees of freedom, and Welch's with a noisy 2-seed arm."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from condensation.reporting.findings import page
from condensation.reporting.statistics import power
from condensation.reporting.statistics.decisions import AGREES, INCONCLUSIVE, EvidencePiece, Verdict, decide
from condensation.reporting.statistics.panel import (
    Estimate,
    Run,
    contrast,
    difference,
    fieller,
    gap_share,
    panel_from_replicates,
    panel_from_units,
)

NUMERATOR, DENOMINATOR = {"distilled": 1.0, "ce": -1.0}, {"teacher": 1.0, "ce": -1.0}


def distillation_panel(seed: int, distilled: float, teacher: float, seed_sd: float):
    """CE, distilled and teacher arms, 3 paired seeds each, on 8 shared sequences."""
    rng = np.random.default_rng(seed)
    runs, per_unit = [], []
    main = rng.normal(0, 0.01, 8)
    for arm, mean in (("ce", 0.40), ("distilled", distilled), ("teacher", teacher)):
        for run_seed in range(3):
            runs.append(Run(arm, run_seed, 0.0))
            per_unit.append(mean + rng.normal(0, seed_sd) + main + rng.normal(0, 0.005, 8))
    return panel_from_units(runs, per_unit, units="sequences")


@pytest.mark.parametrize("dof", [1.0, 2.0, 5.0, math.inf])
def test_the_minimum_detectable_effect_has_the_power_it_claims(dof):
    """At the printed effect a two-sided 5 % t test rejects 80 % of the time (the shortcut
    (t_0.025 + t_0.2) x se gave 77 % at 2 degrees of freedom)."""
    effect = Estimate(0.0, 1.0, dof, 1.0, 0.0, "seeds").detectable(0.05, 0.80)
    rng = np.random.default_rng(0)
    draws = 400_000
    scale = np.sqrt(rng.chisquare(dof, draws) / dof) if math.isfinite(dof) else 1.0
    t = (effect + rng.standard_normal(draws)) / scale
    critical = stats.t.isf(0.025, dof) if math.isfinite(dof) else stats.norm.isf(0.025)
    assert np.mean(np.abs(t) > critical) == pytest.approx(0.80, abs=0.004)  # 3 Monte Carlo sd


def test_fieller_bounds_are_where_the_test_flips_however_far_from_the_estimate():
    panel = distillation_panel(53, distilled=0.38, teacher=0.35, seed_sd=0.02)
    ratio = fieller(panel, NUMERATOR, DENOMINATOR, 0.90)
    assert ratio.ci_high > ratio.estimate + 4 * max(1.0, abs(ratio.estimate))  # beyond the old search span

    def holds_zero(m: float) -> bool:
        combined = {arm: NUMERATOR.get(arm, 0.0) - m * DENOMINATOR.get(arm, 0.0) for arm in ("ce", "distilled",
                                                                                               "teacher")}
        low, high = contrast(panel, combined).interval(0.90)
        return low <= 0 <= high

    for bound in (ratio.ci_low, ratio.ci_high):
        step = 1e-6 * max(1.0, abs(bound))
        inside, outside = (bound + step, bound - step) if bound == ratio.ci_low else (bound - step, bound + step)
        assert holds_zero(inside) and not holds_zero(outside), bound


def test_holm_reads_each_equivalence_piece_at_its_own_level():
    """Alone, the piece's 90 % upper bound is under the margin: it agrees. As one of two, Holm
    reads it at 2.5 %, its 95 % interval, whose upper bound is over the margin."""
    panel = distillation_panel(0, distilled=0.39, teacher=0.30, seed_sd=0.01)
    at_90, at_95 = fieller(panel, NUMERATOR, DENOMINATOR, 0.90), fieller(panel, NUMERATOR, DENOMINATOR, 0.95)
    margin = (at_90.ci_high + at_95.ci_high) / 2
    share, ratio = gap_share(panel, "distilled", "ce", "teacher", margin)
    piece = EvidencePiece("pair", "", share, margin=margin, ratio=ratio)
    assert decide([piece]).verdict == AGREES
    both = decide([piece, EvidencePiece("again", "", share, margin=margin, ratio=ratio)])
    assert both.verdict == INCONCLUSIVE
    assert all(reading.piece.ratio.confidence == pytest.approx(0.95) for reading in both.readings)
    assert both.readings[0].piece.ratio.ci_high == pytest.approx(at_95.ci_high)
    with pytest.raises(ValueError, match="all directional or all equivalence"):
        decide([piece, EvidencePiece("slope", "", difference(panel, "distilled", "ce"))])


def test_findings_json_gives_a_share_the_interval_it_is_judged_by(tmp_path):
    panel = distillation_panel(0, distilled=0.39, teacher=0.30, seed_sd=0.01)
    share, ratio = gap_share(panel, "distilled", "ce", "teacher", 0.25)
    decision = decide([EvidencePiece("pair", "", share, margin=0.25, ratio=ratio)], statistic="deeper-layer cosine")
    verdict = Verdict("Distillation does not remove condensation (Fig. 3)", decision.verdict, [decision])
    page.write_findings([verdict], tmp_path / "f.md", tmp_path / "f.json", tmp_path / "s.json")
    found = json.loads((tmp_path / "f.json").read_text())["findings"][0]["decisions"][0]["pieces"][0]
    assert (found["ci_low"], found["ci_high"], found["ci_level"]) == (ratio.ci_low, ratio.ci_high, 0.90)
    summary = json.loads((tmp_path / "s.json").read_text())
    (claim,) = summary.values()
    assert (claim["deep_cos"]["ci_low"], claim["deep_cos"]["ci_high"]) == (ratio.ci_low, ratio.ci_high)


def jackknife_panel(rng: np.random.Generator, seeds: int = 10, groups: int = 6):
    """Two arms, paired seeds, a lens's delete-a-group jackknife over ``groups`` groups of
    sequences whose arm x group effect dominates the seeds' (the units' noise is G - 1 dof)."""
    runs, replicates = [], []
    shared = rng.normal(0, 0.002, seeds)
    for arm in ("a", "b"):
        by_group = rng.normal(0, 0.02, groups)
        for run_seed in range(seeds):
            values = 0.4 + shared[run_seed] + by_group + rng.normal(0, 0.002, groups)
            runs.append(Run(arm, run_seed, float(values.mean())))
            replicates.append((values.sum() - values) / (groups - 1))
    return panel_from_replicates(runs, replicates, kind="jackknife", units="groups of sequences")


def test_a_jackknife_contrast_of_trained_runs_reads_at_most_g_minus_1_dof_and_is_calibrated():
    """The seeds' 9 degrees of freedom read the 6-group jackknife's noise at 6.4 % false calls."""
    rng = np.random.default_rng(1)
    estimates = [difference(jackknife_panel(rng), "b", "a") for _ in range(3000)]
    assert max(estimate.dof for estimate in estimates) <= 5
    false_calls = np.mean([estimate.p_value < 0.05 for estimate in estimates])
    assert false_calls <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 3000)


POSITIONS = (5.37, 5.66, 6.02)


def slope_rates(seeds: tuple[int, ...], seed_sds: tuple[float, ...], effect: float, draws: int) -> float:
    """The share of simulated slopes (unpaired widths, one seed sd per width) called at 5 %: the
    power tool's own simulation (:func:`power.simulate_slope` with ``seed_sds``)."""
    rates = power.simulate_slope(effect, POSITIONS, seeds, seed_sds=seed_sds, draws=draws)
    return rates.agrees + rates.disagrees if effect == 0 else rates.agrees


@pytest.mark.parametrize("seeds, seed_sds", [((2, 5, 5), (0.06, 0.024, 0.024)), ((5, 5, 2), (0.024, 0.024, 0.06)),
                                              ((5, 2, 5), (0.024, 0.06, 0.024))])
def test_a_slope_with_a_noisy_two_seed_arm_stays_calibrated(seeds, seed_sds):
    """Welch's degrees of freedom trust a 2-seed arm's variance: 9-10 % false calls when that arm
    is the noisy one at an end. Hsu's bound over the arms that weigh in the slope keeps it <= 5 %."""
    draws = 2000
    assert slope_rates(seeds, seed_sds, 0.0, draws) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / draws)


def test_the_shipped_size_design_keeps_its_power():
    """5/2/5 seeds at each width's own seed spread as the default measured them (power.UNEQUAL_SPREADS'
    first row) and the default's positions: the 2-seed middle width weighs little in the slope, so
    Hsu's bound leaves the power at the slope the default measures."""
    seeds, spreads, _ = power.UNEQUAL_SPREADS[0]
    rates = power.simulate_slope(power.MEASURED_SIZE_SLOPE, power.DEFAULT_POSITIONS, seeds, seed_sds=spreads,
                                 draws=500)
    assert rates.agrees >= 0.95
