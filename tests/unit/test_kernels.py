"""Tiled dispersion loss: same value and gradient as the dense formula, and no [B, T, T] kept for backward."""

from __future__ import annotations

import math
import os
import shutil

import pytest
import torch

from condensation.config.objectives import AuxLossConfig
from condensation.training import kernels, losses
from condensation.training.kernels import dispersion_tiled
from condensation.training.losses import (
    _dispersion_dense,
    layer_loss,
    reference_layer_loss,
)

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
    with pytest.raises(ValueError, match="'triton'.*auto, eager, compiled"):
        dispersion_tiled(hidden(1, 4, 3), 1.0, CLAMP, kernel="triton")


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
