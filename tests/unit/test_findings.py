"""The findings page: verdicts computed from hand-made results with known answers."""

import pandas as pd

from condensation.reporting import findings as claims


def trend(label, value, low, high, rho=1.0, **extra):
    return {"label": label, "last_half": value, "last_half_low": low, "last_half_high": high, "spearman_rho": rho, **extra}


def test_size_claim_agrees_only_when_the_largest_is_below_the_smallest_beyond_both_intervals():
    apart = pd.DataFrame([trend("MLP 32", 0.30, 0.29, 0.31), trend("MLP 2048", 0.20, 0.19, 0.21)])
    overlapping = pd.DataFrame([trend("S", 0.30, 0.20, 0.40), trend("L", 0.25, 0.15, 0.35)])
    reversed_ = pd.DataFrame([trend("S", 0.20, 0.19, 0.21), trend("L", 0.30, 0.29, 0.31)])
    assert claims.size_claim({"toy": apart}).verdict == claims.AGREES
    assert claims.size_claim({"toy": overlapping}).verdict == claims.INCONCLUSIVE
    assert claims.size_claim({"toy": reversed_}).verdict == claims.DISAGREES
    assert claims.size_claim({"toy": apart, "other": overlapping}).verdict == claims.INCONCLUSIVE
    finding = claims.size_claim({"toy": apart})
    assert "0.300 [0.290, 0.310]" in finding.evidence[0] and "MLP 2048" in finding.evidence[0]
    # a group of unrelated models (compares_size: false) is listed but cannot overturn the verdict
    mixed = claims.size_claim({"toy": apart, "packaged": reversed_}, uncounted={"packaged"})
    assert mixed.verdict == claims.AGREES and "packaged: not counted" in mixed.evidence[1]


def test_pairs_feed_the_distillation_or_the_initialisation_claim_by_their_labels():
    table = pd.DataFrame([
        {"member": 0, **trend("init", 0.5, 0.45, 0.55)}, {"member": 1, **trend("trained", 0.2, 0.15, 0.25)},
    ])
    distill, init = claims.pair_claims({"init-vs-trained": (["initialisation", "pre-trained"], table)})
    assert distill.verdict == claims.UNTESTED and init.verdict == claims.AGREES
    # a distilled model clearly less condensed than its scratch twin contradicts "distillation does not remove it"
    distill, _ = claims.pair_claims({"qwen": (["trained from scratch", "distilled"], table)})
    assert distill.verdict == claims.DISAGREES


def test_dispersion_claims_read_the_effects_and_the_item_level_comparison():
    effects = pd.DataFrame([
        {"method": "dispersion", "step": 49, "mean": 0.25, "reference_mean": 0.28, "difference": -0.03,
         "pooled_std": 0.005, "exceeds_seed_spread": True},
        {"method": "dispersion", "step": 10, "mean": 0.30, "reference_mean": 0.28, "difference": 0.02,
         "pooled_std": 0.005, "exceeds_seed_spread": True},
    ])
    assert claims.dispersion_condensation_claim({"toy": effects}).verdict == claims.AGREES  # the last step counts
    assert "pooled seed std 0.005, beyond the seed spread: yes" in claims.dispersion_condensation_claim({"toy": effects}).evidence[0]
    within = effects.assign(exceeds_seed_spread=False)
    assert claims.dispersion_condensation_claim({"toy": within}).verdict == claims.INCONCLUSIVE
    one_seed = claims.dispersion_condensation_claim({"toy": effects.assign(pooled_std=float("nan"), exceeds_seed_spread=None)})
    assert one_seed.verdict == claims.INCONCLUSIVE and "one seed each: no seed spread" in one_seed.evidence[0]
    table = pd.DataFrame([{"model": "toy", "method": "dispersion", "diff_vs_ce": 0.4, "ci_low_vs_ce": -1.1,
                           "ci_high_vs_ce": 1.9, "p_vs_ce": 0.6, "n_items_vs_ce": 1600}])
    score = claims.dispersion_score_claim({"table2": table})
    assert score.verdict == claims.INCONCLUSIVE and "+0.40 points [-1.10, +1.90]" in score.evidence[0]
    assert claims.dispersion_score_claim({}).verdict == claims.UNTESTED


def test_page_lists_every_claim_with_its_verdict_and_the_tasks_at_chance(tmp_path):
    page = claims.render([claims.size_claim({})], chance={"next": {"at_chance": True}, "cloze": {"at_chance": False}})
    assert "**cannot test**" in page and "nothing in this config measures it" in page
    assert "at chance for every model" in page and "next" in page and "cloze" not in page.split("chance for")[1]


def test_series_claim_compares_first_and_last_and_names_a_peak_between():
    rising_then_falling = pd.DataFrame([
        {"checkpoint": "step 0", **trend("init", 0.05, 0.04, 0.06)},
        {"checkpoint": "step 48", **trend("early", 0.61, 0.60, 0.62)},
        {"checkpoint": "step 293", **trend("final", 0.28, 0.27, 0.29)},
    ])
    finding = claims.series_claim({"toy": rising_then_falling})
    assert finding.verdict == claims.DISAGREES  # the last checkpoint lies above the first
    assert "peak 0.610 [0.600, 0.620] at step 48, after which it falls beyond both intervals" in finding.evidence[0]
    finding = claims.series_claim({"toy": rising_then_falling.iloc[[1, 2]]})
    assert finding.verdict == claims.AGREES and "peak" not in finding.evidence[0]
