"""Score records: one JSON file per evaluated checkpoint, read into one long frame and reduced
to one checkpoint per run.

A record (written by the evaluation stage) holds model, method, seed, checkpoint, step,
val_loss and ``scores`` (task -> metrics); beside it lie its per-item results
(:func:`condensation.evaluation.score_files.item_rows_path`). :func:`load_scores` validates records where the
file name is still known, :func:`load_items` reads the per-item results of the records one asks
for; :func:`select_checkpoints` applies the project's one checkpoint rule,
:func:`condensation.runtime.run_dir.select_step`, so every table is built from checkpoints chosen
on validation loss and never on a test score.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from condensation.evaluation.score_files import item_rows_path, read_item_rows
from condensation.runtime.run_dir import select_step

PRETRAINED = "pretrained"
"""Method name of the model before mid-training: one record per model, no seed, no step."""

RECORD_FIELDS = ("model", "method", "seed", "checkpoint", "step", "val_loss", "scores")
SCORE_COLUMNS = ("model", "method", "seed", "checkpoint", "step", "val_loss", "task", "score")
ITEM_COLUMNS = ("model", "method", "seed", "checkpoint", "task", "subtask", "doc_id", "score", "n_choices")
ITEM_KEY = ("task", "subtask", "doc_id")
"""What identifies a test item across runs (a group task's items are told apart by subtask)."""


# --------------------------------------------------------------------------------------------
# Loading
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
    return frame.astype({"seed": "Int64", "step": "Int64", "val_loss": "float64", "score": "float64"})


def load_items(
    paths: Sequence[str | os.PathLike], metric: str = "acc", *, checkpoints: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per-item results of score records, from the samples file beside each record.

    One row per (record, item): model, method, seed, checkpoint (the record's), task, subtask,
    doc_id (the item), score (the item's ``metric``, 0 or 1 for accuracy) and n_choices (the
    number of answer choices, from the item's log-likelihoods; NaN for tasks that have none).
    ``checkpoints`` (a frame with model, method, seed, checkpoint, e.g. the output of
    :func:`select_checkpoints`) limits the reading to those records. When a task's items were
    scored under several lm-eval filters, the unfiltered ones (filter ``none``) are kept. A
    record without its samples file, or an item without ``metric``, fails naming the file.
    """
    wanted = None if checkpoints is None else {_record_key(row) for row in checkpoints.to_dict("records")}
    frames = []
    for path in paths:
        record = _read_record(path)
        key = _record_key(record)
        if wanted is not None and key not in wanted:
            continue
        frames.append(_record_items(path, metric).assign(
            model=record["model"], method=record["method"], seed=record["seed"], checkpoint=record["checkpoint"]))
    if not frames:
        raise ValueError("load_items: none of the given score records was asked for")
    items = pd.concat(frames, ignore_index=True)[list(ITEM_COLUMNS)]
    return items.astype({"seed": "Int64", "doc_id": "int64", "score": "float64", "n_choices": "float64"})


def _record_key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    seed = record["seed"]
    return record["model"], record["method"], None if pd.isna(seed) else int(seed), record["checkpoint"]


def _record_items(path: str | os.PathLike, metric: str) -> pd.DataFrame:
    """The items of one record's samples file: task, subtask, doc_id, score, n_choices."""
    where = item_rows_path(path)
    if not where.is_file():
        raise FileNotFoundError(f"{path}: its per-item results {where} are missing")
    samples = read_item_rows(where)
    if metric not in samples.columns or samples[metric].isna().any():
        raise ValueError(f"{where}: some items lack metric {metric!r}")
    several = samples.groupby("task")["filter"].transform("nunique") > 1
    samples = samples.loc[~several | (samples["filter"] == "none")]
    if samples.duplicated(list(ITEM_KEY)).any():
        task = samples.loc[samples.duplicated(list(ITEM_KEY)), "task"].iloc[0]
        raise ValueError(f"{where}: task {task!r} repeats items (several filters, none of them 'none')")
    if not samples[metric].between(0.0, 1.0).all():
        raise ValueError(f"{where}: metric {metric!r} must be a fraction in [0, 1] per item")
    choices = samples["loglikelihoods"] if "loglikelihoods" in samples else pd.Series(None, index=samples.index)
    return pd.DataFrame({
        "task": samples["task"], "subtask": samples["subtask"], "doc_id": samples["doc_id"],
        "score": samples[metric].astype(float),
        "n_choices": [len(c) if isinstance(c, list) and c else np.nan for c in choices],
    })


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
    if record["val_loss"] is not None and not is_finite_number(record["val_loss"]):
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
        if not is_finite_number(value) or not 0.0 <= value <= 1.0:
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


def is_finite_number(value: Any) -> bool:
    """A real int or float (not a bool), neither NaN nor infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# --------------------------------------------------------------------------------------------
# Checkpoint selection
# --------------------------------------------------------------------------------------------


def select_checkpoints(scores: pd.DataFrame) -> pd.DataFrame:
    """Keep, per (model, method, seed), the checkpoint :func:`condensation.runtime.run_dir.select_step`
    chooses: the lowest validation loss, ties to the earliest step, never step 0 (the model before
    mid-training, reported as the pretrained row).

    The paper's code chose the checkpoint that maximised the downstream test scores themselves,
    an optimistic selection that leaks the test set into the result; here the choice never looks
    at a test score. Pretrained rows pass through untouched. A run none of whose checkpoints can
    be selected raises ValueError naming it. Row order of the input is kept.
    """
    require_columns(scores, SCORE_COLUMNS, "scores")
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
    chosen = [
        (model, method, seed, _selected_checkpoint(group, f"model {model!r} method {method!r} seed {seed}"))
        for (model, method, seed), group in checkpoints.groupby(["model", "method", "seed"], sort=False)
    ]
    keys = pd.MultiIndex.from_frame(scores[["model", "method", "seed", "checkpoint"]])
    keep = is_pretrained.to_numpy() | keys.isin(chosen)
    return scores.loc[keep].reset_index(drop=True)


def _selected_checkpoint(run: pd.DataFrame, where: str) -> str:
    """The checkpoint name of one run (one row per checkpoint) that ``select_step`` picks."""
    candidates = run.dropna(subset=["val_loss"])
    if candidates["step"].isna().any():
        name = candidates.loc[candidates["step"].isna(), "checkpoint"].iloc[0]
        raise ValueError(f"{where}: checkpoint {name!r} has a validation loss but no step")
    shared = candidates["step"].duplicated(keep=False)
    if shared.any():
        names = ", ".join(map(str, candidates.loc[shared, "checkpoint"]))
        raise ValueError(f"{where}: checkpoints {names} share a step, so the step does not identify one")
    try:
        step = select_step(zip(candidates["step"].astype(int), candidates["val_loss"]))
    except ValueError:
        raise ValueError(
            f"{where}: no checkpoint has a validation loss, so none can be selected (step 0, the "
            f"model before mid-training, never is; checkpoints: {', '.join(map(str, run['checkpoint']))})"
        ) from None
    return str(candidates.loc[candidates["step"] == step, "checkpoint"].item())


def require_columns(frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    """Raise ValueError naming the ``columns`` that ``frame`` (described as ``what``) lacks."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} lacks column(s) {', '.join(missing)}")
