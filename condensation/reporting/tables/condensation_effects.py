"""Condensation effects: how each method moved condensation against the baseline method, per study,
at every measured checkpoint, on the deeper layers' cosine and on the depth trend (Spearman rho,
Kendall tau), with intervals over seeds and the text sequences.

A study that mid-trains several pre-training runs of one model (a suite's seeds, sharing a label)
is compared once more with the base model as a replicate (:func:`pool_bases`): each base's seeds
are averaged first, and the interval is over the bases, whose spread holds both their pre-training
and the mid-training seeds nested in them."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from condensation.evaluation.scores import require_columns
from condensation.reporting.statistics.decisions import ALPHA, POWER
from condensation.reporting.statistics.panel import difference
from condensation.reporting.tables.profiles import STATISTICS, Profiles
from condensation.reporting.tables.table_files import (
    MISSING,
    check_unique_steps,
    to_markdown,
    write_csv,
)
from condensation.runtime.io import write_text

EFFECT_COLUMNS = (
    "method", "step", "metric", "n_seeds", "n_reference_seeds", "mean", "reference_mean", "difference", "se",
    "dof", "seed_se", "unit_se", "ci_low", "ci_high", "p", "detectable", "per_seed", "std", "reference_std",
    "saturated",
)
METRICS = ("last_half", "spearman_rho", "kendall_tau")


def condensation_effects(profiles: Profiles, reference: str = "ce", metrics: Sequence[str] = METRICS) -> pd.DataFrame:
    """Each method against ``reference`` at every step both measured, on each of ``metrics``.

    ``profiles``: one row per (method, seed, step) of a study's runs with each checkpoint's
    per-sequence layer means. One row per (metric, method, step): ``mean`` and ``std`` over the
    method's seeds, the same for the reference, their ``difference`` (method - reference) with its
    standard error, a 95 % interval and p over the seeds and the sequences
    (:func:`condensation.reporting.statistics.panel.difference`: paired by seed, a seed being one
    data order and starting point; the sequences' main effect added once), ``detectable`` (80 %
    power at 5 %) and the same-seed differences (``per_seed``). One seed each leaves the interval NaN.
    """
    rows = profiles.rows
    require_columns(rows, ("method", "seed", "step"), "trajectory profiles")
    check_unique_steps(rows)
    if reference not in set(rows["method"]):
        raise ValueError(f"condensation_effects: reference {reference!r} has no runs")
    records = []
    for metric in metrics:
        for method in pd.unique(rows["method"]):
            if method == reference:
                continue
            shared = sorted(set(rows.loc[rows["method"] == method, "step"])
                            & set(rows.loc[rows["method"] == reference, "step"]))
            for step in shared:
                records.append(_effect(profiles, metric, method, reference, step))
    return pd.DataFrame(records, columns=list(EFFECT_COLUMNS))


def _effect(profiles: Profiles, metric: str, method: str, reference: str, step: int) -> dict:
    rows = profiles.rows
    subset = profiles.subset(rows["method"].isin([method, reference]).to_numpy() & (rows["step"] == step).to_numpy())
    panel = subset.panel(metric, list(subset.rows["method"]), [int(s) for s in subset.rows["seed"]])
    result = difference(panel, method, reference)
    low, high = result.interval()
    own = panel.values[[i for i, run in enumerate(panel.runs) if run.arm == method]]
    base = panel.values[[i for i, run in enumerate(panel.runs) if run.arm == reference]]
    return {
        "method": method, "step": step, "metric": metric, "n_seeds": len(own), "n_reference_seeds": len(base),
        "mean": float(own.mean()), "reference_mean": float(base.mean()), "difference": result.estimate,
        "se": result.se, "dof": result.dof, "seed_se": result.seed_se, "unit_se": result.unit_se,
        "ci_low": low, "ci_high": high, "p": result.p_value, "detectable": result.detectable(ALPHA, POWER),
        "per_seed": "; ".join(f"{d:+.4f}" for d in result.per_seed) or math.nan,
        "std": float(pd.Series(own).std(ddof=1)), "reference_std": float(pd.Series(base).std(ddof=1)),
        "saturated": result.saturated or math.nan,
    }


def pool_bases(by_base: Mapping[str, Profiles]) -> Profiles:
    """Several base models' study runs as one study whose replicate is the base: per base, method
    and step, the per-sequence layer means averaged over the base's seeds (its data orders, nested
    in it), with the base's position as the ``seed`` (so that methods pair by base)."""
    rows, layers = [], []
    for position, (base, profiles) in enumerate(by_base.items()):
        require_columns(profiles.rows, ("method", "seed", "step"), f"trajectory profiles of {base}")
        for method, step in profiles.rows[["method", "step"]].drop_duplicates().itertuples(index=False):
            mask = ((profiles.rows["method"] == method) & (profiles.rows["step"] == step)).to_numpy()
            runs = [profiles.layers[i] for i in np.flatnonzero(mask)]
            rows.append({"method": method, "seed": position, "step": int(step), "base": base, "runs": len(runs)})
            layers.append(np.mean(runs, axis=0))
    return Profiles(pd.DataFrame(rows), layers, [None] * len(rows), [None] * len(rows))


def effects_caption(reference: str, pooled: bool = False) -> str:
    """What the condensation-effects table shows and what its interval covers (``pooled``: over
    base models, :func:`pool_bases`)."""
    if pooled:
        over = ("means over base models (each its seeds' mean) and their difference (method - "
                f"{reference}) with a 95 % interval and p over the base models and the text sequences (paired by "
                "base: each base's pre-training and the mid-training seeds nested in it; t with k - 1 degrees of "
                "freedom, k the bases")
    else:
        over = (f"means over seeds and their difference (method - {reference}) with a 95 % interval and p over "
                "the training seeds and the text sequences (paired by seed: a seed is one data order and starting "
                "point; t with k - 1 degrees of freedom")
    return (
        f"Condensation of each method against {reference} at every measured step, on text no run trained on: "
        f"{over}; the sequences' main effect added once, their interaction with the runs being in the "
        f"{'bases' if pooled else 'seeds'}' spread already); MDE: the smallest difference found with 80 % power at "
        "5 %. Metrics: "
        f"{', '.join(f'{k} ({v.title})' for k, v in STATISTICS.items())}. A dash: one seed each, the training noise "
        "unmeasured."
    )


def write_condensation_effects(
    *, profiles: Profiles, csv_path: str | os.PathLike, markdown_path: str | os.PathLike, reference: str = "ce",
    pooled: bool = False,
) -> pd.DataFrame:
    """:func:`condensation_effects` of one model's trajectory profiles (or, ``pooled``, of base
    models pooled by :func:`pool_bases`), as CSV (5 decimals) and as Markdown (4 decimals, the rule
    in the caption). Returns the effects frame."""
    effects = condensation_effects(profiles, reference=reference)
    write_csv(effects, csv_path, "%.5f")
    shown = effects.drop(columns=["n_reference_seeds", "std", "reference_std", "seed_se", "unit_se", "saturated"])
    shown["per_seed"] = [MISSING if pd.isna(text) else text for text in effects["per_seed"]]
    shown = shown.rename(columns={"reference_mean": f"{reference} mean", "per_seed": "per seed", "detectable": "MDE"})
    caption = effects_caption(reference, pooled=pooled)
    write_text(markdown_path, caption + "\n\n" + to_markdown(shown, float_format=".4f") + "\n")
    return effects
