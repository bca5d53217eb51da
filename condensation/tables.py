"""Downstream-accuracy tables: the paper's Table 2 (methods x models) and Table 3 (dispersion ablation).

Input is one JSON score record per evaluated checkpoint (read by :mod:`condensation.scores`) and
the per-item results beside it (:func:`condensation.scores.load_items`). Every table is built
from *selected* checkpoints: one per (model, method, seed), the one with the lowest validation
loss (:func:`~condensation.scores.select_checkpoints`). The paper's code picked the checkpoint
that maximised the test scores themselves, which is optimistic; choosing on validation loss keeps
the test scores out of every decision, so the tables are honest estimates. Rows are compared with
the baseline and the reference method item by item (:mod:`condensation.comparisons`).

Each table comes twice: a tidy numeric frame (machine-readable CSV, one column per quantity) and a
display frame of strings (Markdown, LaTeX and HTML, :mod:`condensation.table_files`). Numbers are
percentages (accuracy x 100). The ``write_*`` functions at the end are what the workflow's stages
call: score files (or a frame) in, table files out. The trend tables of the geometry stage are
written here too; Table 4 and the condensation effects live in :mod:`condensation.table4`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from condensation.comparisons import (
    at_chance_note, chance_flags, comparison_columns, comparison_record, selected_items, task_chance, task_headers,
)
from condensation.io import write_json, write_text
from condensation.scores import (
    PRETRAINED, is_finite_number, load_items, load_scores, require_columns, select_checkpoints,
)
from condensation.table_files import MISSING, comparison_cell, fixed, mean_std, to_markdown, write_csv, write_table

TABLE3_COLUMNS = ("model", "weight", "tau", "method", "n_seeds", "average_mean", "average_std")

# Means are compared after rounding to this many decimals (in percent), so that two means that
# are equal on paper (52.0 from 50, 52, 54 and from 52, 52, 52) tie instead of being split by
# floating-point noise.
_MEAN_DECIMALS = 9

CHECKPOINT_RULE = "Each run's checkpoint chosen per seed by the lowest validation loss (never by test score)."


# --------------------------------------------------------------------------------------------
# Per-row seed matrices (shared by Tables 2 and 3 and the metrics)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One (model, method): percent scores with one row per seed and one column per task."""

    model: str
    method: str
    values: pd.DataFrame  # index: seed (a single "pretrained" entry for the base model)

    @property
    def n_seeds(self) -> int:
        return len(self.values)

    @property
    def per_seed_average(self) -> pd.Series:
        return self.values.mean(axis=1)


def _check_names(names: Sequence[str], what: str, reserved: str, why: str) -> list[str]:
    """``names`` as a list: non-empty, without repeats, without the ``reserved`` name."""
    names = list(names)
    if not names:
        raise ValueError(f"{what}: give at least one")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"{what}: listed more than once: {', '.join(duplicates)}")
    if reserved in names:
        raise ValueError(f"{what}: {reserved!r} {why}")
    return names


def check_tasks(tasks: Sequence[str]) -> list[str]:
    return _check_names(tasks, "tasks", "average", "is reserved for the mean over tasks")


def check_methods(methods: Sequence[str]) -> list[str]:
    return _check_names(methods, "methods", PRETRAINED, "is added automatically; do not list it")


def seed_matrix(selected: pd.DataFrame, model: str, method: str, tasks: Sequence[str]) -> Row:
    """The seed x task matrix of one (model, method); a missing or doubled cell is an error."""
    part = selected.loc[(selected["model"] == model) & (selected["method"] == method)]
    if part.empty:
        raise ValueError(f"model {model!r}: method {method!r} has no scores")
    part = part.loc[part["task"].isin(tasks)]
    if method == PRETRAINED:
        checkpoints = part["checkpoint"].unique()
        if len(checkpoints) > 1:
            raise ValueError(f"model {model!r}: several pretrained records ({', '.join(map(str, checkpoints))})")
        unit = pd.Series(PRETRAINED, index=part.index, dtype=object)
    else:
        unit = part["seed"].astype("int64")
    counts = part.assign(unit=unit).groupby(["unit", "task"]).size()
    if (counts > 1).any():
        seed, task = counts.index[counts.to_numpy() > 1][0]
        raise ValueError(f"model {model!r} method {method!r} seed {seed}: task {task!r} scored more than once")
    values = part.assign(unit=unit).pivot(index="unit", columns="task", values="score")
    values = values.reindex(index=unit.unique(), columns=list(tasks)) * 100.0
    if values.empty:
        raise ValueError(f"model {model!r} method {method!r}: none of the tasks {list(tasks)} is scored")
    holes = values.isna()
    if holes.to_numpy().any():
        seed = holes.any(axis=1).idxmax()
        task = holes.loc[seed].idxmax()
        where = "" if method == PRETRAINED else f" seed {seed}"
        raise ValueError(f"model {model!r} method {method!r}{where}: task {task!r} is missing")
    values.index.name = "seed"
    values.columns.name = None
    return Row(model, method, values)


def model_rows(selected: pd.DataFrame, tasks: Sequence[str], methods: Sequence[str]) -> list[list[Row]]:
    """Per model (in order of first appearance), its rows: pretrained if present, then ``methods``."""
    blocks = []
    for model in pd.unique(selected["model"]):
        present = set(selected.loc[selected["model"] == model, "method"])
        order = ([PRETRAINED] if PRETRAINED in present else []) + list(methods)
        missing = [m for m in methods if m not in present]
        if missing:
            raise ValueError(f"model {model!r}: method(s) {', '.join(missing)} listed but not scored")
        blocks.append([seed_matrix(selected, model, method, tasks) for method in order])
    return blocks


def sample_std(values: pd.Series | pd.DataFrame) -> Any:
    """Sample standard deviation (ddof=1): NaN for a single seed, where spread is unknown."""
    return values.std(ddof=1)


# --------------------------------------------------------------------------------------------
# Score blocks (shared by Tables 2 and 4)
# --------------------------------------------------------------------------------------------


def score_block(rows: list[Row], tasks: list[str], labels: Mapping[str, str]) -> pd.DataFrame:
    """One model's rows: per task the mean and sample std over seeds (percent) and the rank of
    the mean within the model (1 = best, ties share the average rank); ``average`` is the mean
    over seeds of each seed's mean over tasks; ``avg_rank`` the mean of the task ranks."""
    records = []
    for row in rows:
        record: dict[str, Any] = {
            "model": row.model, "method": row.method,
            "label": labels.get(row.method, row.method), "n_seeds": row.n_seeds,
        }
        for task in tasks:
            record[f"{task}_mean"] = float(row.values[task].mean())
            record[f"{task}_std"] = float(sample_std(row.values[task]))
        record["average_mean"] = float(row.per_seed_average.mean())
        record["average_std"] = float(sample_std(row.per_seed_average))
        records.append(record)
    block = pd.DataFrame(records)
    for task in tasks:
        block[f"{task}_rank"] = rank_descending(block[f"{task}_mean"].to_numpy())
    block["avg_rank"] = block[[f"{task}_rank" for task in tasks]].mean(axis=1)
    return block[score_columns(tasks)]


def score_columns(tasks: Sequence[str]) -> list[str]:
    """The columns of :func:`score_block`, in order."""
    per_task = [f"{task}_{what}" for task in tasks for what in ("mean", "std", "rank")]
    return ["model", "method", "label", "n_seeds", *per_task, "average_mean", "average_std", "avg_rank"]


def rank_descending(means: np.ndarray) -> np.ndarray:
    """Ranks with 1 = highest; tied means share the average rank (``rankdata(method='average')``)."""
    return stats.rankdata(-np.round(np.asarray(means, dtype=float), _MEAN_DECIMALS), method="average")


def compared_blocks(
    blocks: list[list[Row]], tasks: list[str], labels: Mapping[str, str], items: pd.DataFrame,
    targets: Sequence[str], n_resamples: int, seed: int,
) -> pd.DataFrame:
    """The score blocks of every model with each row's item-level comparisons against ``targets``
    (:func:`condensation.comparisons.comparison_record`) as further columns."""
    frames = []
    for rows in blocks:
        comparisons = pd.DataFrame([
            comparison_record(items, row.model, row.method, targets, tasks, n_resamples=n_resamples, seed=seed)
            for row in rows
        ], columns=comparison_columns(targets))
        frames.append(pd.concat([score_block(rows, tasks, labels), comparisons], axis=1))
    table = pd.concat(frames, ignore_index=True)
    return table.astype({f"n_items_vs_{target}": "Int64" for target in targets})


def comparison_targets(methods: Sequence[str], *targets: str) -> list[str]:
    """The methods every row is compared with, each once and in order; each must be listed."""
    for target in targets:
        if target not in methods:
            raise ValueError(f"comparison method {target!r} is not among methods {list(methods)}")
    return list(dict.fromkeys(targets))


# --------------------------------------------------------------------------------------------
# Table 2
# --------------------------------------------------------------------------------------------


def table2(
    scores: pd.DataFrame, tasks: Sequence[str], methods: Sequence[str], reference: str = "dispersion",
    labels: Mapping[str, str] | None = None, *, items: pd.DataFrame, baseline: str = "ce",
    n_resamples: int = 10_000, seed: int = 0,
) -> pd.DataFrame:
    """Downstream accuracy of every method on every model, as a tidy numeric frame.

    Built from :func:`select_checkpoints`. One block per model, rows: pretrained (if scored),
    then ``methods`` in order, with the columns of :func:`score_block`. Every row is compared
    with ``baseline`` (CE, the paper's baseline) and with ``reference`` (the dispersion loss)
    item by item (:mod:`condensation.comparisons`): ``diff_vs_<m>`` (the difference of average
    accuracy in points), ``ci_low_vs_<m>``/``ci_high_vs_<m>`` (95 % paired-bootstrap interval),
    ``p_vs_<m>`` (two-sided), ``n_items_vs_<m>`` (paired item results) and ``mcnemar_p_vs_<m>``
    (cross-check); NaN for a method against itself. ``items`` holds the per-item results
    (:func:`condensation.scores.load_items`); those of the selected checkpoints are used.
    ``n_resamples`` and ``seed`` set the bootstrap.
    """
    tasks = check_tasks(tasks)
    methods = check_methods(methods)
    if reference not in methods:
        raise ValueError(f"reference {reference!r} is not among methods {methods}")
    targets = comparison_targets(methods, baseline, reference)
    selected = select_checkpoints(scores)
    table = compared_blocks(model_rows(selected, tasks, methods), tasks, dict(labels or {}),
                            selected_items(items, selected), targets, n_resamples, seed)
    return table[table2_columns(tasks, targets)]


def table2_columns(tasks: Sequence[str], targets: Sequence[str]) -> list[str]:
    """Column order of :func:`table2` (compared with ``targets``), so readers of the CSV need not guess it."""
    return [*score_columns(tasks), *comparison_columns(targets)]


# --------------------------------------------------------------------------------------------
# Table 3
# --------------------------------------------------------------------------------------------


def table3(
    scores: pd.DataFrame, tasks: Sequence[str], grid: Mapping[str, Sequence[float]], models: Sequence[str] | None = None
) -> pd.DataFrame:
    """Dispersion-loss ablation: average accuracy per (model, weight lambda, temperature tau).

    ``grid`` maps each ablation method to its (weight, tau) pair, the default ``dispersion`` run
    included. ``models`` defaults to every model with any grid method; each of them must have
    every grid method, because a half-filled ablation grid would silently compare unlike things
    (pass ``models`` when only some models were ablated). Sorted by model, weight, tau.
    """
    tasks = check_tasks(tasks)
    points = _check_grid(grid)
    selected = select_checkpoints(scores)
    in_grid = selected.loc[selected["method"].isin(list(points))]
    chosen = list(pd.unique(in_grid["model"])) if models is None else list(models)
    if not chosen:
        raise ValueError(f"table3: no model has any of the grid methods {sorted(points)}")
    records = []
    for model in chosen:
        present = set(in_grid.loc[in_grid["model"] == model, "method"])
        missing = [m for m in points if m not in present]
        if missing:
            raise ValueError(
                f"table3: model {model!r} lacks grid method(s) {', '.join(missing)}; "
                "pass `models` to restrict the ablation to fully evaluated models"
            )
        for method, (weight, tau) in points.items():
            average = seed_matrix(selected, model, method, tasks).per_seed_average
            records.append({
                "model": model, "weight": weight, "tau": tau, "method": method,
                "n_seeds": len(average), "average_mean": float(average.mean()),
                "average_std": float(sample_std(average)),
            })
    frame = pd.DataFrame(records, columns=list(TABLE3_COLUMNS))
    return frame.sort_values(["model", "weight", "tau"], kind="stable").reset_index(drop=True)


def _check_grid(grid: Mapping[str, Sequence[float]]) -> dict[str, tuple[float, float]]:
    """Grid points as floats; two methods on the same (weight, tau) would make duplicate cells."""
    if not grid:
        raise ValueError("grid: give at least one method -> (weight, tau)")
    points: dict[str, tuple[float, float]] = {}
    owner: dict[tuple[float, float], str] = {}
    for method, point in grid.items():
        if len(point) != 2 or not all(is_finite_number(v) for v in point):
            raise ValueError(f"grid[{method!r}]: expected (weight, tau) as two finite numbers, got {point!r}")
        key = (float(point[0]), float(point[1]))
        if key in owner:
            raise ValueError(f"grid: methods {owner[key]!r} and {method!r} share (weight, tau) = {key}")
        owner[key] = method
        points[method] = key
    return points


def table3_grid(table3_df: pd.DataFrame, model: str | None = None) -> pd.DataFrame:
    """The ablation as a weight x tau grid of "mean ± std" strings, for Markdown and LaTeX.

    One model per grid (``model`` may be omitted when the frame holds only one). Rows are
    weights, columns taus, both ascending; an unevaluated cell shows a dash.
    """
    require_columns(table3_df, TABLE3_COLUMNS, "table3 frame")
    available = list(pd.unique(table3_df["model"]))
    if model is None:
        if len(available) != 1:
            raise ValueError(f"table3_grid: frame holds models {available}; pass `model`")
        model = available[0]
    part = table3_df.loc[table3_df["model"] == model]
    if part.empty:
        raise ValueError(f"table3_grid: model {model!r} not in frame (has {available})")
    cells = {
        (row.weight, row.tau): mean_std(row.average_mean, row.average_std, 2)
        for row in part.itertuples(index=False)
    }
    weights = sorted(part["weight"].unique())
    taus = sorted(part["tau"].unique())
    return pd.DataFrame(
        [[f"{w:g}", *(cells.get((w, t), MISSING) for t in taus)] for w in weights],
        columns=["weight", *(f"tau = {t:g}" for t in taus)],
    )


# --------------------------------------------------------------------------------------------
# Display and captions
# --------------------------------------------------------------------------------------------


def format_scores(df: pd.DataFrame, tasks: Sequence[str], headers: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Display strings of the :func:`score_block` columns: "41.0 ± 2.1" per task, the best mean
    per model bold, then the average and the average rank.

    Bold is written the Markdown way (``**...**``); :func:`write_table` turns it into
    ``\\textbf`` for LaTeX. The best (highest, ties all marked) seed-mean of each task and of the
    average is marked within each model. Tasks get one decimal, the average two, ranks one;
    NaN shows as a dash, a single seed shows no "± std". ``headers`` renames task columns.
    """
    require_columns(df, score_columns(tasks), "table frame")
    headers = dict(headers or {})
    best = {
        column: df.groupby("model", sort=False)[f"{column}_mean"].transform(
            lambda s: np.round(s, _MEAN_DECIMALS) == np.round(s, _MEAN_DECIMALS).max()
        )
        for column in [*tasks, "average"]
    }
    display = pd.DataFrame({
        "Model": df["model"].astype(str),
        "Method": df["label"].astype(str),
        "Seeds": df["n_seeds"].map(lambda n: str(int(n))),
    })
    for column, decimals in [*((task, 1) for task in tasks), ("average", 2)]:
        text = [mean_std(m, s, decimals) for m, s in zip(df[f"{column}_mean"], df[f"{column}_std"])]
        display["Average" if column == "average" else headers.get(column, column)] = [
            f"**{t}**" if is_best and t != MISSING else t for t, is_best in zip(text, best[column])
        ]
    display["Avg. rank"] = [fixed(v, 1) for v in df["avg_rank"]]
    return display


def format_comparisons(df: pd.DataFrame, targets: Sequence[str]) -> pd.DataFrame:
    """One display column per target, "Δ vs <label>": "+1.2 [−0.4, 2.8], p=0.14" cells."""
    require_columns(df, comparison_columns(targets), "table frame")
    shown = {}
    for target in targets:
        label = df.loc[df["method"] == target, "label"]
        header = f"Δ vs {label.iloc[0] if len(label) else target}"
        shown[header] = [
            comparison_cell(d, lo, hi, p)
            for d, lo, hi, p in zip(*(df[f"{field}_vs_{target}"] for field in ("diff", "ci_low", "ci_high", "p")))
        ]
    return pd.DataFrame(shown, index=df.index)


def format_table2(
    df: pd.DataFrame, tasks: Sequence[str], targets: Sequence[str], chance: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Display strings for :func:`table2`: :func:`format_scores` and :func:`format_comparisons`;
    with ``chance`` (:func:`condensation.comparisons.task_chance`) a task at chance is marked in
    its header."""
    tasks = check_tasks(tasks)
    headers = None if chance is None else task_headers(tasks, chance)
    return pd.concat([format_scores(df, tasks, headers), format_comparisons(df, targets)], axis=1)


def comparison_caption(targets: Sequence[str], n_resamples: int = 10_000) -> str:
    """What the "Δ vs" columns test, over which items, and what their interval covers."""
    names = " and ".join(targets)
    return (
        f"Δ vs {names}: the row's average minus that method's, in points, with a 95 % interval and a "
        f"two-sided p from a paired bootstrap over test items ({n_resamples} resamples): each item's result "
        "is paired with the other method's on the same item and seed (the pretrained model's one run with "
        "each seed of the other), pooled over tasks and seeds with every task weighted equally, an item's pairs resampled "
        "together. The interval covers the sampling of items, not the variation between training seeds "
        "(shown by ± std)."
    )


def table2_caption(
    targets: Sequence[str] = ("ce", "dispersion"), metric: str = "acc", chance: pd.DataFrame | None = None,
    n_resamples: int = 10_000,
) -> str:
    """The caption every Table 2 carries: the statistic, the test and its items, the checkpoint
    rule, and the tasks at chance. ``targets`` are the compared methods as the reader should see
    them (their labels)."""
    note = "" if chance is None else at_chance_note(chance)
    return (
        f"Downstream {metric} (%) as mean ± sample std over seeds; best per model in bold. Average: mean "
        "over tasks; Avg. rank: mean of the per-task ranks within a model (1 = best). "
        f"{comparison_caption(targets, n_resamples)} {CHECKPOINT_RULE}{note}"
    )


def table3_caption(metric: str = "acc") -> str:
    """Caption of the ablation grid: rows are weights lambda, columns temperatures tau."""
    return (
        f"Dispersion-loss ablation: average downstream {metric} (%) over tasks, mean ± sample std "
        "over seeds; rows: loss weight lambda, columns: temperature tau. "
        f"{CHECKPOINT_RULE}"
    )


# --------------------------------------------------------------------------------------------
# DVC metrics
# --------------------------------------------------------------------------------------------


def score_metrics(
    scores: pd.DataFrame, tasks: Sequence[str], methods: Sequence[str], *, chance: pd.DataFrame | None = None
) -> dict[str, Any]:
    """``{model: {method: {task: mean %, ..., "average": mean %}}}`` for DVC, pretrained included.

    Same selection and averaging as :func:`table2`, rounded to 4 decimals so that ``dvc metrics
    diff`` shows real changes rather than float noise. Values are plain floats (JSON-ready).
    With ``chance`` (:func:`condensation.comparisons.task_chance`) a ``"chance_flags"`` entry
    ``{task: {chance, max_distance, at_chance}}`` is added beside the models.
    """
    tasks = check_tasks(tasks)
    methods = check_methods(methods)
    metrics: dict[str, Any] = {}
    for rows in model_rows(select_checkpoints(scores), tasks, methods):
        for row in rows:
            entry = {task: round(float(row.values[task].mean()), 4) for task in tasks}
            entry["average"] = round(float(row.per_seed_average.mean()), 4)
            metrics.setdefault(row.model, {})[row.method] = entry
    if chance is not None:
        metrics["chance_flags"] = chance_flags(chance)
    return metrics


# --------------------------------------------------------------------------------------------
# Table files of the workflow (one call per stage)
# --------------------------------------------------------------------------------------------


def load_selected(
    score_paths: Sequence[str | os.PathLike], metric: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The scores of ``score_paths`` and the per-item results of their selected checkpoints."""
    scores = load_scores(score_paths, metric=metric)
    return scores, load_items(score_paths, metric, checkpoints=select_checkpoints(scores))


def write_table2(
    *, score_paths: Sequence[str | os.PathLike], tasks: Sequence[str], methods: Sequence[str], reference: str,
    metric: str, labels: Mapping[str, str], stem: str | os.PathLike, metrics_path: str | os.PathLike,
    plot_path: str | os.PathLike, baseline: str = "ce", n_resamples: int = 10_000, seed: int = 0,
) -> pd.DataFrame:
    """Table 2 (every method on every model, against ``baseline`` and ``reference``) from score
    files and the per-item results beside them: the table files of :func:`write_table` at
    ``stem``, the scores and the tasks' chance flags as DVC metrics (:func:`score_metrics`) and
    each row's average as a DVC plot table. Returns the tidy table."""
    scores, items = load_selected(score_paths, metric)
    table = table2(scores, tasks, methods, reference=reference, labels=labels, items=items, baseline=baseline,
                   n_resamples=n_resamples, seed=seed)
    targets = comparison_targets(methods, baseline, reference)
    chance = task_chance(table, items, tasks)
    caption = table2_caption([labels.get(t, t) for t in targets], metric, chance, n_resamples)
    write_table(format_table2(table, tasks, targets, chance), table, stem, caption)
    write_json(metrics_path, score_metrics(scores, tasks, methods, chance=chance))
    averages = table.assign(row=table["model"] + " / " + table["method"])
    write_csv(averages[["row", "model", "method", "average_mean", "average_std"]], plot_path, "%.4f")
    return table


def write_table3(
    *, score_paths: Sequence[str | os.PathLike], tasks: Sequence[str], metric: str,
    grid: Mapping[str, Sequence[float]], models: Sequence[str], stem: str | os.PathLike,
) -> pd.DataFrame:
    """Table 3, the dispersion-loss ablation over ``grid`` (method -> (weight, tau)) for
    ``models``, from score files: the tidy numbers in ``stem.csv``, one weight x tau grid per
    model (model in the first column) in the display files. Returns the tidy table."""
    scores = load_scores(score_paths, metric=metric)
    table = table3(scores, tasks, grid, models=models)
    grids = pd.concat([table3_grid(table, model=model).assign(model=model) for model in models], ignore_index=True)
    display = grids[["model", *(c for c in grids.columns if c != "model")]].fillna(MISSING)
    write_table(display, table, stem, table3_caption(metric))
    return table


def write_scores_by_step(
    *, score_paths: Sequence[str | os.PathLike], metric: str, out_path: str | os.PathLike
) -> pd.DataFrame:
    """Every scored checkpoint, no selection: per (model, method, step, task) the mean, sample
    std and count over seeds of the score in percent, as CSV. The model before mid-training
    (method ``pretrained``, no step) is put at step 0. Returns the written frame."""
    scores = load_scores(score_paths, metric=metric)
    scores["step"] = scores["step"].fillna(0)
    summary = (
        scores.assign(score=scores["score"] * 100)
        .groupby(["model", "method", "step", "task"])["score"]
        .agg(["mean", "std", "count"])
        .reset_index()
    )
    write_csv(summary, out_path, "%.4f")
    return summary


def write_trend_table(
    table: pd.DataFrame, *, family: str, dataset: str, csv_path: str | os.PathLike,
    markdown_path: str | os.PathLike,
) -> pd.DataFrame:
    """A family's condensation trend on one dataset (one row per model, e.g. from the geometry
    stage's ``trend_rows``) as CSV and Markdown, numbers to 4 decimals, with ``family`` and
    ``dataset`` as the first two columns. Returns the written frame; ``table`` is not changed."""
    table = table.copy()
    table.insert(0, "dataset", dataset)
    table.insert(0, "family", family)
    write_csv(table, csv_path, "%.4f")
    write_text(markdown_path, f"# {family} on {dataset}\n\n" + to_markdown(table, float_format=".4f") + "\n")
    return table
