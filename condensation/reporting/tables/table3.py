"""The paper's Table 3: the dispersion loss's weight x temperature ablation."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import pandas as pd

from condensation.evaluation.scores import (
    is_finite_number,
    load_scores,
    require_columns,
    select_checkpoints,
)
from condensation.reporting.tables.score_tables import (
    CHECKPOINT_RULE,
    check_tasks,
    sample_std,
    seed_matrix,
)
from condensation.reporting.tables.table_files import MISSING, mean_std, write_table

TABLE3_COLUMNS = ("model", "weight", "tau", "method", "n_seeds", "average_mean", "average_std")


def table3(
    scores: pd.DataFrame, tasks: Sequence[str], grid: Mapping[str, Sequence[float]], models: Sequence[str] | None = None
) -> pd.DataFrame:
    """Dispersion-loss ablation: average accuracy per (model, weight lambda, temperature tau).

    ``grid`` maps each ablation method to its (weight, tau) pair, the default ``dispersion`` run
    included. ``models`` defaults to every model with any grid method; each of them must have
    every grid method, because a half-filled ablation grid would silently compare unlike things
    (pass ``models`` when only some models were ablated). Sorted by model, weight, tau.
    """
    tasks = check_tasks(tasks)
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
            average = seed_matrix(selected, model, method, tasks).per_seed_average
            records.append({
                "model": model, "weight": weight, "tau": tau, "method": method,
                "n_seeds": len(average), "average_mean": float(average.mean()),
                "average_std": float(sample_std(average)),
            })
    frame = pd.DataFrame(records, columns=list(TABLE3_COLUMNS))
    return frame.sort_values(["model", "weight", "tau"], kind="stable").reset_index(drop=True)


def _check_grid(grid: Mapping[str, Sequence[float]]) -> dict[str, tuple[float, float]]:
    """Grid points as floats; two methods on the same (weight, tau) would make duplicate cells."""
    if not grid:
        raise ValueError("grid: give at least one method -> (weight, tau)")
    points: dict[str, tuple[float, float]] = {}
    owner: dict[tuple[float, float], str] = {}
    for method, point in grid.items():
        if len(point) != 2 or not all(is_finite_number(v) for v in point):
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
    require_columns(table3_df, TABLE3_COLUMNS, "table3 frame")
    available = list(pd.unique(table3_df["model"]))
    if model is None:
        if len(available) != 1:
            raise ValueError(f"table3_grid: frame holds models {available}; pass `model`")
        model = available[0]
    part = table3_df.loc[table3_df["model"] == model]
    if part.empty:
        raise ValueError(f"table3_grid: model {model!r} not in frame (has {available})")
    cells = {
        (row.weight, row.tau): mean_std(row.average_mean, row.average_std, 2)
        for row in part.itertuples(index=False)
    }
    weights = sorted(part["weight"].unique())
    taus = sorted(part["tau"].unique())
    return pd.DataFrame(
        [[f"{w:g}", *(cells.get((w, t), MISSING) for t in taus)] for w in weights],
        columns=["weight", *(f"tau = {t:g}" for t in taus)],
    )


def table3_caption(metric: str = "acc") -> str:
    """Caption of the ablation grid: rows are weights lambda, columns temperatures tau."""
    return (
        f"Dispersion-loss ablation: average downstream {metric} (%) over tasks, mean ± sample std "
        "over seeds; rows: loss weight lambda, columns: temperature tau. "
        f"{CHECKPOINT_RULE}"
    )


def write_table3(
    *, score_paths: Sequence[str | os.PathLike], tasks: Sequence[str], metric: str,
    grid: Mapping[str, Sequence[float]], models: Sequence[str], stem: str | os.PathLike,
) -> pd.DataFrame:
    """Table 3, the dispersion-loss ablation over ``grid`` (method -> (weight, tau)) for
    ``models``, from score files: the tidy numbers in ``stem.csv``, one weight x tau grid per
    model (model in the first column) in the display files. Returns the tidy table."""
    scores = load_scores(score_paths, metric=metric)
    table = table3(scores, tasks, grid, models=models)
    grids = pd.concat([table3_grid(table, model=model).assign(model=model) for model in models], ignore_index=True)
    display = grids[["model", *(c for c in grids.columns if c != "model")]].fillna(MISSING)
    write_table(display, table, stem, table3_caption(metric))
    return table
