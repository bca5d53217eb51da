"""Stages of rules/figures.smk: the paper's figures from stored geometry and training logs.

Depth trends are computed here with :func:`~condensation.trend.depth_trend` under the
configured :class:`~condensation.config.specs.TrendConfig`, exactly as the trend tables compute them,
and handed to the figures.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from condensation import geometry, models
from condensation.config.specs import TrendConfig, as_settings
from condensation.reporting.tables.trend_tables import write_trend_table
from condensation.runtime.io import atomic_path
from condensation.runtime.run_dir import RunDir, parse_step
from condensation.stages.geometry import check_family_sizes
from condensation.trend import depth_trend, lens_summary

# The figure modules (matplotlib) and the findings and profile modules (scipy.stats, 1-2 s) are
# imported by the stages that use them: the findings stage draws nothing, and the family, dataset
# and study figures test nothing.
if TYPE_CHECKING:
    from condensation.reporting.figures.runs import Checkpoint
    from condensation.reporting.figures.trends import FamilyEntry

log = logging.getLogger("condensation")


def _entries(
    model_names: Sequence[str], geometry_paths: Sequence[str | Path], handle_paths: Sequence[str | Path] | None,
    labels: Mapping[str, str], trend: TrendConfig,
) -> list[FamilyEntry]:
    """One FamilyEntry per model; without ``handle_paths`` the entries carry no size. Replicates
    (models that share a label) are numbered in the figure: "MLP 32 #1", "MLP 32 #2"."""
    # deferred: matplotlib, see the imports
    from condensation.reporting.figures.trends import FamilyEntry  # noqa: PLC0415

    handle_paths = [None] * len(model_names) if handle_paths is None else handle_paths
    shown = [labels.get(name, name) for name in model_names]
    # replicates are distinct models under one label; one model listed again (a pair's teacher
    # beside each seed) is the same model and keeps its plain label
    repeats = Counter(labels.get(name, name) for name in dict.fromkeys(model_names))
    number: dict[str, int] = {}
    entries = []
    for name, label, geometry_path, handle_path in zip(model_names, shown, geometry_paths, handle_paths, strict=True):
        number.setdefault(name, sum(1 for other in number if labels.get(other, other) == label) + 1)
        stats = geometry.CosineStatistics.load(geometry_path)
        size = None if handle_path is None else models.ModelHandle.load(handle_path).num_parameters
        label = f"{label} #{number[name]}" if repeats[label] > 1 else label
        entries.append(FamilyEntry(label, stats, size, depth_trend(stats, trend),
                                   lens_summary(stats, trend)))
    return entries


def family_figure(
    *, family: str, dataset: str, model_names: Sequence[str], geometry_paths: Sequence[str | Path],
    handle_paths: Sequence[str | Path], labels: Mapping[str, str], trend: TrendConfig | Mapping[str, Any],
    out_path: str | Path, compares_size: bool,
) -> None:
    # deferred: matplotlib, see the imports
    from condensation.reporting.figures.trends import plot_family_trend  # noqa: PLC0415

    trend = as_settings(TrendConfig, trend)
    if compares_size:  # the first job that knows the sizes (with the trend table)
        check_family_sizes(family, model_names, handle_paths, labels)
    entries = _entries(model_names, geometry_paths, handle_paths, labels, trend)
    plot_family_trend(entries, out_path, title=f"{family} on {dataset}")


def paired_figure(
    *, pair: str, dataset: str, first: Sequence[str], second: Sequence[str], geometry_paths: Sequence[str | Path],
    handle_paths: Sequence[str | Path], labels: Mapping[str, str], row_labels: Sequence[str],
    trend: TrendConfig | Mapping[str, Any], out_path: str | Path, csv_path: str | Path, markdown_path: str | Path,
    reference: Sequence[str] = (),
) -> None:
    """Fig. 3 layout, and its numbers as a table (``member`` 0 = first row, 1 = second, 2 = the
    reference row, e.g. a distilled student's teacher). ``geometry_paths`` and ``handle_paths``
    list the first members, then the second members, then the reference members."""
    # deferred: matplotlib and scipy, see the imports
    from condensation.reporting.figures.trends import plot_paired_trend  # noqa: PLC0415
    from condensation.reporting.tables import profiles  # noqa: PLC0415

    trend = as_settings(TrendConfig, trend)
    groups = [list(first), list(second)] + ([list(reference)] if reference else [])
    names = [name for group in groups for name in group]
    entries = _entries(names, geometry_paths, handle_paths, labels, trend)
    n = len(first)
    pairs = list(zip(*(entries[r * n : (r + 1) * n] for r in range(len(groups)))))
    plot_paired_trend(pairs, out_path, title=pair, row_labels=tuple(row_labels))
    rows = [
        {"member": index // n, "model": name, "label": labels.get(name, name), "num_parameters": entry.size,
         **entry.trend.as_row(), **(entry.lenses or {})}
        for index, (name, entry) in enumerate(zip(names, entries))
    ]
    write_trend_table(pd.DataFrame(rows), family=pair, dataset=dataset, csv_path=csv_path, markdown_path=markdown_path)
    keys = [{"member": row["member"], "model": row["model"], "label": row["label"]} for row in rows]
    profiles.write_profiles_of(profiles.profile_path(csv_path), keys, geometry_paths, trend)


def dataset_figure(
    *, family: str, model_names: Sequence[str], datasets: Sequence[str], geometry_paths: Sequence[str | Path],
    labels: Mapping[str, str], trend: TrendConfig | Mapping[str, Any], out_path: str | Path,
) -> None:
    """``geometry_paths`` is dataset-major: every model of the first dataset, then the next."""
    # deferred: matplotlib, see the imports
    from condensation.reporting.figures.trends import plot_dataset_robustness  # noqa: PLC0415

    trend = as_settings(TrendConfig, trend)
    n = len(model_names)
    if len(geometry_paths) != n * len(datasets):
        raise ValueError(f"{len(geometry_paths)} geometry paths for {n} models x {len(datasets)} datasets")
    rows = {
        d: _entries(model_names, geometry_paths[i * n : (i + 1) * n], None, labels, trend)
        for i, d in enumerate(datasets)
    }
    plot_dataset_robustness(rows, out_path, title=f"{family} across datasets")


def study_figures(
    *, model: str, label: str, trajectory_path: str | Path, loss_path: str | Path, methods: Sequence[str],
    grid_methods: Sequence[str], grid_dirs: Sequence[str | Path], trend: TrendConfig | Mapping[str, Any],
    grid_figure: str | Path, trajectory_figure: str | Path, loss_figure: str | Path,
) -> None:
    """The paper's Fig. 6 (heatmaps per method and checkpoint), the depth trend over training and
    the losses of ``methods`` (the ablation runs are Table 3's, not these figures')."""
    # deferred: matplotlib, see the imports
    from condensation.reporting.figures.runs import (  # noqa: PLC0415
        plot_condensation_grid,
        plot_loss_curves,
        plot_trajectory,
    )

    trend = as_settings(TrendConfig, trend)

    rows = {method: _checkpoints(directory, trend) for method, directory in zip(grid_methods, grid_dirs, strict=True)}
    colour_order = list(methods) + [m for m in grid_methods if m not in methods]  # same colours in every figure
    plot_condensation_grid(rows, grid_figure, title=f"{label}: condensation during training", methods=colour_order)
    trajectory = pd.read_csv(trajectory_path)
    plot_trajectory(
        trajectory[trajectory["method"].isin(methods)], trajectory_figure,
        title=f"{label}: condensation during training",
        # with few layers rho and tau saturate; the deeper layers' mean cosine shows the size of the effect
        metrics=("spearman_rho", "kendall_tau", "last_half"), methods=list(methods),
    )
    # Cross-entropy, not the total: auxiliary terms differ in scale and sign between methods.
    losses = pd.read_csv(loss_path)
    losses = losses[losses["method"].isin(methods)].assign(loss=lambda frame: frame["ce_loss"])
    plot_loss_curves(
        losses, loss_figure, title=f"{label}: mid-training losses", methods=list(methods),
        train_label="training cross-entropy",
    )


def _checkpoints(directory: str | Path, trend: TrendConfig) -> list[Checkpoint]:
    """Every ``step-*.npz`` of one run's checkpoint geometry, with its depth trend."""
    # deferred: matplotlib, see the imports
    from condensation.reporting.figures.runs import Checkpoint  # noqa: PLC0415

    checkpoints = []
    for path in sorted(Path(directory).glob("step-*.npz")):
        stats = geometry.CosineStatistics.load(path)
        checkpoints.append(Checkpoint(parse_step(path), stats, depth_trend(stats, trend)))
    return checkpoints


def series_figure(
    *, series: str, title: str, dataset: str, points: Sequence[tuple[str, float | None]],
    geometry_paths: Sequence[str | Path], trend: TrendConfig | Mapping[str, Any], out_path: str | Path,
    csv_path: str | Path, markdown_path: str | Path,
) -> None:
    """Fig. 4: one model at successive points of its training (``points``: label and training
    tokens, in order), its depth trend over training beside a heatmap per checkpoint; and the
    numbers as a table."""
    # deferred: matplotlib and scipy, see the imports
    from condensation.reporting.figures.trends import FamilyEntry, plot_family_trend  # noqa: PLC0415
    from condensation.reporting.tables import profiles  # noqa: PLC0415

    trend = as_settings(TrendConfig, trend)
    entries = []
    for (label, tokens), geometry_path in zip(points, geometry_paths, strict=True):
        stats = geometry.CosineStatistics.load(geometry_path)
        entries.append(FamilyEntry(label, stats, tokens, depth_trend(stats, trend),
                                   lens_summary(stats, trend)))
    plot_family_trend(entries, out_path, title=f"{title} over training (tokens under each checkpoint), {dataset}")
    rows = [{"checkpoint": e.label, "tokens": e.size, **e.trend.as_row(), **(e.lenses or {})} for e in entries]
    write_trend_table(pd.DataFrame(rows), family=series, dataset=dataset, csv_path=csv_path,
                      markdown_path=markdown_path)
    keys = [{"checkpoint": label, "tokens": tokens} for label, tokens in points]
    profiles.write_profiles_of(profiles.profile_path(csv_path), keys, geometry_paths, trend)



def series_band(
    *, label: str, dataset: str, series: Sequence[str], profile_paths: Sequence[str | Path], out_path: str | Path,
    csv_path: str | Path,
) -> None:
    """Fig. 4 over the seeds of one configuration (the ``series``, whose models share ``label``):
    each checkpoint's condensation as the runs' mean with its interval over runs and sequences
    (:mod:`condensation.reporting.tables.series_bands`), drawn and written as a table."""
    # deferred: matplotlib and scipy, see the imports
    from condensation.reporting.figures.runs import plot_series_band  # noqa: PLC0415
    from condensation.reporting.tables import profiles, series_bands  # noqa: PLC0415

    runs = {name: profiles.read_profiles(path) for name, path in zip(series, profile_paths, strict=True)}
    for missing in series_bands.left_out(runs):
        log.warning("series band %s: checkpoint %s is not in every run; left out", label, missing)
    table = series_bands.band_table(runs)
    if table.empty:
        raise ValueError(f"series band {label}: its runs {list(series)} share no checkpoint")
    plot_series_band(table, out_path, title=f"{label} over training: {len(series)} runs, {dataset}")
    with atomic_path(csv_path) as tmp:
        table.to_csv(tmp, index=False, float_format="%.5f")

def run_series_points(index_path: str | Path, geometry_dir: str | Path) -> tuple[list[tuple[str, float]], list[Path]]:
    """The points of a series made of a training run's checkpoints: ``step N`` with its tokens,
    and the checkpoint geometry ``measure_checkpoints`` wrote for each."""
    run = RunDir(Path(index_path).parent)
    entries = run.read_index()
    points = [(f"step {entry['step']}", float(entry["tokens"])) for entry in entries]
    return points, [Path(geometry_dir) / f"{entry['name']}.npz" for entry in entries]


def findings(
    *, trend_profiles: Sequence[str | Path], pair_profiles: Sequence[str | Path], series_profiles: Sequence[str | Path],
    effects: Sequence[str | Path], pooled_effects: Sequence[str | Path] = (), trajectories: Sequence[str | Path],
    score_tables: Sequence[str | Path], run_scores: Sequence[str | Path] = (), similarity: Sequence[str | Path] = (),
    losses: Sequence[str | Path] = (), design: Mapping[str, Any], markdown_path: str | Path, json_path: str | Path,
    summary_path: str | Path,
) -> None:
    """The findings page: each of the paper's claims against what this run measured. The tables'
    per-sequence profiles (``*_profiles``: trend tables, pairs, series), the studies' effects,
    trajectories and losses (``results/<study>/<model>/``: named "<study>, <model>"), the pooled
    effects of a study's base models that share a label, Tables 2 and 4 and the similarity tables; ``design``:
    what the config says of them (the rule's one parameter, read by ``claims.Design.from_params``)."""
    # deferred: scipy, see the imports
    from condensation.reporting.findings import claims, page  # noqa: PLC0415
    from condensation.reporting.findings.prediction import read_run_scores  # noqa: PLC0415
    from condensation.reporting.tables.profiles import read_all  # noqa: PLC0415

    def study_name(path: str | Path) -> str:
        return f"{Path(path).parts[-3]}, {Path(path).parent.name}"

    tables = {Path(path).stem: pd.read_csv(path) for path in score_tables}
    counted = page.counted_tasks(design["tasks"], design["counted_tasks"], tables)
    evidence = claims.Evidence(
        trends=read_all(trend_profiles),
        pairs={name: (design["pair_labels"][name], table) for name, table in read_all(pair_profiles).items()},
        series=read_all(series_profiles),
        effects={study_name(path): pd.read_csv(path) for path in effects}
        | {name: pd.read_csv(path) for name, path in zip(design["pooled"], pooled_effects, strict=True)},
        trajectories={study_name(path): pd.read_csv(path) for path in trajectories},
        scores=tables,
        similarity=pd.concat([pd.read_csv(path) for path in similarity]) if similarity else None,
        similarity_kinds=dict(design["similarity_kinds"]),
        run_scores=read_run_scores(run_scores, counted["counted"]),
        losses={study_name(path): pd.read_csv(path) for path in losses},
    )
    chosen = claims.Design.from_params(design)
    under_lenses = claims.claims_under_lenses(evidence, chosen)
    page.write_findings(claims.with_outlier_robustness(claims.all_claims(evidence, chosen), under_lenses),
                        markdown_path, json_path, summary_path, under_lenses, counted)
