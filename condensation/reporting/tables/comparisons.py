"""Item-level comparisons between the rows of a results table, and the chance level of each task.

Two rows of a table (e.g. a method and CE, on one model) are compared on the test items both
were scored on, with the per-item results of their selected checkpoints
(:func:`condensation.evaluation.scores.load_items`):

- pairing: an item of one run is paired with the same item (task, subtask, doc_id) of the other
  row's run *with the same seed* (same data order and initialisation), for every seed both rows
  have; the pretrained model (one run, no seed) is a fixed reference, its one run compared with
  every seed of the other row.
- estimate: the difference of the rows' average score in points, every (task, seed) weighted
  equally (each item weighs 1 / the number of items of its task), which is exactly the difference
  of the tables' "average" columns when both rows have the same seeds.
- uncertainty, two intervals:

  * over seeds and items (the main columns ``diff``, ``se``, ``dof``, ``ci_low``, ``ci_high``,
    ``p``, ``detectable``): :func:`condensation.reporting.statistics.panel.difference`, a paired t
    over the per-seed differences (k - 1 degrees of freedom) whose variance adds only the items'
    main effect (the run x item noise is already in the seeds' spread: it is not counted again);
    ``detectable`` is the smallest difference this comparison finds with 80 % power at 5 %.
    ``per_seed`` lists the same-seed differences.
  * items only (``items_ci_low``, ``items_ci_high``, ``items_p``):
    :func:`condensation.reporting.statistics.resampling.paired_bootstrap`, resampling test items
    whole; it treats the runs as fixed, so it says how precisely these runs were scored, not
    whether the method helps. The exact McNemar p over all pairs is a cross-check of it.

  ``p_holm`` is the p adjusted (Holm) over every distinct comparison of a table, which the table
  fills in (:func:`holm_column`): the table's own family. The findings page adjusts each claim over
  its own pieces instead, from the raw ``p``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from condensation.evaluation.scores import ITEM_COLUMNS, ITEM_KEY, require_columns
from condensation.intervals import ITEM_RESAMPLES
from condensation.reporting.statistics.decisions import ALPHA, POWER, holm
from condensation.reporting.statistics.panel import Run, difference, panel_from_units
from condensation.reporting.statistics.resampling import mcnemar, paired_bootstrap

CHANCE_MARGIN = 2.0
"""A task is flagged "at chance" when every row's mean lies within this many points of chance."""

COMPARISON_FIELDS = (
    "diff", "se", "dof", "seed_se", "unit_se", "ci_low", "ci_high", "p", "p_holm", "detectable", "per_seed",
    "items_ci_low", "items_ci_high", "items_p", "n_items", "mcnemar_p",
)
CHANCE_COLUMNS = ("task", "chance", "max_distance", "at_chance")

ABOVE_CHANCE = "above_chance"
"""``evaluation.counted_tasks``'s rule (:func:`tasks_above_chance`): count the tasks every run of a
table, pooled, answers above chance."""
POOLED_COLUMNS = ("task", "pooled", "chance", "p", "n_items", "counted")


def comparison_columns(targets: Sequence[str]) -> list[str]:
    """The CSV columns of the comparisons with ``targets``: ``diff_vs_<target>`` etc."""
    return [f"{field}_vs_{target}" for target in targets for field in COMPARISON_FIELDS]


def selected_items(items: pd.DataFrame, selected: pd.DataFrame) -> pd.DataFrame:
    """The items of the checkpoints in ``selected`` (rows with model, method, seed, checkpoint)."""
    require_columns(items, ITEM_COLUMNS, "items")
    runs = selected[["model", "method", "seed", "checkpoint"]].drop_duplicates()
    return items.merge(runs, on=["model", "method", "seed", "checkpoint"], how="inner")


def _run_items(items: pd.DataFrame, model: str, method: str, tasks: Sequence[str]) -> pd.DataFrame:
    """One row's items on ``tasks``; a seed (or the pretrained run) without a task's items fails."""
    part = items.loc[(items["model"] == model) & (items["method"] == method) & items["task"].isin(tasks)]
    for seed in pd.unique(items.loc[(items["model"] == model) & (items["method"] == method), "seed"]):
        runs = part.loc[part["seed"].isna() if pd.isna(seed) else part["seed"] == seed]
        missing = [t for t in tasks if t not in set(runs["task"])]
        if missing:
            where = "" if pd.isna(seed) else f" seed {seed}"
            raise ValueError(f"model {model!r} method {method!r}{where}: no per-item results for task {missing[0]!r}")
    if part.empty:
        raise ValueError(f"model {model!r} method {method!r}: no per-item results")
    return part[["seed", *ITEM_KEY, "score"]]


def _repeat_over_seeds(seedless: pd.DataFrame, seeds: Sequence[Any]) -> pd.DataFrame:
    return pd.concat([seedless.assign(seed=seed) for seed in seeds], ignore_index=True).astype({"seed": "Int64"})


def paired_items(items: pd.DataFrame, model: str, method: str, other: str, tasks: Sequence[str]) -> pd.DataFrame:
    """The pairs of ``method`` against ``other`` on one model (see the module docstring):
    columns seed, task, subtask, doc_id, score (``method``'s), other_score. No shared seed gives
    no pairs; on a shared seed both must have the same items, else the scores are not comparable."""
    own, ref = _run_items(items, model, method, tasks), _run_items(items, model, other, tasks)
    if own["seed"].isna().all():
        own = _repeat_over_seeds(own, pd.unique(ref["seed"].dropna()))
    if ref["seed"].isna().all():
        ref = _repeat_over_seeds(ref, pd.unique(own["seed"].dropna()))
    shared = set(own["seed"].dropna()) & set(ref["seed"].dropna())
    own, ref = own.loc[own["seed"].isin(shared)], ref.loc[ref["seed"].isin(shared)]
    keys = ["seed", *ITEM_KEY]
    pairs = own.merge(ref, on=keys, how="outer", suffixes=("", "_other"), indicator=True)
    unmatched = pairs.loc[pairs["_merge"] != "both"]
    if not unmatched.empty:
        first = unmatched.iloc[0]
        raise ValueError(
            f"model {model!r}: {method!r} and {other!r} were scored on different items (seed {first['seed']}, "
            f"task {first['task']!r}: {len(unmatched)} item(s) scored by only one of them)"
        )
    return pairs[[*keys, "score", "score_other"]].rename(columns={"score_other": "other_score"})


def _no_comparison() -> dict[str, Any]:
    return {field: math.nan for field in COMPARISON_FIELDS} | {"n_items": 0}


def _single_run(items: pd.DataFrame, model: str, method: str) -> bool:
    return bool(items.loc[(items["model"] == model) & (items["method"] == method), "seed"].isna().all())


def score_panel(pairs: pd.DataFrame, method: str, other: str, single: Mapping[str, bool]):
    """The pairs of :func:`paired_items` as a panel of runs over test items (points): per seed a
    run of each row, a row of one run (``single``) as one fixed run; every task weighs equally,
    the items of a task are its stratum."""
    pairs = pairs.sort_values(["seed", *ITEM_KEY], kind="stable")
    seeds = list(pd.unique(pairs["seed"]))
    first = pairs.loc[pairs["seed"] == seeds[0]]
    sizes = first.groupby("task")["score"].transform("size").to_numpy(dtype=float)
    weights = 1.0 / (first["task"].nunique() * sizes)
    strata = pd.factorize(first["task"])[0]
    runs, per_unit, fixed = [], [], []
    for arm, column in ((method, "score"), (other, "other_score")):
        if single[arm]:
            runs.append(Run(arm, None, 0.0))
            per_unit.append(100.0 * first[column].to_numpy(dtype=float))
            fixed.append(arm)
            continue
        for seed in seeds:
            runs.append(Run(arm, int(seed), 0.0))
            per_unit.append(100.0 * pairs.loc[pairs["seed"] == seed, column].to_numpy(dtype=float))
    return panel_from_units(runs, per_unit, units="test items", strata=strata, weights=weights, fixed=fixed,
                            statistic="accuracy")


def compare(
    items: pd.DataFrame, model: str, method: str, other: str, tasks: Sequence[str], *,
    n_resamples: int = ITEM_RESAMPLES, seed: int = 0,
) -> dict[str, Any]:
    """``method`` against ``other`` on one model, in points (see the module docstring): over seeds
    and items ``diff``, ``se``, ``dof``, ``seed_se``, ``unit_se``, ``ci_low``, ``ci_high``, ``p``,
    ``detectable`` and ``per_seed`` ("; "-joined); items only ``items_ci_low``, ``items_ci_high``,
    ``items_p``, ``n_items``, ``mcnemar_p`` (McNemar only for 0/1 scores); ``p_holm`` is left NaN
    for the table to fill. NaN and 0 items without a shared seed."""
    pairs = paired_items(items, model, method, other, tasks)
    if pairs.empty:
        return _no_comparison()
    weights = 1.0 / pairs.groupby(["seed", "task"])["score"].transform("size").to_numpy(dtype=float)
    clusters = pairs.groupby(list(ITEM_KEY), sort=False).ngroup().to_numpy()
    own, ref = pairs["score"].to_numpy(dtype=float), pairs["other_score"].to_numpy(dtype=float)
    by_items = paired_bootstrap(own, ref, weights=weights, clusters=clusters, n_resamples=n_resamples, seed=seed)
    binary = np.isin(own, (0.0, 1.0)).all() and np.isin(ref, (0.0, 1.0)).all()
    single = {method: _single_run(items, model, method), other: _single_run(items, model, other)}
    result = difference(score_panel(pairs, method, other, single), method, other)
    low, high = result.interval()
    return {
        "diff": result.estimate, "se": result.se, "dof": result.dof, "seed_se": result.seed_se,
        "unit_se": result.unit_se, "ci_low": low, "ci_high": high, "p": result.p_value, "p_holm": math.nan,
        "detectable": result.detectable(ALPHA, POWER),
        "per_seed": "; ".join(f"{d:+.2f}" for d in result.per_seed) or math.nan,
        "items_ci_low": by_items.ci_low, "items_ci_high": by_items.ci_high, "items_p": by_items.p_value,
        "n_items": by_items.n_items, "mcnemar_p": mcnemar(own, ref) if binary else math.nan,
    }


def holm_column(table: pd.DataFrame, targets: Sequence[str]) -> pd.DataFrame:
    """``table`` with ``p_holm_vs_<target>`` filled: the seed-aware p-values adjusted together
    (:func:`condensation.reporting.statistics.holm`) over the table's distinct comparisons, a
    comparison that appears twice (A vs B and B vs A) counted once."""
    keys, values = {}, []
    for _, row in table.iterrows():
        for target in targets:
            p = row[f"p_vs_{target}"]
            if pd.isna(p):
                continue
            key = (row["model"], frozenset((row["method"], target)))
            if key not in keys:
                keys[key] = len(values)
                values.append(float(p))
    adjusted = holm(values)
    table = table.copy()
    for target in targets:
        table[f"p_holm_vs_{target}"] = [
            math.nan if pd.isna(row[f"p_vs_{target}"])
            else adjusted[keys[(row["model"], frozenset((row["method"], target)))]]
            for _, row in table.iterrows()
        ]
    return table


def comparison_record(
    items: pd.DataFrame, model: str, method: str, targets: Sequence[str], tasks: Sequence[str], *,
    n_resamples: int = ITEM_RESAMPLES, seed: int = 0,
) -> dict[str, Any]:
    """One table row's comparison columns (:func:`comparison_columns`) against every target; a
    row is not compared with itself (NaN, no items)."""
    record: dict[str, Any] = {}
    for target in targets:
        if target == method:
            result = _no_comparison() | {"n_items": pd.NA}
        else:
            result = compare(items, model, method, target, tasks, n_resamples=n_resamples, seed=seed)
        record.update({f"{field}_vs_{target}": value for field, value in result.items()})
    return record


# --------------------------------------------------------------------------------------------
# Chance levels
# --------------------------------------------------------------------------------------------


def chance_level(n_choices: pd.Series) -> float:
    """What guessing scores, in percent, on items with these numbers of answer choices: the mean
    of 1 / choices (NaN for no items)."""
    return float(100 * (1.0 / n_choices).mean()) if len(n_choices) else math.nan


def task_chance(
    table: pd.DataFrame, items: pd.DataFrame, tasks: Sequence[str], margin: float = CHANCE_MARGIN
) -> pd.DataFrame:
    """Per task, its chance level and whether no row of ``table`` gets clear of it.

    ``chance`` (percent) is the mean over the task's items of 1 / (number of answer choices):
    what guessing scores on it. ``max_distance`` is the largest |row mean - chance| (points)
    over every row of ``table`` (its ``<task>_mean`` columns: every model and method), and
    ``at_chance`` is true when that is at most ``margin``: no model or method answers the task
    better (or worse) than a guess. A task whose items have no choices (not multiple choice) has
    no chance level (NaN) and is never flagged.
    """
    records = []
    for task in tasks:
        distinct = items.loc[items["task"] == task].drop_duplicates(list(ITEM_KEY))
        chance = chance_level(distinct["n_choices"])
        distance = float((table[f"{task}_mean"] - chance).abs().max())
        records.append({"task": task, "chance": chance, "max_distance": distance,
                        "at_chance": bool(not math.isnan(chance) and distance <= margin)})
    return pd.DataFrame(records, columns=list(CHANCE_COLUMNS))


def chance_flags(chance: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """:func:`task_chance` as JSON-ready ``{task: {chance, max_distance, at_chance}}`` (4
    decimals; None for an unknown chance level)."""
    def number(value: float) -> float | None:
        return None if math.isnan(value) else round(float(value), 4)

    return {
        row.task: {"chance": number(row.chance), "max_distance": number(row.max_distance),
                   "at_chance": bool(row.at_chance)}
        for row in chance.itertuples(index=False)
    }


def at_chance_note(chance: pd.DataFrame, margin: float = CHANCE_MARGIN) -> str:
    """The caption sentence naming the flagged tasks, or "" when none is flagged."""
    flagged = chance.loc[chance["at_chance"]]
    if flagged.empty:
        return ""
    names = ", ".join(f"{row.task} (chance {row.chance:.1f} %)" for row in flagged.itertuples(index=False))
    return f" At chance, every row within {margin:g} points of guessing: {names}."


def task_headers(tasks: Sequence[str], chance: pd.DataFrame) -> Mapping[str, str]:
    """Column header per task: its name, with " (at chance)" when flagged."""
    flagged = set(chance.loc[chance["at_chance"], "task"])
    return {task: f"{task} (at chance)" if task in flagged else task for task in tasks}


def pooled_chance_tests(items: pd.DataFrame, tasks: Sequence[str], alpha: float = ALPHA) -> pd.DataFrame:
    """Per task, whether the runs of ``items`` answer it above chance, pooled: per test item its
    score averaged over every run (every model, method and seed), less the item's chance
    (1 / its choices); then a one-sided t over the items (``p``). ``pooled`` and ``chance`` in
    percent; ``counted`` is ``p <= alpha``. A task without choices (not multiple choice) has no
    chance level and is counted.

    The rule reads no method's label: giving two methods' runs each other's names changes nothing
    here. So where the compared methods do not differ, which tasks it keeps is unrelated to the
    difference their comparison tests (independent filtering: Bourgon, Gentleman and Huber, PNAS
    2010), and the comparisons keep their false-call rate; only tasks no run learned are dropped
    (calibration and power simulated: ``statistics.power.simulate_scores``, docs/statistics.md).
    """
    records = []
    for task in tasks:
        part = items.loc[items["task"] == task]
        per_item = part.groupby(list(ITEM_KEY), dropna=False).agg(
            score=("score", "mean"), n_choices=("n_choices", "first"))
        pooled = float(100 * per_item["score"].mean()) if len(per_item) else math.nan
        if per_item.empty or per_item["n_choices"].isna().any():
            records.append({"task": task, "pooled": pooled, "chance": math.nan, "p": math.nan,
                            "n_items": len(per_item), "counted": True})
            continue
        excess = per_item["score"] - 1.0 / per_item["n_choices"]
        n = len(excess)
        spread = float(excess.std(ddof=1)) if n > 1 else math.nan
        if n < 2 or not spread > 0:  # every item alike: above chance exactly when the excess is
            p = 0.0 if float(excess.mean()) > 0 else 1.0
        else:
            p = float(stats.t.sf(float(excess.mean()) / (spread / math.sqrt(n)), n - 1))
        records.append({"task": task, "pooled": pooled,
                        "chance": chance_level(per_item["n_choices"]), "p": p, "n_items": n,
                        "counted": p <= alpha})
    return pd.DataFrame(records, columns=list(POOLED_COLUMNS))


def tasks_above_chance(items: pd.DataFrame, tasks: Sequence[str], alpha: float = ALPHA) -> tuple[list[str], str]:
    """The tasks :func:`pooled_chance_tests` counts, in the order of ``tasks`` (every task when none
    is: then nothing separates them, and the table says so), and the sentence a caption gives."""
    tests = pooled_chance_tests(items, tasks, alpha)
    kept = [row.task for row in tests.itertuples(index=False) if row.counted]
    dropped = [row for row in tests.itertuples(index=False) if not row.counted]
    rule = (f"evaluation.counted_tasks: {ABOVE_CHANCE}, the tasks the table's runs answer above chance pooled over "
            f"every run (a one-sided t over the items at {100 * alpha:g} %; it reads no method's label)")
    if not kept:
        return list(tasks), f"No task is answered above chance ({rule}): every task is counted."
    if not dropped:
        return kept, f"Every task is answered above chance ({rule})."
    left = "; ".join(f"{row.task} (pooled {row.pooled:.1f} % against {row.chance:.1f} %, p = {row.p:.2g})"
                     for row in dropped)
    return kept, f"Counted by {rule}: {', '.join(kept)}; not counted: {left}."
