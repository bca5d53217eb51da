"""Tiled dispersion loss: same value and gradient as the dense formula, and no [B, T, T] kept for backward."""

from __future__ import annotations

import math
import os
import shutil

import pytest
import torch

from condensation.config.objectives import AuxLossConfig
from condensation.training import kernels, losses, operands
from condensation.training.kernels import dispersion_tiled, dispersion_tiled_layers
from condensation.training.losses import (
    _dispersion_dense,
    layer_loss,
    reference_layer_loss,
)
from tests.helpers.float_bounds import cosine_bound, gamma

CLAMP = AuxLossConfig("dispersion").clamp


def hidden(batch, tokens, features, seed=0, spread=1.0, dtype=torch.float64):
    """Tokens around a shared direction (as in a condensed layer), so cosines are mostly positive
    and the softmax weights differ from pair to pair; ``spread`` sets how far apart they are."""
    gen = torch.Generator().manual_seed(seed)
    shared = torch.randn(features, generator=gen, dtype=torch.float64)
    z = shared + spread * torch.randn(batch, tokens, features, generator=gen, dtype=torch.float64)
    return z.to(dtype)


def value_and_grad(fn, z, upstream=None):
    z = z.detach().clone().requires_grad_(True)
    value = fn(z)
    (grad,) = torch.autograd.grad(value, z, grad_outputs=upstream)
    return value.detach(), grad


def dense(tau, clamp=CLAMP):
    return lambda z: _dispersion_dense(z.to(torch.promote_types(z.dtype, torch.float32)),
                                       AuxLossConfig("dispersion", tau=tau, clamp=clamp))


def tiled(tau, tile, clamp=CLAMP, kernel="auto"):
    return lambda z: dispersion_tiled(z, tau, clamp, tile=tile, kernel=kernel)


def assert_same_as_dense(z, tau, tile, rtol=1e-10, atol=1e-12, grad_rtol=1e-8, grad_atol=1e-10, clamp=CLAMP,
                         min_grad=1e-4, kernel="auto"):
    value, grad = value_and_grad(tiled(tau, tile, clamp, kernel), z)
    ref_value, ref_grad = value_and_grad(dense(tau, clamp), z)
    assert value.shape == () and value.dtype == ref_value.dtype
    torch.testing.assert_close(value, ref_value, rtol=rtol, atol=atol)
    torch.testing.assert_close(grad, ref_grad, rtol=grad_rtol, atol=grad_atol)
    assert ref_grad.abs().max() > min_grad  # not a comparison between two zeros
    return value, grad


# ----------------------------------------------------------------------------------------------
# equal to the dense formula


@pytest.mark.parametrize(
    "batch,tokens,features,tile",
    [
        (1, 2, 4, 128),  # T = 2: one pair, tile > T
        (3, 37, 16, 8),  # T not divisible by the tile; last tile has 5 rows
        (2, 64, 8, 16),  # T a multiple of the tile
        (2, 10, 6, 64),  # tile > T: one tile, no off-diagonal block
        (2, 9, 5, 1),  # one row per tile; the last tile holds no pair at all
        (4, 33, 12, 32),  # last tile is a single row
    ],
)
@pytest.mark.parametrize("tau", [0.7, 0.1])
def test_matches_dense_float64(batch, tokens, features, tile, tau):
    assert_same_as_dense(hidden(batch, tokens, features, seed=tokens), tau, tile)


def test_matches_loop_reference():
    # the dense formula is itself checked against this reference in test_losses; checked directly
    # here too, so that a shared mistake in the two vectorised paths would still show
    config = AuxLossConfig("dispersion", tau=0.7)
    z = hidden(2, 7, 6, seed=3)
    value, grad = value_and_grad(tiled(config.tau, tile=3), z)
    ref_value, ref_grad = value_and_grad(lambda x: reference_layer_loss(x, config), z)
    torch.testing.assert_close(value, ref_value, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-8, atol=1e-10)


def test_tile_size_does_not_change_the_result():
    z = hidden(2, 50, 8, seed=5)
    results = [value_and_grad(tiled(0.5, tile), z) for tile in (1, 7, 16, 50, 256)]
    for value, grad in results[1:]:
        torch.testing.assert_close(value, results[0][0], rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(grad, results[0][1], rtol=1e-10, atol=1e-12)


def test_running_maximum_grows_in_a_later_tile():
    # the closest pair sits in the last tile's diagonal block, so the running maximum of the
    # logits rises there and everything summed before must be rescaled; a kernel that kept the
    # first tile's maximum, or forgot to rescale the gradient, would differ from the dense formula
    z = hidden(2, 24, 8, seed=20, spread=3.0)
    z[:, 22] = z[:, 23] + 1e-2 * torch.randn(2, 8, generator=torch.Generator().manual_seed(21), dtype=torch.float64)
    cos = losses.cosine_matrix(z)
    first_tile_max = (cos[:, :6, 6:].max() * 1.0).item()  # columns right of tile 0's diagonal block
    assert cos[:, 22, 23].min().item() > first_tile_max + 0.1
    # with small tau the rescale factor is far from 1, so a missing rescale is not a rounding error
    assert_same_as_dense(z, 0.05, tile=6)


def test_sequences_are_independent_and_averaged():
    # mean over B of each sequence's loss; a kernel that mixed tokens across sequences would differ
    z = hidden(3, 12, 8, seed=6)
    alone = torch.stack([dispersion_tiled(z[b : b + 1], 0.5, CLAMP, tile=5) for b in range(3)])
    torch.testing.assert_close(dispersion_tiled(z, 0.5, CLAMP, tile=5), alone.mean(), rtol=1e-12, atol=1e-14)
    assert alone.std() > 1e-3  # the sequences' losses differ, so a wrong pairing would show


def test_upstream_gradient_scales_the_gradient():
    z = hidden(2, 11, 6, seed=7)
    _, grad = value_and_grad(tiled(0.5, 4), z)
    _, scaled = value_and_grad(tiled(0.5, 4), z, upstream=torch.tensor(-2.5, dtype=torch.float64))
    torch.testing.assert_close(scaled, -2.5 * grad, rtol=1e-12, atol=1e-14)


def test_gradcheck_float64():
    z = hidden(2, 7, 5, seed=8).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: dispersion_tiled(x, 0.7, CLAMP, tile=3), (z,))


# ----------------------------------------------------------------------------------------------
# degenerate inputs


def test_zero_vector_token():
    # a zero token has cosine 0 with everything; its gradient is g / eps (the floored norm), as in
    # the dense formula, and every other token's gradient is unaffected by NaN
    z = hidden(2, 9, 6, seed=9)
    z[0, 3] = 0.0
    z[1, 0] = 0.0
    _, grad = assert_same_as_dense(z, 0.7, tile=4, grad_rtol=1e-8, grad_atol=1e-6)
    assert torch.isfinite(grad).all()
    assert grad[0, 3].abs().max() > 1.0  # the 1/eps factor: a projected or zeroed gradient would be small


def test_token_below_the_norm_floor():
    # 0 < ||z_i|| < eps: the norm is the constant eps there, so the gradient is g / eps with no
    # radial projection (zn_i has norm 1/2 here, so projecting it out would change the gradient)
    z = hidden(2, 9, 6, seed=17)
    z[0, 2] = z[0, 2] / z[0, 2].norm() * 0.5 * losses.NORM_EPS
    _, grad = assert_same_as_dense(z, 0.7, tile=4, grad_rtol=1e-8, grad_atol=1e-6)
    assert grad[0, 2].abs().max() > 1.0


def test_near_identical_tokens_clamp_active():
    # every cosine above 1 - clamp: the forward value is the clamped floor and the gradient is
    # arccos' slope at the clamp (straight-through), exactly as in the dense formula; the gradient
    # is small (equal weights, radial part projected out), so the tolerance is absolute and tight
    z = hidden(2, 12, 8, seed=10, spread=1e-3)
    off = ~torch.eye(12, dtype=torch.bool)
    assert losses.cosine_matrix(z)[:, off].min() > 1 - CLAMP
    value, grad = assert_same_as_dense(z, 0.7, tile=5, grad_rtol=1e-6, grad_atol=1e-12, min_grad=1e-5)
    floor = math.acos(1 - CLAMP) / math.pi
    assert value.item() == pytest.approx(-floor / 0.7, abs=1e-9)
    # mixed: half the tokens condensed (clamp active), half spread out
    mixed = torch.cat([hidden(2, 6, 8, seed=11, spread=1e-4), hidden(2, 6, 8, seed=12)], dim=1)
    assert (losses.cosine_matrix(mixed)[:, :6, :6][:, off[:6, :6]] > 1 - CLAMP).all()
    assert_same_as_dense(mixed, 0.7, tile=5, grad_rtol=1e-6, grad_atol=1e-12)


def test_identical_tokens_float32():
    z = torch.randn(8, generator=torch.Generator().manual_seed(1)).expand(2, 5, 8).clone()
    value, grad = value_and_grad(tiled(1.0, 2), z)
    assert value.item() == pytest.approx(-math.acos(1 - CLAMP) / math.pi, abs=1e-5)
    assert torch.isfinite(grad).all() and grad.abs().max() < 1e-4  # radial part projected out


@pytest.mark.parametrize("tau,spread", [(0.1, 2.0), (0.01, 2.0), (0.002, 10.0)])
def test_small_tau_float32_is_stable(tau, spread):
    # logits -D/tau down to -1/tau; with tau = 0.002 and spread-out tokens (D ~ 1/2) every exp(-D/tau)
    # underflows to 0 in float32, so only a max-shifted logsumexp gives a finite loss
    z = hidden(2, 40, 16, seed=13, spread=spread)
    value, grad = value_and_grad(tiled(tau, 16), z.float())
    ref_value, ref_grad = value_and_grad(dense(tau), z)
    assert value.dtype == torch.float32 and grad.dtype == torch.float32
    assert torch.isfinite(value) and torch.isfinite(grad).all()
    torch.testing.assert_close(value.double(), ref_value, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad.double(), ref_grad, rtol=1e-3, atol=1e-4 * ref_grad.abs().max().item())


def test_float32_matches_float64_dense():
    z = hidden(3, 70, 32, seed=14)
    value, grad = value_and_grad(tiled(0.5, 16), z.float())
    ref_value, ref_grad = value_and_grad(dense(0.5), z)
    torch.testing.assert_close(value.double(), ref_value, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad.double(), ref_grad, rtol=1e-3, atol=1e-5 * ref_grad.abs().max().item())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_input_is_upcast(dtype):
    z = hidden(2, 20, 16, seed=15, dtype=dtype)
    value, grad = value_and_grad(tiled(0.5, 8), z)
    assert value.dtype == torch.float32 and grad.dtype == dtype
    torch.testing.assert_close(value, dispersion_tiled(z.float(), 0.5, CLAMP, tile=8), rtol=0, atol=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # would run the tile matmuls in bf16
        under_autocast, grad_autocast = value_and_grad(tiled(0.5, 8), z.float())
    _, grad_plain = value_and_grad(tiled(0.5, 8), z.float())
    assert under_autocast.dtype == torch.float32
    # autocast switched off inside: the same float32 computation as without it, bit-identical
    torch.testing.assert_close(under_autocast, value, rtol=0, atol=0)
    torch.testing.assert_close(grad_autocast, grad_plain, rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------
# memory: nothing [B, T, T] kept for backward


def saved_tensors_of(fn, z):
    """Shapes and total bytes (distinct storages) of what autograd saves for backward during fn(z)."""
    shapes, storages = [], {}

    def pack(tensor):
        shapes.append(tuple(tensor.shape))
        storage = tensor.untyped_storage()
        # keyed by address, and kept alive so that no address is freed and reused within one call
        storages[storage.data_ptr()] = storage
        return tensor

    z = z.detach().clone().requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        value = fn(z)
    value.backward()  # the saved tensors are still enough for a backward
    return shapes, sum(storage.nbytes() for storage in storages.values())


@pytest.mark.parametrize("tile", [16, 256])
def test_saves_no_pairwise_tensor(tile):
    batch, tokens, features = 2, 96, 8  # T >> F, so O(B T F) and O(B T^2) are far apart
    z = hidden(batch, tokens, features, dtype=torch.float32)
    shapes, nbytes = saved_tensors_of(tiled(0.5, tile), z)
    assert all(math.prod(shape) <= batch * tokens * features for shape in shapes), shapes
    assert nbytes <= 4 * batch * tokens * features + 1024  # the gradient, the size of z
    # the same probe on the dense formula finds the [B, T, T] tensors: the check can fail
    dense_shapes, dense_bytes = saved_tensors_of(dense(0.5), z)
    assert (batch, tokens, tokens) in dense_shapes
    assert dense_bytes > 2 * 4 * batch * tokens * tokens  # at least two float32 [B, T, T]


def test_low_precision_input_saves_a_low_precision_gradient():
    # for a bf16 z the gradient is kept in bf16, not as a float32 copy (twice the bytes)
    z = hidden(2, 32, 8, dtype=torch.bfloat16)
    shapes, nbytes = saved_tensors_of(tiled(0.5, 8), z)
    assert shapes == [(2, 32, 8)] and nbytes == 2 * 2 * 32 * 8


def test_no_gradient_work_without_grad():
    # under no_grad (validation) nothing is saved, and the value is the same as with a gradient
    z = hidden(2, 40, 8, seed=19, dtype=torch.float32).requires_grad_(True)
    saved = []
    with torch.no_grad(), torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        value = dispersion_tiled(z, 0.5, CLAMP, tile=16)
    assert value.grad_fn is None and saved == []
    torch.testing.assert_close(value, dispersion_tiled(z, 0.5, CLAMP, tile=16).detach(), rtol=0, atol=0)


def test_non_contiguous_input():
    base = hidden(13, 3, 8, seed=18)
    z = base.transpose(0, 1)  # [3, 13, 8] view with a non-standard layout
    assert not z.is_contiguous()
    assert_same_as_dense(z, 0.7, tile=4)


def test_saved_bytes_grow_linearly_in_t():
    batch, features = 2, 8
    sizes = {t: saved_tensors_of(tiled(0.5, 32), hidden(batch, t, features, dtype=torch.float32))[1] for t in (64, 256)}
    dense_sizes = {t: saved_tensors_of(dense(0.5), hidden(batch, t, features, dtype=torch.float32))[1]
                   for t in (64, 256)}
    assert sizes[256] / sizes[64] < 4.5  # linear: x4 (plus the constant per-sequence scalars)
    assert dense_sizes[256] / dense_sizes[64] > 12  # quadratic: the dense formula, x16 less its O(T) part


# ----------------------------------------------------------------------------------------------
# several layers in one call: the mean of the per-layer losses


def layers_of(count, batch, tokens, features, dtype=torch.float64):
    """``count`` layers of one shape, each condensed to its own degree (distinct losses)."""
    return [hidden(batch, tokens, features, seed=30 + index, spread=0.5 + index, dtype=dtype) for index in range(count)]


def stacked_and_per_layer(layers, tau, tile, kernel="auto", products="float32"):
    """``(value, grads)`` of one call with the layers stacked in one tile loop, and of the mean of
    one call per layer."""
    def run(fn):
        inputs = [z.detach().clone().requires_grad_(True) for z in layers]
        value = fn(inputs)
        return value.detach(), torch.autograd.grad(value, inputs)

    stacked = run(lambda zs: dispersion_tiled_layers(zs, tau, CLAMP, tile=tile, kernel=kernel, products=products,
                                                     stacked=True))
    per_layer = run(lambda zs: torch.stack([dispersion_tiled(z, tau, CLAMP, tile=tile, kernel=kernel,
                                                             products=products) for z in zs]).mean())
    return stacked, per_layer


@pytest.mark.parametrize("count,tile", [(3, 8), (2, 64), (4, 1)])
def test_stacked_layers_equal_the_mean_of_per_layer_calls_float64(count, tile):
    layers = layers_of(count, 2, 37, 16)
    (value, grads), (ref_value, ref_grads) = stacked_and_per_layer(layers, 0.3, tile)
    torch.testing.assert_close(value, ref_value, rtol=1e-12, atol=1e-14)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-14)
    # and the dense formula, layer by layer: a mixing of sequences or layers would show here
    dense_mean = torch.stack([dense(0.3)(z) for z in layers]).mean()
    torch.testing.assert_close(value, dense_mean, rtol=1e-10, atol=1e-12)
    losses_per_layer = torch.stack([dense(0.3)(z) for z in layers])
    assert losses_per_layer.std() > 1e-2  # the layers' losses differ, so a wrong mean would show


def test_stacked_layers_float32_within_rounding():
    # The two differ in rounding only: the order of the products' sums (a batch of L B matrices or
    # of B), of the means (L B values at once, or L means of B) and the gradient's scale (1 / (L B)
    # at once, or 1 / B then the mean's 1 / L). Each is within a bound from the sizes of the exact
    # values (float_bounds; Higham), whatever the order, so the two are within twice that.
    count, batch, tokens, features, tau, tile = 3, 2, 40, 16, 0.5, 16
    layers = layers_of(count, batch, tokens, features, dtype=torch.float32)
    (value, grads), (ref_value, ref_grads) = stacked_and_per_layer(layers, tau, tile)
    slope = 1 / math.sqrt(CLAMP * (2 - CLAMP))  # arccos' largest slope, at the clamp
    cos_error = cosine_bound(features)
    # a logit -arccos(c) / (pi tau): the cosine's error through arccos, arccos' and the scale's roundings
    logit_error = (slope * cos_error + gamma(3) * math.pi) / (math.pi * tau)
    # a sequence's logsumexp: its logits', and the exponentials', sums', rescales' and log's roundings
    pairs, tiles = tokens * (tokens - 1) // 2, math.ceil(tokens / tile)
    exact = [dense(tau)(z.double()[b : b + 1]) for z in layers for b in range(batch)]
    largest = max(abs(loss.item()) for loss in exact) + math.log(tokens * (tokens - 1))
    lse_error = logit_error + gamma(pairs + 2 * tiles + 4) + gamma(2) * largest
    value_bound = 2 * lse_error + (gamma(count * batch + 1) + gamma(batch + 1) + gamma(count + 1)) * largest
    assert (value - ref_value).abs().item() <= value_bound
    # the gradient: each G_ij = dL/dc_ij (softmax weight times arccos' slope) is within r of itself
    # relatively (the logit and logsumexp errors in the weight, the slope's change with the cosine,
    # c s^3 dc, and a few roundings); row i's sum over j of G zn_j adds its T terms' and the unit
    # rows' roundings, so it is within (r + gamma(T + 2) + gamma(F + 2)) A_i of the exact row in
    # 2-norm, A_i = sum_j |G_ij| + |G_ji| (unit rows); the radial projection (norm 1) adds its dot
    # product's gamma(F + 4) A_i, and the division by ||z_i|| one rounding
    relative = (logit_error + lse_error + slope**2 * cos_error + gamma(16) + gamma(tokens + 2)
                + gamma(features + 2) + gamma(features + 5))
    for z, grad, ref_grad in zip(layers, grads, ref_grads, strict=True):
        cos = losses.cosine_matrix(z.double()).requires_grad_(True)
        loss = losses._log_mean_exp_offdiag(-losses.angular_distance(cos, CLAMP) / tau).mean() / count
        (grad_cos,) = torch.autograd.grad(loss, cos)
        weight = (grad_cos.abs() + grad_cos.abs().mT).sum(-1, keepdim=True) / z.double().norm(dim=-1, keepdim=True)
        assert ((grad - ref_grad).abs().double() <= 2 * relative * weight).all()
        # tight enough to see a wrong scale (1 / L missing: x3) or a layer's rows swapped
        assert (2 * relative * weight).max() < 0.05 * ref_grad.abs().max()


@pytest.mark.parametrize("stacked,kept", [(True, [(6, 32, 8)]), (False, [(2, 32, 8)] * 3)])
def test_layers_in_one_call_keep_their_gradient_in_their_dtype(stacked, kept):
    # what autograd keeps is the gradient of all layers, in their dtype, nothing of size T^2:
    # stacked, one tensor for all; one loop per layer, one each
    layers = layers_of(3, 2, 32, 8, dtype=torch.bfloat16)
    saved = []
    inputs = [z.detach().clone().requires_grad_(True) for z in layers]
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        value = dispersion_tiled_layers(inputs, 0.5, CLAMP, tile=8, stacked=stacked)
    assert [(tuple(t.shape), t.dtype) for t in saved] == [(shape, torch.bfloat16) for shape in kept]
    grads = torch.autograd.grad(value, inputs)
    assert [(tuple(g.shape), g.dtype) for g in grads] == [((2, 32, 8), torch.bfloat16)] * 3


def test_one_loop_per_layer_in_one_call_equals_stacked_float64():
    layers = layers_of(3, 2, 37, 16)
    results = []
    for stacked in (True, False):
        inputs = [z.detach().clone().requires_grad_(True) for z in layers]
        value = dispersion_tiled_layers(inputs, 0.3, CLAMP, tile=8, stacked=stacked)
        results.append((value.detach(), torch.autograd.grad(value, inputs)))
    (value, grads), (ref_value, ref_grads) = results
    torch.testing.assert_close(value, ref_value, rtol=1e-12, atol=1e-14)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-14)


def test_layers_are_stacked_on_cuda_only():
    # measured: on a CPU the stacked blocks leave the caches (slower); on a GPU they save launches
    assert not kernels.stacks_layers(torch.device("cpu"))
    assert kernels.stacks_layers(torch.device("cuda"))


def test_stacked_layers_must_share_a_shape():
    with pytest.raises(ValueError, match="one shape, dtype and device"):
        dispersion_tiled_layers([hidden(2, 8, 4), hidden(2, 9, 4)], 1.0, CLAMP)
    with pytest.raises(ValueError, match="one shape, dtype and device"):
        dispersion_tiled_layers([hidden(2, 8, 4), hidden(2, 8, 4, dtype=torch.float32)], 1.0, CLAMP)
    with pytest.raises(ValueError, match="at least one layer"):
        dispersion_tiled_layers([], 1.0, CLAMP)


# ----------------------------------------------------------------------------------------------
# bf16 products (AuxLossConfig.products): error against the float64 formula


def condensed_states(batch, tokens, features, shared, seed=0):
    """Hidden states of a condensed layer: every token is ``shared`` times a common direction (of
    the tokens' own scale) plus its own Gaussian part, so that the mean cosine is about
    ``shared^2 / (1 + shared^2)`` (0.5, 0.74, 0.9 for 1, 1.7, 3)."""
    gen = torch.Generator().manual_seed(seed)
    common = torch.randn(features, generator=gen, dtype=torch.float64)
    common = common / common.norm() * math.sqrt(features)
    return shared * common + torch.randn(batch, tokens, features, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("shared,mean_cosine", [(1.0, 0.5), (1.7, 0.74), (3.0, 0.9)])
@pytest.mark.parametrize("tau", [1.0, 0.1])
def test_bfloat16_products_error_on_condensed_states(shared, mean_cosine, tau):
    # the bounds: loss within 1e-6 of the float64 formula, gradient within 2e-3 relative
    # (Frobenius norm); measured 1e-8..3.2e-7 and 2.6e-4..3.9e-4 (one bf16 product for the
    # cosines instead of the three: up to 4e-5 in the loss, so the split is what meets it)
    z = condensed_states(4, 256, 768, shared)
    off = ~torch.eye(256, dtype=torch.bool)
    assert losses.cosine_matrix(z)[:, off].mean().item() == pytest.approx(mean_cosine, abs=0.02)
    ref_value, ref_grad = value_and_grad(dense(tau), z)
    value, grad = value_and_grad(lambda x: dispersion_tiled(x, tau, CLAMP, products="bfloat16"), z.float())
    assert value.dtype == torch.float32 and grad.dtype == torch.float32
    assert abs(value.item() - ref_value.item()) <= 1e-6
    assert ((grad.double() - ref_grad).norm() / ref_grad.norm()).item() <= 2e-3
    # and the bf16 products are in use: float32 products are ~1000x closer in the gradient
    _, grad_float32 = value_and_grad(lambda x: dispersion_tiled(x, tau, CLAMP), z.float())
    assert (grad_float32.double() - ref_grad).norm() < 0.1 * (grad.double() - ref_grad).norm()


def test_bfloat16_products_float64_and_stacked():
    # float64 states keep float64 sums with bf16-rounded operands (the same rounding, testable in
    # float64); stacked and per-layer calls agree as with float32 products
    layers = layers_of(3, 2, 37, 16)
    (value, grads), (ref_value, ref_grads) = stacked_and_per_layer(layers, 0.3, 8, products="bfloat16")
    assert value.dtype == torch.float64
    torch.testing.assert_close(value, ref_value, rtol=1e-12, atol=1e-14)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-14)
    exact = torch.stack([dense(0.3)(z) for z in layers]).mean()
    assert 0 < abs(value.item() - exact.item()) < 1e-5  # rounded operands: close, not equal


def test_float32_products_are_the_default_and_unchanged():
    z = hidden(2, 30, 8, seed=22, dtype=torch.float32)
    value, grad = value_and_grad(tiled(0.5, 8), z)
    explicit, explicit_grad = value_and_grad(lambda x: dispersion_tiled(x, 0.5, CLAMP, tile=8, products="float32"), z)
    torch.testing.assert_close(explicit, value, rtol=0, atol=0)
    torch.testing.assert_close(explicit_grad, grad, rtol=0, atol=0)
    zn = torch.ones(1, 2, 3)
    assert operands.product_operands(zn, "float32") == (zn, None)  # the products take the unit rows themselves
    assert AuxLossConfig("dispersion").products == "float32"


def test_layer_loss_passes_the_products_setting():
    z = hidden(2, 30, 8, seed=23, dtype=torch.float32)
    config = AuxLossConfig("dispersion", products="bfloat16")
    direct = dispersion_tiled(z, config.tau, config.clamp, products="bfloat16")
    torch.testing.assert_close(layer_loss(z, config), direct, rtol=0, atol=0)
    assert layer_loss(z, config).item() != layer_loss(z, AuxLossConfig("dispersion")).item()


def test_unknown_products_raise():
    with pytest.raises(ValueError, match="'fp8'.*float32, bfloat16"):
        dispersion_tiled(hidden(1, 4, 3), 1.0, CLAMP, products="fp8")


# ----------------------------------------------------------------------------------------------
# wiring and validation


def test_layer_loss_uses_the_tiled_kernel(monkeypatch):
    calls = []

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return dispersion_tiled(*args, **kwargs)

    monkeypatch.setattr(losses, "dispersion_tiled", spy)
    z = hidden(2, 6, 4)
    layer_loss(z, AuxLossConfig("dispersion"))
    assert calls == [(2, 6, 4)]


@pytest.mark.parametrize("kernel", ["eager", "compiled"])
def test_layer_loss_passes_the_kernel_setting(monkeypatch, kernel):
    seen = []
    monkeypatch.setattr(kernels, "tile_step",
                        lambda name, device: seen.append((name, device.type)) or kernels._tile_step)
    layer_loss(hidden(2, 6, 4), AuxLossConfig("dispersion", kernel=kernel))
    assert seen == [(kernel, "cpu")]


def test_kernel_dispatch():
    cpu = torch.device("cpu")
    assert kernels.tile_step("eager", cpu) is kernels._tile_step
    assert kernels.tile_step("auto", cpu) is kernels._tile_step  # measured: compiling does not pay on CPU
    compiled = kernels.tile_step("compiled", cpu)  # torch.compile is lazy: nothing is compiled yet
    assert compiled is not kernels._tile_step and compiled is kernels.tile_step("compiled", cpu)  # built once


def test_unknown_kernel_raises():
    with pytest.raises(ValueError, match="'flash'.*auto, eager, compiled"):
        dispersion_tiled(hidden(1, 4, 3), 1.0, CLAMP, kernel="flash")
    with pytest.raises(ValueError, match="tile body 'triton'"):  # the fused kernels are no tile body
        kernels.tile_step("triton", torch.device("cpu"))


@pytest.mark.parametrize("tile", [0, -3, 2.5, True])
def test_invalid_tile_raises(tile):
    with pytest.raises(ValueError, match="tile"):
        dispersion_tiled(hidden(1, 4, 3), 1.0, CLAMP, tile=tile)


@pytest.mark.parametrize("shape", [(2, 1, 4), (4, 3)])
def test_invalid_shape_raises(shape):
    with pytest.raises(ValueError):
        dispersion_tiled(torch.randn(shape), 1.0, CLAMP)


# ----------------------------------------------------------------------------------------------
# the compiled tile body (torch.compile of the same function: C++ on CPU), against the dense formula.
# Shapes are chosen so that every case reuses a few graphs (first, middle and last tile, and one
# single-tile graph, per dtype): no tile edge one token before the end, where a size-1 dimension
# would be compiled apart. Compiling them takes about a minute on two cores.

needs_compiler = pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "c++")) is None or not torch._dynamo.is_dynamo_supported(),
    reason="torch.compile on CPU needs a C++ compiler and a Python that dynamo supports",
)


def compiled_graphs() -> int:
    """Graphs dynamo holds for the tile body; an eager call adds none."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return len(_debug_get_cache_entry_list(kernels._tile_step.__code__))


@needs_compiler
@pytest.mark.slow  # compiles the tile body: about a minute on two cores
@pytest.mark.parametrize(
    "batch,tokens,features,tile",
    [
        (3, 37, 16, 8),  # odd T, not divisible by the tile: the last tile has 5 rows
        (2, 64, 8, 16),  # T a multiple of the tile
        (2, 10, 6, 64),  # tile > T: one tile, nothing right of the diagonal block
    ],
)
def test_compiled_matches_dense_float64(batch, tokens, features, tile):
    # tau 0.7, then 0.1 on the same graphs: tau is a graph input, not a constant baked into the first graph
    for tau in (0.7, 0.1):
        value, grad = assert_same_as_dense(hidden(batch, tokens, features, seed=tokens), tau, tile, kernel="compiled")
        eager_value, eager_grad = value_and_grad(tiled(tau, tile, kernel="eager"),
                                                 hidden(batch, tokens, features, seed=tokens))
        torch.testing.assert_close(value, eager_value, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(grad, eager_grad, rtol=1e-10, atol=1e-13)
    # the compiled path ran (its graphs may come from an earlier case)
    assert 1 <= compiled_graphs() <= kernels.MAX_COMPILED_GRAPHS


@needs_compiler
@pytest.mark.slow  # compiles the tile body: about a minute on two cores
def test_compiled_running_maximum_and_tiny_tau():
    z = hidden(2, 24, 8, seed=20, spread=3.0)
    z[:, 22] = z[:, 23] + 1e-2 * torch.randn(2, 8, generator=torch.Generator().manual_seed(21), dtype=torch.float64)
    assert_same_as_dense(z, 0.05, tile=6, kernel="compiled")


@needs_compiler
@pytest.mark.slow  # compiles the tile body: about a minute on two cores
def test_compiled_degenerate_tokens():
    # zero token and a token below the norm floor (gradient g / eps), clamp-active pairs (straight-through)
    z = hidden(2, 9, 6, seed=9)
    z[0, 3] = 0.0
    z[1, 2] = z[1, 2] / z[1, 2].norm() * 0.5 * losses.NORM_EPS
    _, grad = assert_same_as_dense(z, 0.7, tile=3, grad_rtol=1e-8, grad_atol=1e-6, kernel="compiled")
    assert torch.isfinite(grad).all() and grad[0, 3].abs().max() > 1.0 and grad[1, 2].abs().max() > 1.0
    mixed = torch.cat([hidden(2, 6, 8, seed=11, spread=1e-4), hidden(2, 6, 8, seed=12)], dim=1)
    off = ~torch.eye(6, dtype=torch.bool)
    assert (losses.cosine_matrix(mixed)[:, :6, :6][:, off] > 1 - CLAMP).all()
    assert_same_as_dense(mixed, 0.7, tile=5, grad_rtol=1e-6, grad_atol=1e-12, kernel="compiled")


@needs_compiler
@pytest.mark.slow  # compiles the tile body: about a minute on two cores
@pytest.mark.parametrize("tau,spread", [(0.5, 1.0), (0.002, 10.0)])
def test_compiled_bfloat16_and_float32(tau, spread):
    # bf16 input computes in float32 (the float32 graphs); tau = 0.002: every exp(-D/tau) underflows
    # without the max shift
    z = hidden(2, 40, 16, seed=13, spread=spread)
    for dtype in (torch.bfloat16, torch.float32):
        value, grad = value_and_grad(tiled(tau, 16, kernel="compiled"), z.to(dtype))
        ref_value, ref_grad = value_and_grad(dense(tau), z.to(dtype).double())
        assert value.dtype == torch.float32 and grad.dtype == dtype
        assert torch.isfinite(value) and torch.isfinite(grad).all()
        torch.testing.assert_close(value.double(), ref_value, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(grad.double(), ref_grad, rtol=2e-2 if dtype == torch.bfloat16 else 1e-3,
                                   atol=1e-3 * ref_grad.abs().max().item())
        torch.testing.assert_close(value, dispersion_tiled(z.to(dtype), tau, CLAMP, tile=16, kernel="eager"),
                                   rtol=1e-6, atol=1e-6)


@needs_compiler
@pytest.mark.slow  # compiles the tile body: about a minute on two cores
def test_compiled_without_grad_saves_nothing():
    z = hidden(2, 40, 8, seed=19, dtype=torch.float32).requires_grad_(True)
    saved = []
    with torch.no_grad(), torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        value = dispersion_tiled(z, 0.5, CLAMP, tile=64, kernel="compiled")
    assert value.grad_fn is None and saved == []
    torch.testing.assert_close(value, dispersion_tiled(z, 0.5, CLAMP, tile=64, kernel="eager").detach(),
                               rtol=1e-6, atol=1e-6)


@needs_compiler
@pytest.mark.slow  # compiles the tile body: about a minute on two cores
def test_compiled_stacked_layers_and_bfloat16_products_without_recompiles():
    # dynamic shapes: the three tile graphs (first, middle, last) of a configuration serve every
    # number of layers, batch, T and F, so the stacked call recompiles nothing from step to step
    # or when the placement changes how many layers are stacked (checked with TORCH_LOGS=recompiles:
    # the only guards that fail are the first tile's, the last tile's and the operands' dtype)
    layers = layers_of(3, 2, 40, 16, dtype=torch.float32)
    for products in ("float32", "bfloat16"):
        (value, grads), (eager_value, eager_grads) = (
            stacked_and_per_layer(layers, 0.5, 16, kernel=kernel, products=products)[0]
            for kernel in ("compiled", "eager"))
        torch.testing.assert_close(value, eager_value, rtol=1e-6, atol=1e-6)
        # bf16: the fused body's float32 rounding can tip a product operand's bf16 rounding (2^-8 of it)
        grad_atol = (2**-8 if products == "bfloat16" else 1e-5)
        for grad, eager_grad in zip(grads, eager_grads, strict=True):
            torch.testing.assert_close(grad, eager_grad, rtol=1e-4, atol=grad_atol * eager_grad.abs().max().item())
        graphs = compiled_graphs()
        for count, batch, tokens, features in ((3, 2, 40, 16), (2, 3, 56, 24), (1, 4, 72, 8)):
            stacked_and_per_layer(layers_of(count, batch, tokens, features, dtype=torch.float32), 0.5, 16,
                                  kernel="compiled", products=products)
        assert compiled_graphs() == graphs  # nothing compiled anew
    assert compiled_graphs() <= kernels.MAX_COMPILED_GRAPHS


# ----------------------------------------------------------------------------------------------
# CUDA: the same code on the GPU, also under bf16 autocast


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_dense():
    z = hidden(2, 300, 64, seed=16, dtype=torch.float32).cuda()
    for tile in (64, 256):
        value, grad = value_and_grad(tiled(0.5, tile), z)
        ref_value, ref_grad = value_and_grad(dense(0.5), z)
        assert value.is_cuda and grad.is_cuda
        # TF32 may be on for matmuls; tolerances cover it
        torch.testing.assert_close(value, ref_value, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-2, atol=1e-3 * ref_grad.abs().max().item())
    with torch.autocast("cuda", dtype=torch.bfloat16):
        under_autocast = dispersion_tiled(z, 0.5, CLAMP)
    assert under_autocast.dtype == torch.float32
    torch.testing.assert_close(under_autocast, dispersion_tiled(z, 0.5, CLAMP), rtol=0, atol=1e-5)
