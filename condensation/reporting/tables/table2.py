"""The paper's Table 2: every method's scores per task, their ranks, and each method against the
baseline."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import pandas as pd

from condensation.evaluation.scores import select_checkpoints
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
    score_columns,
    score_metrics,
)
from condensation.reporting.tables.table_files import write_csv, write_table
from condensation.reporting.tables.tokens_to_target import (
    format_tokens,
    read_losses,
    token_frame,
    tokens_caption,
)
from condensation.runtime.io import write_json

SEEDS_VARY = "the order of the training data; every run of a model starts from the same pre-trained weights"


def table2(
    scores: pd.DataFrame, tasks: Sequence[str], methods: Sequence[str], reference: str = "dispersion",
    labels: Mapping[str, str] | None = None, *, items: pd.DataFrame, baseline: str = "ce",
    n_resamples: int = ITEM_RESAMPLES, seed: int = 0, counted: Sequence[str] | None = None,
    losses: Mapping[str, pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """Downstream accuracy of every method on every model, as a tidy numeric frame.

    Built from :func:`select_checkpoints`. One block per model, rows: pretrained (if scored),
    then ``methods`` in order, with the columns of :func:`score_block`. Every row is compared
    with ``baseline`` (CE, the paper's baseline) and with ``reference`` (the dispersion loss)
    over seeds and items (:mod:`condensation.reporting.tables.comparisons`): ``diff_vs_<m>`` (the
    difference of average accuracy in points), its ``se``, ``dof``, 95 % interval, two-sided p,
    ``p_holm_vs_<m>`` (Holm over the table), ``detectable_vs_<m>`` (80 % power at 5 %),
    ``per_seed_vs_<m>``, the item-only ``items_*_vs_<m>``, ``n_items_vs_<m>`` (paired item
    results) and ``mcnemar_p_vs_<m>``; NaN for a method against itself. Averages and comparisons
    read the ``counted`` tasks (default: all). ``items`` holds the per-item results
    (:func:`condensation.evaluation.scores.load_items`); those of the selected checkpoints are used.
    ``n_resamples`` and ``seed`` set the bootstrap. With ``losses`` (model -> its runs' ``losses.csv``)
    the ``tokens_*`` columns follow: each row's tokens to CE's final validation loss and its token
    multiplier against ``baseline`` (:mod:`condensation.reporting.tables.tokens_to_target`).
    """
    tasks = check_tasks(tasks)
    methods = check_methods(methods)
    if reference not in methods:
        raise ValueError(f"reference {reference!r} is not among methods {methods}")
    targets = comparison_targets(methods, baseline, reference)
    selected = select_checkpoints(scores)
    table = compared_blocks(model_rows(selected, tasks, methods), tasks, dict(labels or {}),
                            selected_items(items, selected), targets, n_resamples, seed, counted)
    table = table[table2_columns(tasks, targets)]
    if losses is None:
        return table
    keys = list(zip(table["model"], table["method"]))
    return pd.concat([table, token_frame(keys, losses, baseline)], axis=1)


def table2_columns(tasks: Sequence[str], targets: Sequence[str]) -> list[str]:
    """Column order of :func:`table2` (compared with ``targets``), so readers of the CSV need not guess it."""
    return [*score_columns(tasks), *comparison_columns(targets)]


def table2_caption(
    targets: Sequence[str] = ("ce", "dispersion"), metric: str = "acc", chance: pd.DataFrame | None = None,
    n_resamples: int = ITEM_RESAMPLES, counted: Sequence[str] | None = None, counted_by: str = "",
) -> str:
    """The caption every Table 2 carries: the statistic, the test and its items, the checkpoint
    rule, and the tasks at chance. ``targets`` are the compared methods as the reader should see
    them (their labels); ``counted_by`` the counting rule's sentence (``resolve_counted``)."""
    note = "" if chance is None else at_chance_note(chance)
    return (
        f"Downstream {metric} (%) as mean ± sample std over seeds; best per model in bold. Average: mean "
        "over tasks; Avg. rank: mean of the per-task ranks within a model (1 = best). "
        f"{comparison_caption(targets, n_resamples, SEEDS_VARY, counted, counted_by)} {CHECKPOINT_RULE}{note}"
    )


def write_table2(
    *, score_paths: Sequence[str | os.PathLike], tasks: Sequence[str], methods: Sequence[str], reference: str,
    metric: str, labels: Mapping[str, str], stem: str | os.PathLike, metrics_path: str | os.PathLike,
    plot_path: str | os.PathLike, baseline: str = "ce", n_resamples: int = ITEM_RESAMPLES, seed: int = 0,
    counted: Sequence[str] | str | None = None, loss_paths: Sequence[str | os.PathLike] = (),
) -> pd.DataFrame:
    """Table 2 (every method on every model, against ``baseline`` and ``reference``) from score
    files and the per-item results beside them: the table files of :func:`write_table` at
    ``stem``, the scores and the tasks' chance flags as DVC metrics (:func:`score_metrics`) and
    each row's average as a DVC plot table. With ``loss_paths`` (``results/midtrain/<model>/losses.csv``)
    the tokens to CE's loss (:mod:`condensation.reporting.tables.tokens_to_target`). Returns the tidy table."""
    scores, items = load_selected(score_paths, metric)
    counted, counted_by = resolve_counted(tasks, counted, items)
    losses = read_losses(loss_paths) if loss_paths else None
    table = table2(scores, tasks, methods, reference=reference, labels=labels, items=items, baseline=baseline,
                   n_resamples=n_resamples, seed=seed, counted=counted, losses=losses)
    table[COUNTED_COLUMN] = COUNTED_SEPARATOR.join(counted_tasks(tasks, counted))
    targets = comparison_targets(methods, baseline, reference)
    chance = task_chance(table, items, tasks)
    caption = table2_caption([labels.get(t, t) for t in targets], metric, chance, n_resamples, counted, counted_by)
    display = format_score_table(table, tasks, targets, chance)
    if losses is not None:
        label = labels.get(baseline, baseline)
        display = pd.concat([display, format_tokens(table, label)], axis=1)
        caption += " " + tokens_caption(table, label)
    write_table(display, table, stem, caption)
    write_json(metrics_path, score_metrics(scores, tasks, methods, chance=chance, counted=counted))
    averages = table.assign(row=table["model"] + " / " + table["method"])
    write_csv(averages[["row", "model", "method", "average_mean", "average_std"]], plot_path, "%.4f")
    return table
