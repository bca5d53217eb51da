"""The other lenses (condensation.lenses): known geometric answers, brute force, the IsoScore package."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from condensation import cosine_extraction, geometry, lens_extraction, lenses
from condensation.trend import lens_summary
from tests.helpers.float_bounds import U64, gamma

LENS_TOLERANCE = 1e-6
"""How far a spectral lens may move when computed another way from the same float32 sample (its
scatters summed in another order, IsoScore* from the trace and Frobenius norm instead of the
eigenvalues): float32 rounding of the covariance reaches the lenses at ~1e-7, and their intervals
over sequences are ~1e-2 wide."""


def accumulate(hidden: list[torch.Tensor], batch: int, **options) -> lenses.LensStatistics:
    """Feed ``[N, T, d]`` hidden states per layer in batches of ``batch`` sequences."""
    n, t = hidden[0].shape[:2]
    acc = lens_extraction.LensAccumulator(n, t, **options)
    for start in range(0, n, batch):
        acc.update([h[start : start + batch] for h in hidden])
    return acc.finalize()


def test_isoscore_star_is_the_packages():
    isoscore = pytest.importorskip("IsoScore.IsoScore")  # the reference implementation (PyPI IsoScore, MIT)
    rng = np.random.default_rng(0)
    points = rng.normal(size=(400, 24)) * np.linspace(0.05, 2.0, 24)
    eigenvalues = lens_extraction.covariance_eigenvalues(torch.from_numpy(points))
    target = np.eye(24) * np.trace(np.cov(points.T)) / 24  # the scaled identity our shrinkage uses
    assert lenses.isoscore_star(eigenvalues, 0.1) == pytest.approx(float(isoscore.IsoScore_star(points, target, 0.1)),
                                                                   rel=1e-7)
    assert lenses.isoscore_star(eigenvalues, 0.0) == pytest.approx(float(isoscore.IsoScore(points)), rel=1e-7)


def test_spectral_lenses_known_answers():
    d = 16
    line = torch.zeros(200, d, dtype=torch.float64)
    line[:, 0] = torch.randn(200, dtype=torch.float64)  # every token on one axis
    eigenvalues = lens_extraction.covariance_eigenvalues(line)
    # float64 throughout, the rounding-level eigenvalues floored to 0: float64 rounding is left (~1e-15)
    assert lenses.isoscore_star(eigenvalues, 0.0) == pytest.approx(0.0, abs=1e-12)
    assert lenses.pc1_share(eigenvalues) == pytest.approx(1.0)
    assert lenses.effective_rank_share(eigenvalues, d) == pytest.approx(1 / d)
    even = torch.eye(d, dtype=torch.float64).repeat(20, 1)  # the d axes, equally often
    even = torch.cat([even, -even])  # mean zero: every axis carries the same variance
    eigenvalues = lens_extraction.covariance_eigenvalues(even)
    assert lenses.isoscore_star(eigenvalues, 0.0) == pytest.approx(1.0)
    assert lenses.pc1_share(eigenvalues) == pytest.approx(1 / d)
    assert lenses.effective_rank_share(eigenvalues, d) == pytest.approx(1.0)
    assert math.isnan(lenses.pc1_share(np.zeros(d)))  # no variance: no direction to share it


def test_gram_and_scatter_give_one_spectrum():
    tokens = torch.randn(12, 40, dtype=torch.float64)  # fewer tokens than dimensions: the Gram route
    wide = lens_extraction.covariance_eigenvalues(tokens)
    assert wide.shape == (40,)
    reference = np.linalg.eigvalsh(np.cov(tokens.numpy().T))
    np.testing.assert_allclose(np.sort(wide), np.clip(reference, 0, None), atol=1e-10)


def brute_force(hidden: torch.Tensor, sequences: np.ndarray) -> tuple[float, float]:
    """(anisotropy, within-sequence off-diagonal mean) of one layer over the chosen sequences."""
    unit = torch.nn.functional.normalize(hidden[sequences].double(), dim=-1)
    n, t, _ = unit.shape
    flat = unit.reshape(n * t, -1)
    cos = flat @ flat.T
    same = torch.block_diag(*[torch.ones(t, t, dtype=torch.bool)] * n)
    eye = torch.eye(n * t, dtype=torch.bool)
    return float(cos[~same].mean()), float(cos[same & ~eye].mean())


def exact_lens_bounds(t: int, d: int, n: int) -> tuple[float, float]:
    """Bounds on the float32 errors of (anisotropy, within_excess) of ``n`` sequences of ``t``
    tokens of ``d`` features (float_bounds). Unit rows leave each entry within gamma_{d+2}; a
    sequence's float32 sum of them, s_n, within gamma_m (m = t + d + 1) of the sum of |entries|.
    Anisotropy sums s_n . s_n' over n != n' (in float64): off by <= (2 gamma_m + gamma_m^2) sum
    |a_i| . |a_j| <= gamma_{2m} per pair (Cauchy-Schwarz). Within: |s_n|^2 off by <= gamma_{2m} t^2,
    the float32 sum of a sequence's t d squared entries (t exactly) by <= gamma_{t d + 2 d + 4} t,
    over t (t - 1) pairs. float64 sums on both sides add gamma_{(n t)^2}(u64)."""
    m, float64 = t + d + 1, 2 * gamma((n * t) ** 2, U64)
    anisotropy = gamma(2 * m) + float64
    within = (t * gamma(2 * m) + gamma(t * d + 2 * d + 4)) / (t - 1) + float64
    return anisotropy, anisotropy + within


def test_exact_lenses_and_their_jackknife_match_brute_force():
    torch.manual_seed(0)
    n, t, d = 10, 6, 8
    shared = torch.randn(d)
    hidden = [torch.randn(n, t, d) + scale * shared for scale in (0.0, 1.0, 3.0)]
    result = accumulate(hidden, batch=3, groups=4)
    bound, excess_bound = exact_lens_bounds(t, d, n)  # against brute force in float64 (fewer sequences: the same)
    for layer, states in enumerate(hidden):
        anisotropy, within = brute_force(states, np.arange(n))
        assert result.layer_values("anisotropy")[layer] == pytest.approx(anisotropy, abs=bound)
        assert result.layer_values("within_excess")[layer] == pytest.approx(within - anisotropy, abs=excess_bound)
        for group in range(4):
            kept = np.arange(n)[np.arange(n) % 4 != group]
            anisotropy, within = brute_force(states, kept)
            assert result.jackknife[0, group, layer] == pytest.approx(anisotropy, abs=bound)
            assert result.jackknife[1, group, layer] == pytest.approx(within - anisotropy, abs=excess_bound)
    assert result.layer_values("anisotropy")[0] < 0.1 < 0.5 < result.layer_values("anisotropy")[2]


def test_sequences_collapsed_onto_their_own_direction():
    """Each sequence's tokens all on one direction, the directions orthogonal across sequences:
    the within-sequence cosine is 1 and none of it is shared."""
    n, t, d = 6, 5, 12
    hidden = [torch.eye(d)[:n, None, :].expand(n, t, d).clone() * 2.0]
    result = accumulate(hidden, batch=4, groups=3, sample_tokens=n * t)
    assert result.layer_values("anisotropy")[0] == pytest.approx(0.0, abs=1e-12)
    assert result.layer_values("within_excess")[0] == pytest.approx(1.0)
    # n orthonormal points, each t times: n - 1 equal variances after centring
    assert result.layer_values("effective_rank")[0] == pytest.approx((n - 1) / d, rel=1e-6)


def test_batching_and_memory_do_not_depend_on_the_number_of_sequences():
    torch.manual_seed(1)
    hidden = [torch.randn(16, 32, 24) for _ in range(3)]
    one = accumulate(hidden, batch=1, sample_tokens=100)
    many = accumulate(hidden, batch=7, sample_tokens=100)
    np.testing.assert_allclose(one.values, many.values, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(one.jackknife, many.jackknife, rtol=1e-10, atol=1e-12, equal_nan=True)
    acc = lens_extraction.LensAccumulator(400, 32, sample_tokens=100)
    acc.update([torch.randn(8, 32, 24) for _ in range(3)])
    assert tuple(acc._sample.shape) == (3, 100, 24)  # K tokens x width per layer, whatever N
    # the spectral jackknife covers the deeper half of the layers only
    assert np.isnan(one.jackknife[2:, :, 0]).all() and np.isfinite(one.jackknife[2:, :, 1:]).all()


def test_summary_interval_and_storage(tmp_path):
    torch.manual_seed(2)
    from condensation.config.specs import TrendConfig

    class Model(torch.nn.Module):  # three "layers" of growing shared direction
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(50, 16)

        def get_input_embeddings(self):
            return self.embed

        def forward(self, input_ids, output_hidden_states, use_cache):
            h = self.embed(input_ids)
            return type("Out", (), {"hidden_states": (h, h + 1.0, h + 3.0)})

    ids, model = torch.randint(0, 50, (12, 10)), Model()
    stats = cosine_extraction.extract_cosine_statistics(model, ids, batch_size=5)
    summary = lens_summary(stats, TrendConfig(include_embedding_layer=True, include_diagonal=True))
    assert summary["anisotropy_low"] < summary["anisotropy"] < summary["anisotropy_high"]
    stats.save(tmp_path / "s.npz")
    loaded = geometry.CosineStatistics.load(tmp_path / "s.npz")
    np.testing.assert_array_equal(loaded.lenses.values, stats.lenses.values)
    np.testing.assert_array_equal(loaded.lenses.jackknife, stats.lenses.jackknife)
    assert lens_summary(loaded, TrendConfig(True, True)) == summary
    cosines_only = cosine_extraction.extract_cosine_statistics(model, ids, batch_size=5, lens_tokens=None)
    assert cosines_only.lenses is None
    np.testing.assert_array_equal(cosines_only.layer_mean, stats.layer_mean)  # the lenses change no cosine


def test_one_batched_eigendecomposition_gives_each_layers_own_lenses():
    """``finalize`` computes the covariances of all layers in two calls (the shallower layers, the
    deeper half's leave-one-group-out replicates) and stacks them into one eigendecomposition: each
    layer gets what ``spectral_lenses`` finds for it alone, with the spectra computed where the
    sample is or on the host. A product batched over layers may sum the float32 scatters in another
    order, which moves a lens by ~1e-8 here: LENS_TOLERANCE."""
    torch.manual_seed(3)
    n, t, d, layers = 12, 16, 10, 5
    hidden = [torch.randn(n, t, d) + scale * torch.randn(d) for scale in np.linspace(0.0, 3.0, layers)]
    acc = lens_extraction.LensAccumulator(n, t, sample_tokens=150)
    for start in range(0, n, 5):
        acc.update([h[start : start + 5] for h in hidden])
    result = acc.finalize()
    deep = range(layers - (layers + 1) // 2, layers)
    assert acc.groups == lenses.JACKKNIFE_GROUPS
    for layer in range(layers):
        alone = lens_extraction.spectral_lenses(acc._sample[layer], acc._sample_group if layer in deep else None)
        np.testing.assert_allclose(result.values[2:, layer], alone[:, 0], rtol=0, atol=LENS_TOLERANCE)
        if layer in deep:
            np.testing.assert_allclose(result.jackknife[2:, :, layer], alone[:, 1:], rtol=0, atol=LENS_TOLERANCE)
    on_host = acc.finalize(spectra_device="cpu")
    np.testing.assert_array_equal(on_host.values, result.values)
    np.testing.assert_array_equal(on_host.jackknife, result.jackknife)
    # a leave-one-group-out covariance is the covariance of the tokens left in
    sample, groups = acc._sample[layers - 1].double(), acc._sample_group
    covariances = lens_extraction.replicate_covariances(sample, groups, acc.groups)
    for group in range(acc.groups):
        kept = sample[groups != group].numpy()
        np.testing.assert_allclose(covariances[1 + group].numpy(), np.cov(kept.T), atol=1e-12)


def spectra_as_before(sample: torch.Tensor, groups: torch.Tensor | None, count: int) -> list[np.ndarray]:
    """The floored spectra finalize read all three spectral lenses from before IsoScore* took the
    trace and Frobenius norm: the covariances of one layer's replicates (``replicate_covariances``)
    when the sample is at least as wide as the tokens, else each replicate's own Gram matrix."""
    width = sample.shape[1]
    if sample.shape[0] < width:
        return [lens_extraction.covariance_eigenvalues(tokens)
                for tokens in [sample] + [sample[groups != g] for g in range(count)]]
    covariances = lens_extraction.replicate_covariances(sample, groups, count)
    return [lenses.floored_eigenvalues(values, width) for values in lens_extraction.covariance_spectra(covariances)]


@pytest.mark.parametrize("sample_tokens", [150, 8], ids=["covariances", "gram"])
def test_the_lenses_are_those_of_the_spectra_as_before(sample_tokens):
    """IsoScore* now comes from each covariance's trace and Frobenius norm, not its eigenvalues:
    every spectral lens of every layer, and of every leave-one-group-out replicate of the deeper
    half, equals what the eigenvalue formulas give for the spectra finalize read before (the old
    values), through the ``d x d`` covariances (more sampled tokens than the width) and the Gram
    matrices (fewer)."""
    torch.manual_seed(5)
    n, t, d, layers = 12, 16, 10, 4
    spread = torch.linspace(0.2, 2.0, d)  # unequal variances: IsoScore* well inside (0, 1)
    hidden = [torch.randn(n, t, d) * spread + scale * torch.randn(d) for scale in np.linspace(0.0, 3.0, layers)]
    acc = lens_extraction.LensAccumulator(n, t, sample_tokens=sample_tokens)
    for start in range(0, n, 5):
        acc.update([h[start : start + 5] for h in hidden])
    result = acc.finalize()
    first_deep = layers - (layers + 1) // 2
    for layer in range(layers):
        groups, count = (acc._sample_group, acc.groups) if layer >= first_deep else (None, 0)
        for column, eigenvalues in enumerate(spectra_as_before(acc._sample[layer], groups, count)):
            expected = [lenses.isoscore_star(eigenvalues), lenses.effective_rank_share(eigenvalues, d),
                        lenses.pc1_share(eigenvalues)]
            found = result.values[2:, layer] if column == 0 else result.jackknife[2:, column - 1, layer]
            np.testing.assert_allclose(found, expected, rtol=0, atol=LENS_TOLERANCE)
    assert 0.05 < result.layer_values("isoscore").min() and result.layer_values("isoscore").max() < 0.95


def test_tokens_sharing_one_direction_keep_their_spread_in_float32():
    """Directions that all but coincide (mean cosine 0.9993, as in a condensed deep layer): the
    covariance is the small spread around a large shared mean, which ``scatter - sum sum^T / n``
    in float32 cancels away unless the tokens are centred first. Every spectral lens of the tokens
    and of each left-out group, from float32, within gamma_n of the same tokens in float64 (the
    rounding of an n-term sum, relative to the spread; without the centring they were off by up
    to 7e-3, 480 times that)."""
    torch.manual_seed(0)
    n, d = 256, 16
    shared = torch.nn.functional.normalize(torch.randn(d), dim=0)
    tokens = torch.nn.functional.normalize(100 * shared + torch.randn(n, d) * torch.linspace(0.2, 1.0, d), dim=1)
    assert tokens.mean(0).norm() ** 2 > 0.999
    groups = torch.arange(n) % 4
    found = lens_extraction.spectral_lenses(tokens, groups)
    exact = lens_extraction.spectral_lenses(tokens.double(), groups)
    np.testing.assert_allclose(found, exact, rtol=0, atol=gamma(n))
    assert 0.05 < exact[0].min() and exact[1].min() > 0.5  # a spread that is far from degenerate
