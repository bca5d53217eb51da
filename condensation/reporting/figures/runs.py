"""Figures of training runs: a study's methods against checkpoint steps (mid-training or from
scratch), and Fig. 4 over the seeds of one configuration (:func:`plot_series_band`).

Given the same ``methods`` list, each method keeps its :func:`.style.method_colors` colour in
every figure.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from condensation.geometry import CosineStatistics
from condensation.reporting.figures.heatmaps import (
    Heatmap,
    HeatmapOptions,
    heatmap_grid,
)
from condensation.reporting.figures.style import (
    RC,
    check_unique,
    format_param_count,
    method_colors,
    new_figure,
    placeholder,
    save,
)
from condensation.trend import TrendStatistics

_METRIC_NAMES = {
    "spearman_rho": "Spearman ρ",
    "kendall_tau": "Kendall τ",
    "last_1": "mean cosine, last layer",
    "last_half": "mean cosine, deeper half of layers",
    "depth_slope": "depth slope of the mean cosine",
}
_RANK_METRICS = ("spearman_rho", "kendall_tau")  # share the fixed [-1, 1] axis
_ROW_LABEL_WIDTH = 22  # characters per line of a grid row label before it wraps


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a training run: its step, statistics and depth trend."""

    step: int
    stats: CosineStatistics
    trend: TrendStatistics


def _cell(checkpoint: Checkpoint | None, title: str | None, annotate: bool) -> Heatmap:
    if checkpoint is None or not annotate:
        return Heatmap(None if checkpoint is None else checkpoint.stats, title)
    rho, tau = checkpoint.trend.spearman_rho, checkpoint.trend.kendall_tau
    if not (math.isfinite(rho) and math.isfinite(tau)):
        return Heatmap(checkpoint.stats, title, "ρ n/a  τ n/a")
    return Heatmap(checkpoint.stats, title, f"ρ {rho:+.2f}  τ {tau:+.2f}".replace("-", "\u2212"))


def plot_condensation_grid(
    rows: Mapping[str, Sequence[Checkpoint]], path: str | os.PathLike, title: str,
    heatmaps: HeatmapOptions = HeatmapOptions(), annotate_trend: bool = True, methods: Sequence[str] | None = None,
) -> Figure:
    """Mid-training heatmaps: one row per training method, one column per checkpoint step (Fig. 6).

    ``rows[method]`` lists checkpoints in any order; columns are the sorted union of all rows'
    steps (step 0 is "before" mid-training), and a row that lacks a step gets a blank cell. Rows
    keep the mapping's order, each labelled by its method in its :func:`method_colors` colour
    (over ``methods`` if given, else the sorted names). ``annotate_trend``: each cell shows its
    checkpoint's rho and tau.
    """
    if not rows:
        raise ValueError("plot_condensation_grid: no rows to plot")
    for method, checkpoints in rows.items():
        if not checkpoints:
            raise ValueError(f"plot_condensation_grid: row {method!r} has no checkpoints")
        check_unique([c.step for c in checkpoints], f"steps in row {method!r}")
    methods = list(methods) if methods is not None else sorted(rows)
    absent = [m for m in rows if m not in methods]
    if absent:
        raise ValueError(f"plot_condensation_grid: rows {absent} are not in methods={methods}")
    colors = method_colors(methods)
    found = {(method, c.step): c for method, checkpoints in rows.items() for c in checkpoints}
    steps = sorted({step for _, step in found})
    titles = ["step 0 (before)" if step == 0 else f"step {step:,}" for step in steps]
    cells = [[_cell(found.get((method, step)), t if r == 0 else None, annotate_trend) for step, t in zip(steps, titles)]
             for r, method in enumerate(rows)]
    with matplotlib.rc_context(RC):
        fig = new_figure(max(1.75 * len(steps) + 2.2, 5.0), 2.05 * len(rows) + 1.15)
        axes = heatmap_grid(fig, fig.add_gridspec(len(rows), len(steps)), cells, ["cosine similarity"] * len(rows),
                            heatmaps, blank_text="no checkpoint")
        for method, row in zip(rows, axes):  # the method's name left of the y label, in its colour
            row[0].annotate(textwrap.fill(method, _ROW_LABEL_WIDTH), xy=(0.0, 0.5), xycoords=row[0].yaxis.label,
                            xytext=(-5, 0), textcoords="offset points", rotation=90, ha="right", va="center",
                            fontweight="bold", fontsize=10, color=colors[method], multialignment="center")
        fig.suptitle(title)
        return save(fig, path)


def _check_frame(frame: pd.DataFrame, columns: Sequence[str], methods: Sequence[str] | None, who: str):
    """A numeric copy of a long-format frame (method, seed, step, ``columns``), the methods it
    holds in colour/legend order (``methods`` if given, else sorted), and their colours."""
    required = ["method", "seed", "step", *columns]
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ValueError(f"{who}: frame is missing column(s) {missing}; it needs {required} "
                         f"(has {[str(c) for c in frame.columns]})")
    if frame.empty:
        raise ValueError(f"{who}: frame is empty, nothing to plot")
    data = frame[required].copy()
    for column in required[2:]:
        try:
            data[column] = pd.to_numeric(data[column]).astype(np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{who}: column {column!r} must be numeric ({err})") from None
    dupes = data.duplicated(["method", "seed", "step"], keep=False)
    if dupes.any():
        first = data.loc[dupes, ["method", "seed", "step"]].iloc[0].tolist()
        raise ValueError(f"{who}: {int(dupes.sum())} rows repeat a (method, seed, step), e.g. {first}; aggregate them")
    present = set(data["method"])
    order = sorted(present) if methods is None else list(methods)
    if present - set(order):
        raise ValueError(f"{who}: methods {sorted(present - set(order))} are in the frame but not in methods={order}")
    return data, [m for m in order if m in present], method_colors(order)


def _seed_band(ax: Axes, data: pd.DataFrame, column: str, method: str, color: str, ms: float) -> None:
    """``column``'s mean over seeds per step (markers and line), mean +- sample std as a band where
    two or more seeds have a finite value."""
    rows = data[(data["method"] == method) & np.isfinite(data[column])]
    summary = rows.groupby("step")[column].agg(["mean", "std"]).sort_index()
    if summary.empty:
        return
    x, mean, std = summary.index.to_numpy(), summary["mean"].to_numpy(), summary["std"].to_numpy()
    ax.plot(x, mean, "-o", color=color, ms=ms, lw=1.6, zorder=3)
    if np.isfinite(std).any():
        ax.fill_between(x, mean - std, mean + std, where=np.isfinite(std), color=color, alpha=0.18, lw=0, zorder=2)


def _interval_bars(ax: Axes, data: pd.DataFrame, column: str, method: str, color: str) -> None:
    """Error bars from the mean over seeds of ``{column}_low`` to that of ``{column}_high`` at each
    step: the typical interval over evaluation sequences of one seed's value."""
    ends = [f"{column}_low", f"{column}_high"]
    rows = data[(data["method"] == method) & np.isfinite(data[ends]).all(axis=1)]
    bounds = rows.groupby("step")[ends].mean().sort_index()
    if bounds.empty:
        return
    x, low, high = bounds.index.to_numpy(), bounds[ends[0]].to_numpy(), bounds[ends[1]].to_numpy()
    ax.vlines(x, low, high, color=color, lw=1.1, zorder=3)
    ax.plot(np.r_[x, x], np.r_[low, high], ls="none", marker="_", ms=5, mew=1.1, color=color, zorder=3,
            label="_caps")


def _interval_metrics(frame: pd.DataFrame, metrics: Sequence[str]) -> list[str]:
    """The metrics whose interval ends (``{metric}_low``, ``{metric}_high``) the frame holds."""
    return [m for m in metrics if {f"{m}_low", f"{m}_high"} <= set(frame.columns)]


def _style_step_axis(ax: Axes) -> None:
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
    _style_axis(ax)


def _style_axis(ax: Axes) -> None:
    """A light grid behind the data, no right spine, short ticks."""
    ax.grid(color="0.92", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.spines["right"].set_visible(False)
    ax.tick_params(length=2.5, pad=2)


def _finish(fig: Figure, present: Sequence[str], colors: Mapping[str, str], title: str, path: str | os.PathLike):
    """Method legend below the panels (balanced rows of at most four), title, save."""
    handles = [Line2D([], [], color=colors[m], marker="o", ms=5, lw=1.8, label=m) for m in present]
    ncol = math.ceil(len(handles) / math.ceil(len(handles) / 4)) if handles else 1
    # matplotlib fills legend columns first; interleave so the entries read row by row
    handles = [h for col in range(ncol) for h in handles[col::ncol]]
    fig.legend(handles=handles, loc="outside lower center", ncol=ncol, frameon=False, handlelength=2.2,
               columnspacing=1.6)
    fig.suptitle(title)
    return save(fig, path)


def plot_trajectory(
    frame: pd.DataFrame, path: str | os.PathLike, title: str,
    metrics: Sequence[str] = ("spearman_rho", "kendall_tau"), methods: Sequence[str] | None = None,
) -> Figure:
    """Depth-trend statistics against training step, one panel per metric (paper Fig. 4).

    ``frame``: columns ``method``, ``seed``, ``step`` and each of ``metrics``, one row per
    (method, seed, checkpoint). Per method, the mean over seeds with a mean +- std band where
    two or more seeds have a value; NaNs (undefined trends) are left out. A metric whose
    interval over sequences the frame holds (``{metric}_low``, ``{metric}_high``, as
    :meth:`~condensation.trend.TrendStatistics.as_row` names them) also gets error bars: the
    mean over seeds of each end. Colours and legend order follow :func:`method_colors` over
    ``methods`` (default: sorted names).
    """
    metrics = list(metrics)
    if not metrics:
        raise ValueError("plot_trajectory: metrics is empty")
    check_unique(metrics, "metrics")
    with_interval = _interval_metrics(frame, metrics)
    ends = [f"{m}_{end}" for m in with_interval for end in ("low", "high")]
    data, present, colors = _check_frame(frame, metrics + ends, methods, "plot_trajectory")
    ms = 4.5 if data["step"].nunique() <= 20 else 3.0
    with matplotlib.rc_context(RC):
        fig = new_figure(3.5 * len(metrics) + 0.6, 3.6)
        first = first_rank = None
        for i, metric in enumerate(metrics):
            is_rank = metric in _RANK_METRICS
            ax = fig.add_subplot(1, len(metrics), i + 1, sharex=first, sharey=first_rank if is_rank else None)
            first = first or ax
            if is_rank:
                ax.axhline(0.0, color="0.45", linestyle=":", linewidth=1.0, zorder=1)
                ax.set_ylim(-1.05, 1.05)
            for m in present:
                _seed_band(ax, data, metric, m, colors[m], ms)
                if metric in with_interval:
                    _interval_bars(ax, data, metric, m, colors[m])
            if not np.isfinite(data[metric]).any():
                placeholder(ax, "no finite values")
            # error bars and the seed band look alike in a legend; the title tells them apart
            ax.set_title(_METRIC_NAMES.get(metric, metric) + ("\nbars: 95 % interval over sequences"
                                                            if metric in with_interval else ""))
            if is_rank and first_rank is None:  # one label for the shared rank-correlation axis
                ax.set_ylabel("rank correlation with depth")
                first_rank = ax
            elif not is_rank:
                ax.set_ylabel("mean cosine similarity" if metric in _METRIC_NAMES else metric)
            _style_step_axis(ax)
        return _finish(fig, present, colors, title, path)


def plot_loss_curves(
    frame: pd.DataFrame, path: str | os.PathLike, title: str, methods: Sequence[str] | None = None,
    train_label: str = "training loss",
) -> Figure:
    """Training loss (every step) and validation loss (checkpoints) against step, per method.

    ``frame`` columns: ``method``, ``seed``, ``step``, ``loss`` and ``val_loss`` (NaN except at
    checkpoints). Left: the mean training loss over seeds, smoothed by a centred rolling mean of
    ``max(1, n // 50)`` steps (``n``: that method's logged steps). Right: the mean validation
    loss over seeds with a mean +- std band. Colours as :func:`method_colors` over ``methods``.
    """
    data, present, colors = _check_frame(frame, ["loss", "val_loss"], methods, "plot_loss_curves")
    if not np.isfinite(data["loss"]).any():
        raise ValueError("plot_loss_curves: column 'loss' has no finite values")
    val_steps = data.loc[np.isfinite(data["val_loss"]), "step"]
    ms = 4.5 if val_steps.nunique() <= 20 else 3.0
    with matplotlib.rc_context(RC):
        fig = new_figure(7.6, 3.6)
        ax_train = fig.add_subplot(1, 2, 1)
        ax_val = fig.add_subplot(1, 2, 2, sharex=ax_train)
        windows = set()
        for m in present:
            curve = data[(data["method"] == m) & np.isfinite(data["loss"])].groupby("step")["loss"].mean()
            if curve.empty:
                continue
            windows.add(max(1, len(curve) // 50))
            smooth = curve.sort_index().rolling(max(1, len(curve) // 50), center=True, min_periods=1).mean()
            ax_train.plot(smooth.index.to_numpy(), smooth.to_numpy(), color=colors[m], lw=1.4)
            _seed_band(ax_val, data, "val_loss", m, colors[m], ms)
        smoothing = ("" if windows == {1} else f" (rolling mean, {windows.pop()} steps)" if len(windows) == 1
                     else " (rolling mean)")
        ax_train.set_title(train_label + smoothing)
        ax_val.set_title("validation loss")
        if val_steps.empty:
            placeholder(ax_val, "no validation checkpoints")
            ax_val.tick_params(axis="y", labelleft=False, length=0)
        for ax in (ax_train, ax_val):
            ax.set_ylabel("loss")
            ax.yaxis.get_major_formatter().set_useOffset(False)
            _style_step_axis(ax)
        return _finish(fig, present, colors, title, path)


def plot_series_band(table: pd.DataFrame, path: str | os.PathLike, title: str) -> Figure:
    """Fig. 4 over seeds: one panel per statistic of ``table`` (rows of
    :func:`condensation.reporting.tables.series_bands.band_table`), checkpoints along x in training
    order (training tokens under each label): a thin line per run (its ``run:`` column), their mean,
    and the band of the mean's interval over the runs and sequences, drawn within [-1, 1] where
    both statistics live."""
    statistics = list(dict.fromkeys(table["statistic"]))
    runs = [column for column in table.columns if column.startswith("run:")]
    if not statistics or not runs:
        raise ValueError("plot_series_band: the table has no statistic or no run: columns")
    with matplotlib.rc_context(RC):
        fig = new_figure(3.6 * len(statistics) + 0.6, 3.8)
        for i, statistic in enumerate(statistics):
            rows = table[table["statistic"] == statistic].reset_index(drop=True)
            x = np.arange(len(rows))
            ax = fig.add_subplot(1, len(statistics), i + 1)
            for column in runs:
                ax.plot(x, rows[column].to_numpy(float), color="0.55", lw=0.8, alpha=0.7, zorder=2)
            mean, low, high = (rows[c].to_numpy(float) for c in ("mean", "low", "high"))
            # both statistics live in [-1, 1]; a t interval over two runs can reach past it (the CSV keeps it whole)
            ax.fill_between(x, np.clip(low, -1, 1), np.clip(high, -1, 1), where=np.isfinite(low) & np.isfinite(high),
                            color="C0", alpha=0.22, lw=0, zorder=1)
            ax.plot(x, mean, "-o", color="C0", ms=4, lw=1.8, zorder=3)
            if statistic in _RANK_METRICS:
                ax.axhline(0.0, color="0.45", linestyle=":", linewidth=1.0, zorder=1)
                ax.set_ylim(-1.05, 1.05)
            ax.set_title(_METRIC_NAMES.get(statistic, statistic))
            ax.set_ylabel("rank correlation with depth" if statistic in _RANK_METRICS else "mean cosine similarity")
            crowded = len(rows) > 5
            ax.set_xticks(x, [f"{label}\n{format_param_count(tokens) if np.isfinite(tokens) else ''}"
                              for label, tokens in zip(rows["checkpoint"], rows["tokens"].astype(float))],
                          rotation=40 if crowded else 0, ha="right" if crowded else "center",
                          fontsize="small" if crowded else None)
            ax.set_xlabel("checkpoint (training tokens)")
            _style_axis(ax)
        handles = [Line2D([], [], color="0.55", lw=0.8, label=f"each run ({len(runs)})"),
                   Line2D([], [], color="C0", marker="o", ms=4, lw=1.8, label="mean over runs"),
                   Patch(color="C0", alpha=0.22, label=f"95 % interval ({table['covers'].iloc[0]})")]
        fig.legend(handles=handles, loc="outside lower center", ncol=3, frameon=False)
        fig.suptitle(title)
        return save(fig, path)
