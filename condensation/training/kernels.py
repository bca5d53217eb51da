"""Memory-lean dispersion loss: the same value and gradient as the dense formula, without ``[B, T, T]``.

The dense formula in ``losses`` builds the ``B x T x T`` cosine matrix and, through autograd,
keeps several tensors of that size alive per layer until backward (the cosines, their clamp,
the arccos, the scaled logits, the masked logits, the softmax of the logsumexp). With
``output_hidden_states`` and the loss on every block, that is ``~6 * L * B * T^2`` floats: for
T = 2048 it dwarfs the model's own activations, and it is why ``max_tokens`` subsampling exists.

``TiledDispersion`` makes one pass over row tiles of ``tile`` tokens and computes the value and,
when ``z`` needs one, the gradient in that same pass; backward only multiplies the saved gradient
by the upstream scalar. At any moment one ``[B, tile, T]`` block exists, and what is kept for
backward is that gradient, ``[B, T, F]``, nothing of size ``T^2``.

One pass works because all pairs of a sequence share one normaliser: the softmax weight of pair
``(i, j)`` is ``exp(x_ij - lse_b)``, so the gradient can be summed with ``exp(x_ij - m_b)`` for a
running maximum ``m_b`` (an online logsumexp, as in flash attention) and scaled by
``exp(m_b - lse_b)`` once the last tile is in. Whenever ``m_b`` grows, what was summed so far is
rescaled. Compared with a forward that only keeps the logsumexp and a backward that recomputes
the cosines, this saves the second cosine matmul and arccos pass per tile, at the price of
keeping the gradient (the size of ``z``) instead of nothing extra.

Symmetry saves work: ``D_ij = D_ji``, so row tile ``[i0, i1)`` only looks at columns
``j >= i0``. Its square diagonal block ``[i0, i1) x [i0, i1)`` holds both ``(i, j)`` and
``(j, i)`` (the diagonal ``i = j`` is dropped); the columns right of it, ``j >= i1``, stand for
their mirror pairs as well and enter the sum with weight 2 (``+ log 2`` on the logit). The
cosines then cost ``(1 + tile / T) / 2`` of a ``T x T`` matmul, and the gradient one: each
pair sends one term to each of its two tokens. The gradient is the exact adjoint of that
computation, so value and gradient agree with the dense formula up to float rounding (the dense
one takes ``cos_ji`` from its own dot product, which can differ from ``cos_ij`` in the last bit).

Definitions, per sequence (the same as ``losses.dispersion``; ``NORM_EPS`` = 1e-6):

    zn_i   = z_i / max(||z_i||, eps)
    c_ij   = zn_i . zn_j,   cc_ij = clamp(c_ij, -1 + clamp, 1 - clamp)   (straight-through)
    x_ij   = -arccos(cc_ij) / (pi * tau)
    loss_b = logsumexp_{i != j} x_ij - log(T (T - 1)),   loss = mean_b loss_b

Gradient, with ``w_ij = exp(x_ij - lse_b)`` (the softmax over the pairs of sequence b) and
``s`` the upstream gradient divided by B:

    dL/dc_ij = s * w_ij / (pi * tau * sqrt(1 - cc_ij^2))      (arccos' slope at the clamped value)
    dL/dzn   = (G + G^T) zn                                    (G = dL/dc, per sequence)
    dL/dz    = (g - zn (zn . g)) / ||z||,  or g / eps where the norm was floored

It runs in float32, or float64 for float64 input (``gradcheck``), with autocast off, like every
loss in ``losses``.

Several layers of one shape go through one call (``dispersion_tiled_layers``, what
``losses.auxiliary_loss`` uses). On CUDA they are stacked on the batch axis, ``[L B, T, F]``:
``L B`` independent sequences, whose mean loss is the mean over the layers of each layer's mean
(equal sizes), so that one tile loop over all of them replaces ``L`` loops: ``L`` times fewer
launches, larger products. On a CPU each layer keeps its own loop, whose blocks fit the caches
(``stacks_layers``).

The matrix products (the cosines and the gradient's two products per tile) are float32 by
default; ``products="bfloat16"`` (``AuxLossConfig.products``) gives them bf16 operands with
float32 sums, as a GPU's tensor cores run them. The gradient's products take the unit rows
rounded to bf16; the cosines add the two cross terms of what that rounding dropped
(``hi hi^T + hi lo^T + lo hi^T``, three products), since one bf16 product moved the loss by up to
4e-5 on condensed hidden states, and the split by under 4e-7 (``AuxLossConfig.products``).
arccos, exponent, the sums and the gradient's accumulation stay in float32.

Two ways to run the tile body ``_tile_step``, picked by ``tile_step`` from ``AuxLossConfig.kernel``:
``eager``, plain PyTorch, the reference (about 34 ops per tile, each a kernel launch on a GPU),
and ``compiled``, the same function through ``torch.compile``: its elementwise passes and
reductions fused (on CPU, two C++ loops beside the three ``bmm`` library calls of a middle tile;
Triton kernels on CUDA). ``auto`` is the one measured fastest on the device (benchmarks/README.md).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.utils._triton import has_triton

from condensation.config.objectives import KERNELS, PRODUCTS
from condensation.cosine import NORM_EPS
from condensation.training.operands import product_operands, stacked_unit_rows

DEFAULT_TILE = 128
"""Rows per tile. Temporaries are a few ``B x tile x T`` blocks; smaller tiles skip more of the
mirrored lower triangle but make smaller, less efficient matmuls. Timed forward + backward on
CPU, one thread, 4 layers, tile 64 vs 128: 36.8 vs 39.4 ms at B=8, T=256, F=256; 53.9 vs 52.7 ms
at B=4, T=256, F=768; 140.5 vs 126.0 ms at B=2, T=1024, F=256."""


def _no_autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast would run the loss's matmuls in bf16/fp16 and undo the float32 upcast. Also used
    by ``losses`` for its other losses."""
    if torch.amp.is_autocast_available(device.type):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()


def _product(a: Tensor, b: Tensor, dtype: torch.dtype) -> Tensor:
    """Batched ``a @ b``, summed and returned in ``dtype`` (the loss's float32, or float64).

    Operands already in ``dtype`` (``products="float32"``) are one plain ``bmm``. bf16 operands
    (``products="bfloat16"``): on CUDA one bf16 product with float32 accumulation and a float32
    result (tensor cores; a bf16 result would round every cosine to 3 digits); elsewhere the same
    numbers emulated: the product of two bf16 values is exact in float32, so the upcast operands'
    float32 product differs from it only in the order of the sums (no speed-up, but the error that
    the tests measure is the GPU's)."""
    if a.dtype == dtype:
        return torch.bmm(a, b)
    if a.device.type == "cuda" and dtype == torch.float32:
        return torch.bmm(a, b, out_dtype=dtype)
    return torch.bmm(a.to(dtype), b.to(dtype))


def _tile_weights(zn: Tensor, low: Tensor | None, start: int, stop: int, peak: Tensor, logit_scale: Tensor,
                  clamp: float, with_slope: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """Row tile ``[start, stop)`` against columns ``[start, T)``: ``(weight, new_peak, slope)``.

    ``weight`` is ``[B, stop - start, T - start]``, ``exp(x - new_peak)`` for the logits
    ``x = logit_scale * arccos(cc)`` (``logit_scale = -1 / (pi tau)``), with ``+ log 2`` right of
    the diagonal block (each of those entries also stands for its mirror pair ``(j, i)``) and 0 on
    the diagonal (the pair is dropped); ``new_peak`` is the running maximum ``peak`` raised to the
    tile's largest logit. ``slope`` is ``1 / sqrt(1 - cc^2)``, arccos' slope at the clamped cosine,
    in the buffer of the cosines (None unless ``with_slope``). Few passes over the block: it is the
    cost beside the matmul. ``zn`` is the products' operand (``_product``): the unit rows, or
    their bf16 rounding, then ``low`` holds what that rounding dropped (bf16 too) and the cosines
    add its two cross terms: ``hi hi^T + hi lo^T + lo hi^T`` carries ~16 bits of the unit rows
    instead of bf16's 8 (``lo lo^T`` is below float32's own rounding). Everything after the
    products is in ``peak``'s dtype.
    """
    rows, cols = stop - start, zn.shape[1] - start
    cc = _product(zn[:, start:stop], zn[:, start:].mT, peak.dtype)
    if low is not None:
        cc += _product(zn[:, start:stop], low[:, start:].mT, peak.dtype)
        cc += _product(low[:, start:stop], zn[:, start:].mT, peak.dtype)
    cc.clamp_(-1.0 + clamp, 1.0 - clamp)
    angle = torch.acos(cc)
    angle.diagonal(dim1=1, dim2=2).fill_(float("inf"))  # offset 0: entries (i, i); exp(-inf) = 0
    # the largest logit is the smallest angle, of the diagonal block and of the part right of it
    tile_peak = angle[:, :, :rows].amin(dim=(1, 2)).mul_(logit_scale)
    if cols > rows:
        right_peak = angle[:, :, rows:].amin(dim=(1, 2)).mul_(logit_scale).add_(math.log(2.0))
        tile_peak = torch.maximum(tile_peak, right_peak)
    new_peak = torch.maximum(peak, tile_peak)  # finite: the first tile holds the pair (0, 1)
    # x - new_peak in one pass: a per-column offset (log 2 right of the block) minus new_peak
    offset = torch.zeros(cols, dtype=peak.dtype, device=peak.device)
    offset[rows:] = math.log(2.0)
    bias = offset[None, None, :] - new_peak[:, None, None]
    weight = torch.addcmul(bias, angle, logit_scale, out=angle).exp_()
    if not with_slope:
        return weight, new_peak, None
    one = torch.ones((), dtype=cc.dtype, device=cc.device)
    return weight, new_peak, torch.addcmul(one, cc, cc, value=-1.0, out=cc).rsqrt_()  # 1 - cc^2 in one pass


def _tile_step(zn: Tensor, low: Tensor | None, peak: Tensor, total: Tensor, grad_zn: Tensor | None, start: int,
               stop: int, logit_scale: Tensor, clamp: float) -> tuple[Tensor, Tensor]:
    """One row tile of the online logsumexp: the new ``(peak, total)``, and ``grad_zn`` updated in place.

    ``peak`` is the running maximum of the logits per sequence, ``total = sum exp(x - peak)``;
    ``grad_zn`` (None: no gradient wanted) is dL/dzn up to the per-sequence factor
    ``1 / (S pi tau total)`` (``S`` the sequences of the call), scaled to the current ``peak``.
    ``zn`` and ``low`` are the products' operands (``_tile_weights``); the gradient's products
    take ``zn`` alone (bf16 there costs ~4e-4 of the gradient, within the 2e-3 asked for).
    ``logit_scale`` is a 0-dim tensor, not a float: the compiled body takes it as an input (one
    graph for every tau), whereas a float in ``addcmul``'s place (``add``'s ``alpha``) was baked
    into the graph unguarded, so that a later tau reused the first one's constant (torch 2.13).
    """
    weight, new_peak, slope = _tile_weights(zn, low, start, stop, peak, logit_scale, clamp, grad_zn is not None)
    rescale = torch.exp(peak - new_peak)  # 0 on the first tile: nothing summed yet
    total = total * rescale + weight.sum(dim=(1, 2))
    if grad_zn is None:
        return new_peak, total
    # G = dL/dc up to that factor: the pair's weight times arccos' slope (straight-through)
    grad_cos = weight.mul_(slope)
    grad_zn.mul_(rescale[:, None, None])
    # c_ij = zn_i . zn_j sends G_ij zn_j to row i and G_ij zn_i to row j. The diagonal block holds
    # both orders of its pairs, so G_d + G_d^T serves both in one product; the part right of it
    # holds one order (its mirror is the factor 2 in the weight) and needs the transposed product
    # too. Fresh products added to slices: baddbmm_ into a strided slice of grad_zn falls back to
    # one addmm per sequence on CPU.
    diag = grad_cos[:, :, : stop - start]
    diag.copy_(diag + diag.mT)
    grad_cos = grad_cos.to(zn.dtype)  # the products' operand dtype (bf16 or none: the same tensor)
    grad_zn[:, start:stop] += _product(grad_cos, zn[:, start:], grad_zn.dtype)
    if stop < zn.shape[1]:
        grad_zn[:, stop:] += _product(grad_cos[:, :, stop - start :].mT, zn[:, start:stop], grad_zn.dtype)
    return new_peak, total


TileStep = Callable[[Tensor, "Tensor | None", Tensor, Tensor, "Tensor | None", int, int, Tensor, float],
                    tuple[Tensor, Tensor]]


MAX_COMPILED_GRAPHS = 32
"""Graphs the compiled tile body may hold (``torch.compile``'s ``recompile_limit``, 8 by default).
A run needs three per dtype, ``products`` and with/without gradient (first, middle, last tile),
more where a tile edge falls one token before the end (a size-1 dimension is compiled apart) or
another ``clamp`` is used (it is a constant of the graph); past the limit ``fullgraph`` raises."""


@functools.cache
def _compiled_tile_step() -> TileStep:
    """``_tile_step`` through ``torch.compile``, built once per process. ``dynamic=True``: tiles
    differ in ``start`` and in their number of columns, and static shapes would compile every tile
    of every layer shape anew; with symbolic shapes the graphs serve any ``B``, ``T``, ``F`` and
    number of stacked layers, so nothing recompiles from step to step (a test counts the graphs).
    ``fullgraph``: a graph break would split the fused body silently."""
    # a torch.compile argument in recent torch (2.13 has it); older ones have only the global 8
    limit = ({"recompile_limit": MAX_COMPILED_GRAPHS}
             if "recompile_limit" in inspect.signature(torch.compile).parameters else {})
    return torch.compile(_tile_step, dynamic=True, fullgraph=True, **limit)


def tile_step(kernel: str, device: torch.device) -> TileStep:
    """The tile body for ``kernel`` (``AuxLossConfig.kernel``) on ``device``.

    ``auto``: ``compiled`` on CUDA when Triton is there to generate its kernels, else ``eager``
    (on CPU the compiled body ran at x0.95-1.04 of the eager one: benchmarks/README.md).
    """
    if kernel not in KERNELS or kernel == "triton":  # triton is no tile body: dispersion_tiled_layers hands it over
        raise ValueError(f"unknown tile body {kernel!r}; allowed: {', '.join(k for k in KERNELS if k != 'triton')}")
    if kernel == "auto":
        kernel = "compiled" if device.type == "cuda" and has_triton() else "eager"
    return _compiled_tile_step() if kernel == "compiled" else _tile_step


def stacks_layers(device: torch.device) -> bool:
    """Whether ``dispersion_tiled_layers`` runs its layers through one tile loop by default (else
    one loop per layer, still in one call). On CUDA yes: each op of a tile is a kernel launch, and
    one loop over ``[L B, T, F]`` launches ``L`` times fewer, each ``L`` times larger. On a CPU no:
    there is nothing to launch, and the stacked tile blocks ``[L B, tile, T]`` leave the caches
    that one layer's fit in (one thread, forward + backward: stacked at x0.78 the per-layer loops'
    speed on 12 x [4, 256, 768], x0.90 on 12 x [2, 1024, 768]; benchmarks/README.md)."""
    return device.type == "cuda"


def _tile_loop(layers: Sequence[Tensor], sequences: int, tau: float, clamp: float, tile: int, norm_eps: float,
               kernel: str, products: str, with_grad: bool) -> tuple[Tensor, Tensor | None]:
    """One tile loop over ``layers`` stacked on the batch axis: each sequence's logsumexp over its
    pairs, and, if ``with_grad``, the gradient of the loss with respect to the layers (stacked,
    in their dtype) for a loss that is the mean over ``sequences`` sequences in all."""
    num_tokens = layers[0].shape[1]
    dtype = torch.promote_types(layers[0].dtype, torch.float32)
    zn, norm, floored = stacked_unit_rows(layers, dtype, norm_eps)
    step = tile_step(kernel, zn.device)
    operand, low = product_operands(zn, products)
    # Online logsumexp per sequence: running max ``peak`` and ``total = sum exp(x - peak)``.
    # The first tile always holds a pair (row 0, column 1), so ``peak`` is finite after it;
    # a later tile with no pair (a last row alone) has max -inf and leaves ``peak`` as it is.
    peak = torch.full((zn.shape[0],), float("-inf"), dtype=dtype, device=zn.device)
    total = torch.zeros_like(peak)
    grad_zn = torch.zeros_like(zn) if with_grad else None
    logit_scale = torch.full((), -1.0 / (math.pi * tau), dtype=dtype, device=zn.device)
    for start in range(0, num_tokens, tile):
        peak, total = step(operand, low, peak, total, grad_zn, start, min(start + tile, num_tokens), logit_scale, clamp)
    del operand, low
    lse = peak + total.log()
    if grad_zn is None:
        return lse, None
    grad_zn.mul_((1.0 / (sequences * math.pi * tau * total))[:, None, None])
    # Through zn = z / norm: project out the radial part; where the norm was floored it is
    # a constant and the gradient is just g / eps (the clamp_min of the dense formula).
    radial = torch.linalg.vecdot(zn, grad_zn).unsqueeze_(-1).masked_fill_(floored, 0.0)
    return lse, grad_zn.addcmul_(zn, radial, value=-1.0).div_(norm).to(layers[0].dtype)


class TiledDispersion(torch.autograd.Function):
    """Dispersion loss of ``L`` layers ``[B, T, F]`` of one shape in one call, ``-> 0-dim``: the mean
    over the layers of each one's loss (mean over B), tile by tile.

    With ``stacked``, the layers go through one tile loop, stacked on the batch axis ``[L B, T, F]``:
    each sequence's loss only involves its own tokens, and the mean over ``L B`` sequences is the
    mean over the layers of their means over B (equal sizes), so the value is the per-layer
    loops' and the tiles run once, not ``L`` times (GPT2-small at T = 1024, tile 128: 8 tile
    calls instead of 96, each ``L`` times larger, which is what keeps a GPU busy). The price is
    memory: the float32 unit rows and their gradient exist for all layers at once (``8 L B T F``
    bytes during the forward instead of ``8 B T F``; what is kept for backward is the same, the
    gradient in the layers' dtype). Without it, one loop per layer (``stacks_layers``).
    One pass over the tiles computes the value and, when a layer needs a gradient, the gradient too
    (see the module docstring); backward only scales the saved gradient and hands each layer its
    rows. Computes in float32 (float64 for float64 layers). Checks are in ``dispersion_tiled_layers``.
    Not twice differentiable (``once_differentiable``): the training loss needs one backward.
    """

    @staticmethod
    def forward(ctx, tau: float, clamp: float, tile: int, norm_eps: float, kernel: str, products: str,
                stacked: bool, *layers: Tensor) -> Tensor:
        num_tokens = layers[0].shape[1]
        groups = [layers] if stacked else [[z] for z in layers]
        with_grad = any(ctx.needs_input_grad[7:])
        lses, grads = [], []
        for group in groups:
            lse, grad = _tile_loop(group, len(layers) * layers[0].shape[0], tau, clamp, tile, norm_eps, kernel,
                                   products, with_grad)
            lses.append(lse)
            grads.append(grad)
        if with_grad:
            ctx.save_for_backward(*grads)
            ctx.layers_per_loop = len(groups[0])
        return (torch.cat(lses) - math.log(num_tokens * (num_tokens - 1))).mean()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output: Tensor):
        # each layer's rows of its loop's gradient (views)
        return (None,) * 7 + tuple(layer_grad for grad in ctx.saved_tensors
                                   for layer_grad in (grad * grad_output.to(grad.dtype)).chunk(ctx.layers_per_loop))


def dispersion_tiled_layers(layers: Sequence[Tensor], tau: float, clamp: float, tile: int = DEFAULT_TILE,
                            norm_eps: float = NORM_EPS, kernel: str = "auto", products: str = "float32",
                            stacked: bool | None = None) -> Tensor:
    """The mean over ``layers`` (each ``[B, T, F]``, one shape, dtype and device) of the paper's
    dispersion loss, in one call (``TiledDispersion``), in O(L B T F) memory.

    Same value and gradient as the mean of ``losses._dispersion_dense`` over the layers
    (log-mean-exp over ``i != j`` of ``-arccos(cos_ij) / (pi tau)``, straight-through clamp), up
    to float rounding. ``kernel`` picks the tile body (``tile_step``); ``products`` the precision
    of its matrix products (``AuxLossConfig.products``): ``float32``, the loss's own, or
    ``bfloat16`` operands with float32 sums (arccos, exponent and sums stay float32);
    ``stacked`` whether all layers go through one tile loop (None: ``stacks_layers``, by device).
    ``kernel="triton"`` hands the call to the fused Triton kernels (``triton_dispersion``), which
    stack every layer and choose their own blocks (``tile`` and ``stacked`` unused).
    Float32 for anything narrower, float64 stays float64; the gradients come back in the layers' dtype.
    """
    if not layers:
        raise ValueError("dispersion needs at least one layer")
    for z in layers:
        if z.dim() != 3 or not z.is_floating_point():
            raise ValueError(f"z must be a floating [B, T, F] tensor, got {z.dtype} of shape {tuple(z.shape)}")
    if len({(z.shape, z.dtype, z.device) for z in layers}) > 1:
        raise ValueError("layers computed in one call must share one shape, dtype and device, got "
                         + ", ".join(f"{tuple(z.shape)} {z.dtype} {z.device}" for z in layers))
    if layers[0].shape[1] < 2:
        raise ValueError(f"dispersion compares tokens pairwise and needs T >= 2, got T={layers[0].shape[1]}")
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1:
        raise ValueError(f"tile must be a positive int, got {tile!r}")
    if products not in PRODUCTS:
        raise ValueError(f"unknown products {products!r}; allowed: {', '.join(PRODUCTS)}")
    if kernel == "triton":  # the fused kernels: every layer stacked, in blocks of their own (no tile, no stacked)
        from condensation.training.triton_dispersion import dispersion_fused_layers  # noqa: PLC0415

        with _no_autocast(layers[0].device):
            return dispersion_fused_layers(layers, tau, clamp, norm_eps, products)
    if stacked is None:
        stacked = stacks_layers(layers[0].device)
    with _no_autocast(layers[0].device):
        return TiledDispersion.apply(float(tau), float(clamp), tile, float(norm_eps), kernel, products, bool(stacked),
                                     *layers)


def dispersion_tiled(z: Tensor, tau: float, clamp: float, tile: int = DEFAULT_TILE,
                     norm_eps: float = NORM_EPS, kernel: str = "auto", products: str = "float32") -> Tensor:
    """The paper's dispersion loss of one layer, ``[B, T, F] -> 0-dim`` (mean over B), in O(B T F)
    memory: ``dispersion_tiled_layers`` of that one layer."""
    return dispersion_tiled_layers([z], tau, clamp, tile, norm_eps, kernel, products)
