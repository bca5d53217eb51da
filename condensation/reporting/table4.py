"""The paper's Table 4: models pre-trained from scratch with CE and with the dispersion loss, their
scores beside their final condensation.

Condensation comes from a trajectory CSV (``results/midtrain/<model>/trajectory.csv`` and its
pre-training twin): one row per (method, seed, step) with val_loss, spearman_rho, kendall_tau,
last_1..last_5 and last_half (the mean cosine of the deeper half of the layers).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import pandas as pd

from condensation.evaluation.scores import (
    PRETRAINED,
    require_columns,
    select_checkpoints,
)
from condensation.reporting.comparisons import (
    at_chance_note,
    comparison_columns,
    selected_items,
    task_chance,
)
from condensation.reporting.score_tables import (
    CHECKPOINT_RULE,
    Row,
    check_methods,
    check_tasks,
    compared_blocks,
    comparison_caption,
    comparison_targets,
    load_selected,
    model_rows,
    sample_std,
    score_columns,
)
from condensation.reporting.table2 import format_table2
from condensation.reporting.table_files import mean_std, write_table

CONDENSATION_STATISTICS = {"last_half": "Deep cos", "spearman_rho": "Spearman ρ", "kendall_tau": "Kendall τ"}
"""Table 4's condensation columns and their display headers."""

SEEDS_VARY = "the initialisation and the order of the training data"


def final_condensation(trajectory: pd.DataFrame) -> pd.DataFrame:
    """Each run's last measured step: one row per (method, seed) of ``trajectory``."""
    require_columns(trajectory, ("method", "seed", "step", *CONDENSATION_STATISTICS), "trajectory")
    check_unique_steps(trajectory)
    return trajectory.loc[trajectory.groupby(["method", "seed"])["step"].idxmax()].reset_index(drop=True)


def check_unique_steps(trajectory: pd.DataFrame) -> None:
    doubled = trajectory.duplicated(["method", "seed", "step"])
    if doubled.any():
        bad = trajectory.loc[doubled].iloc[0]
        raise ValueError(f"trajectory: method {bad['method']!r} seed {bad['seed']} has step {bad['step']} twice")


# --------------------------------------------------------------------------------------------
# Table 4
# --------------------------------------------------------------------------------------------


def table4(
    scores: pd.DataFrame, tasks: Sequence[str], methods: Sequence[str], *, items: pd.DataFrame,
    trajectories: Mapping[str, pd.DataFrame], baseline: str = "ce", labels: Mapping[str, str] | None = None,
    n_resamples: int = 10_000, seed: int = 0,
) -> pd.DataFrame:
    """Models pre-trained from scratch, one row per method (per model), as a tidy frame.

    The score columns are Table 2's (:func:`condensation.reporting.score_tables.score_block`, from the selected
    checkpoints) with the seed-aware comparison against ``baseline`` (``diff_vs_ce`` etc.); a
    pretrained record, if any, is left out (nothing here was pre-trained before). Then per
    condensation statistic (:data:`CONDENSATION_STATISTICS`) the mean and sample std over the
    row's seeds of its value at each run's final step, read from ``trajectories`` (model ->
    trajectory frame); every scored seed must be in the trajectory.
    """
    tasks = check_tasks(tasks)
    methods = check_methods(methods)
    targets = comparison_targets(methods, baseline)
    selected = select_checkpoints(scores)
    selected = selected.loc[selected["method"] != PRETRAINED]
    blocks = model_rows(selected, tasks, methods)
    table = compared_blocks(blocks, tasks, dict(labels or {}), selected_items(items, selected), targets,
                            n_resamples, seed)
    finals = {model: final_condensation(frame) for model, frame in trajectories.items()}
    condensation = pd.DataFrame([_condensation_record(finals, row) for rows in blocks for row in rows])
    return pd.concat([table, condensation], axis=1)[table4_columns(tasks, targets)]


def table4_columns(tasks: Sequence[str], targets: Sequence[str]) -> list[str]:
    """Column order of :func:`table4`."""
    condensation = [f"{name}_{what}" for name in CONDENSATION_STATISTICS for what in ("mean", "std")]
    return [*score_columns(tasks), *comparison_columns(targets), *condensation]


def _condensation_record(finals: Mapping[str, pd.DataFrame], row: Row) -> dict[str, Any]:
    if row.model not in finals:
        raise ValueError(f"model {row.model!r}: no trajectory given")
    final = finals[row.model]
    runs = final.loc[final["method"] == row.method].set_index("seed")
    missing = [seed for seed in row.values.index if seed not in runs.index]
    if missing:
        raise ValueError(f"model {row.model!r} method {row.method!r}: seed {missing[0]} is not in the trajectory")
    runs = runs.loc[list(row.values.index)]
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
    display = format_table2(df, tasks, targets, chance)
    for name, header in CONDENSATION_STATISTICS.items():
        display[header] = [mean_std(m, s, 3) for m, s in zip(df[f"{name}_mean"], df[f"{name}_std"])]
    return display


def table4_caption(
    targets: Sequence[str] = ("ce",), metric: str = "acc", chance: pd.DataFrame | None = None,
    n_resamples: int = 10_000,
) -> str:
    """Table 4's caption: scores, the item-level test, the condensation columns and the rules."""
    note = "" if chance is None else at_chance_note(chance)
    return (
        f"Models pre-trained from scratch with each loss: downstream {metric} (%) as mean ± sample std over "
        "seeds; best per model in bold. Average: mean over tasks. "
        f"{comparison_caption(targets, n_resamples, SEEDS_VARY)} Condensation of each run's final checkpoint, mean ± "
        "sample std over seeds: Deep cos is the mean pairwise cosine similarity of tokens in the deeper half "
        "of the layers (higher: more condensed); Spearman ρ and Kendall τ correlate the layers' mean cosine "
        f"with depth (positive: condensation grows with depth). Scores: {CHECKPOINT_RULE}{note}"
    )


def write_table4(
    *, score_paths: Sequence[str | os.PathLike], tasks: Sequence[str], methods: Sequence[str], metric: str,
    labels: Mapping[str, str], condensation: Mapping[str, str | os.PathLike], stem: str | os.PathLike,
    baseline: str = "ce", n_resamples: int = 10_000, seed: int = 0,
) -> pd.DataFrame:
    """Table 4 from score files, the per-item results beside them and one trajectory CSV per
    model (``condensation``: model -> path): the table files of
    :func:`condensation.reporting.table_files.write_table` at ``stem``. Returns the tidy table."""
    scores, items = load_selected(score_paths, metric)
    trajectories = {model: pd.read_csv(path) for model, path in condensation.items()}
    table = table4(scores, tasks, methods, items=items, trajectories=trajectories, baseline=baseline,
                   labels=labels, n_resamples=n_resamples, seed=seed)
    targets = comparison_targets(methods, baseline)
    chance = task_chance(table, items, tasks)
    caption = table4_caption([labels.get(t, t) for t in targets], metric, chance, n_resamples)
    write_table(format_table4(table, tasks, targets, chance), table, stem, caption)
    return table
