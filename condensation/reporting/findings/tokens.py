"""Does the dispersion loss reach the CE model's loss in fewer tokens? (issue 46, item 2; beyond the paper)

A speed-up is a claim one hears about auxiliary losses; the paper does not make it. Each study model
that trains both arms is one piece: the dispersion loss's *token multiplier* ``k`` against CE
(:mod:`condensation.reporting.tables.tokens_to_target`), from each seed's two runs (the same data
order and starting point). ``k > 1``: dispersion's validation loss reaches CE's final loss after
``1 / k`` of CE's tokens.

The verdict reads the test of ``k = 1``: the final validation-loss gap, CE - dispersion, a paired t
over seeds (k - 1 degrees of freedom). For loss curves that fall, a run reaches the other's final
loss before its own end exactly when it ends lower, so ``k > 1`` and a positive gap are one
hypothesis; the gap is a difference of two losses, near normal, and the t over it is calibrated
(tests/unit/test_tokens_to_target.py: 5 % false calls under no effect at the default's noise, 80 %
power at the detectable effect). The interval of ``k`` inverts the same t at each ``k`` (each seed's
dispersion run read at ``T / k`` against its CE run at ``T``) on the side of 1 the gap gives, so it
excludes 1 exactly when the test rejects; it covers the true ``k`` in at least 95 % of simulated
draws. Two simpler readings are not used. A t over the per-seed multipliers is not calibrated: on
the default's grid (an evaluation every fifth of the run) they pile up at the evaluation before the
last, and such a t calls 8 % false speed-ups at the from-scratch study's noise. A comparison of the
tokens each arm needs to CE's mean final loss is calibrated but weak: CE's own runs are about half
censored by construction, both runs of a seed are often censored together (a tie), and at the
detectable gap it finds the effect in 3 % (mid-training) and 47 % (from scratch) of draws against 81 %.

Pieces combine as every claim's: agrees when one agrees and none disagrees, Holm over the pieces.
The page shows beside it each arm's tokens to CE's mean final loss (censored runs flagged) and how
finely the evaluations locate a crossing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from condensation.reporting.statistics.decisions import EvidencePiece
from condensation.reporting.tables.tokens_to_target import (
    Multiplier,
    multiplier,
    resolution,
    tokens_record,
    tokens_text,
    validation_series,
)

STATISTIC = "validation loss"
"""The statistic the claim is decided on (the page's column)."""

DIRECTION = +1
"""The claim's sign: CE's final loss above dispersion's, ``k > 1``."""


def _times(log_k: float) -> str:
    if math.isnan(log_k):
        return "nan"
    if math.isinf(log_k):
        return "×∞" if log_k > 0 else "×0"
    return f"×{math.exp(log_k):.2f}"


def tokens_piece(name: str, found: Multiplier, method: str = "dispersion", baseline: str = "ce") -> EvidencePiece:
    """One study model's piece: its verdict reads ``found.gap`` (the test of ``k = 1``); the text
    gives ``k`` with its interval, each seed's own multiplier and the ``k`` the test detects."""
    gap = found.gap
    seeds = len(gap.per_seed)
    text = (f"{name}: {method} reaches {baseline}'s final validation loss in 1 / k of the tokens, "
            f"k = {_times(found.log_k)}")
    if gap.measured:
        text += (f" [{_times(found.low)}, {_times(found.high)}] (95 %, over {gap.covers})")
    if found.per_seed:
        text += "; per seed " + ", ".join(_times(v) for v in found.per_seed)
    text += f"; final loss {baseline} - {method} {gap.estimate:+.4f}"
    if gap.measured:
        low, high = gap.interval()
        text += f" [{low:+.4f}, {high:+.4f}] over {seeds} seeds"
        if math.isfinite(found.detectable):
            text += f"; the test finds k = {_times(found.detectable)} with 80 % power at 5 %"
        elif math.isinf(found.detectable):
            text += (f"; with 80 % power at 5 % the test finds no k the evaluations locate "
                     f"(up to {_times(found.limit)})")
    else:
        text += f" ({gap.unmeasured})"
    return EvidencePiece(name, text, gap, DIRECTION)


def tokens_pieces(losses: Mapping[str, pd.DataFrame], method: str = "dispersion",
                  baseline: str = "ce") -> tuple[list[EvidencePiece], list[str]]:
    """The claim's pieces, one per study model ("<study>, <model>": its ``losses.csv``) that ran
    both ``method`` and ``baseline``, and the notes beside them: each arm's tokens to the
    baseline's mean final loss, and how finely the evaluations locate a crossing."""
    pieces, notes = [], []
    for name, frame in losses.items():
        series = validation_series(frame)
        methods = {arm for arm, _ in series}
        if method not in methods or baseline not in methods:
            continue
        pieces.append(tokens_piece(name, multiplier(frame, method, baseline), method, baseline))
        notes.append(_level_note(name, frame, methods, baseline))
        evaluations, widest = resolution(series)
        notes.append(f"{name}: {evaluations} validation evaluations per run, at most {widest:.0%} of its tokens apart "
                     "(train.num_checkpoints): a crossing is located by linear interpolation in tokens between two "
                     "of them, no finer")
    return pieces, notes


def _level_note(name: str, frame: pd.DataFrame, methods: set[str], baseline: str) -> str:
    """Each arm's tokens to the baseline's mean final loss (geometric mean over seeds), with its
    censored runs: shown, not counted (the baseline defines the target)."""
    parts, target = [], math.nan
    for arm in [baseline, *sorted(methods - {baseline})]:
        record = tokens_record(frame, arm, baseline)
        target = record["target_loss"]
        censored = int(record["n_censored"])
        bound = "≥" if censored else ""
        parts.append(f"{arm} {bound}{tokens_text(record['tokens_mean'])}"
                     + (f" ({censored} of {int(record['n_runs'])} runs never reach it: censored)" if censored else ""))
    return (f"{name}: tokens to {baseline}'s mean final validation loss {target:.4f} (shown, not counted; "
            f"{baseline} defines it, so about half its runs end above it): " + "; ".join(parts))
