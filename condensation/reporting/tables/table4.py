"""The paper's Table 4: models pre-trained from scratch with CE and with the dispersion loss, their
scores beside their condensation, both of the same checkpoint.

Condensation comes from a trajectory CSV (``results/scratch/<model>/trajectory.csv``): one row per
(method, seed, step) with val_loss, spearman_rho, kendall_tau, last_1..last_5 and last_half (the
mean cosine of the deeper half of the layers), measured on text no run trained on. Each run's row is
read at the step of the checkpoint its scores come from (the lowest validation loss).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from condensation.evaluation.scores import (
    PRETRAINED,
    select_checkpoints,
)
from condensation.intervals import ITEM_RESAMPLES
from condensation.reporting.tables.comparisons import (
    at_chance_note,
    comparison_columns,
    selected_items,
    task_chance,
)
from condensation.reporting.tables.score_tables import (
    CHECKPOINT_RULE,
    COUNTED_COLUMN,
    COUNTED_SEPARATOR,
    Row,
    check_methods,
    check_tasks,
    compared_blocks,
    comparison_caption,
    comparison_targets,
    counted_tasks,
    format_score_table,
    load_selected,
    model_rows,
    resolve_counted,
    sample_std,
    score_columns,
)
from condensation.reporting.tables.table_files import (
    check_unique_steps,
    mean_std,
    write_table,
)
from condensation.reporting.tables.tokens_to_target import (
    format_tokens,
    read_losses,
    token_frame,
    tokens_caption,
)

CONDENSATION_STATISTICS = {"last_half": "Deep cos", "spearman_rho": "Spearman ρ", "kendall_tau": "Kendall τ"}
"""Table 4's condensation columns and their display headers."""

SEEDS_VARY = "the initialisation and the order of the training data"


# --------------------------------------------------------------------------------------------
# Table 4
# --------------------------------------------------------------------------------------------


def table4(
    scores: pd.DataFrame, tasks: Sequence[str], methods: Sequence[str], *, items: pd.DataFrame,
    trajectories: Mapping[str, pd.DataFrame], baseline: str = "ce", labels: Mapping[str, str] | None = None,
    n_resamples: int = ITEM_RESAMPLES, seed: int = 0, counted: Sequence[str] | None = None,
    losses: Mapping[str, pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """Models pre-trained from scratch, one row per method (per model), as a tidy frame.

    The score columns are Table 2's (:func:`condensation.reporting.tables.score_tables.score_block`, from the selected
    checkpoints) with the seed-aware comparison against ``baseline`` (``diff_vs_ce`` etc.); a
    pretrained record, if any, is left out (nothing here was pre-trained before). Then per
    condensation statistic (:data:`CONDENSATION_STATISTICS`) the mean and sample std over the
    row's seeds of its value at the step of each run's selected checkpoint (the one its scores
    come from), read from ``trajectories`` (model -> trajectory frame); every scored seed and step
    must be in the trajectory. With ``losses`` (model -> its runs' ``losses.csv``) the ``tokens_*``
    columns follow (:mod:`condensation.reporting.tables.tokens_to_target`).
    """
    tasks = check_tasks(tasks)
    methods = check_methods(methods)
    targets = comparison_targets(methods, baseline)
    selected = select_checkpoints(scores)
    selected = selected.loc[selected["method"] != PRETRAINED]
    blocks = model_rows(selected, tasks, methods)
    table = compared_blocks(blocks, tasks, dict(labels or {}), selected_items(items, selected), targets,
                            n_resamples, seed, counted)
    steps = selected.drop_duplicates(["model", "method", "seed"]).set_index(["model", "method", "seed"])["step"]
    for frame in trajectories.values():
        check_unique_steps(frame)
    condensation = pd.DataFrame([_condensation_record(trajectories, steps, row) for rows in blocks for row in rows])
    table = pd.concat([table, condensation], axis=1)[table4_columns(tasks, targets)]
    if losses is None:
        return table
    keys = list(zip(table["model"], table["method"]))
    return pd.concat([table, token_frame(keys, losses, baseline)], axis=1)


def table4_columns(tasks: Sequence[str], targets: Sequence[str]) -> list[str]:
    """Column order of :func:`table4`."""
    condensation = [f"{name}_{what}" for name in CONDENSATION_STATISTICS for what in ("mean", "std")]
    return [*score_columns(tasks), *comparison_columns(targets), *condensation]


def _condensation_record(trajectories: Mapping[str, pd.DataFrame], steps: pd.Series, row: Row) -> dict[str, Any]:
    """One row's condensation: each seed's trajectory value at its selected checkpoint's step."""
    if row.model not in trajectories:
        raise ValueError(f"model {row.model!r}: no trajectory given")
    trajectory = trajectories[row.model].set_index(["method", "seed", "step"])
    runs = []
    for seed in row.values.index:
        key = (row.method, seed, steps.get((row.model, row.method, seed)))
        if key not in trajectory.index:
            raise ValueError(f"model {row.model!r} method {row.method!r} seed {seed}: step {key[2]} of its scored "
                             "checkpoint is not in the trajectory")
        runs.append(trajectory.loc[key])
    runs = pd.DataFrame(runs)
    record: dict[str, Any] = {}
    for name in CONDENSATION_STATISTICS:
        record[f"{name}_mean"] = float(runs[name].mean())
        record[f"{name}_std"] = float(sample_std(runs[name]))
    return record


def format_table4(
    df: pd.DataFrame, tasks: Sequence[str], targets: Sequence[str], chance: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Display strings for :func:`table4`: Table 2's columns, then the condensation statistics
    as "0.812 ± 0.004"."""
    display = format_score_table(df, tasks, targets, chance)
    for name, header in CONDENSATION_STATISTICS.items():
        display[header] = [mean_std(m, s, 3) for m, s in zip(df[f"{name}_mean"], df[f"{name}_std"])]
    return display


def table4_caption(
    targets: Sequence[str] = ("ce",), metric: str = "acc", chance: pd.DataFrame | None = None,
    n_resamples: int = ITEM_RESAMPLES, counted: Sequence[str] | None = None, counted_by: str = "",
) -> str:
    """Table 4's caption: scores, the item-level test, the condensation columns and the rules
    (``counted_by``: the counting rule's sentence, ``resolve_counted``)."""
    note = "" if chance is None else at_chance_note(chance)
    return (
        f"Models pre-trained from scratch with each loss: downstream {metric} (%) as mean ± sample std over "
        "seeds; best per model in bold. Average: mean over tasks. "
        f"{comparison_caption(targets, n_resamples, SEEDS_VARY, counted, counted_by)} Condensation of the checkpoint "
        "each run's "
        "scores come from, on text no run trained on, mean ± sample std over seeds: "
        "Deep cos is the mean pairwise cosine similarity of tokens in the deeper half "
        "of the layers (higher: more condensed); Spearman ρ and Kendall τ correlate the layers' mean cosine "
        f"with depth (positive: condensation grows with depth). Scores: {CHECKPOINT_RULE}{note}"
    )


def write_table4(
    *, score_paths: Sequence[str | os.PathLike], tasks: Sequence[str], methods: Sequence[str], metric: str,
    labels: Mapping[str, str], condensation: Mapping[str, str | os.PathLike], stem: str | os.PathLike,
    baseline: str = "ce", n_resamples: int = ITEM_RESAMPLES, seed: int = 0,
    counted: Sequence[str] | str | None = None, loss_paths: Sequence[str | os.PathLike] = (),
) -> pd.DataFrame:
    """Table 4 from score files, the per-item results beside them and one trajectory CSV per
    model (``condensation``: model -> path): the table files of
    :func:`condensation.reporting.tables.table_files.write_table` at ``stem``. With ``loss_paths``
    (``results/scratch/<model>/losses.csv``) the tokens to CE's loss
    (:mod:`condensation.reporting.tables.tokens_to_target`). Returns the tidy table."""
    scores, items = load_selected(score_paths, metric)
    counted, counted_by = resolve_counted(tasks, counted, items)
    trajectories = {model: pd.read_csv(path) for model, path in condensation.items()}
    losses = read_losses(loss_paths) if loss_paths else None
    table = table4(scores, tasks, methods, items=items, trajectories=trajectories, baseline=baseline,
                   labels=labels, n_resamples=n_resamples, seed=seed, counted=counted, losses=losses)
    table[COUNTED_COLUMN] = COUNTED_SEPARATOR.join(counted_tasks(tasks, counted))
    targets = comparison_targets(methods, baseline)
    chance = task_chance(table, items, tasks)
    caption = table4_caption([labels.get(t, t) for t in targets], metric, chance, n_resamples, counted, counted_by)
    display = format_table4(table, tasks, targets, chance)
    if losses is not None:
        label = labels.get(baseline, baseline)
        display = pd.concat([display, format_tokens(table, label)], axis=1)
        caption += " " + tokens_caption(table, label)
    write_table(display, table, stem, caption)
    return table
