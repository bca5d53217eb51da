"""Grids of heatmaps, the picture every condensation figure is built from.

A heatmap stacks one model's per-layer density histograms of pairwise token cosine similarity
along depth: x is the layer fraction ``l / L`` (0 = embedding output, 1 = last hidden state),
y the cosine similarity, colour the probability density. The y range defaults to
:data:`DEFAULT_YLIM` but extends (see :func:`heatmap_ylim`) whenever a layer has mass outside
it, so no model's distribution is cropped silently.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.gridspec import GridSpec

from condensation.geometry import CosineStatistics
from condensation.reporting.figures.style import RC, placeholder

DEFAULT_YLIM: tuple[float, float] = (-0.25, 1.0)
"""The heatmaps' default cosine range; :func:`heatmap_ylim` extends it when data lies outside."""

DEFAULT_VMAX = 10.0
"""Top of the colour scale (probability density); denser bins saturate."""


@dataclass(frozen=True)
class HeatmapOptions:
    """How a figure draws its heatmaps."""

    histogram: Literal["mean", "pooled"] = "mean"
    """"mean": histograms of the mean cosine matrix; "pooled": of every sequence's cosines."""
    vmax: float = DEFAULT_VMAX
    ylim: tuple[float, float] = DEFAULT_YLIM
    """The default y range; widened where a heatmap has mass outside it."""

    def __post_init__(self) -> None:
        if self.histogram not in ("mean", "pooled"):
            raise ValueError(f"histogram must be 'mean' or 'pooled', got {self.histogram!r}")
        if not self.vmax > 0:
            raise ValueError(f"vmax (top of the density colour scale) must be a positive number, got {self.vmax!r}")


@dataclass(frozen=True)
class Heatmap:
    """One cell of a grid: ``stats`` (None leaves the cell blank), a title, and a note boxed in
    the top-left corner."""

    stats: CosineStatistics | None
    title: str | None = None
    note: str | None = None


def heatmap_ylim(
    hists: np.ndarray,
    edges: np.ndarray,
    default: tuple[float, float] = DEFAULT_YLIM,
    tol: float = 1e-3,
    step: float = 0.05,
) -> tuple[float, float]:
    """The y (cosine) range of a heatmap: ``default``, widened to hold every layer's mass.

    ``hists`` is ``[layers, bins]`` (or one ``[bins]`` histogram), any non-negative weights
    (densities or counts) over the bins delimited by ``edges`` (``bins + 1`` values). For each
    layer we find the lowest cosine below which at most ``tol`` of its mass lies; when that is
    below ``default[0]`` the lower limit moves down to it, rounded outward to a multiple of
    ``step`` and clipped at -1. The upper limit is widened the same way. Layers with no mass
    are ignored.
    """
    hists = np.atleast_2d(np.asarray(hists, dtype=np.float64))
    edges = np.asarray(edges, dtype=np.float64)
    if edges.shape != (hists.shape[1] + 1,):
        raise ValueError(f"edges must hold bins + 1 = {hists.shape[1] + 1} values, got shape {edges.shape}")
    lo, hi = float(default[0]), float(default[1])
    if not lo < hi:
        raise ValueError(f"default must be (low, high) with low < high, got {default}")
    mass = np.clip(np.nan_to_num(hists), 0.0, None) * np.diff(edges)[None, :]
    total = mass.sum(axis=1)
    mass = mass[total > 0] / total[total > 0, None]
    if mass.size == 0:
        return lo, hi
    eps = 1e-9
    below = np.cumsum(mass, axis=1)  # mass in bins 0..k
    above = np.cumsum(mass[:, ::-1], axis=1)[:, ::-1]  # mass in bins k..end
    first = np.argmax(below > tol, axis=1)  # lowest bin we may not crop, per layer
    last = mass.shape[1] - 1 - np.argmax(above[:, ::-1] > tol, axis=1)
    lowest = float(edges[first].min())
    highest = float(edges[last + 1].max())
    if lowest < lo - eps:
        lo = max(float(edges[0]), math.floor(lowest / step + eps) * step)
    if highest > hi + eps:
        hi = min(float(edges[-1]), math.ceil(highest / step - eps) * step)
    return round(lo, 10), round(hi, 10)


def heatmap_grid(
    fig: Figure,
    grid: GridSpec,
    cells: Sequence[Sequence[Heatmap]],
    row_labels: Sequence[str],
    options: HeatmapOptions,
    first_column: int = 0,
    blank_text: str = "no data",
) -> list[list[Axes]]:
    """Draw ``cells[r][c]`` into ``grid[r, first_column + c]``; rows may be of unequal length.

    All heatmaps share x, one y range (``options.ylim`` widened by :func:`heatmap_ylim` to hold
    every cell's mass) and one colour bar, which gets an arrow when some density exceeds
    ``options.vmax``. ``row_labels[r]`` is the y label of row ``r``'s first cell; x labels go to
    the lowest cell of each column. Returns the axes, shaped like ``cells``.
    """
    vmax = options.vmax
    drawn = [cell for row in cells for cell in row if cell.stats is not None]
    hists = {id(cell): _histograms(cell.stats, options.histogram) for cell in drawn}
    lows, highs = zip(*(heatmap_ylim(hists[id(cell)], cell.stats.bin_edges, options.ylim) for cell in drawn))
    y_range = (min(lows), max(highs))
    axes: list[list[Axes]] = []
    first = image = None
    for r, row in enumerate(cells):
        axes.append([])
        for c, cell in enumerate(row):
            ax = fig.add_subplot(grid[r, first_column + c], sharex=first, sharey=first)
            first = first or ax
            if cell.stats is None:
                ax.set_facecolor("0.96")
                placeholder(ax, blank_text)
            else:
                image = _draw(ax, hists[id(cell)], vmax, cell.note)
            lowest = r + 1 == len(cells) or c >= len(cells[r + 1])
            _style(ax, y_range, lowest, row_labels[r] if c == 0 else None, cell.title)
            axes[-1].append(ax)
    over = any(float(np.max(np.nan_to_num(h))) > vmax for h in hists.values())
    # about 0.14 in wide whatever the figure size: a fixed fraction would stunt it in narrow figures
    length = fig.get_figheight() - 1.3
    cbar = fig.colorbar(
        image, ax=[ax for row in axes for ax in row], label="probability density",
        extend="max" if over else "neither", fraction=0.15, aspect=max(8.0, length / 0.14), pad=0.015,
    )
    cbar.ax.tick_params(labelsize=8)
    return axes


def _histograms(stats: CosineStatistics, histogram: str) -> np.ndarray:
    return np.asarray(stats.hist_of_mean if histogram == "mean" else stats.hist_pooled, dtype=np.float64)


def _draw(ax: Axes, hists: np.ndarray, vmax: float, note: str | None):
    """One model's histograms as an image: columns = layers, rows = cosine bins."""
    image = ax.imshow(hists.T, origin="lower", aspect="auto", extent=(0.0, 1.0, -1.0, 1.0), cmap="Reds",
                      vmin=0.0, vmax=vmax, interpolation="nearest")
    if note is not None:
        ax.text(0.04, 0.96, note, transform=ax.transAxes, ha="left", va="top", fontsize=7, color="0.15",
                bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.75))
    return image


def _style(ax: Axes, ylim: tuple[float, float], xlabel: bool, ylabel: str | None, title: str | None) -> None:
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(*ylim)
    for spine in ax.spines.values():
        spine.set_visible(True)
        spine.set_linewidth(0.6)
    ax.set_xticks([0.0, 0.5, 1.0], ["0", "0.5", "1"])
    ax.tick_params(length=2.5, pad=2, labelbottom=xlabel, labelleft=ylabel is not None)
    if xlabel:
        ax.set_xlabel("layer fraction")
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    if title is not None:
        # a smaller font for long model names, so neighbouring titles never touch
        name = title.split("\n")[0]
        size = RC["axes.titlesize"] if len(name) <= 15 else (8.0 if len(name) <= 20 else 7.0)
        ax.set_title(title, fontsize=size, linespacing=1.15)
