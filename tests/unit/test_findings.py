"""The findings page: verdicts computed from hand-made results with known answers: a true effect,
no effect with a wide spread between seeds, one outlier seed, a single run, a published model."""

import pandas as pd

from condensation.reporting import findings as claims
from condensation.reporting.condensation_effects import Z95

SE = 0.002 * Z95  # a run's 95 % interval over sequences: +-0.004 (standard error 0.002)


def run(model, label, value, rho=1.0, params=1e6, **extra):
    return {"model": model, "label": label, "num_parameters": params, "last_half": value,
            "last_half_low": value - SE, "last_half_high": value + SE, "spearman_rho": rho, **extra}


def family(values: dict[tuple[str, float], list[float]]) -> pd.DataFrame:
    """Rows per (label, parameters), one per seed."""
    return pd.DataFrame([run(f"{label}-s{i}", label, v, params=params)
                         for (label, params), vs in values.items() for i, v in enumerate(vs)])


def drawn(table: pd.DataFrame) -> set:
    return set(table["model"])


def test_size_claim_reads_a_trend_across_all_sizes_with_the_seeds():
    true_effect = family({("MLP 32", 1e6): [0.30, 0.31, 0.30], ("MLP 256", 2e6): [0.26, 0.25, 0.26],
                          ("MLP 1024", 4e6): [0.20, 0.21, 0.20]})
    finding = claims.size_claim({"toy": true_effect}, drawn=drawn(true_effect))
    assert finding.verdict == claims.AGREES and "3 sizes; runs per size 3/3/3" in finding.evidence[0]
    # No effect, wide spread between seeds: the means happen to fall, the interval holds zero.
    noisy = family({("S", 1e6): [0.40, 0.20], ("M", 2e6): [0.22, 0.34], ("L", 4e6): [0.35, 0.17]})
    finding = claims.size_claim({"toy": noisy}, drawn=drawn(noisy))
    assert finding.verdict == claims.INCONCLUSIVE and "interval holds zero" in finding.reason
    # One run per size: apart beyond their sequence intervals, yet training noise is unmeasured.
    single = family({("S", 1e6): [0.30], ("L", 4e6): [0.20]})
    finding = claims.size_claim({"toy": single}, drawn=drawn(single))
    assert finding.verdict == claims.INCONCLUSIVE and "training noise is unmeasured" in finding.reason
    # Published checkpoints are given models, not draws: their sequence intervals decide.
    assert claims.size_claim({"hub": single}, drawn=set()).verdict == claims.AGREES
    reverse = family({("S", 1e6): [0.20, 0.21], ("L", 4e6): [0.30, 0.31]})
    assert claims.size_claim({"toy": reverse}, drawn=drawn(reverse)).verdict == claims.DISAGREES
    # The same models on a second dataset must agree as well; a group of unrelated models is listed only.
    split = claims.size_claim({"austen": true_effect, "pydocs": reverse, "packaged": reverse},
                              uncounted={"packaged"}, drawn=drawn(true_effect) | drawn(reverse))
    assert split.verdict == claims.INCONCLUSIVE and "the evidence splits: 1 agrees, 1 disagrees" == split.reason
    assert any("packaged: not counted" in note for note in split.notes)


def test_an_outlier_seed_does_not_decide_a_score_claim():
    def row(per_seed, low, high, p, holm):
        return {"model": "toy", "method": "dispersion", "n_seeds": 3, "diff_vs_ce": sum(per_seed) / 3,
                "ci_low_vs_ce": low, "ci_high_vs_ce": high, "p_vs_ce": p, "p_holm_vs_ce": holm,
                "per_seed_vs_ce": "; ".join(f"{d:+.2f}" for d in per_seed), "items_ci_low_vs_ce": -3.5,
                "items_ci_high_vs_ce": -0.5, "items_p_vs_ce": 0.001, "n_items_vs_ce": 2400}

    outlier = pd.DataFrame([row([-0.08, -0.1, -4.92], -8.1, 4.7, 0.4, 0.8)])
    finding = claims.dispersion_score_claim({"table4": outlier})
    assert finding.verdict == claims.INCONCLUSIVE and "per seed -0.08, -0.10, -4.92" in finding.evidence[0]
    true_effect = pd.DataFrame([row([2.0, 2.4, 2.2], 1.7, 2.7, 0.003, 0.012)])
    assert claims.dispersion_score_claim({"table2": true_effect}).verdict == claims.AGREES
    # Significant alone, not after Holm's adjustment over the table's comparisons.
    adjusted = claims.dispersion_score_claim({"table2": pd.DataFrame([row([2.0, 2.4, 2.2], 0.1, 4.3, 0.04, 0.12)])})
    assert adjusted.verdict == claims.INCONCLUSIVE and "Holm-adjusted p = 0.12" in adjusted.reason
    worse = pd.DataFrame([row([-2.0, -2.4, -2.2], -2.7, -1.7, 0.003, 0.012)])
    assert claims.dispersion_score_claim({"table2": worse}).verdict == claims.DISAGREES
    assert claims.dispersion_score_claim({}).verdict == claims.UNTESTED


def test_dispersion_condensation_claim_reads_the_last_step_and_its_seed_aware_interval():
    def effect(step, difference, low, high, seeds=2):
        return {"method": "dispersion", "step": step, "n_seeds": seeds, "mean": 0.28 + difference,
                "reference_mean": 0.28, "difference": difference, "ci_low": low, "ci_high": high, "p": 0.01,
                "per_seed": "-0.0300; -0.0280"}

    effects = pd.DataFrame([effect(49, -0.03, -0.05, -0.01), effect(10, 0.02, 0.01, 0.03)])
    assert claims.dispersion_condensation_claim({"toy": effects}).verdict == claims.AGREES  # the last step counts
    wide = pd.DataFrame([effect(49, -0.03, -0.2, 0.14)])
    assert claims.dispersion_condensation_claim({"toy": wide}).verdict == claims.INCONCLUSIVE
    one_seed = pd.DataFrame([effect(49, -0.03, float("nan"), float("nan"), seeds=1)])
    finding = claims.dispersion_condensation_claim({"toy": one_seed})
    assert finding.verdict == claims.INCONCLUSIVE and "training noise unmeasured" in finding.reason


def test_init_pairs_replicates_by_label_and_a_published_model_as_fixed():
    rows = [
        {"member": 0, **run("smol-init", "SmolLM2 init", 0.86)}, {"member": 1, **run("smol", "SmolLM2", 0.59)},
        {"member": 0, **run("smol-init-s1", "SmolLM2 init", 0.85)}, {"member": 1, **run("smol", "SmolLM2", 0.59)},
    ]
    table = pd.DataFrame(rows)
    distill, init = claims.pair_claims({"init-vs-trained": (["initialisation", "trained"], table)},
                                       drawn={"smol-init", "smol-init-s1"})
    assert distill.verdict == claims.UNTESTED and init.verdict == claims.AGREES
    assert "SmolLM2 init 0.860 / 0.850 vs SmolLM2 0.590" in init.evidence[0]
    # The narrow toys start below their trained selves: they disagree, and the page says why.
    toys = pd.DataFrame([
        {"member": 0, **run("t-init", "MLP 32 init", 0.05)}, {"member": 1, **run("t", "MLP 32", 0.27)},
        {"member": 0, **run("t-init-s1", "MLP 32 init", 0.06)}, {"member": 1, **run("t-s1", "MLP 32", 0.25)},
    ])
    _, both = claims.pair_claims({"init-vs-trained": (["initialisation", "trained"], pd.concat([table, toys]))},
                                 drawn={"smol-init", "smol-init-s1", "t-init", "t", "t-init-s1", "t-s1"})
    assert both.verdict == claims.INCONCLUSIVE and both.reason == "the evidence splits: 1 agrees, 1 disagrees"
    assert any("GPT2's initialisation" in note and "MLP 32 init: 0.055" in note for note in both.notes)
    # distilled clearly less condensed than its scratch twin: the claim fails
    pair = pd.DataFrame([{"member": 0, **run("a", "scratch", 0.5)}, {"member": 1, **run("b", "distilled", 0.2)}])
    distill, _ = claims.pair_claims({"qwen": (["trained from scratch", "distilled"], pair)})
    assert distill.verdict == claims.DISAGREES


def test_distillation_pair_over_seeds_with_its_teacher_shown_not_counted():
    """The offline pair: a student distilled from a wide toy vs the same toy with CE, three seeds
    each (drawn here), the teacher (one model, repeated per pair) as the reference row."""
    def pair(distilled, ce):
        rows = []
        for i, (d, c) in enumerate(zip(distilled, ce)):
            rows += [{"member": 0, **run(f"ce-s{i}", "MLP 32 CE", c)}, {"member": 1, **run(f"kd-s{i}", "MLP 32 distilled", d)},
                     {"member": 2, **run("teacher", "MLP 1024", 0.22)}]
        return pd.DataFrame(rows)

    labels = ["CE only", "distilled", "teacher"]
    students = {f"ce-s{i}" for i in range(3)} | {f"kd-s{i}" for i in range(3)}
    drawn_models = students | {"teacher"}
    distill, _ = claims.pair_claims({"distillation": (labels, pair([0.36, 0.37, 0.36], [0.33, 0.335, 0.33]))},
                                    drawn=drawn_models)
    assert distill.verdict == claims.AGREES
    assert "MLP 32 CE 0.330 / 0.335 / 0.330 vs MLP 32 distilled 0.360 / 0.370 / 0.360" in distill.evidence[0]
    assert "(per seed +0.030, +0.035, +0.030)" in distill.evidence[0] and "teacher MLP 1024 0.220" in distill.evidence[0]
    assert any(note.startswith("distillation: MLP 32 distilled - teacher +0.143") for note in distill.notes)
    # the students as far apart as their seeds spread: no verdict
    noisy, _ = claims.pair_claims({"distillation": (labels, pair([0.30, 0.40, 0.33], [0.36, 0.31, 0.35]))},
                                  drawn=drawn_models)
    assert noisy.verdict == claims.INCONCLUSIVE and "interval holds zero" in noisy.reason
    # the student takes the teacher's low condensation: the claim fails
    inherits, _ = claims.pair_claims({"distillation": (labels, pair([0.22, 0.225, 0.22], [0.33, 0.335, 0.33]))},
                                     drawn=drawn_models)
    assert inherits.verdict == claims.DISAGREES


def test_series_claim_pairs_first_and_last_checkpoint_by_run():
    def series(values):
        return pd.DataFrame([{"checkpoint": f"step {i * 48}", **run("m", "m", v)} for i, v in enumerate(values)])

    rising = {"s0": series([0.05, 0.61, 0.28]), "s1": series([0.06, 0.58, 0.30])}
    finding = claims.series_claim(rising, {"s0": "MLP 32", "s1": "MLP 32"}, drawn_series={"s0", "s1"})
    assert finding.verdict == claims.DISAGREES and "MLP 32 (2 runs)" in finding.evidence[0]
    assert "peak 0.610 at step 48 (then 0.280 at the end)" in finding.evidence[0]
    one = claims.series_claim({"s0": rising["s0"]}, {"s0": "MLP 32"}, drawn_series={"s0"})
    assert one.verdict == claims.INCONCLUSIVE and "unmeasured" in one.reason
    # checkpoints of a published run (hub revisions) are one given run
    falling = claims.series_claim({"olmo": series([0.9, 0.7, 0.5])}, {"olmo": "Olmo"})
    assert falling.verdict == claims.AGREES


def test_page_lists_every_claim_with_its_verdict_reason_and_the_tasks_at_chance():
    finding = claims.combine("claim", [claims.Evidence("a", claims.INCONCLUSIVE, "the interval holds zero")])
    page = claims.render([claims.size_claim({}), finding], chance={"next": {"at_chance": True}, "cloze": {"at_chance": False}})
    assert "**cannot test**" in page and "nothing in this config measures it" in page
    assert "## claim: **inconclusive** (the interval holds zero)" in page
    # decided pieces that share a direction carry the claim; undecided ones are counted, not votes against
    mixed = claims.combine("c", [claims.Evidence("a", claims.DISAGREES), claims.Evidence("b", claims.INCONCLUSIVE, "x")])
    assert mixed.verdict == claims.DISAGREES and mixed.reason == "1 of 2 pieces undecided"
    assert "at chance for every model" in page and "next" in page and "cloze" not in page.split("chance for")[1]


def lens_family(flip_isoscore: bool = False) -> pd.DataFrame:
    """Three sizes, two seeds each: IsoScore* rises and PC1 share falls with size (less condensed),
    the within-sequence excess does not move; no anisotropy column."""
    rows = []
    isoscores = (0.10, 0.20, 0.30)[::-1] if flip_isoscore else (0.10, 0.20, 0.30)
    for (label, params, pc1), iso in zip((("S", 1e6, 0.40), ("M", 2e6, 0.30), ("L", 4e6, 0.20)), isoscores):
        for seed, jitter in enumerate((-0.002, 0.002)):
            lens = {"isoscore": iso + jitter, "pc1_share": pc1 + jitter, "within_excess": 0.05 + 5 * jitter}
            extra = {f"{name}{end}": value + shift for name, value in lens.items()
                     for end, shift in (("", 0.0), ("_low", -SE), ("_high", SE))}
            rows.append(run(f"{label}-s{seed}", label, 0.3, params=params, **extra))
    return pd.DataFrame(rows)


def test_the_size_ordering_under_each_lens_follows_its_direction():
    """A lens where larger models are less condensed agrees whichever way it counts condensation
    (IsoScore* rises, PC1 share falls); a lens whose interval holds zero stays inconclusive; a lens
    the tables do not carry cannot be tested."""
    from condensation.lenses import BY_NAME

    table = lens_family()
    verdict = {name: claims.size_claim({"toy": table}, drawn=drawn(table), lens=BY_NAME[name]).verdict for name in BY_NAME}
    assert verdict == {"isoscore": claims.AGREES, "pc1_share": claims.AGREES, "within_excess": claims.INCONCLUSIVE,
                       "anisotropy": claims.UNTESTED, "effective_rank": claims.UNTESTED}
    finding = claims.size_claim({"toy": table}, drawn=drawn(table), lens=BY_NAME["isoscore"])
    assert "isoscore per size" in finding.evidence[0] and "0.100 / 0.100" not in finding.evidence[0]
    flipped = lens_family(flip_isoscore=True)
    assert claims.size_claim({"toy": flipped}, drawn=drawn(flipped), lens=BY_NAME["isoscore"]).verdict == claims.DISAGREES


def test_each_claim_under_each_lens_and_the_page_table():
    """The pair claim read on a lens oriented so that higher is more condensed: an init pair whose
    IsoScore* rises with training (init more condensed) agrees, like its cosine."""
    table = lens_family()
    pair_rows = []
    for seed in (0, 1):
        for member, (label, cosine, iso) in enumerate((("MLP init", 0.6, 0.1), ("MLP", 0.3, 0.4))):
            extra = {"isoscore": iso + 0.001 * seed, "isoscore_low": iso - 0.004, "isoscore_high": iso + 0.004}
            pair_rows.append({**run(f"{label}-s{seed}", label, cosine + 0.001 * seed), "member": member, **extra})
    pairs = {"init": (["MLP init", "MLP"], pd.DataFrame(pair_rows))}
    models = drawn(table) | set(pairs["init"][1]["model"])
    under = claims.claims_under_lenses({"toy": table}, pairs, {}, drawn=models)
    assert under["IsoScore*"][2].verdict == claims.AGREES  # init pairs, on IsoScore* negated
    assert under["variance share of PC 1"][2].verdict == claims.UNTESTED
    base = [claims.size_claim({"toy": table}, drawn=models), *claims.pair_claims(pairs, drawn=models)]
    page = claims.render(base, under_lenses=under)
    assert "## Each condensation claim under each lens" in page and "| mean cosine | cosine across sequences" in page
    assert "## The size ordering under IsoScore* (higher in larger models): **agrees**" in page


