"""The other lenses (condensation.lenses): known geometric answers, brute force, the IsoScore package."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from condensation import cosine, cosine_extraction, geometry, lens_extraction, lenses
from condensation.trend import lens_summary
from tests.helpers.float_bounds import U64, gamma

LENS_TOLERANCE = 1e-6
"""How far a spectral lens may move when computed another way from the same float32 sample (its
scatters summed in another order, IsoScore* from the trace and Frobenius norm instead of the
eigenvalues): float32 rounding of the covariance reaches the lenses at ~1e-7, and their intervals
over sequences are ~1e-2 wide."""


SPECTRAL = lenses.rows(lenses.SPECTRAL)


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
    spectral = one.jackknife[lenses.rows(lenses.SPECTRAL)]
    assert np.isnan(spectral[:, :, 0]).all() and np.isfinite(spectral[:, :, 1:]).all()


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
        np.testing.assert_allclose(result.values[SPECTRAL, layer], alone[:, 0], rtol=0, atol=LENS_TOLERANCE)
        if layer in deep:
            np.testing.assert_allclose(result.jackknife[SPECTRAL, :, layer], alone[:, 1:], rtol=0, atol=LENS_TOLERANCE)
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
                        lenses.pc1_share(eigenvalues), lenses.alpha_req(eigenvalues)]
            found = result.values[SPECTRAL, layer] if column == 0 else result.jackknife[SPECTRAL, column - 1, layer]
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


# --------------------------------------------------------------------------------------------
# alpha-ReQ, the cosine without outlier dimensions, the layer angle, massive activations


def test_alpha_req_known_answers():
    ranks = np.arange(1, 41)
    for alpha in (0.5, 1.0, 2.5):
        # a pure power law, in any order and padded with zeros (below the floor: no direction)
        spectrum = np.concatenate([np.random.default_rng(0).permutation(ranks ** -alpha), np.zeros(24)])
        assert lenses.alpha_req(spectrum) == pytest.approx(alpha, rel=1e-12)
    # only the larger half of the non-zero eigenvalues is fitted: a tail that falls off a cliff (a
    # finite sample's smallest eigenvalues) does not move it
    cliff = np.concatenate([ranks[:20] ** -1.0, 1e-5 * ranks[20:] ** -1.0])
    assert lenses.alpha_req(cliff) == pytest.approx(1.0, rel=1e-12)
    assert math.isnan(lenses.alpha_req(np.array([1.0, 0.5, 0.0, 0.0])))  # one point to fit: none
    # through the sampled tokens: a covariance with eigenvalues i^-1.5, many more tokens than dimensions
    d, n = 32, 40_000
    tokens = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    tokens *= torch.arange(1, d + 1, dtype=torch.float64) ** -0.75
    found = lens_extraction.spectral_lenses(tokens)[lenses.SPECTRAL.index("alpha_req"), 0]
    assert found == pytest.approx(1.5, abs=0.03)


def outlier_free_brute_force(sample: torch.Tensor, sequences: np.ndarray, kept: np.ndarray, k: int) -> float:
    """One layer's ``cosine_without_outliers`` in float64, pair by pair."""
    tokens = sample[torch.from_numpy(kept)].double().numpy()
    owners = sequences[kept]
    outliers = np.argsort(tokens.var(axis=0, ddof=1))[-k:]
    trimmed = np.delete(tokens, outliers, axis=1)
    trimmed /= np.linalg.norm(trimmed, axis=1, keepdims=True)
    cos = trimmed @ trimmed.T
    same = (owners[:, None] == owners[None, :]) & ~np.eye(len(owners), dtype=bool)
    return float(cos[same].mean())


def test_cosine_without_outliers_against_brute_force_and_a_planted_outlier():
    """Each sequence sits far out along three coordinates of its own (large variance across
    sequences, shared within one): its tokens' cosine is near 1 with them and near 0 without."""
    torch.manual_seed(4)
    n, t, d, k = 12, 20, 16, lenses.OUTLIER_DIMENSIONS
    planted = torch.zeros(n, 1, d)
    planted[:, 0, :k] = 20.0 * torch.randn(n, k)
    hidden = [torch.randn(n, t, d), torch.randn(n, t, d) + planted]
    acc = lens_extraction.LensAccumulator(n, t, sample_tokens=150, groups=4)
    for start in range(0, n, 5):
        acc.update([h[start : start + 5] for h in hidden])
    result = acc.finalize()
    sequences = (acc._sample_flat // t).numpy()
    groups = acc._sample_group.numpy()
    for layer in range(2):
        everything = np.ones(len(sequences), bool)
        assert result.layer_values("cosine_without_outliers")[layer] == pytest.approx(
            outlier_free_brute_force(acc._sample[layer], sequences, everything, k), abs=1e-6)
        for group in range(4):  # the replicates cover the deeper half of the layers, as the spectral lenses'
            found = result.jackknife[lenses.LENS_NAMES.index("cosine_without_outliers"), group, layer]
            if layer == 0:
                assert math.isnan(found)
                continue
            assert found == pytest.approx(outlier_free_brute_force(acc._sample[layer], sequences, groups != group, k),
                                          abs=1e-6)
    within = result.layer_values("within_excess") + result.layer_values("anisotropy")
    assert within[1] > 0.8 and abs(result.layer_values("cosine_without_outliers")[1]) < 0.05


def test_layer_angle_sink_share_and_massive_ratio_against_brute_force(monkeypatch):
    """Over stacks of one layer (the CPU budget shrunk) and of all of them, in batches: each
    token's angle to the layer before, the largest norm's share of its sequence's, the largest
    |activation| over the sampled tokens' median, and each with a group left out."""
    torch.manual_seed(6)
    n, t, d, groups = 10, 8, 12, 5
    base = torch.randn(n, t, d)
    turned = torch.cat([base[..., 1:], base[..., :1]], dim=-1)  # another direction for each token
    massive = base.clone()
    massive[:, 0, 3] = 500.0  # a massive activation on every first token
    hidden = [base, base * 2.0, turned, massive]
    results = []
    for budget in (t * d, 1 << 18):
        monkeypatch.setattr(cosine, "CPU_STACK_VALUES", budget)
        acc = lens_extraction.LensAccumulator(n, t, sample_tokens=40, groups=groups)
        for start in range(0, n, 3):
            acc.update([h[start : start + 3] for h in hidden])
        results.append(acc.finalize())
    np.testing.assert_allclose(results[0].values, results[1].values, rtol=1e-6, equal_nan=True)
    result, sample_index = results[1], acc._sample_flat.numpy()
    for column in range(groups + 1):
        kept = np.arange(n) % groups != column - 1
        found = result.values if column == 0 else result.jackknife[:, column - 1]
        states = [h[torch.from_numpy(kept)].double() for h in hidden]
        cosines = [torch.nn.functional.cosine_similarity(a, b, dim=-1).clamp(-1, 1) for a, b in zip(states, states[1:])]
        angles = [float((torch.arccos(c) / math.pi).mean()) for c in cosines]
        norms = [h.norm(dim=-1) for h in states]
        sink = [float((m.amax(-1) / m.sum(-1)).mean()) for m in norms]
        read = np.zeros(len(sample_index), bool)
        read[:: lens_extraction.MEDIAN_STRIDE] = True  # the tokens the median reads
        tokens_kept = kept[sample_index // t] & read
        medians = [float(h.reshape(n * t, d)[torch.from_numpy(sample_index[tokens_kept])].abs().flatten()
                         .median()) for h in hidden]
        ratio = np.array([float(s.abs().max()) / m for s, m in zip(states, medians)])
        assert math.isnan(found[lenses.LENS_NAMES.index("layer_angle"), 0])
        np.testing.assert_allclose(found[lenses.LENS_NAMES.index("layer_angle"), 1:], angles, atol=1e-6)
        np.testing.assert_allclose(found[lenses.LENS_NAMES.index("sink_share")], sink, rtol=1e-6)
        deep = slice(None) if column == 0 else slice(2, None)  # a median's replicates: the deeper half
        np.testing.assert_allclose(found[lenses.LENS_NAMES.index("massive_ratio"), deep], ratio[deep], rtol=1e-6)
    angle = result.layer_values("layer_angle")
    assert angle[1] == pytest.approx(0.0, abs=1e-3) and angle[2] > 0.3  # a scaled state keeps its direction
    assert result.layer_values("massive_ratio")[3] > 100 * result.layer_values("massive_ratio")[0]
    assert result.layer_values("sink_share")[3] > 3 / t > result.layer_values("sink_share")[0]


def test_every_lens_is_stored_and_summarised():
    """Each lens of LENSES has a value at every layer of a measured model (the layer angle from
    layer 1), its deeper-half summary an interval, and a file written with fewer lenses loads
    without them rather than misread."""
    torch.manual_seed(7)
    hidden = [torch.randn(12, 10, 16) + scale * torch.randn(16) for scale in (0.0, 1.0, 2.0, 3.0)]
    result = accumulate(hidden, batch=5)
    assert np.isfinite(result.values[:, 1:]).all()
    assert [name for name in lenses.LENS_NAMES if np.isnan(result.layer_values(name)[0])] == ["layer_angle"]
    layers = np.arange(2, 4)
    for name in lenses.LENS_NAMES:
        estimate, se = result.summary(name, layers)
        assert math.isfinite(estimate) and se > 0, name
    assert not any("|" in lens.title for lens in lenses.LENSES)  # a Markdown table's cell
    assert {lens.name for lens in lenses.CONDENSATION_LENSES} == {"anisotropy", "within_excess", "isoscore",
                                                                  "effective_rank", "pc1_share", "alpha_req",
                                                                  "cosine_without_outliers"}
