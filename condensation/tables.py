"""Downstream-accuracy tables: the paper's Table 2 (methods x models) and Table 3 (dispersion ablation).

Input is one JSON score record per evaluated checkpoint (see :func:`load_scores`). Every table is
built from *selected* checkpoints: one per (model, method, seed), the one with the lowest
validation loss (:func:`select_checkpoints`). The paper's code picked the checkpoint that
maximised the test scores themselves, which is optimistic; choosing on validation loss keeps the
test scores out of every decision, so the tables are honest estimates.

Each table comes twice: a tidy numeric frame (machine-readable CSV, one column per quantity) and a
display frame of strings (Markdown and LaTeX). Numbers are percentages (accuracy x 100).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from condensation.io import atomic_path, write_text

PRETRAINED = "pretrained"
"""Method name of the model before mid-training: one record per model, no seed, no step."""

RECORD_FIELDS = ("model", "method", "seed", "checkpoint", "step", "val_loss", "scores")
SCORE_COLUMNS = ("model", "method", "seed", "checkpoint", "step", "val_loss", "task", "score")
TABLE3_COLUMNS = ("model", "weight", "tau", "method", "n_seeds", "average_mean", "average_std")

MISSING = "—"
"""How a NaN is displayed: a dash, never the string 'nan'."""

# Means are compared after rounding to this many decimals (in percent), so that two means that
# are equal on paper (52.0 from 50, 52, 54 and from 52, 52, 52) tie instead of being split by
# floating-point noise. Paired differences get the same treatment (in fractions) before the
# Wilcoxon test, which ranks their magnitudes.
_MEAN_DECIMALS = 9
_DIFF_DECIMALS = 10


# --------------------------------------------------------------------------------------------
# Loading score records
# --------------------------------------------------------------------------------------------


def load_scores(paths: Sequence[str | os.PathLike], metric: str = "acc") -> pd.DataFrame:
    """Read score records into one long frame, one row per (checkpoint, task).

    Columns: model, method, seed, checkpoint, step, val_loss, task, score (the value of
    ``metric``). Records are validated here, where the file name is still known, so a broken
    record fails with its path instead of as a puzzling number later. Scores must be fractions
    in [0, 1] because every table reports them as percentages.
    """
    paths = list(paths)
    if not paths:
        raise ValueError("load_scores: no score files given")
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[Any, ...], str] = {}
    for path in paths:
        record = _read_record(path)
        key = (record["model"], record["method"], record["seed"], record["checkpoint"])
        if key in seen:
            raise ValueError(
                f"{path}: duplicate score record for model={key[0]!r} method={key[1]!r} "
                f"seed={key[2]!r} checkpoint={key[3]!r}; also in {seen[key]}"
            )
        seen[key] = str(path)
        rows.extend(_record_rows(record, path, metric))
    frame = pd.DataFrame(rows, columns=list(SCORE_COLUMNS))
    frame["seed"] = frame["seed"].astype("Int64")
    frame["step"] = frame["step"].astype("Int64")
    frame["val_loss"] = frame["val_loss"].astype("float64")
    frame["score"] = frame["score"].astype("float64")
    return frame


def _read_record(path: str | os.PathLike) -> dict[str, Any]:
    """Parse and check one record's top-level fields (types, and what pretrained may omit)."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(record, dict):
        raise ValueError(f"{path}: a score record must be a JSON object, got {type(record).__name__}")
    missing = [name for name in RECORD_FIELDS if name not in record]
    if missing:
        raise ValueError(f"{path}: score record lacks field(s) {', '.join(missing)}")
    for name in ("model", "method", "checkpoint"):
        if not isinstance(record[name], str) or not record[name]:
            raise ValueError(f"{path}: field {name!r} must be a non-empty string, got {record[name]!r}")
    for name in ("seed", "step"):
        if record[name] is not None and not _is_int(record[name]):
            raise ValueError(f"{path}: field {name!r} must be an integer or null, got {record[name]!r}")
    if record["method"] != PRETRAINED and record["seed"] is None:
        raise ValueError(f"{path}: method {record['method']!r} needs a seed (only {PRETRAINED!r} has none)")
    if record["val_loss"] is not None and not _is_finite_number(record["val_loss"]):
        raise ValueError(f"{path}: field 'val_loss' must be a finite number or null, got {record['val_loss']!r}")
    if not isinstance(record["scores"], dict) or not record["scores"]:
        raise ValueError(f"{path}: field 'scores' must be a non-empty object of task -> metrics")
    return record


def _record_rows(record: Mapping[str, Any], path: str | os.PathLike, metric: str) -> list[dict[str, Any]]:
    """One row per task, holding the chosen metric; a task without it names file, task and metric."""
    rows = []
    for task, metrics in record["scores"].items():
        if not isinstance(metrics, dict) or metric not in metrics:
            raise ValueError(f"{path}: task {task!r} lacks metric {metric!r}")
        value = metrics[metric]
        if not _is_finite_number(value) or not 0.0 <= value <= 1.0:
            raise ValueError(
                f"{path}: task {task!r} metric {metric!r} must be a fraction in [0, 1], got {value!r}"
            )
        rows.append({
            "model": record["model"], "method": record["method"], "seed": record["seed"],
            "checkpoint": record["checkpoint"], "step": record["step"],
            "val_loss": math.nan if record["val_loss"] is None else float(record["val_loss"]),
            "task": task, "score": float(value),
        })
    return rows


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# --------------------------------------------------------------------------------------------
# Checkpoint selection
# --------------------------------------------------------------------------------------------


def select_checkpoints(scores: pd.DataFrame) -> pd.DataFrame:
    """Keep, per (model, method, seed), the checkpoint with the lowest validation loss.

    Ties go to the earliest step (less training for the same loss). The paper's code chose the
    checkpoint that maximised the downstream test scores themselves, an optimistic selection
    that leaks the test set into the result; here the choice is made on validation loss and
    never looks at a test score. Pretrained rows pass through untouched. A run none of whose
    checkpoints has a validation loss cannot be selected and raises ValueError naming it.
    Row order of the input is kept.
    """
    _require_columns(scores, SCORE_COLUMNS, "scores")
    is_pretrained = scores["method"] == PRETRAINED
    runs = scores.loc[~is_pretrained]
    if runs["seed"].isna().any():
        bad = runs.loc[runs["seed"].isna(), ["model", "method"]].iloc[0]
        raise ValueError(f"model {bad['model']!r} method {bad['method']!r}: a row has no seed")
    checkpoints = runs.drop_duplicates(["model", "method", "seed", "checkpoint", "step", "val_loss"])
    clash = checkpoints.duplicated(["model", "method", "seed", "checkpoint"], keep=False)
    if clash.any():
        bad = checkpoints.loc[clash].iloc[0]
        raise ValueError(
            f"model {bad['model']!r} method {bad['method']!r} seed {bad['seed']} checkpoint "
            f"{bad['checkpoint']!r}: rows disagree on step or val_loss"
        )
    chosen = []
    for (model, method, seed), group in checkpoints.groupby(["model", "method", "seed"], sort=False):
        candidates = group.dropna(subset=["val_loss"])
        if candidates.empty:
            raise ValueError(
                f"model {model!r} method {method!r} seed {seed}: no checkpoint has a validation "
                f"loss, so none can be selected (checkpoints: {', '.join(map(str, group['checkpoint']))})"
            )
        best = candidates.sort_values(["val_loss", "step", "checkpoint"], na_position="last").iloc[0]
        chosen.append((model, method, seed, best["checkpoint"]))
    keys = pd.MultiIndex.from_frame(scores[["model", "method", "seed", "checkpoint"]])
    keep = is_pretrained.to_numpy() | keys.isin(chosen)
    return scores.loc[keep].reset_index(drop=True)


def _require_columns(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} lacks column(s) {', '.join(missing)}")


# --------------------------------------------------------------------------------------------
# Per-row seed matrices (shared by Tables 2 and 3 and the metrics)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Row:
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


def _check_tasks(tasks: Sequence[str]) -> list[str]:
    return _check_names(tasks, "tasks", "average", "is reserved for the mean over tasks")


def _check_methods(methods: Sequence[str]) -> list[str]:
    return _check_names(methods, "methods", PRETRAINED, "is added automatically; do not list it")


def _row(selected: pd.DataFrame, model: str, method: str, tasks: Sequence[str]) -> _Row:
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
    return _Row(model, method, values)


def _model_rows(selected: pd.DataFrame, tasks: Sequence[str], methods: Sequence[str]) -> list[list[_Row]]:
    """Per model (in order of first appearance), its rows: pretrained if present, then ``methods``."""
    blocks = []
    for model in pd.unique(selected["model"]):
        present = set(selected.loc[selected["model"] == model, "method"])
        order = ([PRETRAINED] if PRETRAINED in present else []) + list(methods)
        missing = [m for m in methods if m not in present]
        if missing:
            raise ValueError(f"model {model!r}: method(s) {', '.join(missing)} listed but not scored")
        blocks.append([_row(selected, model, method, tasks) for method in order])
    return blocks


def _std(values: pd.Series | pd.DataFrame) -> Any:
    """Sample standard deviation (ddof=1): NaN for a single seed, where spread is unknown."""
    return values.std(ddof=1)


# --------------------------------------------------------------------------------------------
# Table 2
# --------------------------------------------------------------------------------------------


def table2(
    scores: pd.DataFrame,
    tasks: Sequence[str],
    methods: Sequence[str],
    reference: str = "dispersion",
    labels: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """Downstream accuracy of every method on every model, as a tidy numeric frame.

    Built from :func:`select_checkpoints`. One block per model, rows: pretrained (if scored),
    then ``methods`` in order. Per task: mean and sample std over seeds (percent) and the rank of
    the mean within the model (1 = best, ties share the average rank). ``average`` is the mean
    over seeds of each seed's mean over tasks. Significance against ``reference``: a two-sided
    Wilcoxon signed-rank test over the (task, seed) units both rows have, paired by seed;
    NaN for the reference itself and for pretrained (it has no seeds). If every paired difference
    is zero the p-value is 1.0 (scipy refuses that case). ``delta_vs_reference`` is the row's
    average minus the reference's, in percentage points.
    """
    tasks = _check_tasks(tasks)
    methods = _check_methods(methods)
    if reference not in methods:
        raise ValueError(f"reference {reference!r} is not among methods {methods}")
    labels = dict(labels or {})
    selected = select_checkpoints(scores)
    frames = [
        _table2_block(rows, tasks, reference, labels)
        for rows in _model_rows(selected, tasks, methods)
    ]
    return pd.concat(frames, ignore_index=True)


def table2_columns(tasks: Sequence[str]) -> list[str]:
    """Column order of :func:`table2`, so readers of the CSV need not guess it."""
    per_task = [f"{task}_{what}" for task in tasks for what in ("mean", "std", "rank")]
    return ["model", "method", "label", "n_seeds", *per_task,
            "average_mean", "average_std", "avg_rank", "p_value", "n_pairs", "delta_vs_reference"]


def _table2_block(rows: list[_Row], tasks: list[str], reference: str, labels: Mapping[str, str]) -> pd.DataFrame:
    ref = next(r for r in rows if r.method == reference)
    ref_average = float(ref.per_seed_average.mean())
    records = []
    for row in rows:
        record: dict[str, Any] = {
            "model": row.model, "method": row.method,
            "label": labels.get(row.method, row.method), "n_seeds": row.n_seeds,
        }
        for task in tasks:
            record[f"{task}_mean"] = float(row.values[task].mean())
            record[f"{task}_std"] = float(_std(row.values[task]))
        record["average_mean"] = float(row.per_seed_average.mean())
        record["average_std"] = float(_std(row.per_seed_average))
        if row.method in (reference, PRETRAINED):
            record["p_value"], record["n_pairs"] = math.nan, pd.NA
        else:
            record["p_value"], record["n_pairs"] = paired_wilcoxon(row.values, ref.values)
        record["delta_vs_reference"] = record["average_mean"] - ref_average
        records.append(record)
    block = pd.DataFrame(records)
    for task in tasks:
        block[f"{task}_rank"] = rank_descending(block[f"{task}_mean"].to_numpy())
    block["avg_rank"] = block[[f"{task}_rank" for task in tasks]].mean(axis=1)
    block["n_pairs"] = block["n_pairs"].astype("Int64")
    return block[table2_columns(tasks)]


def rank_descending(means: np.ndarray) -> np.ndarray:
    """Ranks with 1 = highest; tied means share the average rank (``rankdata(method='average')``)."""
    return stats.rankdata(-np.round(np.asarray(means, dtype=float), _MEAN_DECIMALS), method="average")


def paired_wilcoxon(values: pd.DataFrame, reference: pd.DataFrame) -> tuple[float, int]:
    """Two-sided Wilcoxon signed-rank p-value and pair count over shared (seed, task) units.

    Pairs are matched by seed, so seed-level variation (data order, initialisation) cancels.
    Zero differences are dropped as scipy's default ``zero_method='wilcox'`` does; if all are
    zero there is no evidence of a difference and p = 1.0. No shared units gives (NaN, 0).
    """
    seeds = [s for s in values.index if s in set(reference.index)]
    tasks = [t for t in values.columns if t in set(reference.columns)]
    if not seeds or not tasks:
        return math.nan, 0
    diffs = (values.loc[seeds, tasks] - reference.loc[seeds, tasks]).to_numpy(dtype=float).ravel()
    diffs = np.round(diffs / 100.0, _DIFF_DECIMALS)
    if not np.any(diffs):
        return 1.0, int(diffs.size)
    result = stats.wilcoxon(diffs, alternative="two-sided")
    return float(result.pvalue), int(diffs.size)


# --------------------------------------------------------------------------------------------
# Table 3
# --------------------------------------------------------------------------------------------


def table3(
    scores: pd.DataFrame,
    tasks: Sequence[str],
    grid: Mapping[str, tuple[float, float]],
    models: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Dispersion-loss ablation: average accuracy per (model, weight lambda, temperature tau).

    ``grid`` maps each ablation method to its (weight, tau), the default ``dispersion`` run
    included. ``models`` defaults to every model with any grid method; each of them must have
    every grid method, because a half-filled ablation grid would silently compare unlike things
    (pass ``models`` when only some models were ablated). Sorted by model, weight, tau.
    """
    tasks = _check_tasks(tasks)
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
            average = _row(selected, model, method, tasks).per_seed_average
            records.append({
                "model": model, "weight": weight, "tau": tau, "method": method,
                "n_seeds": len(average), "average_mean": float(average.mean()),
                "average_std": float(_std(average)),
            })
    frame = pd.DataFrame(records, columns=list(TABLE3_COLUMNS))
    return frame.sort_values(["model", "weight", "tau"], kind="stable").reset_index(drop=True)


def _check_grid(grid: Mapping[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Grid points as floats; two methods on the same (weight, tau) would make duplicate cells."""
    if not grid:
        raise ValueError("grid: give at least one method -> (weight, tau)")
    points: dict[str, tuple[float, float]] = {}
    owner: dict[tuple[float, float], str] = {}
    for method, point in grid.items():
        if len(point) != 2 or not all(_is_finite_number(v) for v in point):
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
    _require_columns(table3_df, TABLE3_COLUMNS, "table3 frame")
    available = list(pd.unique(table3_df["model"]))
    if model is None:
        if len(available) != 1:
            raise ValueError(f"table3_grid: frame holds models {available}; pass `model`")
        model = available[0]
    part = table3_df.loc[table3_df["model"] == model]
    if part.empty:
        raise ValueError(f"table3_grid: model {model!r} not in frame (has {available})")
    cells = {
        (row.weight, row.tau): _mean_std(row.average_mean, row.average_std, 2)
        for row in part.itertuples(index=False)
    }
    weights = sorted(part["weight"].unique())
    taus = sorted(part["tau"].unique())
    return pd.DataFrame(
        [[f"{w:g}", *(cells.get((w, t), MISSING) for t in taus)] for w in weights],
        columns=["weight", *(f"tau = {t:g}" for t in taus)],
    )


# --------------------------------------------------------------------------------------------
# Display, captions and files
# --------------------------------------------------------------------------------------------


def format_table2(df: pd.DataFrame, tasks: Sequence[str]) -> pd.DataFrame:
    """Display strings for :func:`table2`: "41.0 ± 2.1" per task, the best mean per model bold.

    Bold is written the Markdown way (``**...**``); :func:`write_table` turns it into
    ``\\textbf`` for LaTeX. The best (highest, ties all marked) seed-mean of each task and of the
    average is marked within each model. Tasks get one decimal, the average two, ranks one,
    p-values three significant digits; NaN shows as a dash, a single seed shows no "± std".
    """
    tasks = _check_tasks(tasks)
    _require_columns(df, table2_columns(tasks), "table2 frame")
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
        text = [_mean_std(m, s, decimals) for m, s in zip(df[f"{column}_mean"], df[f"{column}_std"])]
        display["Average" if column == "average" else column] = [
            f"**{t}**" if is_best and t != MISSING else t for t, is_best in zip(text, best[column])
        ]
    display["Avg. rank"] = [_fixed(v, 1) for v in df["avg_rank"]]
    display["p"] = [MISSING if _isnan(p) else f"{p:#.3g}" for p in df["p_value"]]
    display["Pairs"] = [MISSING if _isnan(n) else str(int(n)) for n in df["n_pairs"]]
    display["Δ average"] = [MISSING if _isnan(d) else f"{d:+.2f}" for d in df["delta_vs_reference"]]
    return display


def table2_caption(reference: str = "dispersion", metric: str = "acc") -> str:
    """The caption every Table 2 carries, so a reader knows the test and the checkpoint rule."""
    return (
        f"Downstream {metric} (%) as mean ± sample std over seeds; best per model in bold. "
        f"p: Wilcoxon signed-rank test, two-sided, paired over (task, seed) against {reference}. "
        "Each run's checkpoint chosen per seed by the lowest validation loss (never by test score)."
    )


def table3_caption(metric: str = "acc") -> str:
    """Caption of the ablation grid: rows are weights lambda, columns temperatures tau."""
    return (
        f"Dispersion-loss ablation: average downstream {metric} (%) over tasks, mean ± sample std "
        "over seeds; rows: loss weight lambda, columns: temperature tau. "
        "Each run's checkpoint chosen per seed by the lowest validation loss (never by test score)."
    )


def write_table(display_df: pd.DataFrame, csv_df: pd.DataFrame, stem: str | os.PathLike, caption: str) -> None:
    """Write ``stem.csv`` (tidy numbers), ``stem.md`` and ``stem.tex`` (display strings), atomically.

    The CSV keeps full float precision so it reads back to the same numbers; the Markdown starts
    with ``caption`` as a paragraph; the LaTeX is a bare tabular (caption as a comment) for
    ``\\input`` inside the paper's table environment.
    """
    stem = Path(stem)
    with atomic_path(stem.with_name(stem.name + ".csv")) as tmp:
        csv_df.to_csv(tmp, index=False)
    write_text(stem.with_name(stem.name + ".md"), caption.strip() + "\n\n" + to_markdown(display_df) + "\n")
    write_text(stem.with_name(stem.name + ".tex"), to_latex(display_df, caption))


def to_markdown(display_df: pd.DataFrame) -> str:
    """A GitHub Markdown table; pipes inside cells are escaped so they cannot split a column."""
    def cell(value: Any) -> str:
        return str(value).replace("\n", " ").replace("|", "\\|")

    header = "| " + " | ".join(cell(c) for c in display_df.columns) + " |"
    rule = "|" + "|".join("---" for _ in display_df.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in display_df.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def to_latex(display_df: pd.DataFrame, caption: str = "") -> str:
    """A LaTeX tabular of the display strings: special characters escaped, ``**x**`` as \\textbf."""
    align = "".join("r" if _numeric_column(display_df[c]) else "l" for c in display_df.columns)
    # The caption is escaped too, so it can be pasted into \caption{} as it stands.
    comment = "".join(f"% {latex_escape(line)}\n" for line in caption.strip().splitlines() if line)
    header = " & ".join(latex_escape(str(c)) for c in display_df.columns) + r" \\"
    body = [
        " & ".join(_latex_cell(str(v)) for v in row) + r" \\"
        for row in display_df.itertuples(index=False)
    ]
    lines = [rf"\begin{{tabular}}{{{align}}}", r"\hline", header, r"\hline", *body, r"\hline", r"\end{tabular}"]
    return comment + "\n".join(lines) + "\n"


_LATEX_CHARS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "±": r"$\pm$", "—": "---", "–": "--", "τ": r"$\tau$", "λ": r"$\lambda$", "Δ": r"$\Delta$",
}


def latex_escape(text: str) -> str:
    """Escape text for LaTeX in one pass, so replacements are never escaped a second time."""
    return "".join(_LATEX_CHARS.get(ch, ch) for ch in text)


def _latex_cell(text: str) -> str:
    match = re.fullmatch(r"\*\*(.+)\*\*", text)
    return rf"\textbf{{{latex_escape(match.group(1))}}}" if match else latex_escape(text)


def _numeric_column(column: pd.Series) -> bool:
    """Right-align a column whose every cell is a number, a dash, or a bold number."""
    return all(
        re.match(r"^(\*\*)?[+\-]?\d", str(v)) or str(v) == MISSING for v in column
    ) and len(column) > 0


def _mean_std(mean: float, std: float, decimals: int) -> str:
    if _isnan(mean):
        return MISSING
    if _isnan(std):
        return f"{mean:.{decimals}f}"
    return f"{mean:.{decimals}f} ± {std:.{decimals}f}"


def _fixed(value: float, decimals: int) -> str:
    return MISSING if _isnan(value) else f"{value:.{decimals}f}"


def _isnan(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, (float, np.floating)) and math.isnan(value))


# --------------------------------------------------------------------------------------------
# DVC metrics
# --------------------------------------------------------------------------------------------


def score_metrics(scores: pd.DataFrame, tasks: Sequence[str], methods: Sequence[str]) -> dict[str, Any]:
    """``{model: {method: {task: mean %, ..., "average": mean %}}}`` for DVC, pretrained included.

    Same selection and averaging as :func:`table2`, rounded to 4 decimals so that ``dvc metrics
    diff`` shows real changes rather than float noise. Values are plain floats (JSON-ready).
    """
    tasks = _check_tasks(tasks)
    methods = _check_methods(methods)
    metrics: dict[str, Any] = {}
    for rows in _model_rows(select_checkpoints(scores), tasks, methods):
        for row in rows:
            entry = {task: round(float(row.values[task].mean()), 4) for task in tasks}
            entry["average"] = round(float(row.per_seed_average.mean()), 4)
            metrics.setdefault(row.model, {})[row.method] = entry
    return metrics
