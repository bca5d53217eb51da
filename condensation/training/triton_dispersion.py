"""The dispersion loss as two fused Triton kernels, in the style of FlashAttention-2 (``kernel: triton``).

The same value and gradient as ``kernels.TiledDispersion`` (and the dense formula in ``losses``),
computed without any ``[T, T]`` block leaving the chip: a program owns a block of rows of one
sequence and walks the column blocks, each cosine tile made by ``tl.dot`` over chunks of the
features, then clamped, turned into a logit and summed with an online logsumexp in registers.

- **Forward** (``_triton_kernels.forward_kernel``): row block ``I`` against the column blocks ``J >= I`` (the
  cosines are symmetric: the diagonal block holds both orders of its pairs, the blocks right of it
  stand for their mirror pairs too, ``+ log 2`` on the logit, as in ``kernels``), so the cosines
  cost half a ``T x T`` product. Each program writes its rows' running maximum and sum; the
  sequence's logsumexp over its pairs is their logsumexp (``torch``, ``[S, T]`` numbers).
  Autograd keeps the layers (alive anyway) and that logsumexp, ``S`` numbers: nothing of size
  ``T F`` beyond what the model holds, where ``TiledDispersion`` keeps the gradient.
- **Backward** (``_triton_kernels.backward_kernel``): the tile is recomputed, as FlashAttention-2's backward
  does. Row block ``I`` against every column block: the pair's softmax weight
  ``exp(x_ij - lse)`` times arccos' slope is ``G_ij``, and the row block's gradient
  ``2 sum_j G_ij zn_j`` is accumulated chunk by chunk of the features in the program's own rows of
  a float32 buffer (``G`` is symmetric, so ``(G + G^T) zn = 2 G zn``; each program writes only its
  rows: no atomics, the same result on every run). The cosines are made twice here (once per
  order of each pair), the price of writing no other program's rows.

The features are chunked (``BLOCK_K``) because a row of GPT2-small is 768 wide: a row block of 64
whole rows would not fit a streaming multiprocessor's registers.

Products: ``products: float32`` runs ``tl.dot`` at IEEE float32 (the same numbers as the torch
kernel's float32 ``bmm``; Triton's own default would be TF32); ``bfloat16`` gives it bf16 operands
with float32 sums, the cosines as three products of the unit rows' bf16 rounding and its remainder,
the gradient one, exactly as ``operands.product_operands`` prepares them for the torch kernel.

arccos is computed by ``_triton_kernels.acos``, the Cephes single-precision polynomial (about one float32 ulp),
not CUDA's ``libdevice``: Triton's interpreter, which runs these kernels on a CPU (numpy), has no
``libdevice``, and one formula on both devices is what the CPU tests check against the float64
formula (``tests/unit/test_triton_dispersion.py``). Float32 only: float64 hidden states (a
``gradcheck``) take the torch kernel.

On CUDA the kernels are compiled by Triton; on a CPU ``InterpretedFunction`` runs them through
Triton's interpreter (numpy, orders of magnitude slower: it is for the tests, not for training).
Whether this kernel beats the compiled torch tile body is the GPU check's to measure; ``kernel:
auto`` does not pick it until then (benchmarks/README.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import ModuleType

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from condensation.training.operands import product_operands, stacked_unit_rows

BLOCK = 64
"""Rows of a program and columns of a tile (one size for both, so that the diagonal block of a row
block is one tile). 64 x 64 float32 logits are 16 KB of registers per program at 4 warps; FlashAttention-2
uses 64 to 128. The GPU check may tune it."""

BLOCK_K = 32
"""Features per chunk of a ``tl.dot``: the operands of one chunk are two ``BLOCK x BLOCK_K`` tiles."""

INTERPRETER_BLOCK = 16
"""``BLOCK`` and ``BLOCK_K`` under the interpreter (a CPU): ``tl.dot``'s smallest block, so that the
tests' small ``T`` and ``F`` still cross several blocks and a ragged last one."""


def available() -> bool:
    """Whether Triton can be imported (torch's CUDA wheels bring it; ``tools/install.sh`` installs it
    on a CPU machine for the interpreter tests)."""
    try:
        import triton  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def _interpreting() -> bool:
    """Whether Triton runs kernels through its interpreter: ``TRITON_INTERPRET=1`` in the environment
    before Triton is first imported (the interpreter replaces the compiler process-wide, Triton's
    own library functions included, so it cannot be switched on per call)."""
    import triton  # noqa: PLC0415

    return bool(triton.knobs.runtime.interpret)


def _launch(zn: Tensor, products: str) -> tuple[ModuleType, Tensor, Tensor, dict]:
    """The kernels' module, the products' operands (``operands.product_operands``) and the launch settings
    shared by both kernels."""
    interpreted = _interpreting()
    if zn.device.type != "cuda" and not interpreted:
        raise ValueError(f"kernel 'triton' runs on CUDA; on {zn.device.type} only through Triton's interpreter "
                         "(TRITON_INTERPRET=1 set before Python starts: for tests, far too slow to train with)")
    from condensation.training import _triton_kernels  # noqa: PLC0415

    hi, lo = product_operands(zn, products)
    block = INTERPRETER_BLOCK if interpreted else BLOCK
    settings = dict(BF16=lo is not None, INTERPRETED=interpreted, BLOCK=block,
                    BLOCK_K=INTERPRETER_BLOCK if interpreted else BLOCK_K)
    return _triton_kernels, hi.contiguous(), (hi if lo is None else lo).contiguous(), settings


class FusedDispersion(torch.autograd.Function):
    """``kernels.TiledDispersion``'s function (the mean over the layers of each one's loss, the
    layers stacked on the batch axis) by the two Triton kernels; see the module docstring."""

    @staticmethod
    def forward(ctx, tau: float, clamp: float, norm_eps: float, products: str, *layers: Tensor) -> Tensor:
        zn, _, _ = stacked_unit_rows(layers, torch.float32, norm_eps)
        sequences, num_tokens, features = zn.shape
        kernels, hi, lo, settings = _launch(zn, products)
        peak = torch.empty((sequences, num_tokens), dtype=torch.float32, device=zn.device)
        total = torch.empty_like(peak)
        grid = (sequences, math.ceil(num_tokens / settings["BLOCK"]))
        logit_scale = -1.0 / (math.pi * tau)
        kernels.forward_kernel[grid](hi, lo, peak, total, num_tokens, features, logit_scale, clamp, **settings)
        lse = torch.logsumexp(peak + total.log(), dim=1)  # a row's -inf (no pair of its own) adds nothing
        ctx.save_for_backward(lse, *layers)
        ctx.settings = (tau, clamp, norm_eps, products)
        return (lse - math.log(num_tokens * (num_tokens - 1))).mean()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output: Tensor):
        lse, *layers = ctx.saved_tensors
        tau, clamp, norm_eps, products = ctx.settings
        zn, norm, floored = stacked_unit_rows(layers, torch.float32, norm_eps)
        sequences, num_tokens, features = zn.shape
        kernels, hi, lo, settings = _launch(zn, products)
        grad_zn = torch.zeros_like(zn)
        grid = (sequences, math.ceil(num_tokens / settings["BLOCK"]))
        logit_scale = -1.0 / (math.pi * tau)
        kernels.backward_kernel[grid](hi, lo, lse, grad_zn, num_tokens, features, logit_scale, clamp, **settings)
        # dL/dc = (g / S) w slope / (pi tau), and each pair reaches both its rows: 2 G zn
        grad_zn.mul_(grad_output.to(torch.float32) * 2.0 / (sequences * math.pi * tau))
        # through zn = z / norm, as kernels._tile_loop
        radial = torch.linalg.vecdot(zn, grad_zn).unsqueeze_(-1).masked_fill_(floored, 0.0)
        grad_z = grad_zn.addcmul_(zn, radial, value=-1.0).div_(norm).to(layers[0].dtype)
        return (None,) * 4 + tuple(grad_z.chunk(len(layers)))


def dispersion_fused_layers(layers: Sequence[Tensor], tau: float, clamp: float, norm_eps: float,
                            products: str) -> Tensor:
    """The mean over ``layers`` (checked by ``kernels.dispersion_tiled_layers``, which calls this
    for ``kernel: triton``) of the dispersion loss, by the fused Triton kernels."""
    if layers[0].dtype == torch.float64:
        raise ValueError("kernel 'triton' computes in float32 (its arccos is a float32 polynomial); float64 hidden "
                         "states take kernel 'eager' or 'compiled'")
    if not available():
        raise ValueError("kernel 'triton' needs the triton package (torch's CUDA wheels bring it; on a CPU "
                         "`pip install triton` runs it through Triton's interpreter, for tests)")
    return FusedDispersion.apply(float(tau), float(clamp), float(norm_eps), products, *layers)
