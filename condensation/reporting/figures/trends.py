"""Depth-trend figures: models' heatmaps beside their Spearman rho and Kendall tau, and beside
the mean cosine of their deeper half of layers with its interval over sequences.

With few layers every rising profile gives rho = tau = 1; the deeper layers' mean keeps the
size of the effect, and its interval says whether two models differ by more than the choice
of sequences. The trends come with the data (:class:`FamilyEntry`), computed by the caller
under the configured conventions, so a figure always shows what the trend table reports.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from condensation.geometry import CosineStatistics
from condensation.lenses import LENSES
from condensation.reporting.figures.heatmaps import (
    Heatmap,
    HeatmapOptions,
    heatmap_grid,
)
from condensation.reporting.figures.style import (
    DEEP_COLOR,
    DEEP_COLOR_LIGHT,
    RC,
    RHO_COLOR,
    RHO_COLOR_LIGHT,
    TAU_COLOR,
    TAU_COLOR_LIGHT,
    check_unique,
    format_param_count,
    method_colors,
    new_figure,
    save,
)
from condensation.trend import TrendStatistics

MAX_COLUMNS = 6
"""Heatmaps per row in :func:`plot_family_trend` before wrapping to a new row."""

_TREND_YLIM = (-1.0, 1.05)
_DODGE = 0.07  # horizontal offset between rho and tau points of one model, in model units
DEEPER_TITLE = "mean cosine, deeper half\nof layers (95 % interval)"
"""Title of the panel that shows each model's ``last_half`` with its interval as error bars."""
NO_INTERVAL_NOTE = "no interval: per-sequence\nmeans not stored"


@dataclass(frozen=True)
class FamilyEntry:
    """One model in a figure: its label, statistics, parameter count (or None) and depth trend."""

    label: str
    stats: CosineStatistics
    size: float | None  # parameter count, shown under the label ("4.2M")
    trend: TrendStatistics
    lenses: Mapping[str, float] | None = None
    """The other lenses over the deeper half (``trend.lens_summary``); None or empty: not measured."""

    @property
    def tick_label(self) -> str:
        return self.label if self.size is None else f"{self.label}\n{format_param_count(float(self.size))}"


class _Series(NamedTuple):
    """A polyline of rho and one of tau in a trend panel: x offsets from each tick, line styles."""

    entries: Sequence[FamilyEntry]
    dx: tuple[float, float]
    rho: dict
    tau: dict


class _Points(NamedTuple):
    """One polyline in a deeper-layers panel: x offset from each tick, line style (with colour)."""

    entries: Sequence[FamilyEntry]
    dx: float
    style: dict


def _values(entries: Sequence[FamilyEntry]) -> np.ndarray:
    """``[2, models]``: rho, then tau."""
    return np.array([[e.trend.spearman_rho for e in entries], [e.trend.kendall_tau for e in entries]], dtype=float)


def _plain_series(entries: Sequence[FamilyEntry], tau_style: str = "-") -> _Series:
    """Rho as dark blue circles, tau dodged to the right as dark red squares."""
    ms = 6.0 if len(entries) <= 8 else 4.5
    return _Series(entries, (-_DODGE, _DODGE),
                   rho=dict(ls="-", marker="o", color=RHO_COLOR, ms=ms, lw=1.6, label="Spearman ρ"),
                   tau=dict(ls=tau_style, marker="s", color=TAU_COLOR, ms=ms - 0.5, lw=1.6, label="Kendall τ"))


def _last_half(entries: Sequence[FamilyEntry]) -> np.ndarray:
    """``[3, models]``: the deeper half's mean cosine, then its interval's low and high ends."""
    trends = [e.trend for e in entries]
    return np.array([[t.last_half for t in trends], [t.last_half_ci[0] for t in trends],
                     [t.last_half_ci[1] for t in trends]], dtype=float)


def _model_axis(ax: Axes, labels: Sequence[str]) -> np.ndarray:
    """Models along x (tick labels slanted), a light y grid; returns the tick positions."""
    x = np.arange(len(labels))
    ax.set_xlim(-0.5, len(labels) - 0.5)
    ax.set_xticks(x, labels, rotation=45, ha="right", rotation_mode="anchor", multialignment="right")
    ax.grid(axis="y", color="0.9", linewidth=0.6)
    ax.set_axisbelow(True)
    return x


def _trend_panel(ax: Axes, labels: Sequence[str], series: Sequence[_Series], twin: bool = True) -> Axes:
    """Rho and tau of each model (models along x); returns the axis tau is drawn on.

    ``twin``: rho on the left axis, tau on a twin right axis, each in its colour; else both on
    one axis labelled on the right. A model whose trend is undefined (NaN) gets "n/a".
    """
    x = _model_axis(ax, labels)
    ax.axhline(0.0, color="0.45", linestyle=":", linewidth=1.0, zorder=0)
    ax.set_ylim(*_TREND_YLIM)
    tau_axis = _twin_axis(ax) if twin else _right_axis(ax)
    for s in series:
        rho, tau = _values(s.entries)
        ax.plot(x + s.dx[0], rho, zorder=3, clip_on=False, **s.rho)
        tau_axis.plot(x + s.dx[1], tau, zorder=3, clip_on=False, **s.tau)
    for s in series:
        undefined = ~np.isfinite(_values(s.entries)).all(axis=0)
        for position in (x + (s.dx[0] + s.dx[1]) / 2)[undefined]:
            ax.text(position, 0.04, "n/a", ha="center", va="bottom", fontsize=7.5, color="0.35")
    return tau_axis


def _deeper_panel(ax: Axes, labels: Sequence[str], series: Sequence[_Points]) -> None:
    """Each model's mean cosine of its deeper half of layers (models along x) with its interval
    over sequences as an error bar: a vertical line from the low to the high end, with caps.

    Models without an interval (statistics stored before per-sequence means were) get a point
    only, and the panel says why.
    """
    x = _model_axis(ax, labels)
    missing = False
    for s in series:
        value, low, high = _last_half(s.entries)
        ax.plot(x + s.dx, value, zorder=3, clip_on=False, **s.style)
        shown = np.isfinite(low) & np.isfinite(high)
        at = (x + s.dx)[shown]
        ax.vlines(at, low[shown], high[shown], color=s.style["color"], lw=1.2, zorder=2)
        ax.plot(np.r_[at, at], np.r_[low[shown], high[shown]], ls="none", marker="_", ms=6, mew=1.2,
                color=s.style["color"], zorder=2, label="_caps")
        missing |= not shown.all()
    if missing:
        ax.text(0.5, 0.02, NO_INTERVAL_NOTE, transform=ax.transAxes, ha="center", va="bottom", fontsize=7,
                color="0.35")
    ax.spines["right"].set_visible(False)
    ax.set_ylabel("mean cosine similarity")
    ax.set_title(DEEPER_TITLE)


LENS_TITLE = "other lenses, deeper half\n(95 % interval; ↑/↓: more condensed)"
LOG_LENS_TITLE = "unbounded lenses, deeper half\n(95 % interval, log scale)"


def _lens_panel(ax: Axes, labels: Sequence[str], entries: Sequence[FamilyEntry], scale: str = "unit") -> None:
    """Each lens of :mod:`condensation.lenses` on ``scale`` per model (models along x), one colour
    each, with its jackknife interval: the "unit" lenses lie in [-1, 1] and share an axis; the
    "log" ones (alpha-ReQ, the massive-activation ratio) are positive and unbounded, on a
    logarithmic axis. The legend marks with an arrow which way is more condensed (none for a lens
    with no predicted sign)."""
    x = _model_axis(ax, labels)
    drawn = [lens for lens in LENSES if lens.scale == scale]
    colors = matplotlib.colormaps["Dark2"].colors if scale == "unit" else matplotlib.colormaps["Set1"].colors
    dx = np.linspace(-0.2, 0.2, len(drawn))
    for offset, lens, color in zip(dx, drawn, colors):
        value = np.array([e.lenses[lens.name] for e in entries], dtype=float)
        low = np.array([e.lenses[f"{lens.name}_low"] for e in entries], dtype=float)
        high = np.array([e.lenses[f"{lens.name}_high"] for e in entries], dtype=float)
        if scale == "log":  # a jackknife interval may reach below zero; the axis cannot
            low = np.where(low > 0, low, np.nan)
        arrow = {1: " ↑", -1: " ↓"}.get(lens.condensed, "")
        ax.plot(x + offset, value, ls="-", marker="o", ms=4, lw=1.1, color=color, clip_on=False,
                label=f"{lens.short}{arrow}", zorder=3)
        shown = np.isfinite(low) & np.isfinite(high)
        ax.vlines((x + offset)[shown], low[shown], high[shown], color=color, lw=1.0, zorder=2)
    if scale == "unit":
        ax.axhline(0.0, color="0.45", linestyle=":", linewidth=1.0, zorder=0)
        ax.set_ylim(-0.1, 1.05)
        ax.set_title(LENS_TITLE)
    else:
        ax.set_yscale("log")
        ax.set_title(LOG_LENS_TITLE)
    ax.spines["right"].set_visible(False)
    ax.legend(fontsize=6, loc="best", frameon=True, framealpha=0.85, handlelength=1.2, borderpad=0.3)


def _join_pairs(ax: Axes, dx: tuple[float, float], first: np.ndarray, second: np.ndarray) -> None:
    """A dashed grey line from each first member's point to its second member's."""
    for i, ends in enumerate(zip(first, second)):
        ax.plot([i + dx[0], i + dx[1]], ends, ls="--", color="0.55", lw=0.9, zorder=2, clip_on=False)


def _twin_axis(ax: Axes) -> Axes:
    ax.set_ylabel("Spearman ρ", color=RHO_COLOR)
    ax.tick_params(axis="y", colors=RHO_COLOR)
    ax.spines["left"].set_color(RHO_COLOR)
    ax.spines["right"].set_visible(False)
    right = ax.twinx()
    right.set_ylim(*_TREND_YLIM)
    right.set_ylabel("Kendall τ", color=TAU_COLOR)
    right.tick_params(axis="y", colors=TAU_COLOR)
    right.spines["top"].set_visible(False)
    right.spines["left"].set_visible(False)
    right.spines["right"].set_color(TAU_COLOR)
    return right


def _right_axis(ax: Axes) -> Axes:
    ax.yaxis.tick_right()
    ax.yaxis.set_label_position("right")
    ax.spines["left"].set_visible(False)
    ax.spines["right"].set_visible(True)
    ax.set_ylabel("rank correlation")
    ax.tick_params(length=2.5, pad=2)
    return ax


def _deep_style(models: int, **style) -> dict:
    return dict(dict(ls="-", marker="D", color=DEEP_COLOR, ms=5.5 if models <= 8 else 4.0, lw=1.6), **style)


def _cells(entries: Sequence[FamilyEntry]) -> list[Heatmap]:
    return [Heatmap(e.stats, title=e.tick_label) for e in entries]


def plot_family_trend(
    entries: Sequence[FamilyEntry], path: str | os.PathLike, title: str, heatmaps: HeatmapOptions = HeatmapOptions()
) -> Figure:
    """Depth trend of one model family beside one heatmap per model (paper Fig. 2 / S1).

    ``entries`` in x-axis order (smallest model first). Left, rho and tau; next, the deeper half
    of layers' mean cosine with its interval over sequences as error bars (separates models
    whose rho and tau are all 1); then, when every model has them, the other lenses
    (:mod:`condensation.lenses`) over the same layers. The panels span every heatmap row; heatmaps wrap after six
    per row, in balanced rows (8 models: 4 + 4).
    """
    entries = list(entries)
    if not entries:
        raise ValueError("plot_family_trend: no entries to plot")
    check_unique([e.label for e in entries], "model labels")
    n = len(entries)
    nrows = math.ceil(n / MAX_COLUMNS)
    ncols = math.ceil(n / nrows)
    trend_ratio = float(np.clip(0.32 * n, 1.6, 2.8))
    panels = 4 if all(e.lenses for e in entries) else 2  # the lenses' two panels when every model has them
    with matplotlib.rc_context(RC):
        fig = new_figure(1.75 * (ncols + panels * trend_ratio) + 1.9, 2.35 * nrows + 1.3 + 0.9 * (panels == 4))
        grid = fig.add_gridspec(nrows, ncols + panels, width_ratios=[trend_ratio] * panels + [1.0] * ncols)
        ax = fig.add_subplot(grid[:, 0])
        labels = [e.tick_label for e in entries]
        _trend_panel(ax, labels, [_plain_series(entries)])
        ax.set_title("depth trend")
        _deeper_panel(fig.add_subplot(grid[:, 1]), labels, [_Points(entries, 0.0, _deep_style(len(entries)))])
        if panels == 4:
            _lens_panel(fig.add_subplot(grid[:, 2]), labels, entries)
            _lens_panel(fig.add_subplot(grid[:, 3]), labels, entries, scale="log")
        rows = [_cells(entries[r * ncols : (r + 1) * ncols]) for r in range(nrows)]
        heatmap_grid(fig, grid, rows, ["cosine similarity"] * nrows, heatmaps, first_column=panels)
        fig.suptitle(title)
        return save(fig, path)


def _pair_styles(models: int) -> list[tuple[dict, dict, dict]]:
    """Each row's (rho, tau, deeper-layers) line styles in :func:`plot_paired_trend`: the first
    members filled circles in the dark colours, the second open squares in the light ones, a
    reference row dotted grey triangles."""
    first = dict(ls="-", marker="o", ms=6.0 if models <= 8 else 4.5, lw=1.5, markeredgewidth=1.3)
    second = dict(first, marker="s", markerfacecolor="white")
    reference = dict(first, marker="^", ls=":")
    return [
        (dict(first, color=RHO_COLOR), dict(first, color=TAU_COLOR), dict(first, color=DEEP_COLOR)),
        (dict(second, color=RHO_COLOR_LIGHT), dict(second, color=TAU_COLOR_LIGHT),
         dict(second, color=DEEP_COLOR_LIGHT)),
        (dict(reference, color="0.45"), dict(reference, color="0.65"), dict(reference, color="0.45")),
    ]


def _pair_legend(ax: Axes, row_labels: Sequence[str]) -> None:
    """The legend above the paired trend panel: each row's marker (two rows, or three with a
    reference) and the dashed line that joins a pair."""
    handles = [Line2D([], [], color="0.3", marker="o", ls="-", ms=5, label=row_labels[0]),
               Line2D([], [], color="0.5", marker="s", ls="-", ms=5, markerfacecolor="white", label=row_labels[1])]
    if len(row_labels) == 3:
        handles.append(Line2D([], [], color="0.45", marker="^", ls=":", ms=5, label=row_labels[2]))
    handles.append(Line2D([], [], color="0.55", ls="--", lw=0.9, label="pair"))
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(handles), frameon=False,
              handlelength=1.8, columnspacing=1.0, borderaxespad=0.2)


def plot_paired_trend(
    pairs: Sequence[tuple[FamilyEntry, ...]], path: str | os.PathLike, title: str,
    row_labels: tuple[str, ...] = ("scratch", "distilled"), heatmaps: HeatmapOptions = HeatmapOptions(),
) -> Figure:
    """Two rows of heatmaps (first vs. second member of each pair), or three with a reference row
    (e.g. a distilled student's teacher), a joint trend panel and a joint panel of the deeper half
    of layers' mean cosine with its interval over sequences.

    Each model's trend points sit side by side: the first member's rho and tau (filled circles,
    dark) left of the tick, the second member's (open squares, light) right of it, a reference
    member's (triangles, grey) beyond; dashed grey lines join each pair (the reference is shown,
    not joined). The deeper-layers panel marks members alike, with error bars. The x ticks name
    the first members.
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError("plot_paired_trend: no pairs to plot")
    members = len(pairs[0])
    for i, pair in enumerate(pairs):
        if len(pair) != members or members not in (2, 3):
            raise ValueError(f"pair {i}: expected (first, second) or (first, second, reference) like every pair, "
                             f"got {len(pair)} entries")
    if len(row_labels) != members:
        raise ValueError(f"row_labels must name the {members} rows, got {len(row_labels)}: {row_labels!r}")
    rows = [[pair[r] for pair in pairs] for r in range(members)]
    # the first row names the x ticks; a later row may show one model again (a published model or
    # a teacher beside each seed's pair)
    check_unique([e.label for e in rows[0]], f"{row_labels[0]} labels")
    n = len(pairs)
    trend_ratio = float(np.clip(0.4 * n, 1.8, 3.0))
    with matplotlib.rc_context(RC):
        fig = new_figure(1.75 * (n + 2 * trend_ratio) + 2.0, 2.35 * members + 1.6)
        grid = fig.add_gridspec(members, n + 2, width_ratios=[trend_ratio] * 2 + [1.0] * n)
        ax = fig.add_subplot(grid[:, 0])
        # x offsets of each row's (rho, tau) points and of its deeper-layers point
        trend_dx = [(-0.21, -0.07), (0.07, 0.21)] if members == 2 else [(-0.3, -0.2), (-0.05, 0.05), (0.2, 0.3)]
        deep_dx = [-0.1, 0.1] if members == 2 else [-0.2, 0.0, 0.2]
        styles = _pair_styles(n)
        series = [_Series(rows[r], trend_dx[r], styles[r][0], styles[r][1]) for r in range(members)]
        labels = [e.tick_label for e in rows[0]]
        axes = (ax, _trend_panel(ax, labels, series))
        for k, (first_values, second_values) in enumerate(zip(_values(rows[0]), _values(rows[1]))):
            _join_pairs(axes[k], (series[0].dx[k], series[1].dx[k]), first_values, second_values)
        ax.set_title("depth trend", pad=22)  # room for the legend above the panel
        _pair_legend(ax, row_labels)
        deeper = fig.add_subplot(grid[:, 1])
        _deeper_panel(deeper, labels, [_Points(rows[r], deep_dx[r], styles[r][2]) for r in range(members)])
        _join_pairs(deeper, (deep_dx[0], deep_dx[1]), _last_half(rows[0])[0], _last_half(rows[1])[0])
        heatmap_grid(fig, grid, [_cells(row) for row in rows], [f"{label}\ncosine similarity" for label in row_labels],
                     heatmaps, first_column=2)
        fig.suptitle(title)
        return save(fig, path)


def plot_dataset_robustness(
    rows: Mapping[str, Sequence[FamilyEntry]], path: str | os.PathLike, title: str,
    heatmaps: HeatmapOptions = HeatmapOptions(),
) -> Figure:
    """One heatmap row per dataset (``rows[dataset]`` lists its models) and its depth trend; last,
    one panel over all rows with the deeper half of layers' mean cosine, one line per dataset,
    with its interval over sequences as error bars.

    Every dataset must list the same models (by label) in the same order: a missing or extra
    model is an error, not a silent gap. Each row's trend panel shows rho (solid, blue) and tau
    (dashed, red) on one axis.
    """
    if not rows:
        raise ValueError("plot_dataset_robustness: no datasets to plot")
    datasets = list(rows)
    models = [e.label for e in rows[datasets[0]]]
    if not models:
        raise ValueError(f"plot_dataset_robustness: dataset {datasets[0]!r} has no models")
    check_unique(models, "model labels")
    for d in datasets[1:]:
        if [e.label for e in rows[d]] != models:
            raise ValueError(f"dataset {d!r} lists models {[e.label for e in rows[d]]}, "
                             f"dataset {datasets[0]!r} lists {models}: every dataset needs the same models")
    nrows, ncols = len(datasets), len(models)
    trend_ratio = float(np.clip(0.3 * ncols, 1.4, 2.6))
    with matplotlib.rc_context(RC):
        fig = new_figure(1.75 * (ncols + 2 * trend_ratio) + 2.4, 2.2 * nrows + 1.4)
        grid = fig.add_gridspec(nrows, ncols + 2, width_ratios=[1.0] * ncols + [trend_ratio] * 2)
        cells = [[Heatmap(e.stats, title=e.label if r == 0 else None) for e in rows[d]] for r, d in enumerate(datasets)]
        axes = heatmap_grid(fig, grid, cells, [f"{d}\ncosine similarity" for d in datasets], heatmaps)
        first = None
        for r, d in enumerate(datasets):
            axes[r][0].yaxis.label.set_fontweight("bold")
            ax = fig.add_subplot(grid[r, ncols], sharex=first, sharey=first)
            first = first or ax
            _trend_panel(ax, models, [_plain_series(rows[d], tau_style="--")], twin=False)
            ax.tick_params(labelbottom=r == nrows - 1)
        first.set_title("depth trend")
        first.legend(loc="best", frameon=True, framealpha=0.85, edgecolor="none", handlelength=2.2)
        _dataset_deeper_panel(fig.add_subplot(grid[:, ncols + 1]), models, rows)
        fig.suptitle(title)
        return save(fig, path)


def _dataset_deeper_panel(ax: Axes, models: Sequence[str], rows: Mapping[str, Sequence[FamilyEntry]]) -> None:
    """The deeper layers' mean cosine of every model, one line per dataset in its own colour."""
    colors = method_colors(list(rows))
    offsets = np.linspace(-0.12, 0.12, len(rows)) if len(rows) > 1 else [0.0]
    _deeper_panel(ax, models, [_Points(entries, dx, _deep_style(len(models), color=colors[d], label=d))
                               for (d, entries), dx in zip(rows.items(), offsets)])
    ax.legend(loc="best", frameon=True, framealpha=0.85, edgecolor="none", handlelength=2.2)
