"""condensation.similarity against known answers: profiles over relative depth, linear CKA, the
jackknife, and the evidence lines for the findings page."""

from __future__ import annotations

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
    found = similarity.matched_cka_jackknife(similarity.token_grams(a), similarity.token_grams(b), pairs, token_groups)

    def direct(keep: np.ndarray) -> float:
        kept = torch.from_numpy(np.isin(token_groups, np.arange(4)[keep]))
        return float(similarity.cka_matrix(a[:, kept], b[:, kept])[pairs[:, 0], pairs[:, 1]].mean())

    expected = similarity.jackknife(direct, np.arange(4), (0.0, 1.0))
    expected_bounds = (expected.value, expected.low, expected.high)
    assert (found.value, found.low, found.high) == pytest.approx(expected_bounds, abs=1e-12)


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
    same = similarity.compare(measured["narrow"], measured["again"])
    assert same.profile_correlation.value == pytest.approx(1.0) and same.profile_distance.value == pytest.approx(0.0)
    np.testing.assert_allclose(same.cka, same.cka.T, atol=1e-9)
    assert same.matched_cka.value == pytest.approx(1.0)
    other = similarity.compare(measured["narrow"], measured["wide"])
    assert other.matched_cka.value < 0.9 and other.profile_distance.value > 0
    assert other.matched_cka.low <= other.matched_cka.value <= other.matched_cka.high
    assert other.cka.shape == (5, 5) and other.matched_layers.tolist() == [0, 1, 2, 3, 4]
    row = other.as_row()
    assert row["reference"] == "wide" and len(row["matched_cka_by_layer"].split()) == 5


def test_other_tokens_give_profiles_alone_and_other_texts_an_error(measured):
    ids = torch.randint(0, 80, (12, 48), generator=torch.Generator().manual_seed(5))
    elsewhere = measure(gpt2(128, 1), token_ids=ids, name="elsewhere", progress=False, extraction={"batch_size": 4})
    comparison = similarity.compare(measured["narrow"], elsewhere)
    assert comparison.cka is None and comparison.matched_cka is None
    assert math.isnan(comparison.as_row()["matched_cka"])
    fewer = measure(gpt2(16, 0), token_ids=ids[:6], name="fewer", progress=False, extraction={"batch_size": 4})
    with pytest.raises(similarity.SimilarityError, match="not measured on the same texts"):
        similarity.compare(measured["narrow"], fewer)


def test_summarise_gives_each_group_and_the_difference_with_intervals():
    rows = []
    for group, level in (("ce", 0.80), ("dispersion", 0.90)):
        for seed in range(3):
            value = level + 0.01 * seed
            columns = {f"{c}{s}": value for c in similarity.STATISTICS for s in ("", "_low", "_high")}
            rows.append({"comparison": "midtrain", "dataset": "austen", "group": group,
                         "model": f"m/{group}/seed{seed}", "reference": "wide", **columns})
    (line,) = similarity.summarise(pd.DataFrame(rows))
    assert line.startswith("midtrain: against wide on austen, ce (3 runs): profile correlation 0.810 [")
    # Welch: se = sqrt(2 x 1e-4 / 3), 4 degrees of freedom, t = 2.776
    assert "dispersion minus ce: profile correlation +0.100 [+0.077, +0.123]" in line
    assert "t over runs" in line
