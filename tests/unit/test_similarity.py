"""condensation.similarity against known answers: profiles over relative depth, linear CKA, the
jackknife, the permutation nulls (calibrated under no relation, powered, and the width confound
they remove), and the evidence lines for the findings page."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch

from condensation import similarity
from condensation.measurement import measure


def test_profiles_are_read_at_relative_depths():
    # 3 layers (0, 0.5, 1) read at 5 depths: linear between them
    np.testing.assert_allclose(similarity.profile_at_depths(np.array([0.0, 0.2, 1.0]), 5), [0, 0.1, 0.2, 0.6, 1.0])
    assert similarity.matched_layers(4, 8).tolist() == [0, 2, 4, 6, 8]
    assert similarity.matched_layers(8, 4).tolist() == [0, 0, 1, 2, 2, 2, 3, 4, 4]  # rint: halves to even


def linear_cka_reference(x: np.ndarray, y: np.ndarray) -> float:
    """Kornblith et al. (2019), feature-space form: ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F), centred."""
    x, y = x - x.mean(0), y - y.mean(0)
    return float(np.linalg.norm(y.T @ x) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)))


def test_cka_matches_the_feature_space_formula_and_its_invariances():
    generator = np.random.default_rng(0)
    x = generator.normal(size=(2, 50, 6))
    y = np.stack([x[0] @ np.linalg.qr(generator.normal(size=(6, 6)))[0] * 3.0, generator.normal(size=(50, 6))])
    cka = similarity.cka_matrix(torch.from_numpy(x), torch.from_numpy(y))
    for i in range(2):
        for j in range(2):
            assert cka[i, j] == pytest.approx(linear_cka_reference(x[i], y[j]), abs=1e-12)
    assert cka[0, 0] == pytest.approx(1.0)  # a rotation and a scale of the same tokens
    assert cka[1, 1] < 0.5  # unrelated


def test_the_matched_cka_jackknife_from_block_sums_equals_leaving_tokens_out():
    generator = torch.Generator().manual_seed(2)
    a, b = torch.randn(3, 40, 5, generator=generator), torch.randn(4, 40, 7, generator=generator)
    b[1:] += a[:, :, :1]  # some shared structure
    pairs = np.array([[0, 0], [1, 2], [2, 3]])
    token_groups = np.arange(40) % 4
    found, calibrated, null_mean = similarity.matched_cka_jackknife(
        similarity.token_grams(a), similarity.token_grams(b), pairs, token_groups)

    def direct(keep: np.ndarray) -> float:
        kept = torch.from_numpy(np.isin(token_groups, np.arange(4)[keep]))
        return float(similarity.cka_matrix(a[:, kept], b[:, kept])[pairs[:, 0], pairs[:, 1]].mean())

    def direct_null(keep: np.ndarray) -> float:
        kept = torch.from_numpy(np.isin(token_groups, np.arange(4)[keep]))
        return float(np.mean([null_mean_reference(a[i, kept].numpy(), b[j, kept].numpy()) for i, j in pairs]))

    expected = similarity.jackknife(direct, np.arange(4), (0.0, 1.0))
    expected_bounds = (expected.value, expected.low, expected.high)
    assert (found.value, found.low, found.high) == pytest.approx(expected_bounds, abs=1e-12)
    # the calibrated score: the null recomputed on each replicate's tokens
    scored = similarity.jackknife(lambda keep: similarity.calibrate(direct(keep), direct_null(keep)), np.arange(4),
                                  (-math.inf, 1.0))
    assert (calibrated.value, calibrated.low, calibrated.high) == pytest.approx(
        (scored.value, scored.low, scored.high), abs=1e-12)
    assert null_mean == pytest.approx(direct_null(np.ones(4, bool)), abs=1e-12)


def null_mean_reference(x: np.ndarray, y: np.ndarray) -> float:
    """tr(A) tr(B) / ((K - 1) |A| |B|), A and B the centred Gram matrices."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(0), y - y.mean(0)
    a, b = x @ x.T, y @ y.T
    return float(np.trace(a) * np.trace(b) / ((len(x) - 1) * np.linalg.norm(a) * np.linalg.norm(b)))


def test_the_null_mean_is_the_mean_over_every_shuffle_of_the_tokens():
    generator = np.random.default_rng(3)
    x, y = generator.normal(size=(6, 3)), generator.normal(size=(6, 4))
    shuffled = [linear_cka_reference(x[list(order)], y) for order in itertools.permutations(range(6))]
    assert np.mean(shuffled) == pytest.approx(null_mean_reference(x, y), abs=1e-12)
    # the draws of matched_cka_null: the same layer pairs, their mean near the exact one
    a, b = torch.from_numpy(generator.normal(size=(2, 30, 8))), torch.from_numpy(generator.normal(size=(2, 30, 40)))
    pairs = np.array([[0, 0], [1, 1]])
    observed, draws = similarity.matched_cka_null(a, b, pairs, 2000)
    exact = np.mean([null_mean_reference(a[i].numpy(), b[j].numpy()) for i, j in pairs])
    assert observed == pytest.approx(similarity.cka_matrix(a, b).diagonal().mean(), abs=1e-12)
    assert draws.mean() == pytest.approx(exact, abs=3 * draws.std() / math.sqrt(draws.size))


@pytest.mark.parametrize("width", [8, 40])  # X^T Y for narrow tokens, the gathered Gram matrix for wide ones
def test_each_null_draw_is_the_cka_of_the_shuffled_tokens(width):
    generator = np.random.default_rng(10)
    a, b = torch.from_numpy(generator.normal(size=(2, 30, width))), torch.from_numpy(generator.normal(size=(3, 30, 6)))
    pairs = np.array([[0, 0], [1, 2]])
    _, draws = similarity.matched_cka_null(a, b, pairs, 5, seed=4)
    orders = torch.Generator().manual_seed(4)
    for draw in draws:
        order = torch.randperm(30, generator=orders)  # the same permutation for both pairs
        assert draw == pytest.approx(similarity.cka_matrix(a[:, order], b)[pairs[:, 0], pairs[:, 1]].mean(), abs=1e-12)


def unit_rows(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(x / np.linalg.norm(x, axis=-1, keepdims=True))


def cka_against_null(a: torch.Tensor, b: torch.Tensor, permutations: int = 99) -> similarity.Calibrated:
    """Matched layers 0-0, 1-1, ... of two token samples ``[L + 1, K, d]``, against the token-shuffle
    null, as compare() computes it (6 jackknife groups)."""
    grams_a, grams_b = similarity.token_grams(a), similarity.token_grams(b)
    pairs = np.stack([np.arange(a.shape[0])] * 2, axis=1)
    _, calibrated, null_mean = similarity.matched_cka_jackknife(grams_a, grams_b, pairs, np.arange(a.shape[1]) % 6)
    observed, draws = similarity.matched_cka_null(a, b, pairs, permutations)
    return similarity._against_null(observed, draws, null_mean, calibrated)


def test_unrelated_tokens_calibrate_to_zero_with_uniform_p_values_and_5_percent_false_calls():
    """Calibration: two independent token samples (unit rows, 3 layers) in 300 draws; each with 99
    permutations, so a 5 % call is exact (0.05 x 100 a whole number)."""
    generator = np.random.default_rng(4)
    found = [cka_against_null(unit_rows(generator.normal(size=(3, 48, 24))),
                              unit_rows(generator.normal(size=(3, 48, 40)))) for _ in range(300)]
    p = np.array([f.p_value for f in found])
    scores = np.array([f.score.value for f in found])
    assert (p < 0.05).mean() <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / p.size)  # 0.075: binomial noise over 300
    assert np.histogram(p, bins=4, range=(0, 1))[0] == pytest.approx([75] * 4, abs=25)  # uniform-ish
    assert abs(scores.mean()) < 0.01 and np.abs(scores).max() < 0.1
    assert np.mean([f.null_mean for f in found]) > 0.2  # what the raw scores carry at chance


def test_a_wide_token_cloud_scores_high_raw_but_zero_calibrated():
    """The width confound (arXiv 2602.14486): tokens sharing one large direction (condensed: every
    row near m) whose own parts are independent and wide (400 dimensions for 40 tokens) score a
    high raw CKA against another such cloud; against the shuffled tokens they are at chance."""
    generator = np.random.default_rng(5)
    common = np.zeros(400)
    common[0] = 3.0
    raws, calibrated, p = [], [], []
    for _ in range(20):
        a = unit_rows(common + generator.normal(size=(2, 40, 400)) / 10)
        b = unit_rows(common + generator.normal(size=(2, 40, 400)) / 10)
        raws.append(similarity.cka_matrix(a, b).diagonal().mean())
        found = cka_against_null(a, b)
        calibrated.append(found.score.value)
        p.append(found.p_value)
    assert min(raws) > 0.85
    assert abs(np.mean(calibrated)) < 0.01 and max(np.abs(calibrated)) < 0.1
    assert min(p) > 0.01


def test_a_model_against_a_linear_transform_of_itself_calibrates_to_one_with_the_smallest_p():
    generator = np.random.default_rng(6)
    x = generator.normal(size=(3, 48, 24))
    rotation = np.linalg.qr(generator.normal(size=(24, 24)))[0]
    found = cka_against_null(torch.from_numpy(x), torch.from_numpy(2.5 * x @ rotation), 199)
    assert found.score.value == pytest.approx(1.0) and found.p_value == pytest.approx(1 / 200)
    assert found.null_mean < found.null_q95 < 1 and found.permutations == 199


def test_the_cka_null_has_power_against_a_partial_relation():
    """Power: the reference's tokens a noisy linear map of the model's, a relation that lifts the
    raw CKA about 0.08 above its null of about 0.39 (calibrated about 0.14); 200 draws of 99
    permutations."""
    generator = np.random.default_rng(7)
    found = []
    for _ in range(200):
        x = generator.normal(size=(2, 48, 24))
        y = 0.35 * x @ generator.normal(size=(24, 40)) / math.sqrt(24) + generator.normal(size=(2, 48, 40))
        found.append(cka_against_null(torch.from_numpy(x), torch.from_numpy(y)))
    assert np.mean([f.p_value < 0.05 for f in found]) >= 0.8
    assert 0.05 < np.mean([f.score.value for f in found]) < 0.3


def test_the_profile_null_permutes_the_reference_layers():
    orders, every = similarity.layer_orders(5)
    assert every and orders.shape == (119, 5) and not (orders == np.arange(5)).all(1).any()
    orders, every = similarity.layer_orders(7)
    assert not every and orders.shape == (199, 7)
    means = np.array([0.1, 0.5, 0.6, 0.8, 0.7]) + np.random.default_rng(8).normal(0, 0.01, (12, 5))
    found = similarity.profile_correlation_null(means, means, np.arange(12) % 6)
    # itself: r = 1, above all 119 other orders (exact p 1 / 120); calibrated 1 whatever the null
    assert found.p_value == pytest.approx(1 / 120) and found.permutations == 119
    assert found.score.value == pytest.approx(1.0)
    assert abs(found.null_mean) < 0.2  # a permuted profile correlates little on average


def smooth_profiles(generator: np.random.Generator, layers: int) -> np.ndarray:
    """A random smooth depth profile (a Gaussian process of length scale 0.3 in relative depth)."""
    depth = np.linspace(0, 1, layers)
    covariance = np.exp(-((depth[:, None] - depth[None]) ** 2) / (2 * 0.3**2)) + 1e-8 * np.eye(layers)
    return np.linalg.cholesky(covariance) @ generator.normal(size=layers)


def test_the_profile_null_is_calibrated_for_exchangeable_layers_only():
    """Why the page calls nothing from the profile correlation's p-value: with each layer's value
    drawn independently (exchangeable) the layer-order null calls <= 5 % of unrelated pairs; with
    smooth unrelated profiles (any two that rise or fall with depth) it calls far more."""
    generator = np.random.default_rng(9)
    rates = {}
    for kind in ("exchangeable", "smooth"):
        calls = []
        for _ in range(200):
            a, b = (generator.normal(size=13) if kind == "exchangeable" else smooth_profiles(generator, 13)
                    for _ in range(2))
            noise = generator.normal(0, 0.01, (2, 6, 13))
            calls.append(similarity.profile_correlation_null(a + noise[0], b + noise[1], np.arange(6), permutations=99)
                         .p_value < 0.05)
        rates[kind] = np.mean(calls)
    assert rates["exchangeable"] <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 200)
    assert rates["smooth"] > 0.15


def test_jackknife_of_a_mean_is_the_t_interval_of_group_means():
    values = np.arange(12.0) ** 1.5
    groups = np.arange(12) % 4
    found = similarity.jackknife(lambda keep: values[keep].mean(), groups)
    from scipy import stats

    group_means = np.array([values[groups == g].mean() for g in range(4)])  # equal groups: SE of their mean
    half = stats.t.ppf(0.975, 3) * group_means.std(ddof=1) / 2
    assert found.value == pytest.approx(values.mean())
    assert (found.low, found.high) == pytest.approx((values.mean() - half, values.mean() + half))
    assert similarity.jackknife(lambda keep: 0.9 + keep.sum(), groups, bounds=(-1, 1)).high == 1


def gpt2(inner: int, seed: int):
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(seed)
    return GPT2Model(GPT2Config(n_layer=4, n_embd=32, n_head=4, n_inner=inner, n_positions=64, vocab_size=80)).eval()


@pytest.fixture(scope="module")
def measured():
    ids = torch.randint(0, 80, (12, 48), generator=torch.Generator().manual_seed(0))
    return {key: measure(gpt2(inner, seed), token_ids=ids, name=key, progress=False, extraction={"batch_size": 4})
            for key, (inner, seed) in {"narrow": (16, 0), "again": (16, 0), "wide": (128, 1)}.items()}


def test_a_model_against_itself_and_against_another(measured):
    same = similarity.compare(measured["narrow"], measured["again"], permutations=49)
    assert same.profile_correlation.value == pytest.approx(1.0) and same.profile_distance.value == pytest.approx(0.0)
    np.testing.assert_allclose(same.cka, same.cka.T, atol=1e-9)
    assert same.matched_cka.value == pytest.approx(1.0)
    # itself: calibrated 1, above every draw (49 shuffles of the tokens, 49 of its 5 layers' 120 orders)
    assert same.matched_cka_calibrated.value == pytest.approx(1.0) and same.matched_cka_null.p_value == 1 / 50
    assert same.profile_correlation_calibrated.value == pytest.approx(1.0)
    assert same.profile_correlation_null.p_value == pytest.approx(1 / 50)
    other = similarity.compare(measured["narrow"], measured["wide"], permutations=49)
    assert other.matched_cka.value < 0.9 and other.profile_distance.value > 0
    assert other.matched_cka.low <= other.matched_cka.value <= other.matched_cka.high
    assert other.cka.shape == (5, 5) and other.matched_layers.tolist() == [0, 1, 2, 3, 4]
    null = other.matched_cka_null
    assert 0 < null.null_mean < other.matched_cka.value and null.null_mean < null.null_q95
    assert other.matched_cka_calibrated.value == pytest.approx(
        similarity.calibrate(other.matched_cka.value, null.null_mean))
    row = other.as_row()
    assert row["reference"] == "wide" and len(row["matched_cka_by_layer"].split()) == 5
    for name in similarity.STATISTICS:
        assert row[f"{name}_low"] <= row[name] <= row[f"{name}_high"]
    assert row["matched_cka_permutations"] == 49 and row["profile_correlation_permutations"] == 49
    assert 0 < row["matched_cka_p"] <= 1 and 0 < row["profile_correlation_p"] <= 1


def test_other_tokens_give_profiles_alone_and_other_texts_an_error(measured):
    ids = torch.randint(0, 80, (12, 48), generator=torch.Generator().manual_seed(5))
    elsewhere = measure(gpt2(128, 1), token_ids=ids, name="elsewhere", progress=False, extraction={"batch_size": 4})
    comparison = similarity.compare(measured["narrow"], elsewhere)
    assert comparison.cka is None and comparison.matched_cka is None and comparison.matched_cka_null is None
    row = comparison.as_row()
    assert all(math.isnan(row[column]) for column in ("matched_cka", "matched_cka_calibrated", "matched_cka_p"))
    assert 0 < row["profile_correlation_p"] <= 1  # the profiles need no shared tokens
    fewer = measure(gpt2(16, 0), token_ids=ids[:6], name="fewer", progress=False, extraction={"batch_size": 4})
    with pytest.raises(similarity.SimilarityError, match="not measured on the same texts"):
        similarity.compare(measured["narrow"], fewer)


def comparison_rows(levels: dict[str, float], p_values: dict[str, list[float]], comparison: str = "midtrain"):
    """Three runs per group with every column: each statistic level + 0.01 x seed, its calibrated
    score 0.2 below, a null mean of 0.5 and the given CKA p-values."""
    rows = []
    for group, level in levels.items():
        for seed, p in enumerate(p_values[group]):
            value = level + 0.01 * seed
            columns = {f"{c}{s}": value - 0.2 * c.endswith("_calibrated")
                       for c in similarity.STATISTICS for s in ("", "_low", "_high")}
            nulls = {f"{c}_{field}": v for c in similarity.CALIBRATED
                     for field, v in (("null_mean", 0.5), ("null_q95", 0.6), ("p", p), ("permutations", 199))}
            rows.append({"comparison": comparison, "dataset": "austen", "group": group,
                         "model": f"m/{group}/seed{seed}", "reference": "wide", **columns, **nulls})
    return rows


def test_summarise_gives_each_group_and_the_difference_with_intervals():
    rows = comparison_rows({"ce": 0.80, "dispersion": 0.90}, {"ce": [0.005] * 3, "dispersion": [0.005] * 3})
    (line,) = similarity.summarise(pd.DataFrame(rows))
    assert line.startswith("midtrain: against wide on austen, recovers the reference's pattern")
    assert "ce (3 runs): profile correlation 0.810 [" in line
    assert "matched-depth CKA 0.810 [0.785, 0.835], calibrated 0.610 [" in line and "(null mean 0.500)" in line
    # the layer-order null is no calibration (smooth profiles beat it), and the page says so
    assert "profile correlation 0.810 [0.785, 0.835], shuffle-corrected 0.610 [" in line
    assert "not a calibrated null: smooth profiles beat it" in line
    assert "correlation 0.810 [0.785, 0.835], calibrated" not in line
    assert "profile distance 0.810 [0.785, 0.835] (no null" in line
    # Welch: se = sqrt(2 x 1e-4 / 3), 4 degrees of freedom, t = 2.776; the corrected difference the same
    assert ("dispersion minus ce: profile correlation +0.100 [+0.077, +0.123], shuffle-corrected +0.100 [+0.077, "
            "+0.123]" in line)
    assert "t over runs" in line and "no call is read from it" in line


def test_a_run_against_two_references_counts_once():
    """Each run compared with two references (the wider model's two seeds) is one draw of training:
    the group's interval is a t over its 3 runs' means over the references (2 degrees of freedom),
    not over the 6 rows (5), and so is the difference between groups."""
    rows = []
    for offset, reference in ((-0.004, "wide"), (+0.004, "wide-s1")):
        for row in comparison_rows({"ce": 0.80, "dispersion": 0.90}, {"ce": [0.005] * 3, "dispersion": [0.005] * 3}):
            shifted = {key: value + offset if key.startswith("profile_correlation") else value
                       for key, value in row.items()}
            rows.append(shifted | {"reference": reference})
    (line,) = similarity.summarise(pd.DataFrame(rows))
    assert "ce (3 runs, each against 2 references): profile correlation 0.810 [" in line
    # the runs' means 0.80, 0.81, 0.82: se 0.01 / sqrt(3), t(2) = 4.303, half-width 0.0248
    assert "profile correlation 0.810 [0.785, 0.835]" in line
    # Welch over 3 and 3 runs: se = sqrt(2 x 1e-4 / 3), 4 degrees of freedom, t = 2.776
    assert "dispersion minus ce: profile correlation +0.100 [+0.077, +0.123]" in line
    assert "of 6 run-reference comparisons p < 0.05" in line


def test_recovery_reads_the_cka_null_in_every_run_with_holm_over_groups():
    def recovery(p_values: dict[str, list[float]]) -> str:
        return similarity.recovery(pd.DataFrame(comparison_rows(dict.fromkeys(p_values, 0.8), p_values)))

    found = recovery({"ce": [0.005, 0.02, 0.01], "dispersion": [0.005, 0.005, 0.3]})
    assert "Holm over 2 groups at 5%" in found
    assert "ce yes (3 of 3 runs p < 0.05, largest p 0.020)" in found  # 0.02 <= 0.05 / 2, then 0.3 > 0.05
    assert "dispersion no (2 of 3 runs p < 0.05, largest p 0.300)" in found
    # Holm: the smaller largest-p (0.03) against 0.025 fails, so neither group is called
    found = recovery({"ce": [0.03, 0.01, 0.01], "dispersion": [0.005, 0.005, 0.04]})
    assert "ce no (3 of 3 runs" in found and "dispersion no (3 of 3 runs" in found
    found = recovery({"ce": [0.02, 0.01, 0.01], "dispersion": [0.005, 0.005, 0.04]})
    assert "ce yes" in found and "dispersion yes" in found  # 0.02 <= 0.025, then 0.04 <= 0.05
    without = pd.DataFrame(comparison_rows({"ce": 0.8}, {"ce": [math.nan] * 3}))
    assert "untested" in similarity.recovery(without)


def test_the_findings_note_prints_the_calibrated_score_and_the_call():
    from condensation.reporting.findings import claims

    table = pd.DataFrame(comparison_rows({"CE only": 0.8, "distilled": 0.9}, {"CE only": [0.5] * 3,
                                                                              "distilled": [0.005] * 3}, "students"))
    evidence = claims.Evidence(similarity=table, similarity_kinds={"students": "pair"})
    (note,) = claims._similarity_notes(evidence, "pair")
    assert note.startswith("recovers the wider model's pattern? (calibrated against a permutation null")
    assert "CE only no (0 of 3 runs" in note and "distilled yes (3 of 3 runs" in note
    assert "matched-depth CKA 0.810 [" in note and "calibrated 0.610 [" in note
    assert claims._similarity_notes(evidence, "study") == []
