"""What both dispersion kernels (``kernels``, ``triton_dispersion``) hand their products: the layers'
unit rows stacked on the batch axis, and those rows as the products' operands."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from condensation.cosine import unit_rows


def stacked_unit_rows(layers: Sequence[Tensor], dtype: torch.dtype, norm_eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """``unit_rows`` of the layers stacked on the batch axis, in ``dtype``: ``[L B, T, F]``.

    Each layer is upcast and normalised on its own and written into one buffer, so that what
    exists at once is the stacked unit rows plus one layer's copies, never all layers' upcasts
    (a ``torch.cat`` of the upcast layers would hold both)."""
    if len(layers) == 1:
        return unit_rows(layers[0].to(dtype), norm_eps)
    batch, num_tokens, features = layers[0].shape
    zn = torch.empty((len(layers) * batch, num_tokens, features), dtype=dtype, device=layers[0].device)
    norms, floors = [], []
    for index, layer in enumerate(layers):
        layer_zn, norm, floored = unit_rows(layer.to(dtype), norm_eps)
        zn[index * batch : (index + 1) * batch] = layer_zn
        norms.append(norm)
        floors.append(floored)
    return zn, torch.cat(norms), torch.cat(floors)


def product_operands(zn: Tensor, products: str) -> tuple[Tensor, Tensor | None]:
    """The products' operands, made once per call: ``(zn, None)`` for float32 products; for
    ``bfloat16`` the unit rows rounded to bf16 and the bf16 rounding of what that dropped
    (``_tile_weights``)."""
    if products == "float32":
        return zn, None
    high = zn.to(torch.bfloat16)
    return high, (zn - high.to(zn.dtype)).to(torch.bfloat16)
