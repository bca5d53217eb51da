"""Does condensation predict the scores? Each trained run's score against its condensation.

The paper's story is causal (less condensation, better generalisation), and arXiv 2602.20433 (108
controlled models) finds geometry follows training choices and predicts downstream scores poorly.
This asks the runs a config trains: every run of every study (methods x seeds, the ablation grid,
from scratch and mid-training), its score at the checkpoint that was scored (the average accuracy
over the counted tasks, in points) against its condensation at that same checkpoint (the study's
trajectory: the deeper half's mean cosine, or Spearman rho). A cell is one method of one study's
model; the runs of a cell differ by their seed alone.

Two pieces, each a least-squares slope of score on condensation, reported per
:data:`PER` of the statistic:

``within methods``
    the runs' contrasts within their cell and their seed: each run's value less its cell's
    (study, method) mean and its seed's (study, seed) mean, as in a two-way layout (a least-squares
    fit of both sets of means where runs are missing). Does a run that condenses less than its
    siblings score higher? The arms of one seed share their initialisation and data order, so a
    seed moves every method's condensation and score together; taking the seed's mean out as well
    leaves contrasts that are independent between runs. ``n - C - (K - S) - 1`` degrees of freedom
    for ``n`` runs in ``C`` cells and ``K`` seeds over ``S`` studies (where every cell holds every
    seed).
``across methods``
    the cells' means, less their study's mean (each study trains under its own settings, so only
    arms of one study compare): does a method that condenses less score higher? ``C - S - 1``
    degrees of freedom for ``S`` studies. A seed's shift is in every cell's mean alike, so the
    study's mean takes it out.

Each is a t test of a zero slope from the residuals' scatter: calibrated when the runs' contrasts
are independent with a common spread, whatever a seed shares between its arms
(tests/unit/test_prediction.py simulates the false-call rate with the seeds' shifts shared between
arms, and the power). The claim predicts a negative slope (lower
condensation, higher score); it agrees when a piece shows one and none shows a positive one (Holm
over the two, as every claim). A saturated statistic (rho 1.00 for every run) cannot test it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from condensation.reporting.statistics.decisions import EvidencePiece
from condensation.reporting.statistics.panel import Estimate

PER = 0.1
"""The slopes are points of score per this much of the statistic (a tenth of a cosine, or of rho)."""

DIRECTION = -1
"""The claim's sign: lower condensation, higher score."""

MATCHED_SETTINGS = ("lr", "weight_decay", "micro_batch_size", "grad_accum_steps", "block_size", "train_tokens")
"""The training settings the page names as matched (or not) between a study's arms."""


def read_run_scores(paths: Sequence[str | Path],
                    counted: Sequence[str] | Mapping[str, Sequence[str]]) -> dict[str, pd.DataFrame]:
    """Each study model's runs from their score records
    (``results/scores/{study}/{model}/{method}/seed{seed}/selected.json``): ``{"study, model":
    frame of method, seed, step, score}``, the score the mean accuracy over the ``counted`` tasks
    in points (every task of the record when ``counted`` is empty; ``{study: tasks}`` where each
    study's table chose its own, ``page.counted_tasks``)."""
    rows: dict[str, list[dict]] = {}
    for path in map(Path, paths):
        record = json.loads(path.read_text())
        study, model = path.parts[-5], path.parts[-4]
        chosen = counted.get(study, ()) if isinstance(counted, Mapping) else counted
        tasks = [task for task in (chosen or record["scores"]) if task in record["scores"]]
        if not tasks:
            continue
        metric = record.get("metric", "acc")
        score = 100.0 * float(np.mean([record["scores"][task][metric] for task in tasks]))
        rows.setdefault(f"{study}, {model}", []).append(
            {"method": record["method"], "seed": int(record["seed"]), "step": int(record["step"]), "score": score})
    return {name: pd.DataFrame(found) for name, found in rows.items()}


def run_table(trajectories: Mapping[str, pd.DataFrame], run_scores: Mapping[str, pd.DataFrame],
              statistic: str) -> tuple[pd.DataFrame, list[str]]:
    """Every scored run with its ``statistic`` at its scored step: columns study, method, seed,
    step, score, condensation; and a note for each run whose step the trajectory did not measure
    (left out)."""
    rows, missing = [], []
    for study, scores in run_scores.items():
        trajectory = trajectories.get(study)
        if trajectory is None or statistic not in trajectory:
            continue
        measured = trajectory.set_index(["method", "seed", "step"])[statistic]
        for run in scores.itertuples(index=False):
            key = (run.method, run.seed, run.step)
            if key not in measured.index:
                missing.append(f"{study}: {run.method} seed {run.seed} (step {run.step} not measured)")
                continue
            rows.append({"study": study, "method": run.method, "seed": run.seed, "step": run.step,
                         "score": run.score, "condensation": float(measured.loc[key])})
    columns = ["study", "method", "seed", "step", "score", "condensation"]
    return pd.DataFrame(rows, columns=columns), missing


def _slope(x: np.ndarray, y: np.ndarray, dof: int, covers: str, statistic: str) -> Estimate:
    """The least-squares slope of ``y`` on ``x`` (both already centred as the piece needs), per
    :data:`PER`, with its standard error from the residuals on ``dof`` degrees of freedom."""
    spread = float((x**2).sum())
    if spread <= 1e-12 * max(1.0, len(x)):
        return Estimate(math.nan, math.nan, dof, math.nan, math.nan, covers, statistic=statistic,
                        saturated=f"{statistic} does not vary between the runs here")
    if float((y**2).sum()) <= 1e-12 * max(1.0, len(y)):  # a slope of 0 with no error: nothing to read
        return Estimate(math.nan, math.nan, dof, math.nan, math.nan, covers, statistic=statistic,
                        saturated="the scores do not vary between the runs here")
    slope = float((x * y).sum() / spread)
    if dof < 1:
        return Estimate(slope * PER, math.nan, dof, math.nan, math.nan, covers, statistic=statistic,
                        unmeasured="too few runs for an interval (no residual degrees of freedom)")
    residual = y - slope * x
    se = math.sqrt(float((residual**2).sum()) / dof / spread)
    return Estimate(slope * PER, se * PER, dof, se * PER, 0.0, covers, statistic=statistic)


def _residualised(runs: pd.DataFrame, columns: Sequence[str],
                  groupings: Sequence[Sequence[str]]) -> tuple[np.ndarray, int]:
    """``columns`` less their least-squares fit on the indicator columns of every grouping (the
    two-way layout's means, whether or not every cell holds every seed), and that fit's rank."""
    indicators = []
    for keys in groupings:
        labels: dict[tuple, int] = {}
        codes = [labels.setdefault(key, len(labels)) for key in zip(*(runs[name].tolist() for name in keys))]
        indicators.append(np.eye(len(labels))[codes])
    design = np.concatenate(indicators, axis=1)
    values = runs[list(columns)].to_numpy(float)
    coefficients, _, rank, _ = np.linalg.lstsq(design, values, rcond=None)
    return values - design @ coefficients, int(rank)


def within_methods(runs: pd.DataFrame, statistic: str) -> Estimate:
    """The pooled slope of the runs' contrasts within their cell (study, method) and their seed
    (study, seed)."""
    contrasts, rank = _residualised(runs, ["condensation", "score"], (("study", "method"), ("study", "seed")))
    return _slope(contrasts[:, 0], contrasts[:, 1], len(runs) - rank - 1,
                  "runs (contrasts within a method and a seed)", statistic)


def across_methods(runs: pd.DataFrame, statistic: str) -> Estimate:
    """The slope of the cells' means, each less its study's mean of cell means."""
    means = runs.groupby(["study", "method"], as_index=False)[["condensation", "score"]].mean()
    studies = means.groupby("study")
    x = (means["condensation"] - studies["condensation"].transform("mean")).to_numpy()
    y = (means["score"] - studies["score"].transform("mean")).to_numpy()
    return _slope(x, y, len(means) - studies.ngroups - 1, "methods (their seeds' means)", statistic)


def prediction_pieces(trajectories: Mapping[str, pd.DataFrame], run_scores: Mapping[str, pd.DataFrame],
                      statistic: str, title: str) -> tuple[list[EvidencePiece], list[str]]:
    """The claim's two pieces on ``statistic`` and the notes on runs left out."""
    runs, missing = run_table(trajectories, run_scores, statistic)
    if runs.empty:
        return [], missing
    cells = runs.groupby(["study", "method"]).ngroups
    seeds = runs.groupby(["study", "seed"]).ngroups
    studies = runs["study"].nunique()
    pieces = []
    for name, estimate, counts in (
            ("within methods", within_methods(runs, statistic),
             f"{len(runs)} runs in {cells} methods and {seeds} seed groups"),
            ("across methods", across_methods(runs, statistic), f"{cells} methods in {studies} studies")):
        text = (f"{name} ({counts}): score against {title}, points per {PER:g} of it: "
                f"{_describe(estimate)}")
        pieces.append(EvidencePiece(name, text, estimate, DIRECTION))
    return pieces, missing


def _describe(estimate: Estimate) -> str:
    if estimate.saturated:
        return estimate.saturated
    if not estimate.measured:
        return f"{estimate.estimate:+.2f} ({estimate.unmeasured})"
    low, high = estimate.interval()
    return f"{estimate.estimate:+.2f} [{low:+.2f}, {high:+.2f}] (95 %, over {estimate.covers})"


def matched_settings_note(matched: Mapping[str, Mapping[str, object]],
                          run_scores: Mapping[str, pd.DataFrame] | None = None) -> str:
    """Which training settings the compared arms share: within a study every method trains with
    the study's one ``train`` section (only the method differs: its objective, and for a LayerNorm
    Scaling arm the norms' scale); studies differ, which is why the pieces compare arms within a
    study only. ``train_tokens`` is each run's budget, not what it had seen where it was scored:
    a run is scored at its checkpoint of lowest validation loss, so the note gives the scored steps
    of each study's runs (from ``run_scores``) and says where they differ."""
    if not matched:
        return ""
    parts = []
    for study, settings in matched.items():
        shown = ", ".join(f"{key} {settings[key]}" for key in MATCHED_SETTINGS if key in settings)
        parts.append(f"{study}: {shown}")
    note = ("matched between compared arms: within a study every method trains with the same settings, only the "
            "method differs, its objective or its norms' scale (" + "; ".join(parts)
            + "); the studies differ from each other, so only arms of one study are compared")
    steps = [(name, scores["step"]) for name, scores in (run_scores or {}).items() if len(scores)]
    if steps:
        spans = "; ".join(f"{name} step {low}" if low == high else f"{name} steps {low} to {high}"
                          for name, low, high in ((name, int(s.min()), int(s.max())) for name, s in steps))
        differ = any(s.min() != s.max() for _, s in steps)
        note += (". train_tokens is the budget, not the tokens where a run was scored: each run is scored at its "
                 f"checkpoint of lowest validation loss ({spans})"
                 + (", so there the arms' tokens differ" if differ else ", the same for every run here"))
    return note
