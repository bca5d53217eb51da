"""What the downstream-accuracy tables share (Table 2 in ``table2``, Table 3 in ``table3``).

Input is one JSON score record per evaluated checkpoint (read by :mod:`condensation.evaluation.scores`) and
the per-item results beside it (:func:`condensation.evaluation.scores.load_items`). Every table is built
from *selected* checkpoints: one per (model, method, seed), the one with the lowest validation
loss (:func:`~condensation.evaluation.scores.select_checkpoints`). The paper's code picked the checkpoint
that maximised the test scores themselves, which is optimistic; choosing on validation loss keeps
the test scores out of every decision, so the tables are honest estimates. Rows are compared with
the baseline and the reference method item by item (:mod:`condensation.reporting.comparisons`).

Each table comes twice: a tidy numeric frame (machine-readable CSV, one column per quantity) and a
display frame of strings (Markdown, LaTeX and HTML, :mod:`condensation.reporting.table_files`). Numbers are
percentages (accuracy x 100). The ``write_*`` functions at the end are what the workflow's stages
call: score files (or a frame) in, table files out. Table 4 lives in
:mod:`condensation.reporting.table4`, the condensation effects in
:mod:`condensation.reporting.condensation_effects`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from condensation.evaluation.scores import (
    PRETRAINED,
    load_items,
    load_scores,
    require_columns,
    select_checkpoints,
)
from condensation.intervals import ITEM_RESAMPLES
from condensation.reporting.tables.comparisons import (
    ABOVE_CHANCE,
    chance_flags,
    comparison_columns,
    comparison_record,
    holm_column,
    task_headers,
    tasks_above_chance,
)
from condensation.reporting.tables.table_files import (
    MISSING,
    comparison_cell,
    fixed,
    isnan,
    mean_std,
    write_csv,
)

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


def score_block(rows: list[Row], tasks: list[str], labels: Mapping[str, str],
                counted: Sequence[str] | None = None) -> pd.DataFrame:
    """One model's rows: per task the mean and sample std over seeds (percent) and the rank of
    the mean within the model (1 = best, ties share the average rank); ``average`` is the mean
    over seeds of each seed's mean over the ``counted`` tasks (default: all,
    :func:`counted_tasks`); ``avg_rank`` the mean of their ranks."""
    counted = list(tasks if counted is None else counted)
    records = []
    for row in rows:
        record: dict[str, Any] = {
            "model": row.model, "method": row.method,
            "label": labels.get(row.method, row.method), "n_seeds": row.n_seeds,
        }
        for task in tasks:
            record[f"{task}_mean"] = float(row.values[task].mean())
            record[f"{task}_std"] = float(sample_std(row.values[task]))
        averages = row.values[counted].mean(axis=1)
        record["average_mean"] = float(averages.mean())
        record["average_std"] = float(sample_std(averages))
        records.append(record)
    block = pd.DataFrame(records)
    for task in tasks:
        block[f"{task}_rank"] = rank_descending(block[f"{task}_mean"].to_numpy())
    block["avg_rank"] = block[[f"{task}_rank" for task in counted]].mean(axis=1)
    return block[score_columns(tasks)]


def score_columns(tasks: Sequence[str]) -> list[str]:
    """The columns of :func:`score_block`, in order."""
    per_task = [f"{task}_{what}" for task in tasks for what in ("mean", "std", "rank")]
    return ["model", "method", "label", "n_seeds", *per_task, "average_mean", "average_std", "avg_rank"]


def rank_descending(means: np.ndarray) -> np.ndarray:
    """Ranks with 1 = highest; tied means share the average rank (``rankdata(method='average')``)."""
    return stats.rankdata(-np.round(np.asarray(means, dtype=float), _MEAN_DECIMALS), method="average")


def counted_tasks(tasks: Sequence[str], counted: Sequence[str] | None) -> list[str]:
    """The tasks that count in averages, ranks and tests: ``counted`` as the config fixes it
    (``evaluation.counted_tasks``, chosen before any compared row is seen, or as
    :func:`resolve_counted` made its rule a list), default every task; each must be one of ``tasks``."""
    if counted is None:
        return list(tasks)
    if isinstance(counted, str):
        raise ValueError(f"counted tasks {counted!r}: a rule, to be made a list from a table's items first "
                         "(resolve_counted)")
    unknown = [task for task in counted if task not in tasks]
    if unknown or not counted:
        raise ValueError(f"counted tasks {list(counted)}: each must be one of the scored tasks {list(tasks)}")
    return [task for task in tasks if task in counted]


COUNTED_COLUMN = "counted_tasks"
"""The tidy CSV's column naming the tasks its averages and tests read (the same on every row;
joined by :data:`COUNTED_SEPARATOR`): what the findings page reads back."""
COUNTED_SEPARATOR = ";"


def resolve_counted(tasks: Sequence[str], counted: Sequence[str] | str | None,
                    items: pd.DataFrame) -> tuple[list[str] | None, str]:
    """``evaluation.counted_tasks`` for one table: its rule (``above_chance``) applied to the
    table's per-item results (:func:`condensation.reporting.tables.comparisons.tasks_above_chance`),
    with the sentence the caption gives; a list, or None (every task), as the config has it, with
    no sentence."""
    if counted == ABOVE_CHANCE:
        return tasks_above_chance(items, check_tasks(tasks))
    if isinstance(counted, str):
        raise ValueError(f"counted tasks {counted!r}: the one rule is {ABOVE_CHANCE!r}; else list the tasks")
    return (None if counted is None else list(counted)), ""


def compared_blocks(
    blocks: list[list[Row]], tasks: list[str], labels: Mapping[str, str], items: pd.DataFrame,
    targets: Sequence[str], n_resamples: int, seed: int, counted: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The score blocks of every model with each row's comparisons against ``targets``
    (:func:`condensation.reporting.tables.comparisons.comparison_record`: over seeds and items, and
    items only) as further columns, the p-values Holm-adjusted over the table. Averages and
    comparisons read the ``counted`` tasks (:func:`counted_tasks`)."""
    counted = counted_tasks(tasks, counted)
    frames = []
    for rows in blocks:
        comparisons = pd.DataFrame([
            comparison_record(items, row.model, row.method, targets, counted, n_resamples=n_resamples, seed=seed)
            for row in rows
        ], columns=comparison_columns(targets))
        frames.append(pd.concat([score_block(rows, tasks, labels, counted), comparisons], axis=1))
    table = holm_column(pd.concat(frames, ignore_index=True), targets)
    return table.astype({f"n_items_vs_{target}": "Int64" for target in targets})


def comparison_targets(methods: Sequence[str], *targets: str) -> list[str]:
    """The methods every row is compared with, each once and in order; each must be listed."""
    for target in targets:
        if target not in methods:
            raise ValueError(f"comparison method {target!r} is not among methods {list(methods)}")
    return list(dict.fromkeys(targets))


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
    """Per target, "Δ vs <label>" cells "+1.2 [−0.4, 2.8], p=0.14, Holm p=0.41" (seed-aware) and
    "per seed" cells with the same-seed differences."""
    require_columns(df, comparison_columns(targets), "table frame")
    shown = {}
    for target in targets:
        label = df.loc[df["method"] == target, "label"]
        name = label.iloc[0] if len(label) else target
        fields = ("diff", "ci_low", "ci_high", "p", "p_holm", "detectable")
        shown[f"Δ vs {name}"] = [
            comparison_cell(d, lo, hi, p, holm=ph, detectable=mde)
            for d, lo, hi, p, ph, mde in zip(*(df[f"{field}_vs_{target}"] for field in fields))
        ]
        shown[f"per seed vs {name}"] = [
            MISSING if isnan(text) else text.replace("-", "−") for text in df[f"per_seed_vs_{target}"]
        ]
    return pd.DataFrame(shown, index=df.index)


def format_score_table(
    df: pd.DataFrame, tasks: Sequence[str], targets: Sequence[str], chance: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Display strings of a score table (Tables 2 and 4): :func:`format_scores` and :func:`format_comparisons`;
    with ``chance`` (:func:`condensation.reporting.tables.comparisons.task_chance`) a task at chance is marked in
    its header."""
    tasks = check_tasks(tasks)
    headers = None if chance is None else task_headers(tasks, chance)
    return pd.concat([format_scores(df, tasks, headers), format_comparisons(df, targets)], axis=1)


def comparison_caption(targets: Sequence[str], n_resamples: int = ITEM_RESAMPLES, seeds_vary: str = "",
                       counted: Sequence[str] | None = None, counted_by: str = "") -> str:
    """What the "Δ vs" columns test, what their interval covers, the multiple-comparison
    adjustment, the tasks they read (``counted_by``: the rule's sentence, :func:`resolve_counted`)
    and (``seeds_vary``) what a seed changes between runs."""
    names = " and ".join(targets)
    varies = f" A seed varies {seeds_vary}." if seeds_vary else ""
    if counted_by:
        tasks = f"the tasks counted ({', '.join(counted or [])}; the rule below)"
        varies += f" {counted_by}"
    else:
        tasks = (f"the tasks counted ({', '.join(counted)}, fixed in the config before any run)" if counted
                 else "every task")
    return (
        f"Δ vs {names}: the row's average minus that method's, in points, with a 95 % interval and a "
        "two-sided p over seeds and test items: a paired t over the per-seed differences (k - 1 degrees of "
        "freedom; the pretrained model's one run a fixed reference) whose variance adds the items' main effect "
        "only, since the seeds' spread already holds the run x item noise. MDE: the smallest difference the "
        "comparison finds with 80 % power at 5 %. Holm p: adjusted over the table's distinct comparisons. Per "
        f"seed: the same-seed differences. Averages, ranks and tests read {tasks}. The CSV also holds an item-only "
        f"interval (items_*, a paired bootstrap over items, {n_resamples} resamples), which treats the runs as fixed "
        f"and so says how precisely these runs were scored, not whether the method helps.{varies}"
    )


# --------------------------------------------------------------------------------------------
# DVC metrics
# --------------------------------------------------------------------------------------------


def score_metrics(
    scores: pd.DataFrame, tasks: Sequence[str], methods: Sequence[str], *, chance: pd.DataFrame | None = None,
    counted: Sequence[str] | None = None,
) -> dict[str, Any]:
    """``{model: {method: {task: mean %, ..., "average": mean %}}}`` for DVC, pretrained included.

    Same selection and averaging as :func:`table2`, rounded to 4 decimals so that ``dvc metrics
    diff`` shows real changes rather than float noise. Values are plain floats (JSON-ready).
    With ``chance`` (:func:`condensation.reporting.comparisons.task_chance`) a ``"chance_flags"`` entry
    ``{task: {chance, max_distance, at_chance}}`` is added beside the models; the average reads
    the ``counted`` tasks, as the table's does (:func:`counted_tasks`).
    """
    tasks = check_tasks(tasks)
    methods = check_methods(methods)
    counted = counted_tasks(tasks, counted)
    metrics: dict[str, Any] = {}
    for rows in model_rows(select_checkpoints(scores), tasks, methods):
        for row in rows:
            entry = {task: round(float(row.values[task].mean()), 4) for task in tasks}
            entry["average"] = round(float(row.values[counted].mean(axis=1).mean()), 4)
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
