"""Condensation effects: how each method moved the deeper layers' cosine and the depth trend
against the baseline method, per study."""

from __future__ import annotations

import os

import pandas as pd

from condensation.evaluation.scores import require_columns
from condensation.reporting.statistics import SPREAD_FACTOR, seed_effect
from condensation.reporting.table4 import check_unique_steps
from condensation.reporting.table_files import MISSING, to_markdown, write_csv
from condensation.runtime.io import write_text

EFFECT_COLUMNS = (
    "method", "step", "metric", "n_seeds", "n_reference_seeds", "mean", "reference_mean", "difference",
    "std", "reference_std", "pooled_std", "paired_min", "paired_max", "exceeds_seed_spread",
)


def condensation_effects(
    trajectory: pd.DataFrame, reference: str = "ce", metric: str = "last_half", factor: float = SPREAD_FACTOR
) -> pd.DataFrame:
    """Each method against ``reference`` on one condensation ``metric``, at every step both measured.

    One row per (method, step), methods in order of appearance: ``mean`` and ``std`` over the
    method's seeds, the same for the reference, their ``difference`` (method - reference),
    ``pooled_std`` (the seeds' pooled sample std), ``paired_min``/``paired_max`` (the smallest
    and largest same-seed difference) and ``exceeds_seed_spread``: ``|difference| > factor *
    pooled_std`` (:func:`condensation.reporting.statistics.seed_effect`; NA when neither has two seeds).
    A descriptive screen for whether an effect stands out from the noise between seeds, not a
    test. Rows whose ``metric`` is NaN are left out.
    """
    require_columns(trajectory, ("method", "seed", "step", metric), "trajectory")
    check_unique_steps(trajectory)
    measured = trajectory.dropna(subset=[metric])
    if reference not in set(measured["method"]):
        raise ValueError(f"condensation_effects: reference {reference!r} has no {metric!r} values")
    by_step = {
        (method, step): dict(zip(group["seed"], group[metric]))
        for (method, step), group in measured.groupby(["method", "step"], sort=False)
    }
    records = []
    for method in pd.unique(measured["method"]):
        steps = sorted(step for (m, step) in by_step if m == method and (reference, step) in by_step)
        for step in steps if method != reference else []:
            values, base = by_step[(method, step)], by_step[(reference, step)]
            effect = seed_effect(values, base, factor=factor)
            records.append({
                "method": method, "step": step, "metric": metric, "n_seeds": effect.n_method,
                "n_reference_seeds": effect.n_reference, "mean": sum(values.values()) / len(values),
                "reference_mean": sum(base.values()) / len(base), "difference": effect.difference,
                "std": effect.method_std, "reference_std": effect.reference_std, "pooled_std": effect.pooled_std,
                "paired_min": effect.paired_min, "paired_max": effect.paired_max,
                "exceeds_seed_spread": pd.NA if effect.exceeds_spread is None else effect.exceeds_spread,
            })
    effects = pd.DataFrame(records, columns=list(EFFECT_COLUMNS))
    return effects.astype({"exceeds_seed_spread": "boolean"})


def effects_caption(reference: str, metric: str, factor: float = SPREAD_FACTOR) -> str:
    """What the condensation-effects table shows and the rule behind its last column."""
    return (
        f"Condensation ({metric}) of each method against {reference} at every measured step: means over "
        f"seeds, their difference (method - {reference}), the pooled sample std of the seeds and the range "
        f"of same-seed differences. Beyond spread: |difference| > {factor:g} x pooled std, i.e. the means "
        "lie further apart than two typical seed-to-seed deviations; a descriptive screen, not a test "
        "(2-3 seeds give the std few degrees of freedom)."
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
    shown["exceeds_seed_spread"] = [MISSING if pd.isna(v) else ("yes" if v else "no") for v in effects["exceeds_seed_spread"]]
    shown = shown.rename(columns={"exceeds_seed_spread": "beyond spread", "reference_mean": f"{reference} mean"})
    caption = effects_caption(reference, metric)
    write_text(markdown_path, caption + "\n\n" + to_markdown(shown, float_format=".4f") + "\n")
    return effects
