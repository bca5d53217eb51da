"""Auxiliary losses: equal to the loop-based reference, known answers, edge cases, placement."""

from __future__ import annotations

import math

import pytest
import torch

from condensation.config.objectives import LOSS_NAMES, OBJECTIVES, AuxLossConfig
from condensation.training import losses as losses_module
from condensation.training.losses import (
    angular_distance,
    auxiliary_loss,
    cosine_matrix,
    layer_loss,
    reference_layer_loss,
    select_layers,
    subsample_tokens,
)


def random_hidden(batch=2, tokens=6, features=6, seed=0, dtype=torch.float64):
    """Gaussian hidden states, checked to lie away from the clamp region (|cos| < 0.99, clamp at 0.999)."""
    z = torch.randn(batch, tokens, features, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    off = ~torch.eye(tokens, dtype=torch.bool)
    assert cosine_matrix(z)[:, off].abs().max() < 0.99
    return z.to(dtype)


def value_and_grad(fn, z):
    z = z.detach().clone().requires_grad_(True)
    value = fn(z)
    (grad,) = torch.autograd.grad(value, z)
    return value.detach(), grad


def identical_tokens(batch=2, tokens=5, features=8, dtype=torch.float32):
    base = torch.randn(features, generator=torch.Generator().manual_seed(1))
    return base.expand(batch, tokens, features).clone().to(dtype)


def orthonormal_tokens(batch=2, tokens=5, features=8, seed=0):
    """Rows of a random orthogonal matrix, scaled differently per token (cosine ignores scale)."""
    gen = torch.Generator().manual_seed(seed)
    rows = [torch.linalg.qr(torch.randn(features, features, generator=gen, dtype=torch.float64))[0][:tokens]
            for _ in range(batch)]
    scale = torch.linspace(0.5, 3.0, tokens, dtype=torch.float64)[:, None]
    return torch.stack(rows) * scale


# non-default constants, so a loss that ignored them would differ from the reference
CONFIGS = {
    "dispersion": AuxLossConfig("dispersion", tau=0.7),
    "decorrelation": AuxLossConfig("decorrelation"),
    "l2_repel": AuxLossConfig("l2_repel", tau=1.5, norm_weight=0.3),
    "orthogonalization": AuxLossConfig("orthogonalization", margin=0.6),
}




def loss_config(name: str) -> AuxLossConfig:
    """The settings a loss is tested with: the constants above, or a newly registered loss' defaults
    (every loss of the registry is compared with its reference formula)."""
    return CONFIGS.get(name) or OBJECTIVES[name].settings(name=name)


# ----------------------------------------------------------------------------------------------
# against the reference formula


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("tokens,features", [(5, 4), (7, 8)])
def test_matches_reference_value_and_gradient(name, tokens, features):
    config = loss_config(name)
    z = random_hidden(tokens=tokens, features=features, seed=tokens)
    value, grad = value_and_grad(lambda x: layer_loss(x, config), z)
    ref_value, ref_grad = value_and_grad(lambda x: reference_layer_loss(x, config), z)
    assert value.shape == ()
    torch.testing.assert_close(value, ref_value, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-8, atol=1e-10)
    assert grad.abs().max() > 1e-4  # the comparison is not between two zeros


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_float32_matches_reference(name):
    config = loss_config(name)
    z = random_hidden(tokens=6, features=8, seed=3)
    value, grad = value_and_grad(lambda x: layer_loss(x, config), z.float())
    ref_value, ref_grad = value_and_grad(lambda x: reference_layer_loss(x, config), z)
    assert value.dtype == torch.float32
    torch.testing.assert_close(value.double(), ref_value, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad.double(), ref_grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_gradcheck(name):
    config = loss_config(name)
    z = random_hidden(tokens=5, features=6, seed=7).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: layer_loss(x, config), (z,))


def test_angular_distance_straight_through_clamp():
    t = 1e-3
    cos = torch.tensor([1.0, 0.9995, 0.3, -1.0], dtype=torch.float64, requires_grad=True)
    dist = angular_distance(cos, t)
    at_clamp = math.acos(1 - t) / math.pi
    expected = torch.tensor([at_clamp, at_clamp, math.acos(0.3) / math.pi, 1 - at_clamp], dtype=torch.float64)
    torch.testing.assert_close(dist.detach(), expected)
    dist.sum().backward()
    # clamped entries get arccos' slope at the clamp, not 0 (plain clamp) and not inf (no clamp)
    slope_at_clamp = -1 / (math.pi * math.sqrt(1 - (1 - t) ** 2))
    expected_grad = torch.tensor([slope_at_clamp, slope_at_clamp, -1 / (math.pi * math.sqrt(1 - 0.09)), slope_at_clamp],
                                 dtype=torch.float64)
    torch.testing.assert_close(cos.grad, expected_grad)


# ----------------------------------------------------------------------------------------------
# known answers


@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0])
def test_dispersion_of_orthonormal_tokens(tau):
    z = orthonormal_tokens()
    value = layer_loss(z, AuxLossConfig("dispersion", tau=tau))
    assert value.item() == pytest.approx(-0.5 / tau, abs=1e-12)
    # exact basis vectors in float32 give cos exactly 0
    basis = torch.eye(6)[:4].expand(2, 4, 6)
    assert layer_loss(basis, AuxLossConfig("dispersion", tau=tau)).item() == pytest.approx(-0.5 / tau, abs=1e-7)


def test_dispersion_of_identical_tokens():
    z = identical_tokens()
    config = AuxLossConfig("dispersion")
    value, grad = value_and_grad(lambda x: layer_loss(x, config), z)
    # log-mean-exp of exp(-D) with D at its clamped floor arccos(1 - t) / pi ~ 0.014 instead of 0
    assert value.item() == pytest.approx(-math.acos(1 - config.clamp) / math.pi, abs=1e-5)
    assert torch.isfinite(grad).all() and grad.abs().max() < 1e-4  # only rounding noise survives
    tight = AuxLossConfig("dispersion", clamp=1e-6)
    assert layer_loss(z, tight).item() == pytest.approx(0.0, abs=1e-3)


def test_orthogonalization_known_answers():
    config = AuxLossConfig("orthogonalization")
    assert layer_loss(orthonormal_tokens(), config).item() == pytest.approx(0.0, abs=1e-12)
    assert layer_loss(orthonormal_tokens(), AuxLossConfig("orthogonalization", margin=0.6)).item() == pytest.approx(
        0.01, abs=1e-12)
    z = identical_tokens()
    floor = math.acos(1 - config.clamp) / math.pi
    assert layer_loss(z, config).item() == pytest.approx((0.5 - floor) ** 2, abs=1e-6)
    assert layer_loss(z, AuxLossConfig("orthogonalization", clamp=1e-6)).item() == pytest.approx(0.25, abs=1e-3)


def test_decorrelation_known_answers():
    config = AuxLossConfig("decorrelation")
    base = torch.randn(16, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    scales = torch.tensor([0.5, 1.0, 3.0, -2.0], dtype=torch.float64)  # negative: anti-correlated, C^2 = 1
    shifts = torch.tensor([0.0, 5.0, -1.0, 2.0], dtype=torch.float64)
    correlated = (scales[:, None] * base + shifts[:, None]).expand(2, 4, 16)
    assert layer_loss(correlated, config).item() == pytest.approx(1.0, abs=1e-12)
    # zero-mean, mutually orthogonal rows (Hadamard rows without the constant one): C = 0
    uncorrelated = torch.tensor([[1, 1, -1, -1], [1, -1, 1, -1], [1, -1, -1, 1]], dtype=torch.float64).expand(2, 3, 4)
    assert layer_loss(uncorrelated, config).item() == pytest.approx(0.0, abs=1e-12)


def test_l2_repel_known_answers():
    tau, norm_weight, a = 2.0, 0.3, 1.5
    config = AuxLossConfig("l2_repel", tau=tau, norm_weight=norm_weight)
    # two tokens, 0 and (a, ..., a): squared distance per feature a^2, mean(z^2) = a^2 / 2
    z = torch.stack([torch.zeros(8), torch.full((8,), a)]).expand(3, 2, 8)
    assert layer_loss(z, config).item() == pytest.approx(-a**2 / tau + norm_weight * a**2 / 2, rel=1e-6)
    same = identical_tokens()
    assert layer_loss(same, config).item() == pytest.approx(norm_weight * same.pow(2).mean().item(), rel=1e-5)


def test_l2_repel_distance_is_per_feature():
    # Duplicating every feature doubles ||z_i - z_j||^2 but not the per-feature distance.
    config = AuxLossConfig("l2_repel", norm_weight=0.0)
    z = random_hidden(tokens=6, features=8, seed=4, dtype=torch.float32)
    doubled = torch.cat([z, z], dim=-1)
    torch.testing.assert_close(layer_loss(doubled, config), layer_loss(z, config))
    # per-feature distances ~200: exp(-D) underflows in float32, the logsumexp form does not
    big = 10.0 * random_hidden(tokens=6, features=64, seed=5, dtype=torch.float32)
    value, grad = value_and_grad(lambda x: layer_loss(x, config), big)
    assert torch.isfinite(value) and value < -50
    assert torch.isfinite(grad).all() and grad.abs().max() > 0


# ----------------------------------------------------------------------------------------------
# degenerate and low-precision inputs


DEGENERATE = {
    "identical": lambda: identical_tokens(),
    "zeros": lambda: torch.zeros(2, 5, 8),
    "bf16": lambda: random_hidden(features=8, dtype=torch.bfloat16),
    "bf16_identical": lambda: identical_tokens(dtype=torch.bfloat16),
    "fp16": lambda: random_hidden(features=8, dtype=torch.float16),
    # massive activations (~1e4 per feature occur in real LMs) and vanishing ones, in bf16
    "bf16_huge_norm": lambda: (1e4 * random_hidden(features=8)).bfloat16(),
    "bf16_tiny_norm": lambda: (1e-30 * random_hidden(features=8)).bfloat16(),
    "bf16_two_tokens_opposite": lambda: torch.tensor([[[1.0] * 8, [-1.0] * 8]], dtype=torch.bfloat16),
}


@pytest.mark.parametrize("case", DEGENERATE)
@pytest.mark.parametrize("name", LOSS_NAMES)
def test_finite_on_degenerate_inputs(name, case):
    z = DEGENERATE[case]()
    value, grad = value_and_grad(lambda x: layer_loss(x, AuxLossConfig(name)), z)
    assert value.shape == () and value.dtype == torch.float32
    assert torch.isfinite(value)
    assert grad.dtype == z.dtype and torch.isfinite(grad).all()


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_low_precision_is_upcast(name):
    config = AuxLossConfig(name)
    z = random_hidden(tokens=16, features=64, dtype=torch.float32)
    rounded = z.bfloat16()
    # upcast first, then the same float32 computation: bit-identical
    torch.testing.assert_close(layer_loss(rounded, config), layer_loss(rounded.float(), config), rtol=0, atol=0)
    # autocast would run the matmuls in bf16 (error ~1e-3); the loss switches it off
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = layer_loss(z, config)
    assert under_autocast.dtype == torch.float32
    torch.testing.assert_close(under_autocast, layer_loss(z, config), rtol=0, atol=0)  # the same float32 computation


# ----------------------------------------------------------------------------------------------
# optimisation direction


def test_dispersion_descent_spreads_tokens():
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(16, generator=gen)
    z = (base + 0.3 * torch.randn(2, 8, 16, generator=gen)).requires_grad_(True)  # condensed start
    config = AuxLossConfig("dispersion")
    off = ~torch.eye(8, dtype=torch.bool)

    def mean_cosine():
        return cosine_matrix(z.detach())[:, off].mean().item()

    start_cos = mean_cosine()
    optimizer = torch.optim.SGD([z], lr=10.0)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = layer_loss(z, config)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert start_cos > 0.9
    assert all(later < earlier for earlier, later in zip(losses, losses[1:]))
    assert losses[-1] < losses[0] - 0.1
    assert mean_cosine() < start_cos - 0.2


# ----------------------------------------------------------------------------------------------
# layer placement


def tagged_hidden_states(num_blocks, tokens=5, features=6):
    """``L + 1`` hidden states whose first entry is the layer index, the rest random (float64, so
    that the stacked call and the per-layer calls agree to float64 rounding)."""
    gen = torch.Generator().manual_seed(num_blocks)
    states = []
    for index in range(num_blocks + 1):
        h = torch.randn(2, tokens, features, generator=gen, dtype=torch.float64)
        h[0, 0, 0] = index
        states.append(h)
    return tuple(states)


@pytest.mark.parametrize(
    "num_blocks,placement,expected",
    [
        (5, "all", [1, 2, 3, 4, 5]),
        (5, "last", [5]),
        (5, "early_half", [1, 2]),
        (5, "late_half", [3, 4, 5]),
        (4, "early_half", [1, 2]),
        (4, "late_half", [3, 4]),
        (1, "all", [1]),
        (1, "late_half", [1]),
    ],
)
def test_select_layers(num_blocks, placement, expected):
    states = tagged_hidden_states(num_blocks)
    assert [int(h[0, 0, 0]) for h in select_layers(states, placement)] == expected
    config = AuxLossConfig("dispersion", placement=placement)
    want = torch.stack([layer_loss(states[i], config) for i in expected]).mean()
    torch.testing.assert_close(auxiliary_loss(states, config), want, rtol=1e-12, atol=1e-14)


def test_placements_give_different_losses():
    # guards the test above: the per-layer losses are distinguishable, so a wrong layer shows
    states = tagged_hidden_states(5)
    values = {p: auxiliary_loss(states, AuxLossConfig("dispersion", placement=p)).item()
              for p in ("all", "last", "early_half", "late_half")}
    assert len(set(values.values())) == 4


def test_auxiliary_loss_runs_the_selected_layers_in_one_dispersion_call(monkeypatch):
    calls = []
    original = losses_module.dispersion_tiled_layers
    monkeypatch.setattr(losses_module, "dispersion_tiled_layers",
                        lambda layers, *args, **kwargs: calls.append(len(layers)) or original(layers, *args, **kwargs))
    states = tagged_hidden_states(5)
    auxiliary_loss(states, AuxLossConfig("dispersion", placement="late_half"))
    assert calls == [3]


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_auxiliary_loss_subsamples_each_layer_as_layer_loss_does(name):
    # the stacked call (dispersion) and the per-layer calls (the others) see the same subsets: one
    # draw per layer from the generator, in layer order; value and gradient equal the per-layer mean
    states = tuple(random_hidden(tokens=9, features=6, seed=seed) for seed in range(4))
    config = AuxLossConfig(name, max_tokens=5)

    def per_layer(*layers):
        gen = torch.Generator().manual_seed(3)
        return torch.stack([layer_loss(z, config, gen) for z in layers[1:]]).mean()

    def together(*layers):
        return auxiliary_loss(layers, config, torch.Generator().manual_seed(3))

    inputs = [z.clone().requires_grad_(True) for z in states]
    value, ref_value = together(*inputs), per_layer(*inputs)
    torch.testing.assert_close(value, ref_value, rtol=1e-12, atol=1e-14)
    for grad, ref_grad in zip(torch.autograd.grad(value, inputs[1:]), torch.autograd.grad(ref_value, inputs[1:]),
                              strict=True):
        torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-14)
        assert 0 < (grad != 0).any(dim=-1).sum() <= 2 * 5  # only the 5 sampled of 9 positions per sequence


def test_auxiliary_loss_takes_layers_of_different_shapes_one_by_one():
    # not what a HF model returns, but still the mean of the layer losses: one call each
    states = (random_hidden(tokens=6), random_hidden(tokens=6, seed=1), random_hidden(tokens=8, features=5, seed=2))
    config = AuxLossConfig("dispersion")
    want = torch.stack([layer_loss(z, config) for z in states[1:]]).mean()
    torch.testing.assert_close(auxiliary_loss(states, config), want, rtol=0, atol=0)


def test_select_layers_rejects_impossible_requests():
    with pytest.raises(ValueError, match="early_half"):
        select_layers(tagged_hidden_states(1), "early_half")
    with pytest.raises(ValueError, match="at least one block"):
        select_layers(tagged_hidden_states(0), "all")
    with pytest.raises(ValueError, match="'middle'"):
        select_layers(tagged_hidden_states(3), "middle")


# ----------------------------------------------------------------------------------------------
# token subsampling


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_max_tokens_at_least_t_is_exact(name):
    z = random_hidden(tokens=6, dtype=torch.float32)
    full = layer_loss(z, AuxLossConfig(name))
    for max_tokens in (6, 10):
        gen = torch.Generator().manual_seed(0)
        state = gen.get_state()
        assert layer_loss(z, AuxLossConfig(name, max_tokens=max_tokens), gen).item() == full.item()
        assert torch.equal(gen.get_state(), state)  # no random draw when nothing is dropped


def test_subsample_tokens_picks_shared_positions():
    z = torch.arange(2 * 10 * 3, dtype=torch.float32).reshape(2, 10, 3)
    out = subsample_tokens(z, 4, torch.Generator().manual_seed(0))
    assert out.shape == (2, 4, 3)
    positions = [int(row[0]) // 3 for row in out[0]]
    assert len(set(positions)) == 4 and positions == sorted(positions)
    torch.testing.assert_close(out, z[:, positions])  # same positions in every sequence


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_max_tokens_below_t_uses_that_many_tokens(name):
    z = random_hidden(tokens=7, features=6, seed=11)
    config = AuxLossConfig(name, max_tokens=4)
    values = set()
    for seed in range(4):
        value = layer_loss(z, config, torch.Generator().manual_seed(seed))
        subset = subsample_tokens(z, 4, torch.Generator().manual_seed(seed))
        assert subset.shape[1] == 4
        torch.testing.assert_close(value, reference_layer_loss(subset, config), rtol=1e-10, atol=1e-12)
        values.add(round(value.item(), 12))
    assert len(values) > 1  # different draws, different subsets
    assert layer_loss(z, AuxLossConfig(name)).item() not in values


# ----------------------------------------------------------------------------------------------
# input and config validation


@pytest.mark.parametrize("shape", [(2, 1, 4), (2, 0, 4)])
def test_fewer_than_two_tokens_raises(shape):
    with pytest.raises(ValueError, match=f"T={shape[1]}"):
        layer_loss(torch.randn(shape), AuxLossConfig("dispersion"))


def test_non_3d_or_integer_hidden_states_raise():
    with pytest.raises(ValueError, match="B, T, F"):
        layer_loss(torch.randn(5, 4), AuxLossConfig("dispersion"))
    with pytest.raises(ValueError, match="floating point"):
        layer_loss(torch.ones(2, 5, 4, dtype=torch.long), AuxLossConfig("dispersion"))


@pytest.mark.parametrize(
    "kwargs,shown",
    [
        ({"name": "dispersal"}, "'dispersal'"),
        ({"placement": "middle"}, "'middle'"),
        ({"tau": 0.0}, "tau.*0.0"),
        ({"tau": -1.0}, "tau.*-1.0"),
        ({"tau": float("nan")}, "tau.*nan"),
        ({"weight": -0.1}, "weight.*-0.1"),
        ({"clamp": 0.0}, "clamp.*0.0"),
        ({"clamp": 1.0}, "clamp.*1.0"),
        ({"max_tokens": 1}, "max_tokens.*1"),
        ({"max_tokens": True}, "max_tokens.*True"),
        ({"max_tokens": 2.5}, "max_tokens.*2.5"),
        ({"norm_weight": -1.0}, "norm_weight.*-1.0"),
        ({"margin": 0.0}, "margin.*0.0"),
        ({"margin": 1.5}, "margin.*1.5"),
        ({"kernel": "flash"}, "kernel 'flash'.*auto, eager, compiled, triton"),
        ({"products": "tf32"}, "products 'tf32'.*float32, bfloat16"),
    ],
)
def test_invalid_config_raises(kwargs, shown):
    name = "l2_repel" if "norm_weight" in kwargs else "orthogonalization" if "margin" in kwargs else "dispersion"
    kwargs = {"name": name, **kwargs}
    with pytest.raises(ValueError, match=shown):
        AuxLossConfig(**kwargs)


def test_unknown_name_lists_allowed_names():
    with pytest.raises(ValueError) as info:
        AuxLossConfig("dispersal")
    assert all(name in str(info.value) for name in LOSS_NAMES)


def test_valid_edge_configs_construct():
    AuxLossConfig("orthogonalization", margin=1.0, weight=0.0, max_tokens=2)
    AuxLossConfig("l2_repel", norm_weight=0.0, tau=1e-3)
    assert AuxLossConfig("dispersion").kernel == "auto"
    AuxLossConfig("dispersion", kernel="compiled")
    assert AuxLossConfig("dispersion").products == "float32"
    AuxLossConfig("dispersion", products="bfloat16")
