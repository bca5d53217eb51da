"""Tokens to a target loss: how many training tokens each run needs to reach the CE model's validation
loss, and how many fewer (or more) a method needs than CE (issue 46, item 2; beyond the paper).

**The series.** Each run's validation loss at the steps it evaluated, with the tokens seen by then:
the ``val_loss`` rows of a study model's ``losses.csv`` (rule ``study_tables``, from every run's
``log.csv``). A run evaluates at step 0, at ``num_checkpoints`` evenly spaced steps and at its last
step (:func:`condensation.config.runs.checkpoint_steps`): the default's 4 give 6 points, one every
fifth of the run. :func:`resolution` says how far apart they lie.

**A crossing** (:func:`first_crossing`): the first evaluation at or below the target, the crossing
placed by linear interpolation *in tokens* between it and the evaluation before. Tokens, not log
tokens: the first segment starts at 0 tokens, where a log is undefined; under a learning rate that
decays to zero the curve flattens at the end, so it is no straighter against log tokens there; and
the comparisons below interpolate every arm the same way. A run that never reaches the target is
**censored** at its last evaluation's tokens, and flagged (``reached`` false): its value is a lower
bound, never counted as reached.

**Two targets**, for two questions:

- *Tokens to the CE loss* (the tables' level column, per method): the target is the CE arm's final
  validation loss, the mean over its seeds. Each method's runs cross it; their log tokens are
  averaged over seeds (a geometric mean, with a t interval over seeds). CE defines this target, so
  about half of CE's own runs never reach it (censored at their full length) and the rest reach it
  just before the end: the column describes, it does not compare. The seeds' data order moves
  every method's loss alike, and often more than a method does, so the censored count is shown beside
  every cell.
- *The token multiplier against CE* (the tables' ``vs CE`` column and the findings' claim): if a
  method's curve is CE's with tokens multiplied by ``k``, it reaches CE's final loss after ``T / k``
  tokens (``k > 1``: fewer). The test of ``k = 1`` (:func:`multiplier`) is the final loss gap, CE -
  method, a paired t over seeds (k - 1 degrees of freedom, the tables' machinery:
  :func:`condensation.reporting.statistics.panel.contrast`): for falling curves a run reaches the
  other's final loss before its own end exactly when it ends lower; the seed's data order cancels
  in the pair; nobody is censored (the arm that ends lower reaches the other's end by its own); and
  a loss gap is near normal, so the t is calibrated. ``k`` itself is the gap read on the arms' mean
  curves (:func:`log_k_of_gap`), its 95 % interval every ``k`` that the same paired t does not
  reject when each seed's method run is read at ``T / k`` against its CE run at ``T``
  (:func:`gap_at`, a test inversion), on the side of 1 the gap's test gives. That interval is wider
  than the gap's: reading one run at other tokens than the other brings in how each seed's loss
  moves in between. Per seed, :func:`log_multiplier` reads ``log k`` from where the run that ends
  lower crosses the other's final loss (shown, not tested). tests/unit/test_tokens_to_target.py
  simulates the false calls, the power and the interval's coverage, and why neither simpler
  reading is used: a t over the per-seed ``log k`` calls too many effects on the default's grid
  (they pile up at the evaluation before the last), and comparing the tokens to CE's mean final
  loss has little power (CE's own runs are half censored by construction, and censored pairs tie).

Intervals cover the seeds only: every run is evaluated on the same validation blocks, a fixed set
whose main effect moves every run's loss alike (and both runs of a comparison).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from condensation.intervals import CONFIDENCE
from condensation.reporting.statistics.decisions import ALPHA, POWER, holm
from condensation.reporting.statistics.panel import Estimate, Panel, Run, UnitSampling, contrast
from condensation.reporting.tables.table_files import MISSING, isnan

SERIES_COLUMNS = ("method", "seed", "step", "tokens", "val_loss")
"""What a study model's ``losses.csv`` must hold for this module (other columns are ignored)."""

COVERS = "seeds, on one fixed validation set"

TOKEN_FIELDS = (
    "target_loss", "n_runs", "n_censored", "tokens_mean", "tokens_ci_low", "tokens_ci_high", "tokens_per_seed",
    "gap", "gap_se", "gap_dof", "multiplier", "multiplier_ci_low", "multiplier_ci_high", "multiplier_p",
    "multiplier_p_holm", "multiplier_detectable", "multiplier_limit", "multiplier_per_seed", "evaluations",
    "resolution",
)
"""A row's columns (``tokens_<field>`` in the tables, :func:`token_columns`): the target (CE's mean
final loss), the row's runs and how many never reached it, the geometric mean over seeds of their
tokens to it with its 95 % interval, and each seed's (">": censored, a lower bound); against CE the
final loss gap (CE - method) with its se and degrees of freedom, the token multiplier ``k`` with its
95 % interval, the gap's two-sided p and Holm's over the table's rows, the ``k`` the test finds with
80 % power at 5 %, the largest ``k`` the evaluations locate, and each seed's own ``k``; the fewest
evaluations of a run and the largest gap between two as a share of its tokens."""


def token_columns() -> list[str]:
    """The tables' column names of :data:`TOKEN_FIELDS`."""
    return [f"tokens_{field}" for field in TOKEN_FIELDS]


# --------------------------------------------------------------------------------------------
# Series and crossings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One run's validation loss at the tokens it was evaluated at (ascending)."""

    tokens: np.ndarray
    loss: np.ndarray

    @property
    def total(self) -> float:
        return float(self.tokens[-1])

    @property
    def final(self) -> float:
        return float(self.loss[-1])


def validation_series(losses: pd.DataFrame) -> dict[tuple[str, int], Series]:
    """Each run's (``(method, seed)``) evaluations from a ``losses.csv`` frame: the rows with a
    validation loss, by tokens; a step logged twice (a resumed run) keeps its last row."""
    missing = [column for column in SERIES_COLUMNS if column not in losses]
    if missing:
        raise ValueError(f"losses: missing column(s) {', '.join(missing)}")
    evaluated = losses.loc[np.isfinite(pd.to_numeric(losses["val_loss"], errors="coerce"))]
    evaluated = evaluated.drop_duplicates(["method", "seed", "step"], keep="last")
    series = {}
    for (method, seed), rows in evaluated.groupby(["method", "seed"], sort=False):
        rows = rows.sort_values("tokens", kind="stable")
        series[(str(method), int(seed))] = Series(rows["tokens"].to_numpy(float), rows["val_loss"].to_numpy(float))
    return series


@dataclass(frozen=True)
class Crossing:
    """When a run first reaches a target: ``tokens`` (interpolated), or its last evaluation's
    tokens with ``reached`` false (censored: a lower bound)."""

    tokens: float
    reached: bool


def first_crossing(tokens: np.ndarray, loss: np.ndarray, target: float) -> Crossing:
    """The first point at which the validation loss reaches ``target``: the first evaluation at or
    below it, linearly interpolated in tokens from the evaluation before (its own tokens when the
    first evaluation is already there); censored at the last evaluation when none is."""
    tokens, loss = np.asarray(tokens, float), np.asarray(loss, float)
    if tokens.size == 0 or tokens.shape != loss.shape:
        raise ValueError(f"a crossing needs evaluations, one loss per tokens value, got {tokens.shape}, {loss.shape}")
    below = np.flatnonzero(loss <= target)
    if below.size == 0:
        return Crossing(float(tokens[-1]), False)
    i = int(below[0])
    if i == 0:
        return Crossing(float(tokens[0]), True)
    share = (loss[i - 1] - target) / (loss[i - 1] - loss[i])  # in (0, 1]: loss[i - 1] > target >= loss[i]
    return Crossing(float(tokens[i - 1] + share * (tokens[i] - tokens[i - 1])), True)


def log_multiplier(run: Series, reference: Series) -> float:
    """The token multiplier of ``run`` against the same-seed ``reference`` run, as a log (module
    docstring): ``log(T_ref / tau_run)`` when ``run`` ends lower (``tau_run``: its tokens to the
    reference's final loss), ``-log(T_run / tau_ref)`` when the reference ends lower, 0 when they
    end level. Positive: ``run`` reaches the reference's loss in fewer tokens."""
    if run.final < reference.final:
        reached = first_crossing(run.tokens, run.loss, reference.final)
        return math.log(reference.total / reached.tokens) if reached.tokens > 0 else math.inf
    if reference.final < run.final:
        reached = first_crossing(reference.tokens, reference.loss, run.final)
        return -math.log(run.total / reached.tokens) if reached.tokens > 0 else -math.inf
    return 0.0


def ce_target(series: Mapping[tuple[str, int], Series], baseline: str = "ce") -> float:
    """The baseline arm's final validation loss, the mean over its seeds (NaN with no runs)."""
    finals = [run.final for (method, _), run in series.items() if method == baseline]
    return float(np.mean(finals)) if finals else math.nan


def read_losses(paths: Sequence[str | os.PathLike]) -> dict[str, pd.DataFrame]:
    """Each study model's ``losses.csv`` (``results/<study>/<model>/losses.csv``), by model."""
    return {Path(path).parent.name: pd.read_csv(path) for path in paths}


def run_crossings(losses: pd.DataFrame, baseline: str = "ce") -> pd.DataFrame:
    """Every run of a study model with its tokens to the baseline's mean final loss: columns
    method, seed, evaluations, total_tokens, final_loss, target_loss, tokens_to_target, reached."""
    series = validation_series(losses)
    target = ce_target(series, baseline)
    rows = []
    for (method, seed), run in series.items():
        crossing = first_crossing(run.tokens, run.loss, target) if math.isfinite(target) else Crossing(math.nan, False)
        rows.append({"method": method, "seed": seed, "evaluations": len(run.tokens), "total_tokens": run.total,
                     "final_loss": run.final, "target_loss": target, "tokens_to_target": crossing.tokens,
                     "reached": crossing.reached})
    columns = ["method", "seed", "evaluations", "total_tokens", "final_loss", "target_loss", "tokens_to_target",
               "reached"]
    return pd.DataFrame(rows, columns=columns)


def resolution(series: Mapping[tuple[str, int], Series]) -> tuple[int, float]:
    """The fewest evaluations of any run and the largest gap between two consecutive ones as a
    share of that run's tokens: how finely a crossing is located (the default: 6 and 0.2)."""
    if not series:
        return 0, math.nan
    fewest = min(len(run.tokens) for run in series.values())
    widest = max(float(np.diff(run.tokens).max() / run.total) if len(run.tokens) > 1 and run.total > 0 else 1.0
                 for run in series.values())
    return fewest, widest


# --------------------------------------------------------------------------------------------
# Estimates over seeds
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FixedUnits(UnitSampling):
    """Every run evaluated on the same fixed validation blocks: no units' sampling to add."""

    dof: float = math.inf

    def variance(self, a: np.ndarray) -> float:
        return 0.0


def _over_seeds(values: Mapping[int, float], statistic: str) -> Estimate:
    """The mean of per-seed ``values`` with its t interval over seeds (the tables' machinery:
    :func:`condensation.reporting.statistics.panel.contrast` over one arm; k - 1 degrees of
    freedom, one seed unmeasured)."""
    runs = tuple(Run("arm", seed, float(value)) for seed, value in values.items())
    estimate = contrast(Panel(runs, _FixedUnits(), COVERS, statistic=statistic), {"arm": 1.0})
    if estimate.unmeasured:
        estimate = replace(estimate, unmeasured="one seed: its training noise is unmeasured")
    return replace(estimate, covers=COVERS, per_seed=tuple(float(v) for v in values.values()))


def mean_series(runs: Sequence[Series]) -> Series:
    """The runs' mean curve: each run's loss read (linear in tokens) at every tokens value any of
    them evaluated at, averaged."""
    tokens = np.unique(np.concatenate([run.tokens for run in runs]))
    return Series(tokens, np.mean([np.interp(tokens, run.tokens, run.loss) for run in runs], axis=0))


def log_k_of_gap(gap: float, method: Series, baseline: Series, limit: float) -> float:
    """The ``log k`` a final loss gap (baseline - method) stands for on the arms' mean curves: for a
    gap above 0 the method's mean curve reaches its own final loss plus the gap (the baseline's
    final loss, at the point) at ``T / k`` tokens; below 0 the baseline's mean curve reaches its
    final loss less the gap at ``k T``. Beyond the first evaluation after 0 (``limit``): +-inf."""
    if not math.isfinite(gap):
        return gap if math.isinf(gap) else math.nan
    if gap == 0:
        return 0.0
    curve = method if gap > 0 else baseline
    reached = first_crossing(curve.tokens, curve.loss, curve.final + abs(gap))
    if reached.tokens <= 0:
        return math.copysign(math.inf, gap)
    value = math.log(curve.total / reached.tokens)
    return math.copysign(value, gap) if value <= limit else math.copysign(math.inf, gap)


@dataclass(frozen=True)
class Multiplier:
    """A method's token multiplier ``k`` against the baseline over the seeds both ran (module
    docstring), as logs. ``gap``: the final loss gap, baseline - method, with its t interval over
    seeds (k - 1 degrees of freedom): the test of ``k = 1``, which the verdict reads (for falling
    curves a run reaches the other's final loss before its own end exactly when it ends lower).
    ``log_k``: the gap read on the arms' mean curves (:func:`log_k_of_gap`): where the method's mean
    curve reaches the baseline's mean final loss (or the baseline's the method's). ``low``, ``high``:
    95 %, every ``log k`` that the same paired t, applied to each seed's :func:`gap_at` at that
    ``log k``, does not reject (:func:`_inverted`, a test inversion like Fieller's), on the side of
    ``k = 1`` the gap's test gives: so the interval excludes 1 exactly when that test rejects. It is
    wider than the gap alone suggests: reading one run at other tokens than the other brings in how
    each seed's loss moves in between. ``limit``: the largest ``|log k|`` the evaluations locate
    (``log(T / t_1)``, ``t_1`` the first evaluation after 0); an end beyond it is infinite.
    ``per_seed``: each seed's own :func:`log_multiplier`, shown, not tested (on a coarse grid they
    pile up at the evaluations, and a t over them calls too many effects)."""

    gap: Estimate
    log_k: float
    low: float
    high: float
    limit: float
    detectable: float
    """The ``log k`` the test finds with 80 % power at 5 %: where the baseline's mean curve stands
    the gap's detectable effect above its final loss."""
    per_seed: tuple[float, ...] = ()

    @property
    def measured(self) -> bool:
        return self.gap.measured


def multiplier(losses: pd.DataFrame, method: str, baseline: str = "ce") -> Multiplier:
    """``method``'s token multiplier against ``baseline`` over the seeds both ran (:class:`Multiplier`)."""
    series = validation_series(losses)
    seeds = sorted(seed for (name, seed) in series if name == method and (baseline, seed) in series)
    if not seeds:
        gap = Estimate(math.nan, math.nan, math.nan, math.nan, math.nan, COVERS,
                       unmeasured=f"no seed of {method} has a {baseline} run", statistic="final loss gap")
        return Multiplier(gap, math.nan, math.nan, math.nan, math.nan, math.nan)
    return paired_multiplier({seed: (series[(method, seed)], series[(baseline, seed)]) for seed in seeds})


def paired_multiplier(by_seed: Mapping[int, tuple[Series, Series]]) -> Multiplier:
    """:func:`multiplier` of the runs given per seed as (method's, baseline's) series."""
    pairs = list(by_seed.values())
    gap = _over_seeds({seed: reference.final - run.final for seed, (run, reference) in by_seed.items()},
                      "final loss gap")
    if any(not (run.tokens > 0).any() for pair in pairs for run in pair):
        return Multiplier(replace(gap, se=math.nan, unmeasured="a run has no evaluation after step 0"),
                          math.nan, math.nan, math.nan, math.nan, math.nan)
    method, baseline = mean_series([run for run, _ in pairs]), mean_series([reference for _, reference in pairs])
    limit = min(math.log(run.total / run.tokens[run.tokens > 0][0]) for pair in pairs for run in pair)
    per_seed = tuple(log_multiplier(run, reference) for run, reference in pairs)
    point = log_k_of_gap(gap.estimate, method, baseline, limit)
    if not gap.measured:
        return Multiplier(gap, point, math.nan, math.nan, limit, math.nan, per_seed)
    low, high = _inverted(pairs, gap.quantile((1 - CONFIDENCE) / 2), limit, point)
    # the side of k = 1 is the gap's test's: for falling curves k > 1 is a method that ends lower
    gap_low, gap_high = gap.interval()
    if gap_low > 0:  # open at 1: the smallest multiplier above it
        low = max(low, math.nextafter(0.0, 1.0))
    elif gap_high < 0:
        high = min(high, math.nextafter(0.0, -1.0))
    detectable = log_k_of_gap(gap.detectable(ALPHA, POWER), baseline, baseline, limit)  # the baseline's curve
    return Multiplier(gap, point, low, high, limit, detectable, per_seed)


def gap_at(run: Series, reference: Series, log_k: float) -> float:
    """``D(log k)``: the ``reference``'s loss less ``run``'s, ``run``'s tokens worth ``k`` of the
    reference's: for ``k >= 1`` the reference's final loss less ``run``'s loss at ``T_run / k``
    tokens, for ``k < 1`` the reference's loss at ``k T_ref`` less ``run``'s final loss (linear in
    tokens). If ``run``'s curve is the reference's with tokens times ``k``, ``D(log k)`` is noise
    about 0; ``D(0)`` is the final loss gap."""
    return float(_gaps([(run, reference)], np.array([log_k]))[0, 0])


def _gaps(pairs: Sequence[tuple[Series, Series]], grid: np.ndarray) -> np.ndarray:
    """``[seeds, len(grid)]``: each seed's :func:`gap_at` over a grid of ``log k``."""
    grid = np.asarray(grid, float)
    ahead, behind = np.maximum(grid, 0.0), np.minimum(grid, 0.0)
    rows = []
    for run, reference in pairs:
        later = reference.final - np.interp(run.total * np.exp(-ahead), run.tokens, run.loss)
        earlier = np.interp(reference.total * np.exp(behind), reference.tokens, reference.loss) - run.final
        rows.append(np.where(grid >= 0, later, earlier))
    return np.array(rows)


GRID = 401
"""Points of ``log k`` from -limit to +limit at which the inverted test is read before the
interval's ends are refined by bisection."""


def _inverted(pairs: Sequence[tuple[Series, Series]], critical: float, limit: float,
              point: float) -> tuple[float, float]:
    """The 95 % interval of ``log k``: every ``log k`` whose seeds' :func:`gap_at` a paired t does
    not reject (the test of ``k = 1`` is the one at 0), from the first such value to the last (the
    hull: with few seeds the accepted set need not be one piece); an end at +-``limit`` is infinite.
    Reading one run at other tokens than the other brings in how a seed's loss moves between them,
    which the same-tokens gap at 0 does not: the interval can hold 1 when the gap's test rejects."""
    def accepted(values: np.ndarray) -> np.ndarray:
        spread = values.std(axis=0, ddof=1) / math.sqrt(values.shape[0])
        return np.abs(values.mean(axis=0)) <= critical * spread

    def edge(inner: float, outer: float) -> float:  # 25 halvings of a grid step: to 1e-9 of log k
        for _ in range(25):
            middle = (inner + outer) / 2
            inner, outer = (middle, outer) if accepted(_gaps(pairs, np.array([middle])))[0] else (inner, middle)
        return (inner + outer) / 2

    grid = np.linspace(-limit, limit, GRID)
    inside = np.flatnonzero(accepted(_gaps(pairs, grid)))
    step = grid[1] - grid[0]
    if inside.size:
        first, last = int(inside[0]), int(inside[-1])
        low = -math.inf if first == 0 else edge(grid[first], grid[first - 1])
        high = math.inf if last == GRID - 1 else edge(grid[last], grid[last + 1])
    elif math.isfinite(point):  # narrower than the grid's step: around the point
        low, high = edge(point, point - step), edge(point, point + step)
    else:
        return math.nan, math.nan
    if math.isfinite(point):
        low, high = min(low, point), max(high, point)
    return low, high


def tokens_record(losses: pd.DataFrame | None, method: str, baseline: str = "ce") -> dict[str, Any]:
    """One table row's :data:`TOKEN_FIELDS` (NaN where the model or method has no runs)."""
    record: dict[str, Any] = {field: math.nan for field in TOKEN_FIELDS}
    if losses is None:
        return record
    series = validation_series(losses)
    own = {seed: run for (name, seed), run in series.items() if name == method}
    target = ce_target(series, baseline)
    if not own or not math.isfinite(target):
        return record
    crossings = {seed: first_crossing(run.tokens, run.loss, target) for seed, run in own.items()}
    record["target_loss"] = target
    record["n_runs"] = len(crossings)
    record["n_censored"] = sum(not c.reached for c in crossings.values())
    record["tokens_per_seed"] = "; ".join(("" if c.reached else ">") + f"{c.tokens:.0f}" for c in crossings.values())
    if all(c.tokens > 0 for c in crossings.values()):
        level = _over_seeds({seed: math.log(c.tokens) for seed, c in crossings.items()}, "log tokens")
        low, high = level.interval()
        longest = max(run.total for run in own.values())  # no run's value (censored ones too) lies beyond it
        record |= {"tokens_mean": _exp(level.estimate), "tokens_ci_low": _exp(low),
                   "tokens_ci_high": min(_exp(high), longest) if level.measured else math.nan}
    record["evaluations"], record["resolution"] = resolution(own)
    if method == baseline:
        return record
    found = multiplier(losses, method, baseline)
    record |= {
        "gap": found.gap.estimate, "gap_se": found.gap.se, "gap_dof": found.gap.dof,
        "multiplier": _exp(found.log_k), "multiplier_ci_low": _exp(found.low), "multiplier_ci_high": _exp(found.high),
        "multiplier_p": found.gap.p_value, "multiplier_detectable": _exp(found.detectable),
        "multiplier_limit": _exp(found.limit),
        "multiplier_per_seed": "; ".join(f"{_exp(v):.3f}" for v in found.per_seed) if found.per_seed else math.nan,
    }
    return record


def _exp(value: float) -> float:
    """exp, keeping NaN (and inf for an end beyond the evaluations)."""
    return math.nan if value is None or math.isnan(value) else math.exp(value) if value < 700 else math.inf


def token_frame(keys: Sequence[tuple[str, str]], losses: Mapping[str, pd.DataFrame],
                baseline: str = "ce") -> pd.DataFrame:
    """The ``tokens_*`` columns (:func:`token_columns`) for table rows ``keys`` (model, method),
    from each model's ``losses.csv`` frame; Holm's p over the rows' comparisons with the baseline
    (the table's family for this column)."""
    records = [tokens_record(losses.get(model), method, baseline) for model, method in keys]
    frame = pd.DataFrame(records, columns=list(TOKEN_FIELDS))
    p = frame["multiplier_p"].to_numpy(float)
    frame["multiplier_p_holm"] = holm(p.tolist()) if np.isfinite(p).any() else p
    return frame.set_axis(token_columns(), axis=1)


# --------------------------------------------------------------------------------------------
# Display
# --------------------------------------------------------------------------------------------


def tokens_text(tokens: float) -> str:
    """"92.6k", "1.20M": tokens with three significant figures."""
    if isnan(tokens) or not math.isfinite(tokens):
        return MISSING
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(tokens) >= scale:
            return f"{tokens / scale:.3g}{suffix}"
    return f"{tokens:.0f}"


def _k(value: float) -> str:
    """A multiplier's cell: "1.06", "∞" beyond the evaluations, "0" below them."""
    return "∞" if math.isinf(value) else "0" if value == 0 else f"{value:.2f}"


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"={p:.2g}"


def format_tokens(df: pd.DataFrame, baseline_label: str = "CE") -> pd.DataFrame:
    """Display cells of the ``tokens_*`` columns: "Tokens to CE loss" ("92.6k [88.0k, 97.4k], 1/3
    censored") and "Tokens vs CE" ("×1.06 [0.98, 1.15], p=0.09, Holm p=0.18, MDE ×1.13")."""
    level, versus = [], []
    for row in df.to_dict("records"):
        mean = row["tokens_tokens_mean"]
        if isnan(row["tokens_n_runs"]):
            level.append(MISSING)
        else:
            cell = tokens_text(mean)
            if not isnan(row["tokens_tokens_ci_low"]):
                cell += f" [{tokens_text(row['tokens_tokens_ci_low'])}, {tokens_text(row['tokens_tokens_ci_high'])}]"
            censored = int(row["tokens_n_censored"])
            if censored:
                cell = f"≥{cell}, {censored}/{int(row['tokens_n_runs'])} censored"
            level.append(cell)
        ratio = row["tokens_multiplier"]
        if isnan(ratio):
            versus.append(MISSING)
        elif isnan(row["tokens_multiplier_ci_low"]):
            versus.append(f"×{_k(ratio)} (one run: noise unmeasured)")
        else:
            cell = (f"×{_k(ratio)} [{_k(row['tokens_multiplier_ci_low'])}, {_k(row['tokens_multiplier_ci_high'])}], "
                    f"p{_p(row['tokens_multiplier_p'])}")
            if not isnan(row["tokens_multiplier_p_holm"]):
                cell += f", Holm p{_p(row['tokens_multiplier_p_holm'])}"
            if row["tokens_multiplier_ci_low"] <= 1 <= row["tokens_multiplier_ci_high"]:
                cell += f", MDE ×{_k(row['tokens_multiplier_detectable'])}"
            versus.append(cell)
    return pd.DataFrame({f"Tokens to {baseline_label} loss": level, f"Tokens vs {baseline_label}": versus},
                        index=df.index)


def tokens_caption(df: pd.DataFrame, baseline_label: str = "CE") -> str:
    """The caption's sentences on the two token columns, with the evaluations they rest on."""
    evaluations = df["tokens_evaluations"].dropna()
    gaps = df["tokens_resolution"].dropna()
    grid = (f" Each run evaluated its validation loss {int(evaluations.min())} times, at most "
            f"{gaps.max():.0%} of its tokens apart: crossings are placed by linear interpolation in tokens "
            "between evaluations, no finer." if len(evaluations) and len(gaps) else "")
    base = baseline_label
    return (
        f"Tokens to {base} loss: the tokens at which a run's validation loss first reaches the {base} arm's final "
        "validation loss (the mean over its seeds), geometric mean over seeds with a 95 % t interval over seeds "
        "(at most the runs' length); a run that never reaches it is censored at its last evaluation (≥: a lower "
        "bound). "
        f"{base} defines the target, so about half its own runs are censored by construction. Tokens vs {base}: "
        f"the token multiplier k (the method reaches {base}'s final loss after 1/k of the tokens; k > 1: fewer), "
        f"tested by the final validation-loss gap ({base} - method, a paired t over seeds, k - 1 degrees of "
        "freedom; p, Holm p over the table's rows) and read off the arms' mean loss curves with its 95 % interval; "
        f"MDE: the k found with 80 % power at 5 %.{grid}"
    )
