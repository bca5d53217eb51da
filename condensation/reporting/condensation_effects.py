"""Condensation effects: how each method moved the deeper layers' cosine and the depth trend
against the baseline method, per study."""

from __future__ import annotations

import math
import os

import pandas as pd

from condensation.evaluation.scores import require_columns
from condensation.reporting.statistics import Arm, difference
from condensation.reporting.table4 import check_unique_steps
from condensation.reporting.table_files import MISSING, to_markdown, write_csv
from condensation.runtime.io import write_text

EFFECT_COLUMNS = (
    "method", "step", "metric", "n_seeds", "n_reference_seeds", "mean", "reference_mean", "difference",
    "ci_low", "ci_high", "p", "per_seed", "std", "reference_std",
)

Z95 = 1.959964
"""The trajectories store 95 % intervals over sequences; a run's standard error is their half-width / Z95."""


def run_arm(runs: pd.DataFrame, metric: str, label: str, fixed: bool = False) -> Arm:
    """Runs (one row each) as an :class:`~condensation.reporting.statistics.Arm`: per seed (the
    ``seed`` column, else the row's position) its ``metric``; the sequences' sampling error from
    the runs' ``<metric>_low/_high`` interval when the table has one (each run's standard error,
    averaged in as independent). ``fixed`` marks a single given model (a published checkpoint)."""
    keys = runs["seed"] if "seed" in runs else range(len(runs))
    values = {int(s) if pd.notna(s) else "single run": float(v) for s, v in zip(keys, runs[metric])}
    variance = 0.0
    if f"{metric}_low" in runs and f"{metric}_high" in runs:
        se = (runs[f"{metric}_high"] - runs[f"{metric}_low"]) / (2 * Z95)
        variance = float((se**2).sum() / len(runs) ** 2)
    return Arm(values, variance, fixed=fixed and len(runs) == 1, label=label)


def condensation_effects(trajectory: pd.DataFrame, reference: str = "ce", metric: str = "last_half") -> pd.DataFrame:
    """Each method against ``reference`` on one condensation ``metric``, at every step both measured.

    One row per (method, step), methods in order of appearance: ``mean`` and ``std`` over the
    method's seeds, the same for the reference, their ``difference`` (method - reference) with a
    seed-aware 95 % interval and p (:func:`condensation.reporting.statistics.difference`: paired
    by seed, a seed being one data order and starting point; the sequences' sampling error added,
    :func:`run_arm`) and the same-seed differences (``per_seed``). One seed each leaves the
    interval NaN: the training noise is unmeasured. Rows whose ``metric`` is NaN are left out.
    """
    require_columns(trajectory, ("method", "seed", "step", metric), "trajectory")
    check_unique_steps(trajectory)
    measured = trajectory.dropna(subset=[metric])
    if reference not in set(measured["method"]):
        raise ValueError(f"condensation_effects: reference {reference!r} has no {metric!r} values")
    by_step = {key: group for key, group in measured.groupby(["method", "step"], sort=False)}
    records = []
    for method in pd.unique(measured["method"]):
        steps = sorted(step for (m, step) in by_step if m == method and (reference, step) in by_step)
        for step in steps if method != reference else []:
            own, base = by_step[(method, step)], by_step[(reference, step)]
            result = difference(run_arm(own, metric, method), run_arm(base, metric, reference))
            records.append({
                "method": method, "step": step, "metric": metric, "n_seeds": len(own),
                "n_reference_seeds": len(base), "mean": float(own[metric].mean()),
                "reference_mean": float(base[metric].mean()), "difference": result.estimate,
                "ci_low": result.ci_low, "ci_high": result.ci_high, "p": result.p_value,
                "per_seed": "; ".join(f"{d:+.4f}" for d in result.per_seed) or math.nan,
                "std": float(own[metric].std(ddof=1)), "reference_std": float(base[metric].std(ddof=1)),
            })
    return pd.DataFrame(records, columns=list(EFFECT_COLUMNS))


def effects_caption(reference: str, metric: str) -> str:
    """What the condensation-effects table shows and what its interval covers."""
    return (
        f"Condensation ({metric}) of each method against {reference} at every measured step: means over "
        f"seeds and their difference (method - {reference}) with a 95 % interval and p over the training "
        "seeds (paired by seed: a seed is one data order and starting point; t with k - 1 degrees of "
        "freedom) and the text sequences (each run's bootstrap error); per seed: the same-seed "
        "differences. A dash: one seed each, the training noise unmeasured."
    )


def write_condensation_effects(
    *, trajectory_path: str | os.PathLike, csv_path: str | os.PathLike, markdown_path: str | os.PathLike,
    reference: str = "ce", metric: str = "last_half",
) -> pd.DataFrame:
    """:func:`condensation_effects` of one model's trajectory CSV, as CSV (5 decimals) and as
    Markdown (4 decimals, the rule in the caption). Returns the effects frame."""
    effects = condensation_effects(pd.read_csv(trajectory_path), reference=reference, metric=metric)
    write_csv(effects, csv_path, "%.5f")
    shown = effects.drop(columns=["metric", "n_reference_seeds", "std", "reference_std"])
    shown["per_seed"] = [MISSING if pd.isna(text) else text for text in effects["per_seed"]]
    shown = shown.rename(columns={"reference_mean": f"{reference} mean", "per_seed": "per seed"})
    caption = effects_caption(reference, metric)
    write_text(markdown_path, caption + "\n\n" + to_markdown(shown, float_format=".4f") + "\n")
    return effects
