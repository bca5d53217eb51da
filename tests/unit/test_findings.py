"""The findings page: verdicts computed from hand-made results with known answers: a true effect,
no effect with a wide spread between seeds, one run, a published model, a replicated teacher, a
statistic stuck at 1.00, collapsed runs, and the multiplicity of a claim's pieces."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from condensation.reporting.findings import claims, page
from condensation.reporting.statistics.decisions import AGREES, DEPENDS, DISAGREES, INCONCLUSIVE, UNTESTED
from condensation.reporting.tables.profiles import Profiles, read_profiles, write_profiles

LAYERS, SEQUENCES = 6, 16
RNG = np.random.default_rng(0)
SHARED = RNG.normal(0, 0.01, (SEQUENCES, 1))  # the same sequences move every model alike


def layers_of(deep: float, rising: bool = True, noise: float = 0.004) -> np.ndarray:
    """Per-sequence layer means whose deeper half averages ``deep``; rising with depth (rho 1)
    or with a dip that breaks the ranks (rho < 1, differing between models)."""
    shape = np.linspace(-0.1, 0.05, LAYERS) if rising else np.array([0.0, 0.02, -0.03, 0.03, -0.02, 0.01])
    base = shape - shape[-(LAYERS // 2):].mean() + deep
    return base + SHARED + RNG.normal(0, noise, (SEQUENCES, LAYERS))


def table(rows: list[dict], values: list[float], rising=True) -> Profiles:
    return Profiles(pd.DataFrame(rows), [layers_of(v, rising) for v in values], [None] * len(rows), [None] * len(rows))


def family(values: dict[tuple[str, float], list[float]], rising=True) -> Profiles:
    rows, deep = [], []
    for (label, params), seeds in values.items():
        for i, value in enumerate(seeds):
            rows.append({"model": f"{label}-s{i}", "label": label, "num_parameters": params})
            deep.append(value)
    return table(rows, deep, rising)


def design(trends, **extra):
    drawn = frozenset(m for t in trends.values() for m in t.rows["model"])
    return claims.Design(seeded=drawn, families={"toy": ["austen", "pydocs"]}, **extra)


def test_size_is_decided_on_the_primary_text_with_the_others_as_robustness_checks():
    falls = family({("MLP 32", 1e6): [0.30, 0.32, 0.31], ("MLP 256", 2e6): [0.26, 0.25, 0.27],
                    ("MLP 1024", 4e6): [0.20, 0.21, 0.19]})
    rises = family({("MLP 32", 1e6): [0.20, 0.21, 0.19], ("MLP 1024", 4e6): [0.30, 0.31, 0.29]})
    trends = {"toy_austen": falls, "toy_pydocs": rises}
    decision = claims.size_claim(trends, design(trends))
    assert decision.verdict == AGREES
    assert [(r.counted, r.verdict) for r in decision.readings] == [(True, AGREES), (False, DISAGREES)]
    assert "3 sizes, runs per size 3/3/3" in decision.readings[0].piece.text
    # no effect with a wide spread between seeds: the means happen to fall, the interval holds zero
    noisy = family({("S", 1e6): [0.40, 0.20], ("M", 2e6): [0.22, 0.34], ("L", 4e6): [0.35, 0.17]})
    found = claims.size_claim({"toy_austen": noisy}, design({"toy_austen": noisy}))
    assert found.verdict == INCONCLUSIVE and found.readings[0].detectable > 0
    # one run per size: apart beyond their sequences' noise, yet training noise is unmeasured
    single = family({("S", 1e6): [0.30], ("L", 4e6): [0.20]})
    found = claims.size_claim({"toy_austen": single}, design({"toy_austen": single}))
    assert found.verdict == INCONCLUSIVE and "training noise is unmeasured" in found.reason
    # published checkpoints are given models, not draws: their sequences decide
    given = claims.Design(families={"toy": ["austen"]})
    assert claims.size_claim({"toy_austen": single}, given).verdict == AGREES


def test_a_statistic_stuck_at_one_cannot_test_the_claim_and_says_so():
    falls = family({("S", 1e6): [0.30, 0.32, 0.31], ("L", 4e6): [0.20, 0.21, 0.19]})
    trends = {"toy_austen": falls}
    verdicts = claims.all_claims(claims.Evidence(trends=trends), design(trends))
    size = verdicts[0]
    assert size.claim == claims.SIZE and size.verdict == AGREES
    assert any("Spearman rho cannot test it" in note and "1.00 for every run" in note for note in size.notes)
    # with ranks that differ between models, rho decides too, and a split depends on the statistic
    dipped = family({("S", 1e6): [0.30, 0.32, 0.31], ("L", 4e6): [0.20, 0.21, 0.19]}, rising=False)
    size = claims.all_claims(claims.Evidence(trends={"toy_austen": dipped}), design({"toy_austen": dipped}))[0]
    assert (size.verdict in (AGREES, DEPENDS)
            and {d.statistic for d in size.decisions} == {"deeper-layer cosine", "Spearman rho"})


def pair(labels, first, second, reference=None):
    rows, values = [], []
    for member, models in enumerate((first, second, reference or [])):
        for model, label, value in models:
            rows.append({"member": member, "model": model, "label": label})
            values.append(value)
    return (labels, table(rows, values))


def test_distillation_is_an_equivalence_claim_with_a_replicated_teacher():
    labels = ["CE only", "distilled", "teacher"]
    ce = [(f"ce{i}", "CE", v) for i, v in enumerate([0.40, 0.42, 0.41])]
    teachers = [(f"t{i}", "teacher", v) for i, v in enumerate([0.20, 0.22, 0.21])]
    mirrors = [(f"d{i}", "distilled", v) for i, v in enumerate([0.40, 0.415, 0.405])]  # closes ~2 % of the gap
    drawn = frozenset(m for group in (ce, teachers, mirrors) for m, _, _ in group)
    distill, _ = claims.pair_pieces({"distillation": pair(labels, ce, mirrors, teachers)}, claims.Design(seeded=drawn),
                                    "last_half")
    reading = claims.decide(distill).readings[0]
    assert reading.verdict == AGREES and "share of the gap closed" in reading.piece.text
    inherits = [(f"d{i}", "distilled", v) for i, v in enumerate([0.25, 0.27, 0.26])]  # closes ~75 %
    distill, _ = claims.pair_pieces({"distillation": pair(labels, ce, inherits, teachers)}, claims.Design(seeded=drawn),
                                    "last_half")
    assert claims.decide(distill).verdict == DISAGREES
    # one teacher for every student: its training noise is unmeasured, nothing is decided
    single = [("t0", "teacher", 0.20)] * 3
    distill, _ = claims.pair_pieces({"distillation": pair(labels, ce, mirrors, single)}, claims.Design(seeded=drawn),
                                    "last_half")
    decision = claims.decide(distill)
    assert decision.verdict == INCONCLUSIVE and "one run of teacher" in decision.reason


def test_initialisation_pairs_any_piece_agreeing_with_none_against_and_a_given_trained_model():
    labels = ["initialisation", "pre-trained"]
    first = [("big-init", "big init", 0.86), ("big-init-s1", "big init", 0.85),
             ("toy-init", "toy init", 0.04), ("toy-init-s1", "toy init", 0.05)]
    second = [("big", "big", 0.61), ("big", "big", 0.61), ("toy", "toy", 0.33), ("toy-s1", "toy", 0.36)]
    drawn = frozenset({"big-init", "big-init-s1", "toy-init", "toy-init-s1", "toy", "toy-s1"})
    _, init = claims.pair_pieces({"init-vs-trained": pair(labels, first, second)}, claims.Design(seeded=drawn),
                                 "last_half")
    decision = claims.decide(init)
    assert [r.verdict for r in decision.readings] == [AGREES, DISAGREES]
    assert decision.verdict == INCONCLUSIVE and decision.reason == "the evidence splits: 1 agrees, 1 disagrees"
    assert init[0].estimate.covers == "seeds and sequences" and len(init[0].estimate.per_seed) == 2


def test_dispersion_effects_read_the_last_step_and_count_collapsed_runs():
    def effect(step, difference, se, metric="last_half", seeds=3):
        return {"method": "dispersion", "step": step, "metric": metric, "n_seeds": seeds, "mean": 0.28 + difference,
                "reference_mean": 0.28, "difference": difference, "se": se, "dof": 2.0, "seed_se": se, "unit_se": 0.0,
                "per_seed": "-0.0300; -0.0280; -0.0310"}

    effects = {"midtrain, toy": pd.DataFrame([effect(49, -0.03, 0.002), effect(10, 0.02, 0.002)])}
    trajectory = pd.DataFrame({"method": ["dispersion"] * 3 + ["ce"] * 3, "seed": [0, 1, 2] * 2, "step": [49] * 6,
                               "last_half": [0.25, 0.995, 0.25, 0.28, 0.28, 0.28]})
    pieces = claims.dispersion_condensation_pieces(effects, {"midtrain, toy": trajectory}, "last_half")
    assert claims.decide(pieces).verdict == AGREES  # the last step counts
    assert "dispersion 1 of 3 runs (seed 1)" in pieces[0].text and pieces[0].notes
    wide = {"midtrain, toy": pd.DataFrame([effect(49, -0.03, 0.05)])}
    assert claims.decide(claims.dispersion_condensation_pieces(wide, {}, "last_half")).verdict == INCONCLUSIVE


def test_score_pieces_are_adjusted_once_over_the_claim():
    def row(model, diff, se):
        return {"model": model, "method": "dispersion", "n_seeds": 3, "diff_vs_ce": diff, "se_vs_ce": se,
                "dof_vs_ce": 2.0, "seed_se_vs_ce": se, "unit_se_vs_ce": 0.1, "per_seed_vs_ce": "+1.00; +1.20; +1.10"}

    from scipy import stats

    alone = stats.t.isf(0.04 / 2, 2)  # p = 0.04 alone, 0.08 after Holm over the claim's two pieces
    tables = {"table2": pd.DataFrame([row("a", alone * 0.5, 0.5)]), "table4": pd.DataFrame([row("b", 0.0, 0.5)])}
    decision = claims.decide(claims.score_pieces(tables))
    assert decision.verdict == INCONCLUSIVE and "Holm-adjusted p = 0.08" in decision.readings[0].reason
    assert claims.decide(claims.score_pieces({"table2": pd.DataFrame([row("a", alone * 0.5, 0.5)])})).verdict == AGREES
    assert claims.decide(claims.score_pieces({})).verdict == UNTESTED


def test_profiles_round_trip_and_the_page_and_json(tmp_path):
    falls = family({("S", 1e6): [0.30, 0.20, 0.25], ("L", 4e6): [0.27, 0.21, 0.22]})  # no clear effect
    path = tmp_path / "toy_austen.profiles.npz"
    write_profiles(path, falls.rows, falls.layers, [(np.ones(5), np.ones((5, 6)))] * len(falls.rows))
    back = read_profiles(path)
    assert back.rows.equals(falls.rows) and all(np.array_equal(a, b) for a, b in zip(back.layers, falls.layers))
    assert back.lens_jackknife[0].shape == (5, 6)
    verdicts = claims.all_claims(claims.Evidence(trends={"toy_austen": falls}), design({"toy_austen": falls}))
    markdown, js, summary = tmp_path / "findings.md", tmp_path / "findings.json", tmp_path / "summary.json"
    page.write_findings(verdicts, markdown, js, summary)
    text = markdown.read_text()
    assert ("| A larger or wider model condenses less (Figs. 2, S1) |" in text
            and "(95 %, over seeds and sequences)" in text)
    assert "**inconclusive**" in text and "smallest effect this design detects with 80% power" in text
    found = json.loads(js.read_text())["findings"][0]
    piece = found["decisions"][0]["pieces"][0]
    assert piece["covers"] == "seeds and sequences" and piece["se"] > 0 and piece["detectable"] > 0
    # the summary (dvc metrics): each claim's verdict, and each statistic's first counted piece
    size = json.loads(summary.read_text())["size"]
    assert size["verdict"] == found["verdict"] and size["deep_cos"]["piece"] == piece["piece"] == "toy on austen"
    assert size["deep_cos"]["estimate"] == piece["estimate"] and size["deep_cos"]["ci_low"] == piece["ci_low"]
    assert set(size) == {"verdict", "deep_cos", "rho"}


@pytest.mark.parametrize("verdict", [AGREES, DISAGREES])
def test_series_first_against_last_checkpoint_paired_by_run(verdict):
    start, end = (0.8, 0.4) if verdict == AGREES else (0.1, 0.4)
    series = {}
    for run in range(3):
        rows = [{"checkpoint": "init", "tokens": 0}, {"checkpoint": "step 10", "tokens": 100}]
        series[f"run{run}"] = table(rows, [start + 0.01 * run, end - 0.01 * run])
    found = claims.series_pieces(series, claims.Design(series_groups={f"run{r}": "toy" for r in range(3)},
                                                        seeded_series=frozenset(series)), "last_half")
    assert len(found) == 1 and claims.decide(found).verdict == verdict and "toy (3 runs)" in found[0].text


def test_the_noise_sources_of_a_family_that_groups_them_are_shown_with_their_variance_ratio():
    """Full seeds, data-order runs and weight runs of one size (one label each): each group's run
    spread, against the full seeds' as a ratio with its F interval, worked out by hand; shown on
    the page beside the size claim, counted in no verdict."""
    from scipy import stats

    from condensation.reporting.findings.noise_sources import noise_source_line, variance_ratio

    full, data, weights = [0.50, 0.56, 0.44, 0.53, 0.47], [0.49, 0.51, 0.50], [0.45, 0.55]
    sources = family({("160M", 1.6e8): full, ("160M data seed", 1.6e8): data, ("160M weight seed", 1.6e8): weights,
                      ("160M other", 1.6e8): [0.5]})
    deep = [float(layers[:, LAYERS // 2:].mean()) for layers in sources.layers]
    ratio, low, high = variance_ratio(np.array(deep[5:8]), np.array(deep[:5]))
    expected = np.var(deep[5:8], ddof=1) / np.var(deep[:5], ddof=1)
    assert ratio == pytest.approx(expected)
    assert low == pytest.approx(expected / stats.f.ppf(0.975, 2, 4))
    assert high == pytest.approx(expected / stats.f.ppf(0.025, 2, 4))
    line = noise_source_line("sources", sources)
    assert line.startswith("sources: training noise by source (shown, not counted; deeper-layer cosine): ")
    assert f"160M (5 runs): run SD {np.std(deep[:5], ddof=1):.4f}" in line
    assert f"variance {ratio:.0%} of 160M's [{low:.0%}, {high:.0%}]" in line
    assert "160M other (1 run): no spread" in line
    # one label (a family of full seeds alone) has no source to compare: no line
    assert noise_source_line("seeds", family({("160M", 1.6e8): full})) is None
    # on the page: beside the size claim of a family that does not compare sizes
    trends = {"sources_austen": sources}
    found = claims.all_claims(claims.Evidence(trends=trends), claims.Design(
        seeded=frozenset(sources.rows["model"]), families={"sources": ["austen"]}, uncounted=frozenset({"sources"})))
    size = next(verdict for verdict in found if verdict.claim == claims.SIZE)
    assert line in size.notes and size.verdict == UNTESTED


def test_the_noise_source_interval_covers_the_true_variance_ratio_95_percent_of_the_time():
    """Three runs of a source against ten full seeds (PolyPythia's 160M design), normal runs with
    a true variance ratio of 0.4: the F interval's coverage, simulated."""
    from condensation.reporting.findings.noise_sources import variance_ratio

    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(4000):
        source, full = rng.normal(0, math.sqrt(0.4), 3), rng.normal(0, 1.0, 10)
        _, low, high = variance_ratio(source, full)
        covered += low <= 0.4 <= high
    assert 0.94 <= covered / 4000 <= 0.96


def test_a_pooled_study_decides_the_dispersion_claim_in_place_of_its_base_models():
    """Two base models of one label mid-trained: each alone is inconclusive (two seeds each, wide),
    pooled the base is a replicate and the difference is clear. The verdict counts the pooled
    effect once (no multiplicity over its members); the members stay on the page, not counted."""
    def effect(difference, se, seeds):
        return pd.DataFrame([{"method": "dispersion", "step": 49, "metric": metric, "n_seeds": seeds,
                              "mean": 0.28 + difference, "reference_mean": 0.28, "difference": difference, "se": se,
                              "dof": seeds - 1.0, "seed_se": se, "unit_se": 0.0, "per_seed": "-0.0300; -0.0280"}
                             for metric in ("last_half", "spearman_rho")])

    pooled = "midtrain, Pythia-160M (2 base runs pooled)"
    effects = {"midtrain, pythia-160m": effect(-0.03, 0.02, 2), "midtrain, pythia-160m-seed1": effect(-0.03, 0.02, 2),
               pooled: effect(-0.03, 0.001, 2)}
    found = claims.all_claims(claims.Evidence(effects=effects), claims.Design(
        pooled={pooled: ("midtrain, pythia-160m", "midtrain, pythia-160m-seed1")}))
    dispersion = next(verdict for verdict in found if verdict.claim == claims.DISPERSION)
    assert dispersion.verdict == AGREES
    assert [reading.piece.name for reading in dispersion.decisions[0].readings] == [pooled]
    pooled_text = dispersion.decisions[0].readings[0].piece.text
    assert "over 2 base models" in pooled_text
    assert "(95 %, over base models and sequences); per base model" in pooled_text
    assert sum(note.startswith(f"shown, not counted (one base model of {pooled})") for note in dispersion.notes) == 2
    assert any("the base model is a replicate" in note for note in dispersion.notes)
    assert claims.ONE_BASE_MODEL not in dispersion.notes  # every mid-training model is pooled


def test_each_lens_reads_the_claims_and_the_outlier_free_cosine_is_a_robustness_line(tmp_path):
    """A family whose condensation falls with size under every lens that measures it, and whose
    layer angle rises with size: the lens table has a row per lens (the lenses with no predicted
    sign say which way they move), and the size claim carries the outlier-free cosine's verdict as
    a robustness line."""
    from condensation.lenses import LENSES

    rng = np.random.default_rng(3)
    sizes = {("S", 1e6): 0.30, ("M", 2e6): 0.25, ("L", 4e6): 0.20}
    rows, deep, lens_values, lens_jackknife = [], [], [], []
    for index, ((label, params), value) in enumerate(sizes.items()):
        for seed in range(3):
            rows.append({"model": f"{label}-s{seed}", "label": label, "num_parameters": params})
            deep.append(value)
            run = value + rng.normal(0, 0.003)
            values = np.array([run if lens.condensed > 0 else 1 - run if lens.condensed < 0 else 0.1 + 0.05 * index
                               for lens in LENSES])
            lens_values.append(values)
            lens_jackknife.append(values[:, None] + rng.normal(0, 0.002, (len(LENSES), 6)))
    falls = Profiles(pd.DataFrame(rows), [layers_of(v) for v in deep], lens_values, lens_jackknife)
    evidence = claims.Evidence(trends={"toy_austen": falls})
    chosen = design({"toy_austen": falls})
    under = claims.claims_under_lenses(evidence, chosen)
    assert list(under) == [lens.title for lens in LENSES]
    size = {title: verdicts[0].verdict for title, verdicts in under.items()}
    assert all(size[lens.title] == AGREES for lens in LENSES if lens.condensed), size
    assert size["angle to the previous layer / pi"] == AGREES  # oriented: rises with size
    verdicts = claims.with_outlier_robustness(claims.all_claims(evidence, chosen), under)
    size_claim = next(v for v in verdicts if v.claim == claims.SIZE)
    robustness = size_claim.notes[-1]
    assert robustness.startswith("robustness: without the 3 outlier dimensions") and "**agrees**" in robustness
    markdown = tmp_path / "findings.md"
    page.write_findings(verdicts, markdown, tmp_path / "findings.json", tmp_path / "summary.json", under)
    text = markdown.read_text()
    no_pair_or_series = " | ".join(["cannot test"] * 3)
    assert f"| angle to the previous layer / pi (-) | rises with size | {no_pair_or_series} |" in text
    assert "| IsoScore* | agrees |" in text
    assert "robustness: without the 3 outlier dimensions" in text
