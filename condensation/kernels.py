"""Memory-lean dispersion loss: the same value and gradient as the dense formula, without ``[B, T, T]``.

The dense formula in ``losses`` builds the ``B x T x T`` cosine matrix and, through autograd,
keeps several tensors of that size alive per layer until backward (the cosines, their clamp,
the arccos, the scaled logits, the masked logits, the softmax of the logsumexp). With
``output_hidden_states`` and the loss on every block, that is ``~6 * L * B * T^2`` floats: for
T = 2048 it dwarfs the model's own activations, and it is why ``max_tokens`` subsampling exists.

``TiledDispersion`` computes the same per-sequence log-mean-exp with a streaming (online)
logsumexp over row tiles of ``tile`` tokens and saves only the input ``z`` (which the model's
graph keeps alive anyway) and one logsumexp per sequence. Backward recomputes each tile's
cosines and turns them into the gradient directly, so at any moment only one
``[B, tile, T]`` block exists, and nothing of that size is held between forward and backward.

Symmetry halves the work: ``D_ij = D_ji``, so row tile ``[i0, i1)`` only looks at columns
``j >= i0``. Its square diagonal block ``[i0, i1) x [i0, i1)`` holds both ``(i, j)`` and
``(j, i)`` (the diagonal ``i = j`` is dropped); the columns right of it, ``j >= i1``, stand for
their mirror pairs as well and enter the sum with weight 2 (``+ log 2`` on the logit). The
backward pass is the exact adjoint of that computation, so value and gradient agree with the
dense formula up to float rounding (the dense one takes ``cos_ji`` from its own dot product,
which can differ from ``cos_ij`` in the last bit).

Definitions, per sequence (the same as ``losses._dispersion``; ``losses.NORM_EPS`` = 1e-6):

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
loss in ``losses``; it is plain PyTorch, so the same code runs on CPU and CUDA.
"""

from __future__ import annotations

import contextlib
import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

DEFAULT_TILE = 128
"""Rows per tile. Temporaries are a few ``B x tile x T`` blocks, small next to the dense formula's
saved ``[B, T, T]`` tensors; smaller tiles also skip more of the mirrored lower triangle (a tile
covers ``tile x (T - start)``). Timed forward + backward on CPU (1 and 2 threads, T = 256 and
1024, F = 256 and 768): 64 and 128 were fastest, 256 and 512 up to ~25% slower at T = 256;
128 keeps the number of Python-level steps, ``T / tile``, lower for long sequences."""

NORM_EPS = 1e-6
"""Floor on a token's norm; must equal ``losses.NORM_EPS`` (a test checks). Repeated here, not
imported, because ``losses`` imports this module."""


def _no_autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast would run the tile matmuls in bf16/fp16 and undo the float32 upcast; and since
    backward may run in the caller's autocast context too, both passes switch it off."""
    if torch.amp.is_autocast_available(device.type):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()


def _normalise(z: Tensor, norm_eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(zn, norm, floored)``: unit rows, the floored norms ``[B, T, 1]``, and where the floor applied.

    Same arithmetic as ``losses.cosine_matrix`` (sqrt of a floored squared norm), so both paths
    see the same ``zn`` bit for bit.
    """
    sq_norm = z.pow(2).sum(-1, keepdim=True)
    floored = sq_norm < norm_eps**2  # clamp_min passes the gradient at equality; so do we
    norm = sq_norm.clamp_min(norm_eps**2).sqrt()
    return z / norm, norm, floored


def _tile_logits(zn: Tensor, start: int, stop: int, tau: float, clamp: float) -> tuple[Tensor, Tensor]:
    """Logits of row tile ``[start, stop)`` against columns ``[start, T)``, and their clamped cosines.

    Returns ``(x, cc)``, both ``[B, stop - start, T - start]``: ``x`` is ``-arccos(cc) / (pi tau)``
    with ``-inf`` on the diagonal (``exp`` gives 0: the pair is dropped) and ``+ log 2`` right of
    the diagonal block (each of those entries also stands for its mirror pair ``(j, i)``).
    """
    rows = stop - start
    cc = torch.matmul(zn[:, start:stop], zn[:, start:].mT).clamp_(-1.0 + clamp, 1.0 - clamp)
    x = torch.acos(cc).mul_(-1.0 / (math.pi * tau))
    x.diagonal(dim1=1, dim2=2).fill_(float("-inf"))  # offset 0: entries (i, i) of the tile
    x[:, :, rows:].add_(math.log(2.0))
    return x, cc


class TiledDispersion(torch.autograd.Function):
    """Dispersion loss of one layer, ``[B, T, F] -> 0-dim`` (mean over B), tile by tile.

    Computes in float32 (float64 for float64 ``z``) and saves ``z`` as given plus one logsumexp per
    sequence, nothing ``O(T^2)``: a bf16 ``z`` is upcast again in backward rather than kept as a
    float32 copy. Checks are in ``dispersion_tiled``. Not twice differentiable
    (``once_differentiable``): the training loss needs one backward.
    """

    @staticmethod
    def forward(ctx, z: Tensor, tau: float, clamp: float, tile: int, norm_eps: float) -> Tensor:
        batch, num_tokens, _ = z.shape
        compute_dtype = torch.promote_types(z.dtype, torch.float32)
        zn, _, _ = _normalise(z.to(compute_dtype), norm_eps)
        lse = torch.full((batch,), float("-inf"), dtype=compute_dtype, device=z.device)
        for start in range(0, num_tokens, tile):
            x, _ = _tile_logits(zn, start, min(start + tile, num_tokens), tau, clamp)
            # Online logsumexp: each tile's own logsumexp is stable (it subtracts the tile's max),
            # and logaddexp merges them stably; a tile with no pair (last row alone) gives -inf,
            # which logaddexp absorbs.
            lse = torch.logaddexp(lse, torch.logsumexp(x.flatten(1), dim=1))
        ctx.save_for_backward(z, lse)
        ctx.constants = (tau, clamp, tile, norm_eps)
        return (lse - math.log(num_tokens * (num_tokens - 1))).mean()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output: Tensor):
        z_in, lse = ctx.saved_tensors
        tau, clamp, tile, norm_eps = ctx.constants
        z = z_in.to(lse.dtype)
        batch, num_tokens, _ = z.shape
        with _no_autocast(z.device):
            zn, norm, floored = _normalise(z, norm_eps)
            grad_zn = torch.zeros_like(zn)
            # upstream gradient, the 1/B of the batch mean and the 1/(pi tau) of the logits, folded
            scale = grad_output.to(z.dtype) / (batch * math.pi * tau)
            lse = lse[:, None, None]
            for start in range(0, num_tokens, tile):
                stop = min(start + tile, num_tokens)
                x, cc = _tile_logits(zn, start, stop, tau, clamp)
                # G = dL/dc: softmax weight (with its factor 2 right of the diagonal block, and 0 on
                # the diagonal) times arccos' slope at the clamped cosine (straight-through).
                grad_cos = (x - lse).exp_().mul_(cc.mul_(cc).neg_().add_(1.0).rsqrt_()).mul_(scale)
                # c = zn[:, start:stop] @ zn[:, start:]^T sends gradient to both factors. (The diagonal
                # block's share, G_d zn_rows + G_d^T zn_rows, is split between the two products.)
                # Fresh products added to slices: baddbmm_ into a strided slice of grad_zn falls back
                # to one addmm per sequence on CPU, several times slower.
                grad_zn[:, start:stop] += torch.matmul(grad_cos, zn[:, start:])
                grad_zn[:, start:] += torch.matmul(grad_cos.mT, zn[:, start:stop])
            # Through zn = z / norm: project out the radial part; where the norm was floored it is a
            # constant and the gradient is just g / eps (the clamp_min of the dense formula).
            radial = zn * (zn * grad_zn).sum(-1, keepdim=True)
            grad_z = torch.where(floored, grad_zn, grad_zn - radial) / norm
        return grad_z.to(z_in.dtype), None, None, None, None


def dispersion_tiled(z: Tensor, tau: float, clamp: float, tile: int = DEFAULT_TILE,
                     norm_eps: float = NORM_EPS) -> Tensor:
    """The paper's dispersion loss of one layer, ``[B, T, F] -> 0-dim`` (mean over B), in O(B T F) memory.

    Same value and gradient as ``losses._dispersion_dense`` (log-mean-exp over ``i != j`` of
    ``-arccos(cos_ij) / (pi tau)``, straight-through clamp), computed by ``TiledDispersion``.
    Float32 for anything narrower, float64 stays float64; the gradient comes back in z's dtype.
    """
    if z.dim() != 3 or not z.is_floating_point():
        raise ValueError(f"z must be a floating [B, T, F] tensor, got {z.dtype} of shape {tuple(z.shape)}")
    if z.shape[1] < 2:
        raise ValueError(f"dispersion compares tokens pairwise and needs T >= 2, got T={z.shape[1]}")
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1:
        raise ValueError(f"tile must be a positive int, got {tile!r}")
    with _no_autocast(z.device):
        return TiledDispersion.apply(z, float(tau), float(clamp), tile, float(norm_eps))
