"""The one cosine helper: token states as unit rows, with a floored norm.

The measurements (:mod:`condensation.geometry`, :mod:`condensation.lenses`), the losses and the
loss kernel (:mod:`condensation.training.losses`, :mod:`condensation.training.kernels`) all
normalise through :func:`unit_rows`, so a loss sees the cosines the figures report. It sits below
all of them and imports nothing of the package.
"""

from __future__ import annotations

import torch

NORM_EPS = 1e-6
"""Floor on a token's norm: a zero vector gets cosine 0 with everything, not NaN. The measurements,
the losses and the loss kernel all normalise through :func:`unit_rows`, so a loss sees the
cosines the figures report."""


def unit_rows(z: torch.Tensor, eps: float = NORM_EPS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(z / norm, norm, floored)`` along the last dimension: the unit rows, the floored norms
    ``[..., 1]`` and where the floor applied. The floor is on the squared norm (the square root
    of a floored square, not a floored norm), whose gradient stays finite at exactly zero, so one
    form serves the measurements and the losses' backward alike."""
    sq_norm = z.pow(2).sum(-1, keepdim=True)
    floored = sq_norm < eps**2  # clamp_min passes the gradient at equality; so does the loss kernel
    norm = sq_norm.clamp_min(eps**2).sqrt()
    return z / norm, norm, floored
