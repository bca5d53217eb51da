"""What every figure shares: rc settings, colours, figure creation and the atomic save."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from condensation.runtime.io import atomic_path

DPI = 150

RC = {
    "font.size": 9,
    "axes.titlesize": 9.5,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "figure.titlesize": 12,
    "figure.titleweight": "bold",
    "axes.spines.top": False,
}

RHO_COLOR = matplotlib.colormaps["Blues"](0.8)
RHO_COLOR_LIGHT = matplotlib.colormaps["Blues"](0.5)
TAU_COLOR = matplotlib.colormaps["Reds"](0.8)
TAU_COLOR_LIGHT = matplotlib.colormaps["Reds"](0.5)
DEEP_COLOR = matplotlib.colormaps["Greens"](0.8)  # the deeper layers' mean cosine
DEEP_COLOR_LIGHT = matplotlib.colormaps["Greens"](0.55)


def new_figure(width: float, height: float) -> Figure:
    """A constrained-layout figure; no pyplot, so nothing depends on a display."""
    fig = Figure(figsize=(width, height), layout="constrained", dpi=DPI)
    fig.get_layout_engine().set(w_pad=0.04, h_pad=0.04, wspace=0.03, hspace=0.04)
    return fig


def save(fig: Figure, path: str | os.PathLike) -> Figure:
    """Write ``fig`` as a PNG atomically, so a killed job never leaves half a figure."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, facecolor="white")
    return fig


def check_unique(names: Sequence[str], what: str) -> None:
    seen: set[str] = set()
    dupes = sorted({n for n in names if n in seen or seen.add(n)})
    if dupes:
        raise ValueError(f"duplicate {what}: {dupes}")


def format_param_count(n: float) -> str:
    """``4.2e6 -> "4.2M"``, ``1.1e9 -> "1.1B"``, ``350e3 -> "350K"``: three significant digits."""
    if not math.isfinite(n) or n < 0:
        raise ValueError(f"parameter count must be a finite non-negative number, got {n!r}")
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:.3g}"


def method_colors(methods: Sequence[str]) -> dict[str, str]:
    """A distinct colour (hex string) per method, assigned in the order given.

    Qualitative ``tab10`` for up to ten methods, ``tab20`` up to twenty, evenly spaced hues
    beyond. The result depends only on the list (same list, same colours), so figures that
    pass the same method list colour each method alike. An empty list gives an empty dict.
    """
    methods = list(methods)
    check_unique(methods, "methods")
    n = len(methods)
    if n <= 10:
        colors = matplotlib.colormaps["tab10"](np.arange(n))
    elif n <= 20:
        colors = matplotlib.colormaps["tab20"](np.arange(n))
    else:
        colors = matplotlib.colormaps["hsv"](np.linspace(0.0, 1.0, n, endpoint=False))
    return {m: to_hex(c) for m, c in zip(methods, colors)}


def placeholder(ax: Axes, text: str) -> None:
    """Grey italic text in the middle of an axes that has nothing to show."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=8,
            color="0.45", style="italic")
