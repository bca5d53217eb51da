"""The paper's figures, drawn from plain data (``CosineStatistics`` and layer-mean curves).

Every public function takes data already in memory, draws one figure and writes it as a PNG
atomically (a temporary file beside the target, then ``os.replace``), so a killed job never
leaves a half-written figure under its final name.

* :func:`plot_family_trend`: depth trend of one model family (Spearman rho, Kendall tau per
  model) beside one heatmap per model (the paper's Fig. 2 / S1, and the MLP-width sweep);
* :func:`plot_paired_trend`: two rows of heatmaps (e.g. trained from scratch vs. distilled)
  and a trend panel joining each pair (the paper's distillation figure);
* :func:`plot_dataset_robustness`: one row per dataset, one heatmap per model, and a trend
  panel per row (the paper's Fig. S2);
* :func:`plot_layer_means`: mean cosine similarity against layer fraction, one line per label;
* :func:`plot_condensation_grid`: mid-training, one heatmap row per training method and one
  column per checkpoint step (the paper's Fig. 6);
* :func:`plot_trajectory`: mid-training, depth-trend statistics (rho, tau) against training
  step, mean +- std over seeds per method (the paper's Fig. 4);
* :func:`plot_loss_curves`: mid-training, training and validation loss against step per method.

The mid-training figures colour each method by :func:`method_colors`, so one method keeps its
colour across figures.

A heatmap stacks the per-layer density histograms of pairwise token cosine similarity along
depth: x is the layer fraction ``l / L`` (0 = embedding output, 1 = last hidden state), y the
cosine similarity, colour the probability density. The y range defaults to [-0.25, 1] but
extends downwards (see :func:`heatmap_ylim`) whenever a layer has mass below it, so no
model's distribution is cropped silently.

No pyplot: figures are plain :class:`matplotlib.figure.Figure` objects rendered by the Agg
canvas, so nothing depends on a display or on pyplot's global figure registry.
"""

from __future__ import annotations

import math
import operator
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Mapping, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.colors import to_hex
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from .geometry import CosineStatistics, trend_statistics
from .io import atomic_path

__all__ = [
    "FamilyEntry",
    "DEFAULT_YLIM",
    "DEFAULT_VMAX",
    "format_param_count",
    "heatmap_ylim",
    "plot_family_trend",
    "plot_paired_trend",
    "plot_dataset_robustness",
    "plot_layer_means",
    "method_colors",
    "plot_condensation_grid",
    "plot_trajectory",
    "plot_loss_curves",
]

DEFAULT_YLIM: tuple[float, float] = (-0.25, 1.0)
"""The heatmaps' default cosine range; :func:`heatmap_ylim` extends it when data lies outside."""

DEFAULT_VMAX = 10.0
"""Top of the colour scale (probability density); denser bins saturate."""

DPI = 150
MAX_COLUMNS = 6
"""Heatmaps per row in :func:`plot_family_trend` before wrapping to a new row."""

HEATMAP_CMAP = "Reds"
HistogramKind = Literal["mean", "pooled"]

_RC = {
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

_RHO_COLOR = matplotlib.colormaps["Blues"](0.8)
_RHO_COLOR_LIGHT = matplotlib.colormaps["Blues"](0.5)
_TAU_COLOR = matplotlib.colormaps["Reds"](0.8)
_TAU_COLOR_LIGHT = matplotlib.colormaps["Reds"](0.5)
_TREND_YLIM = (-1.0, 1.05)
_DODGE = 0.07  # horizontal offset between rho and tau points of one model, in model units


@dataclass
class FamilyEntry:
    """One model in a figure: its tick/title label, its statistics, optionally its size."""

    label: str
    stats: CosineStatistics
    size: float | None = None  # parameter count, shown under the label ("4.2M")


# ---------------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------------


def format_param_count(n: float) -> str:
    """``4.2e6 -> "4.2M"``, ``1.1e9 -> "1.1B"``, ``350e3 -> "350K"``: three significant digits."""
    if not math.isfinite(n) or n < 0:
        raise ValueError(f"parameter count must be a finite non-negative number, got {n!r}")
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:.3g}"


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
    hists = np.asarray(hists, dtype=np.float64)
    edges = np.asarray(edges, dtype=np.float64)
    if hists.ndim == 1:
        hists = hists[None, :]
    if hists.ndim != 2:
        raise ValueError(f"hists must be [layers, bins], got shape {hists.shape}")
    if edges.ndim != 1 or edges.size != hists.shape[1] + 1:
        raise ValueError(
            f"edges must hold bins + 1 = {hists.shape[1] + 1} values, got shape {edges.shape}"
        )
    lo, hi = float(default[0]), float(default[1])
    if not lo < hi:
        raise ValueError(f"default must be (low, high) with low < high, got {default}")
    if not 0.0 <= tol < 1.0:
        raise ValueError(f"tol must lie in [0, 1), got {tol}")
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
    low_edge, high_edge = float(edges[0]), float(edges[-1])
    if lowest < lo - eps:
        lo = max(low_edge, math.floor(lowest / step + eps) * step)
    if highest > hi + eps:
        hi = min(high_edge, math.ceil(highest / step - eps) * step)
    return round(lo, 10), round(hi, 10)


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


def _histograms(stats: CosineStatistics, histogram: str, who: str) -> np.ndarray:
    if histogram == "mean":
        hists = stats.hist_of_mean
    elif histogram == "pooled":
        hists = stats.hist_pooled
    else:
        raise ValueError(f"histogram must be 'mean' or 'pooled', got {histogram!r}")
    hists = np.asarray(hists, dtype=np.float64)
    layers = np.asarray(stats.layer_mean).shape[0]
    if hists.ndim != 2 or hists.shape[0] != layers or hists.shape[1] < 2:
        raise ValueError(
            f"{who}: {histogram} histograms have shape {hists.shape}, expected "
            f"[num_layers={layers}, bins]"
        )
    if layers < 2:
        raise ValueError(f"{who}: need at least two layers to draw a depth profile, got {layers}")
    return hists


def _check_label(label: object, who: str) -> str:
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"{who}: missing label (got {label!r}); every model needs a non-empty label")
    return label


def _check_entry(entry: object, who: str) -> FamilyEntry:
    if not isinstance(entry, FamilyEntry):
        raise TypeError(f"{who}: expected a FamilyEntry, got {type(entry).__name__}")
    _check_label(entry.label, who)
    if not isinstance(entry.stats, CosineStatistics):
        raise TypeError(f"{who} ({entry.label!r}): stats must be CosineStatistics, got {type(entry.stats).__name__}")
    if entry.size is not None:
        format_param_count(float(entry.size))  # raises on a bad size
    return entry


def _check_unique(names: Sequence[str], what: str) -> None:
    seen: set[str] = set()
    dupes = sorted({n for n in names if n in seen or seen.add(n)})
    if dupes:
        raise ValueError(f"duplicate {what}: {dupes}")


# ---------------------------------------------------------------------------------------------
# Drawing pieces
# ---------------------------------------------------------------------------------------------


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained", dpi=DPI)
    fig.get_layout_engine().set(w_pad=0.04, h_pad=0.04, wspace=0.03, hspace=0.04)
    return fig


def _save(fig: Figure, path: str | os.PathLike) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, facecolor="white")
    fig.clear()
    return path


def _check_vmax(vmax: float) -> float:
    if not (isinstance(vmax, (int, float)) and math.isfinite(vmax) and vmax > 0):
        raise ValueError(f"vmax (top of the density colour scale) must be a positive number, got {vmax!r}")
    return float(vmax)


def _draw_heatmap(ax: Axes, hists: np.ndarray, vmax: float):
    """One model's histograms as an image: columns = layers, rows = cosine bins."""
    return ax.imshow(
        hists.T,
        origin="lower",
        aspect="auto",
        extent=(0.0, 1.0, -1.0, 1.0),
        cmap=HEATMAP_CMAP,
        vmin=0.0,
        vmax=vmax,
        interpolation="nearest",
    )


def _style_heatmap(ax: Axes, ylim: tuple[float, float], xlabel: bool, ylabel: str | None) -> None:
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(*ylim)
    for spine in ax.spines.values():
        spine.set_visible(True)
        spine.set_linewidth(0.6)
    ax.set_xticks([0.0, 0.5, 1.0], ["0", "0.5", "1"])
    ax.tick_params(length=2.5, pad=2)
    if xlabel:
        ax.set_xlabel("layer fraction")
    else:
        ax.tick_params(labelbottom=False)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    else:
        ax.tick_params(labelleft=False)


def _add_colorbar(
    fig: Figure, image, axes: Sequence[Axes], hists: Sequence[np.ndarray], vmax: float
) -> None:
    """One colour bar for all heatmaps; an arrow on top when some density exceeds ``vmax``."""
    over = any(float(np.max(np.nan_to_num(h))) > vmax for h in hists)
    # about 0.14 in wide whatever the figure size: a fixed fraction would stunt it in narrow figures
    length = fig.get_figheight() - 1.3
    cbar = fig.colorbar(
        image, ax=list(axes), label="probability density", extend="max" if over else "neither",
        fraction=0.15, aspect=max(8.0, length / 0.14), pad=0.015,
    )
    cbar.ax.tick_params(labelsize=8)


def _shared_ylim(hists: Sequence[np.ndarray], edges: Sequence[np.ndarray], default) -> tuple[float, float]:
    lows, highs = zip(*(heatmap_ylim(h, e, default) for h, e in zip(hists, edges)))
    return min(lows), max(highs)


def _heatmap_title(ax: Axes, entry: FamilyEntry | str) -> None:
    """Model label (smaller font when long, so neighbouring titles never touch), size below."""
    label = entry if isinstance(entry, str) else entry.label
    size = _RC["axes.titlesize"] if len(label) <= 15 else (8.0 if len(label) <= 20 else 7.0)
    text = label if isinstance(entry, str) else _tick_label(entry)
    ax.set_title(text, fontsize=size, linespacing=1.15)


def _tick_label(entry: FamilyEntry) -> str:
    if entry.size is None:
        return entry.label
    return f"{entry.label}\n{format_param_count(float(entry.size))}"


def _trends(stats: Sequence[CosineStatistics]) -> tuple[np.ndarray, np.ndarray]:
    rows = [trend_statistics(np.asarray(s.layer_mean, dtype=np.float64)) for s in stats]
    return (
        np.array([t.spearman_rho for t in rows], dtype=np.float64),
        np.array([t.kendall_tau for t in rows], dtype=np.float64),
    )


def _trend_axes(ax: Axes, labels: Sequence[str], title: str) -> Axes:
    """Left axis for rho, a twin right axis for tau, models along x; returns the tau axis."""
    n = len(labels)
    ax.axhline(0.0, color="0.45", linestyle=":", linewidth=1.0, zorder=0)
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(*_TREND_YLIM)
    ax.set_xticks(np.arange(n), labels, rotation=45, ha="right", rotation_mode="anchor",
                  multialignment="right")
    ax.set_ylabel("Spearman ρ", color=_RHO_COLOR)
    ax.tick_params(axis="y", colors=_RHO_COLOR)
    ax.grid(axis="y", color="0.9", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_title(title)
    right = ax.twinx()
    right.set_ylim(*_TREND_YLIM)
    right.set_ylabel("Kendall τ", color=_TAU_COLOR)
    right.tick_params(axis="y", colors=_TAU_COLOR)
    right.spines["top"].set_visible(False)
    right.spines["left"].set_visible(False)
    right.spines["right"].set_color(_TAU_COLOR)
    ax.spines["left"].set_color(_RHO_COLOR)
    ax.spines["right"].set_visible(False)
    return right


def _mark_undefined(ax: Axes, xs: np.ndarray, *values: np.ndarray) -> None:
    """Write "n/a" at y = 0 where a model has no trend (constant layer means give NaN)."""
    undefined = np.zeros(len(xs), dtype=bool)
    for v in values:
        undefined |= ~np.isfinite(v)
    for x in np.asarray(xs)[undefined]:
        ax.text(x, 0.04, "n/a", ha="center", va="bottom", fontsize=7.5, color="0.35")


def _marker_size(n: int) -> float:
    return 6.0 if n <= 8 else 4.5


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


def plot_family_trend(
    entries: Sequence[FamilyEntry],
    path: str | os.PathLike,
    title: str,
    histogram: HistogramKind = "mean",
    vmax: float = DEFAULT_VMAX,
    ylim: tuple[float, float] = DEFAULT_YLIM,
) -> Path:
    """Depth trend of one model family beside one heatmap per model (paper Fig. 2 / S1).

    ``entries`` are in the order the x axis shows them (smallest model first). The trend panel
    spans every heatmap row; heatmaps wrap after six per row and share one colour bar and one
    y range (``ylim``, widened by :func:`heatmap_ylim` where a model has mass outside it).
    """
    vmax = _check_vmax(vmax)
    entries = list(entries)
    if not entries:
        raise ValueError("plot_family_trend: no entries to plot")
    for i, entry in enumerate(entries):
        _check_entry(entry, f"entry {i}")
    _check_unique([e.label for e in entries], "model labels")
    hists = [_histograms(e.stats, histogram, e.label) for e in entries]
    edges = [np.linspace(-1.0, 1.0, h.shape[1] + 1) for h in hists]
    y_range = _shared_ylim(hists, edges, ylim)
    rho, tau = _trends([e.stats for e in entries])

    n = len(entries)
    nrows = math.ceil(n / MAX_COLUMNS)
    ncols = math.ceil(n / nrows)  # balanced rows: 8 models -> 4 + 4, not 6 + 2
    trend_ratio = float(np.clip(0.32 * n, 1.6, 2.8))
    with matplotlib.rc_context(_RC):
        fig = _new_figure(1.75 * (ncols + trend_ratio) + 1.4, 2.35 * nrows + 1.3)
        grid = fig.add_gridspec(nrows, ncols + 1, width_ratios=[trend_ratio] + [1.0] * ncols)
        ax_trend = fig.add_subplot(grid[:, 0])
        right = _trend_axes(ax_trend, [_tick_label(e) for e in entries], "depth trend")
        x = np.arange(n)
        ms = _marker_size(n)
        # dodge tau a little to the right so equal values (often both 1) do not hide rho
        ax_trend.plot(x - _DODGE, rho, "-o", color=_RHO_COLOR, ms=ms, lw=1.6, label="Spearman ρ", zorder=3,
                      clip_on=False)
        right.plot(x + _DODGE, tau, "-s", color=_TAU_COLOR, ms=ms - 0.5, lw=1.6, label="Kendall τ", zorder=3,
                   clip_on=False)
        _mark_undefined(ax_trend, x, rho, tau)

        heat_axes: list[Axes] = []
        image = None
        first = None
        for i, (entry, h) in enumerate(zip(entries, hists)):
            row, col = divmod(i, ncols)
            ax = fig.add_subplot(grid[row, col + 1], sharex=first, sharey=first)
            first = first or ax
            image = _draw_heatmap(ax, h, vmax)
            # x labels on the lowest heatmap of each column, so a short last row leaves none bare
            lowest_in_column = i + ncols >= n
            _style_heatmap(ax, y_range, lowest_in_column, "cosine similarity" if col == 0 else None)
            _heatmap_title(ax, entry)
            heat_axes.append(ax)
        _add_colorbar(fig, image, heat_axes, hists, vmax)
        fig.suptitle(title)
        return _save(fig, path)


def plot_paired_trend(
    pairs: Sequence[tuple[FamilyEntry, FamilyEntry]],
    path: str | os.PathLike,
    title: str,
    row_labels: tuple[str, str] = ("scratch", "distilled"),
    histogram: HistogramKind = "mean",
    vmax: float = DEFAULT_VMAX,
    ylim: tuple[float, float] = DEFAULT_YLIM,
) -> Path:
    """Two rows of heatmaps (first vs. second member of each pair) and a joint trend panel.

    In the trend panel the first members form one polyline (circles), the second members
    another (squares) just to the right of the same x positions; dashed grey lines join the
    two points of each pair. The x tick labels are the first members' labels (and sizes).
    """
    vmax = _check_vmax(vmax)
    pairs = list(pairs)
    if not pairs:
        raise ValueError("plot_paired_trend: no pairs to plot")
    row_labels = tuple(row_labels)
    if len(row_labels) != 2:
        raise ValueError(f"row_labels must name exactly two rows, got {len(row_labels)}: {row_labels!r}")
    for r, label in enumerate(row_labels):
        _check_label(label, f"row label {r}")
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"pair {i}: expected a (first, second) pair of FamilyEntry, got {pair!r:.80}")
        for r in range(2):
            _check_entry(pair[r], f"pair {i} ({row_labels[r]})")
    for r in range(2):
        _check_unique([p[r].label for p in pairs], f"{row_labels[r]} labels")
    hists = [[_histograms(p[r].stats, histogram, p[r].label) for p in pairs] for r in range(2)]
    flat = hists[0] + hists[1]
    y_range = _shared_ylim(flat, [np.linspace(-1.0, 1.0, h.shape[1] + 1) for h in flat], ylim)
    trends = [_trends([p[r].stats for p in pairs]) for r in range(2)]

    n = len(pairs)
    trend_ratio = float(np.clip(0.4 * n, 1.8, 3.0))
    with matplotlib.rc_context(_RC):
        fig = _new_figure(1.75 * (n + trend_ratio) + 1.5, 2.35 * 2 + 1.6)
        grid = fig.add_gridspec(2, n + 1, width_ratios=[trend_ratio] + [1.0] * n)
        ax_trend = fig.add_subplot(grid[:, 0])
        right = _trend_axes(ax_trend, [_tick_label(p[0]) for p in pairs], "depth trend")
        ax_trend.set_title("depth trend", pad=22)  # room for the legend above the panel
        x = np.arange(n)
        ms = _marker_size(n)
        # each model's four points side by side: first-row rho, tau left of the tick,
        # second-row rho, tau right of it (0.1 model units apart, so equal values stay visible)
        xs_rho = [x - 0.21, x + 0.07]
        xs_tau = [x - 0.07, x + 0.21]
        # first members: filled circles, dark; second members: open squares, light
        looks = [
            dict(marker="o", rho=_RHO_COLOR, tau=_TAU_COLOR, face=None),
            dict(marker="s", rho=_RHO_COLOR_LIGHT, tau=_TAU_COLOR_LIGHT, face="white"),
        ]
        for r, look in enumerate(looks):
            rho, tau = trends[r]
            for axis, xs, values, color in (
                (ax_trend, xs_rho[r], rho, look["rho"]),
                (right, xs_tau[r], tau, look["tau"]),
            ):
                axis.plot(xs, values, marker=look["marker"], ls="-", color=color, ms=ms, lw=1.5,
                          markerfacecolor=look["face"] or color, markeredgewidth=1.3, zorder=3,
                          clip_on=False)
        for r in range(2):
            _mark_undefined(ax_trend, (xs_rho[r] + xs_tau[r]) / 2, *trends[r])
        for i in range(n):
            for axis, xs, k in ((ax_trend, xs_rho, 0), (right, xs_tau, 1)):
                axis.plot([xs[0][i], xs[1][i]], [trends[0][k][i], trends[1][k][i]],
                          ls="--", color="0.55", lw=0.9, zorder=2, clip_on=False)
        handles = [
            Line2D([], [], color="0.3", marker="o", ls="-", ms=5, label=row_labels[0]),
            Line2D([], [], color="0.5", marker="s", ls="-", ms=5, markerfacecolor="white", label=row_labels[1]),
            Line2D([], [], color="0.55", ls="--", lw=0.9, label="pair"),
        ]
        ax_trend.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3,
                        frameon=False, handlelength=1.8, columnspacing=1.0, borderaxespad=0.2)

        heat_axes: list[Axes] = []
        image = None
        first = None
        for r in range(2):
            for i, pair in enumerate(pairs):
                ax = fig.add_subplot(grid[r, i + 1], sharex=first, sharey=first)
                first = first or ax
                image = _draw_heatmap(ax, hists[r][i], vmax)
                _style_heatmap(ax, y_range, r == 1, f"{row_labels[r]}\ncosine similarity" if i == 0 else None)
                _heatmap_title(ax, pair[r])
                heat_axes.append(ax)
        _add_colorbar(fig, image, heat_axes, flat, vmax)
        fig.suptitle(title)
        return _save(fig, path)


def plot_dataset_robustness(
    grid: Mapping[str, Mapping[str, CosineStatistics]],
    path: str | os.PathLike,
    title: str,
    model_order: Sequence[str],
    dataset_order: Sequence[str],
    histogram: HistogramKind = "mean",
    vmax: float = DEFAULT_VMAX,
    ylim: tuple[float, float] = DEFAULT_YLIM,
) -> Path:
    """One heatmap row per dataset (``grid[dataset][model]``) and, last, its depth trend.

    Every dataset must hold exactly the models of ``model_order`` and ``grid`` exactly the
    datasets of ``dataset_order``; anything missing or extra is an error, not a silent gap.
    The trend column shows Spearman rho (solid, blue) and Kendall tau (dashed, red) on one
    axis, models in ``model_order``.
    """
    vmax = _check_vmax(vmax)
    model_order = list(model_order)
    dataset_order = list(dataset_order)
    if not grid:
        raise ValueError("plot_dataset_robustness: grid is empty")
    if not model_order:
        raise ValueError("plot_dataset_robustness: model_order is empty")
    if not dataset_order:
        raise ValueError("plot_dataset_robustness: dataset_order is empty")
    for d in dataset_order:
        _check_label(d, "dataset_order")
    for m in model_order:
        _check_label(m, "model_order")
    _check_unique(dataset_order, "datasets in dataset_order")
    _check_unique(model_order, "models in model_order")
    missing = [d for d in dataset_order if d not in grid]
    extra = [d for d in grid if d not in dataset_order]
    if missing or extra:
        raise ValueError(
            f"datasets in grid do not match dataset_order: missing {missing}, not in dataset_order {extra}"
        )
    for d in dataset_order:
        row = grid[d]
        missing = [m for m in model_order if m not in row]
        extra = [m for m in row if m not in model_order]
        if missing or extra:
            raise ValueError(
                f"dataset {d!r}: models do not match model_order: missing {missing}, "
                f"not in model_order {extra}"
            )
        for m in model_order:
            if not isinstance(row[m], CosineStatistics):
                raise TypeError(f"grid[{d!r}][{m!r}] must be CosineStatistics, got {type(row[m]).__name__}")
    hists = {
        (d, m): _histograms(grid[d][m], histogram, f"{d}/{m}") for d in dataset_order for m in model_order
    }
    flat = list(hists.values())
    y_range = _shared_ylim(flat, [np.linspace(-1.0, 1.0, h.shape[1] + 1) for h in flat], ylim)

    nrows, ncols = len(dataset_order), len(model_order)
    trend_ratio = float(np.clip(0.3 * ncols, 1.4, 2.6))
    with matplotlib.rc_context(_RC):
        fig = _new_figure(1.75 * (ncols + trend_ratio) + 1.9, 2.2 * nrows + 1.4)
        gs = fig.add_gridspec(nrows, ncols + 1, width_ratios=[1.0] * ncols + [trend_ratio])
        heat_axes: list[Axes] = []
        image = None
        first = None
        trend_first = None
        x = np.arange(ncols)
        ms = _marker_size(ncols)
        for r, d in enumerate(dataset_order):
            last_row = r == nrows - 1
            for c, m in enumerate(model_order):
                ax = fig.add_subplot(gs[r, c], sharex=first, sharey=first)
                first = first or ax
                image = _draw_heatmap(ax, hists[(d, m)], vmax)
                _style_heatmap(ax, y_range, last_row, f"{d}\ncosine similarity" if c == 0 else None)
                if c == 0:
                    ax.yaxis.label.set_fontweight("bold")
                if r == 0:
                    _heatmap_title(ax, m)
                heat_axes.append(ax)
            rho, tau = _trends([grid[d][m] for m in model_order])
            ax_t = fig.add_subplot(gs[r, ncols], sharex=trend_first, sharey=trend_first)
            trend_first = trend_first or ax_t
            ax_t.axhline(0.0, color="0.45", linestyle=":", linewidth=1.0, zorder=0)
            ax_t.plot(x - _DODGE, rho, "-o", color=_RHO_COLOR, ms=ms, lw=1.6, label="Spearman ρ",
                      zorder=3, clip_on=False)
            ax_t.plot(x + _DODGE, tau, "--s", color=_TAU_COLOR, ms=ms - 0.5, lw=1.6, label="Kendall τ",
                      zorder=3, clip_on=False)
            _mark_undefined(ax_t, x, rho, tau)
            ax_t.set_xlim(-0.5, ncols - 0.5)
            ax_t.set_ylim(*_TREND_YLIM)
            ax_t.grid(axis="y", color="0.9", linewidth=0.6)
            ax_t.set_axisbelow(True)
            ax_t.yaxis.tick_right()
            ax_t.yaxis.set_label_position("right")
            ax_t.spines["left"].set_visible(False)
            ax_t.spines["right"].set_visible(True)
            ax_t.set_ylabel("rank correlation")
            ax_t.tick_params(length=2.5, pad=2)
            if last_row:
                ax_t.set_xticks(x, model_order, rotation=45, ha="right", rotation_mode="anchor")
            else:
                ax_t.tick_params(labelbottom=False)
            if r == 0:
                ax_t.set_title("depth trend")
                ax_t.legend(loc="best", frameon=True, framealpha=0.85, edgecolor="none",
                            handlelength=2.2)
        _add_colorbar(fig, image, heat_axes, flat, vmax)
        fig.suptitle(title)
        return _save(fig, path)


def plot_layer_means(
    curves: Mapping[str, np.ndarray],
    path: str | os.PathLike,
    title: str,
    ylabel: str = "mean cosine similarity",
) -> Path:
    """Mean cosine similarity against layer fraction, one line per label (a quick diagnostic).

    Curves may have different lengths (models of different depth): each is drawn against its
    own layer fraction ``l / (len - 1)``.
    """
    if not curves:
        raise ValueError("plot_layer_means: no curves to plot")
    prepared: list[tuple[str, np.ndarray]] = []
    for label, values in curves.items():
        _check_label(label, "plot_layer_means")
        arr = np.asarray(values, dtype=np.float64)
        if arr.ndim != 1 or arr.size < 2:
            raise ValueError(f"curve {label!r}: need a 1-D array of at least two layer means, got shape {arr.shape}")
        prepared.append((label, arr))
    n = len(prepared)
    colors = (
        matplotlib.colormaps["tab10"](np.arange(n) % 10)
        if n <= 10
        else matplotlib.colormaps["viridis"](np.linspace(0.0, 0.92, n))
    )
    with matplotlib.rc_context(_RC):
        fig = _new_figure(6.4 if n <= 8 else 7.4, 3.8)
        ax = fig.add_subplot()
        ax.axhline(0.0, color="0.45", linestyle=":", linewidth=1.0, zorder=0)
        for (label, arr), color in zip(prepared, colors):
            frac = np.arange(arr.size) / (arr.size - 1)
            ax.plot(frac, arr, "-o", color=color, ms=3 if arr.size <= 40 else 0, lw=1.5, label=label)
        ax.set_xlim(0.0, 1.0)
        ax.set_xlabel("layer fraction (layer / last layer)")
        ax.set_ylabel(ylabel)
        ax.grid(color="0.92", linewidth=0.6)
        ax.set_axisbelow(True)
        ax.spines["right"].set_visible(False)
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False,
                  ncol=1 if n <= 14 else 2)
        ax.set_title(title, fontsize=11, fontweight="bold")
        return _save(fig, path)


# ---------------------------------------------------------------------------------------------
# Mid-training figures: methods against checkpoint steps
# ---------------------------------------------------------------------------------------------

_METRIC_NAMES = {
    "spearman_rho": "Spearman ρ",
    "kendall_tau": "Kendall τ",
    "last_1": "mean cosine, last layer",
    "last_half": "mean cosine, deeper half of layers",
}
_RANK_METRICS = ("spearman_rho", "kendall_tau")  # share the fixed [-1, 1] axis
_ROW_LABEL_WIDTH = 22  # characters per line of a grid row label before it wraps


def method_colors(methods: Sequence[str]) -> dict[str, str]:
    """A distinct colour (hex string) per method, assigned in the order given.

    Qualitative ``tab10`` for up to ten methods, ``tab20`` up to twenty, evenly spaced hues
    beyond. The result depends only on the list (same list, same colours), so figures that
    pass the same method list colour each method alike. An empty list gives an empty dict.
    """
    methods = list(methods)
    for m in methods:
        _check_label(m, "method_colors")
    _check_unique(methods, "methods")
    n = len(methods)
    if n <= 10:
        colors = matplotlib.colormaps["tab10"](np.arange(n))
    elif n <= 20:
        colors = matplotlib.colormaps["tab20"](np.arange(n))
    else:
        colors = matplotlib.colormaps["hsv"](np.linspace(0.0, 1.0, n, endpoint=False))
    return {m: to_hex(c) for m, c in zip(methods, colors)}


def _check_step(step: object, who: str) -> int:
    """A checkpoint step: a non-negative integer (integral floats such as 10.0 are accepted)."""
    if isinstance(step, (bool, np.bool_)):
        raise ValueError(f"{who}: step must be a non-negative integer, got {step!r}")
    if isinstance(step, (float, np.floating)) and float(step).is_integer():
        step = int(step)
    try:
        value = operator.index(step)
    except TypeError:
        raise ValueError(f"{who}: step must be a non-negative integer, got {step!r}") from None
    if value < 0:
        raise ValueError(f"{who}: step must be a non-negative integer, got {value}")
    return int(value)


def _step_title(step: int) -> str:
    return "step 0 (before)" if step == 0 else f"step {step:,}"


def _check_frame(frame: object, required: Sequence[str], who: str) -> pd.DataFrame:
    """Validate a long-format frame (method, seed, step, values...) and return a clean copy."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{who}: expected a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{who}: frame is missing column(s) {missing}; it needs {list(required)} "
            f"(has {[str(c) for c in frame.columns]})"
        )
    if frame.empty:
        raise ValueError(f"{who}: frame is empty, nothing to plot")
    data = frame[list(required)].copy()
    for m in data["method"].unique():
        _check_label(m, f"{who}: method")
    if data["seed"].isna().any():
        raise ValueError(f"{who}: column 'seed' has missing values")
    for column in required[2:]:
        try:
            data[column] = pd.to_numeric(data[column]).astype(np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{who}: column {column!r} must be numeric ({err})") from None
    steps = data["step"].to_numpy()
    if not np.all(np.isfinite(steps)) or np.any(steps < 0) or np.any(steps != np.round(steps)):
        raise ValueError(f"{who}: column 'step' must hold non-negative integers")
    dupes = data.duplicated(["method", "seed", "step"], keep=False)
    if dupes.any():
        first = data.loc[dupes, ["method", "seed", "step"]].iloc[0].tolist()
        raise ValueError(
            f"{who}: {int(dupes.sum())} rows repeat a (method, seed, step), e.g. {first}; "
            "aggregate them first"
        )
    return data


def _method_order(data: pd.DataFrame, methods: Sequence[str] | None, who: str) -> list[str]:
    """Colour/legend order: ``methods`` if given (it must cover the frame), else sorted names."""
    present = set(data["method"].unique())
    if methods is None:
        return sorted(present)
    methods = list(methods)
    absent = sorted(present - set(methods))
    if absent:
        raise ValueError(f"{who}: methods {absent} are in the frame but not in methods={methods}")
    return methods


def _seed_summary(data: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per (method, step): mean, sample std and count of ``column`` over seeds (NaNs dropped)."""
    finite = data.loc[np.isfinite(data[column]), ["method", "step", column]]
    return (
        finite.groupby(["method", "step"])[column]
        .agg(["mean", "std", "count"])
        .reset_index()
        .sort_values(["method", "step"])
    )


def _plot_seed_band(ax: Axes, summary: pd.DataFrame, method: str, color: str, ms: float) -> bool:
    """Mean over seeds as markers + line, mean +- std as a band where >= 2 seeds; drawn?"""
    rows = summary[summary["method"] == method]
    if rows.empty:
        return False
    x = rows["step"].to_numpy()
    mean = rows["mean"].to_numpy()
    std = rows["std"].to_numpy()
    ax.plot(x, mean, "-o", color=color, ms=ms, lw=1.6, zorder=3)
    has_band = np.isfinite(std)
    if has_band.any():
        ax.fill_between(x, mean - std, mean + std, where=has_band, color=color, alpha=0.18, lw=0,
                        zorder=2)
    return True


def _method_legend(fig: Figure, order: Sequence[str], colors: Mapping[str, str], marker: str | None) -> None:
    handles = [
        Line2D([], [], color=colors[m], marker=marker, ms=5, lw=1.8, label=m) for m in order
    ]
    n = len(handles)
    ncol = math.ceil(n / math.ceil(n / 4)) if n else 1  # balanced rows of at most four
    # matplotlib fills legend columns first; interleave so the entries read row by row
    handles = [h for col in range(ncol) for h in handles[col::ncol]]
    fig.legend(handles=handles, loc="outside lower center", ncol=ncol, frameon=False,
               handlelength=2.2, columnspacing=1.6)


def _style_step_axis(ax: Axes) -> None:
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
    ax.grid(color="0.92", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.spines["right"].set_visible(False)
    ax.tick_params(length=2.5, pad=2)


def plot_condensation_grid(
    rows: Mapping[str, Sequence[tuple[int, CosineStatistics]]],
    path: str | os.PathLike,
    title: str,
    histogram: HistogramKind = "mean",
    vmax: float = DEFAULT_VMAX,
    ylim: tuple[float, float] = DEFAULT_YLIM,
    annotate_trend: bool = True,
    methods: Sequence[str] | None = None,
) -> Path:
    """Mid-training heatmaps: one row per training method, one column per checkpoint step (Fig. 6).

    ``rows[method]`` lists ``(step, stats)`` pairs, in any order; columns are the sorted union
    of all rows' steps (step 0, before mid-training, is titled "step 0 (before)"). A row that
    lacks a step gets a blank "no checkpoint" cell in that column. Rows keep the mapping's
    order; each method's name, in its :func:`method_colors` colour (over ``methods`` if given,
    else the sorted names), labels its row on the left. All cells share one y range
    (``ylim`` widened by :func:`heatmap_ylim`) and one colour bar. With ``annotate_trend``
    each cell shows its Spearman rho and Kendall tau of layer mean against depth.
    """
    vmax = _check_vmax(vmax)
    if not isinstance(rows, Mapping):
        raise TypeError(f"plot_condensation_grid: rows must be a mapping method -> [(step, stats)], "
                        f"got {type(rows).__name__}")
    if not rows:
        raise ValueError("plot_condensation_grid: no rows to plot")
    hists: dict[tuple[str, int], np.ndarray] = {}
    trends: dict[tuple[str, int], tuple[float, float]] = {}
    for method, checkpoints in rows.items():
        _check_label(method, "plot_condensation_grid: row")
        checkpoints = list(checkpoints)
        if not checkpoints:
            raise ValueError(f"plot_condensation_grid: row {method!r} has no checkpoints")
        for i, item in enumerate(checkpoints):
            who = f"row {method!r}, checkpoint {i}"
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise ValueError(f"{who}: expected a (step, CosineStatistics) pair, got {item!r:.80}")
            step = _check_step(item[0], who)
            stats = item[1]
            if not isinstance(stats, CosineStatistics):
                raise TypeError(f"{who}: stats must be CosineStatistics, got {type(stats).__name__}")
            if (method, step) in hists:
                raise ValueError(f"row {method!r}: step {step} appears more than once")
            hists[(method, step)] = _histograms(stats, histogram, f"{method} @ step {step}")
            rho, tau = _trends([stats])
            trends[(method, step)] = (float(rho[0]), float(tau[0]))
    row_order = list(rows)
    if methods is not None:
        absent = [m for m in row_order if m not in list(methods)]
        if absent:
            raise ValueError(f"plot_condensation_grid: rows {absent} are not in methods={list(methods)}")
    colors = method_colors(list(methods) if methods is not None else sorted(row_order))
    steps = sorted({s for _, s in hists})
    flat = list(hists.values())
    y_range = _shared_ylim(flat, [np.linspace(-1.0, 1.0, h.shape[1] + 1) for h in flat], ylim)

    nrows, ncols = len(row_order), len(steps)
    with matplotlib.rc_context(_RC):
        fig = _new_figure(max(1.75 * ncols + 2.2, 5.0), 2.05 * nrows + 1.15)
        gs = fig.add_gridspec(nrows, ncols)
        heat_axes: list[Axes] = []
        image = None
        first = None
        for r, method in enumerate(row_order):
            last_row = r == nrows - 1
            for c, step in enumerate(steps):
                ax = fig.add_subplot(gs[r, c], sharex=first, sharey=first)
                first = first or ax
                _style_heatmap(ax, y_range, last_row, "cosine similarity" if c == 0 else None)
                if r == 0:
                    ax.set_title(_step_title(step))
                if c == 0:
                    # the method's name left of the y label, in the method's colour
                    ax.annotate(
                        textwrap.fill(method, _ROW_LABEL_WIDTH), xy=(0.0, 0.5),
                        xycoords=ax.yaxis.label, xytext=(-5, 0), textcoords="offset points",
                        rotation=90, ha="right", va="center", fontweight="bold", fontsize=10,
                        color=colors[method], multialignment="center",
                    )
                heat_axes.append(ax)
                h = hists.get((method, step))
                if h is None:
                    ax.set_facecolor("0.96")
                    ax.text(0.5, 0.5, "no checkpoint", transform=ax.transAxes, ha="center",
                            va="center", fontsize=8, color="0.45", style="italic")
                    continue
                image = _draw_heatmap(ax, h, vmax)
                if annotate_trend:
                    rho, tau = trends[(method, step)]
                    text = ("ρ n/a  τ n/a" if not (math.isfinite(rho) and math.isfinite(tau))
                            else f"ρ {rho:+.2f}  τ {tau:+.2f}".replace("-", "\u2212"))
                    ax.text(0.04, 0.96, text, transform=ax.transAxes, ha="left", va="top",
                            fontsize=7, color="0.15",
                            bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.75))
        _add_colorbar(fig, image, heat_axes, flat, vmax)
        fig.suptitle(title)
        return _save(fig, path)


def plot_trajectory(
    frame: pd.DataFrame,
    path: str | os.PathLike,
    title: str,
    metrics: Sequence[str] = ("spearman_rho", "kendall_tau"),
    methods: Sequence[str] | None = None,
) -> Path:
    """Depth-trend statistics against training step, one panel per metric (paper Fig. 4).

    ``frame`` is long format: columns ``method``, ``seed``, ``step`` and each of ``metrics``,
    one row per (method, seed, checkpoint). Per method: the mean over seeds as a line with a
    marker at each checkpoint, and a band of mean +- sample std where two or more seeds have a
    value (none for a single seed). NaN metric values (undefined trends) are left out. Colours
    and legend order follow :func:`method_colors` over ``methods`` (default: sorted names).
    """
    metrics = list(metrics)
    if not metrics:
        raise ValueError("plot_trajectory: metrics is empty")
    _check_unique(metrics, "metrics")
    for m in metrics:
        if m in ("method", "seed", "step"):
            raise ValueError(f"plot_trajectory: {m!r} is not a metric column")
    data = _check_frame(frame, ["method", "seed", "step", *metrics], "plot_trajectory")
    order = _method_order(data, methods, "plot_trajectory")
    colors = method_colors(order)
    present = [m for m in order if m in set(data["method"])]
    ms = 4.5 if data["step"].nunique() <= 20 else 3.0

    with matplotlib.rc_context(_RC):
        k = len(metrics)
        fig = _new_figure(3.5 * k + 0.6, 3.6)
        first = first_rank = None
        for i, metric in enumerate(metrics):
            is_rank = metric in _RANK_METRICS
            ax = fig.add_subplot(1, k, i + 1, sharex=first, sharey=first_rank if is_rank else None)
            first = first or ax
            summary = _seed_summary(data, metric)
            if is_rank:
                ax.axhline(0.0, color="0.45", linestyle=":", linewidth=1.0, zorder=1)
            for m in present:
                _plot_seed_band(ax, summary, m, colors[m], ms)
            if summary.empty:
                ax.text(0.5, 0.5, "no finite values", transform=ax.transAxes, ha="center",
                        va="center", fontsize=8, color="0.45", style="italic")
            name = _METRIC_NAMES.get(metric, metric)
            ax.set_title(name)
            if is_rank:
                ax.set_ylim(-1.05, 1.05)
                if first_rank is None:  # one label for the shared rank-correlation axis
                    ax.set_ylabel("rank correlation with depth")
                    first_rank = ax
            else:
                ax.set_ylabel("mean cosine similarity" if metric in _METRIC_NAMES else name)
            ax.set_xlabel("training step")
            _style_step_axis(ax)
        _method_legend(fig, present, colors, "o")
        fig.suptitle(title)
        return _save(fig, path)


def plot_loss_curves(
    frame: pd.DataFrame,
    path: str | os.PathLike,
    title: str,
    methods: Sequence[str] | None = None,
    train_label: str = "training loss",
) -> Path:
    """Training loss (every step) and validation loss (checkpoints) against step, per method.

    ``frame`` columns: ``method``, ``seed``, ``step``, ``loss`` (training loss) and
    ``val_loss`` (NaN except at checkpoints). Left: the mean training loss over seeds, smoothed
    by a centred rolling mean of ``max(1, n // 50)`` steps (``n`` = that method's logged
    steps). Right: mean validation loss over seeds at each checkpoint (markers and line) with
    a mean +- std band where two or more seeds have a value. Linear axes; colours as in
    :func:`method_colors` over ``methods`` (default: sorted names).
    """
    data = _check_frame(frame, ["method", "seed", "step", "loss", "val_loss"], "plot_loss_curves")
    if not np.isfinite(data["loss"]).any():
        raise ValueError("plot_loss_curves: column 'loss' has no finite values")
    order = _method_order(data, methods, "plot_loss_curves")
    colors = method_colors(order)
    present = [m for m in order if m in set(data["method"])]
    train = data[np.isfinite(data["loss"])]
    val = _seed_summary(data, "val_loss")
    ms = 4.5 if val["step"].nunique() <= 20 else 3.0

    with matplotlib.rc_context(_RC):
        fig = _new_figure(7.6, 3.6)
        ax_train = fig.add_subplot(1, 2, 1)
        ax_val = fig.add_subplot(1, 2, 2, sharex=ax_train)
        windows = set()
        for m in present:
            curve = train[train["method"] == m].groupby("step")["loss"].mean().sort_index()
            if curve.empty:
                continue
            window = max(1, len(curve) // 50)
            windows.add(window)
            smooth = curve.rolling(window, center=True, min_periods=1).mean()
            ax_train.plot(smooth.index.to_numpy(), smooth.to_numpy(), color=colors[m], lw=1.4)
            _plot_seed_band(ax_val, val, m, colors[m], ms)
        smoothing = (
            "" if windows == {1}
            else f" (rolling mean, {windows.pop()} steps)" if len(windows) == 1
            else " (rolling mean)"
        )
        ax_train.set_title(train_label + smoothing)
        ax_val.set_title("validation loss")
        if val.empty:
            ax_val.text(0.5, 0.5, "no validation checkpoints", transform=ax_val.transAxes,
                        ha="center", va="center", fontsize=8, color="0.45", style="italic")
            ax_val.tick_params(axis="y", labelleft=False, length=0)
        for ax in (ax_train, ax_val):
            ax.set_xlabel("training step")
            ax.set_ylabel("loss")
            ax.yaxis.get_major_formatter().set_useOffset(False)
            _style_step_axis(ax)
        _method_legend(fig, present, colors, "o")
        fig.suptitle(title)
        return _save(fig, path)
