"""From estimates to verdicts: one test per piece of evidence, one multiplicity rule per claim.

A claim of the paper is tested on one or more pieces of evidence (a family on a text, a pair of
models, a study), each an :class:`~condensation.reporting.statistics.panel.Estimate`:

- a *directional* piece agrees when its test rejects zero in the paper's direction, disagrees when
  it rejects zero the other way, and is inconclusive otherwise;
- an *equivalence* piece (a claim of no or little difference) agrees when its one-sided test shows
  the effect below a margin fixed before the data, disagrees when it shows it above.

How a claim's pieces combine is stated with the claim, and the multiplicity follows from it:

- ``ANY``: some counted piece agrees and none disagrees (a union over pieces: Holm's adjustment over
  exactly the claim's counted pieces, once); pieces that decide both ways make the claim
  inconclusive ("the evidence splits");
- robustness checks (the same models measured again, e.g. on another text) are read at ``ALPHA``
  each and shown beside the counted pieces, never counted: they are not new evidence.

A claim decided on several statistics (the deeper layers' cosine and the paper's Spearman rho) takes
a verdict when every statistic gives it (an intersection: no adjustment needed); otherwise it
*depends on the statistic*, and the page says which gives what.

Every inconclusive piece carries its minimum detectable effect at 80 % power at the level it was
tested at, so a reader sees whether the design could have decided.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from condensation.reporting.statistics.panel import Estimate, Ratio

AGREES, DISAGREES, INCONCLUSIVE, UNTESTED = "agrees", "disagrees", "inconclusive", "cannot test"
DEPENDS = "depends on the statistic"
VERDICTS = (AGREES, DISAGREES, INCONCLUSIVE, UNTESTED, DEPENDS)
ALPHA = 0.05
POWER = 0.80
ANY = "any"
RULE_TEXT = {ANY: "agrees when a counted piece agrees and none disagrees, Holm-adjusted over the counted pieces"}


@dataclass(frozen=True)
class EvidencePiece:
    """One piece of evidence: its name, the numbers a reader sees, its estimate, and the sign the
    claim predicts (``direction`` +1 / -1). An equivalence piece has a ``margin`` and its ratio."""

    name: str
    text: str
    estimate: Estimate
    direction: int = 1
    margin: float | None = None
    ratio: Ratio | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reading:
    """A piece read at a level: its verdict, why (if inconclusive), the p it was judged on and the
    smallest effect the design could have found."""

    piece: EvidencePiece
    verdict: str
    reason: str = ""
    p_value: float = math.nan
    level: float = ALPHA
    detectable: float = math.nan
    counted: bool = True


def read_directional(piece: EvidencePiece, level: float = ALPHA, p_value: float | None = None) -> Reading:
    """Two-sided test of zero at ``level`` (``p_value``: an adjusted p to judge instead)."""
    result = piece.estimate
    detectable = result.detectable(level, POWER)
    if result.saturated:
        return Reading(piece, INCONCLUSIVE, f"cannot separate the runs: {result.saturated}", level=level)
    if not result.measured:
        return Reading(piece, INCONCLUSIVE, result.unmeasured, level=level)
    p = result.p_value if p_value is None else p_value
    if p < level:
        agrees = (result.estimate > 0) == (piece.direction > 0)
        return Reading(piece, AGREES if agrees else DISAGREES, p_value=p, level=level, detectable=detectable)
    why = "the interval holds zero" if p_value is None or result.p_value >= level else f"Holm-adjusted p = {p:.2g}"
    return Reading(piece, INCONCLUSIVE, why, p, level, detectable)


def read_equivalence(piece: EvidencePiece, level: float = ALPHA) -> Reading:
    """A claim that an effect stays below ``piece.margin`` of a reference gap (a ratio with
    Fieller's interval at ``1 - 2 level``, i.e. two one-sided tests at ``level``): agrees when the
    upper bound is below the margin, disagrees when the lower bound is above it."""
    ratio, margin = piece.ratio, piece.margin
    if ratio is None or margin is None:
        raise ValueError(f"{piece.name}: an equivalence piece needs a margin and a ratio")
    if not math.isclose(ratio.confidence, 1 - 2 * level):  # Holm's level: the interval widens with it
        ratio = ratio.at(1 - 2 * level)
        piece = replace(piece, ratio=ratio)
    if not piece.estimate.measured:
        return Reading(piece, INCONCLUSIVE, piece.estimate.unmeasured, level=level)
    detectable = margin - piece.estimate.detectable(level, POWER, sides=1)
    if math.isnan(ratio.ci_low):
        return Reading(piece, INCONCLUSIVE, "the reference gap's interval holds zero: there is no gap to close",
                       level=level)
    if ratio.ci_high < margin:
        return Reading(piece, AGREES, level=level, detectable=detectable)
    if ratio.ci_low > margin:
        return Reading(piece, DISAGREES, level=level, detectable=detectable)
    return Reading(piece, INCONCLUSIVE, f"the interval holds the {margin:.0%} margin", level=level,
                   detectable=detectable)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (NaN entries are not part of the family and stay NaN): the i-th
    smallest of m is multiplied by m - i + 1, then made non-decreasing, capped at 1. Rejecting
    where the adjusted p < alpha keeps the chance of any false rejection below alpha, whatever the
    dependence between the tests."""
    values = np.asarray(p_values, dtype=float)
    adjusted = np.full(values.shape, math.nan)
    present = np.flatnonzero(~np.isnan(values))
    order = present[np.argsort(values[present], kind="stable")]
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * values[index]))
        adjusted[index] = running
    return adjusted.tolist()


@dataclass(frozen=True)
class Decision:
    """A claim's verdict on one statistic: the pieces as read, and why the verdict is what it is."""

    statistic: str
    verdict: str
    readings: list[Reading]
    reason: str = ""
    rule: str = ANY


def decide(pieces: Sequence[EvidencePiece], rule: str = ANY, statistic: str = "", alpha: float = ALPHA,
           robustness: Sequence[EvidencePiece] = ()) -> Decision:
    """The claim's verdict on one statistic from its counted ``pieces`` (module docstring: ``ANY``,
    Holm over exactly these pieces); ``robustness`` pieces (the same models measured again) are
    read at ``alpha`` each and shown, never counted."""
    if rule != ANY:
        raise ValueError(f"rule must be {ANY!r}, got {rule!r}")
    checks = [replace(_read(p, alpha), counted=False) for p in robustness]
    if not pieces:
        return Decision(statistic, UNTESTED, checks, "nothing in this config measures it", rule)
    readings = _read_holm(pieces, alpha)
    if all(r.piece.estimate.saturated for r in readings):
        return Decision(statistic, UNTESTED, readings + checks, f"it cannot separate the runs here: "
                        f"{readings[0].piece.estimate.saturated}", rule)
    decided = {r.verdict for r in readings if r.verdict in (AGREES, DISAGREES)}
    if len(decided) == 1:
        verdict = decided.pop()
        undecided = sum(r.verdict == INCONCLUSIVE for r in readings)
        reason = f"{undecided} of {len(readings)} pieces undecided" if undecided else ""
        return Decision(statistic, verdict, readings + checks, reason, rule)
    if decided:
        counts = ", ".join(f"{sum(r.verdict == v for r in readings)} {v}" for v in (AGREES, DISAGREES, INCONCLUSIVE)
                           if any(r.verdict == v for r in readings))
        return Decision(statistic, INCONCLUSIVE, readings + checks, f"the evidence splits: {counts}", rule)
    reasons = sorted({r.reason for r in readings if r.reason})
    return Decision(statistic, INCONCLUSIVE, readings + checks, "; ".join(reasons), rule)


def _read(piece: EvidencePiece, level: float) -> Reading:
    return read_equivalence(piece, level) if piece.margin is not None else read_directional(piece, level)


def _read_holm(pieces: Sequence[EvidencePiece], alpha: float) -> list[Reading]:
    """Each piece at Holm's level within the claim: directional pieces by their adjusted p; an
    equivalence piece (tested by its interval) at alpha / m, the level Holm gives the first."""
    m = len(pieces)
    if m == 1:
        return [_read(pieces[0], alpha)]
    if len({piece.margin is None for piece in pieces}) > 1:  # Holm's p's would leave the intervals out of m
        raise ValueError("a claim's counted pieces are all directional or all equivalence pieces, not both: "
                         + ", ".join(piece.name for piece in pieces))
    adjusted = holm([p.estimate.p_value if p.margin is None and p.estimate.measured else math.nan for p in pieces])
    readings = []
    for piece, p in zip(pieces, adjusted):
        if piece.margin is not None:
            readings.append(read_equivalence(piece, alpha / m))
        else:
            reading = read_directional(piece, alpha, None if math.isnan(p) else p)
            readings.append(replace(reading, detectable=piece.estimate.detectable(alpha / m, POWER)))
    return readings


@dataclass(frozen=True)
class Verdict:
    """A claim over all its statistics: the verdict they share, or ``DEPENDS`` when they differ."""

    claim: str
    verdict: str
    decisions: list[Decision]
    reason: str = ""
    notes: list[str] = field(default_factory=list)


def over_statistics(claim: str, decisions: Sequence[Decision], notes: Sequence[str] = ()) -> Verdict:
    """Every statistic must give the verdict for the claim to take it (an intersection over
    statistics); a claim with no tested statistic cannot be tested."""
    tested = [d for d in decisions if d.verdict != UNTESTED]
    untestable = [f"{d.statistic} cannot test it ({d.reason})"
                  for d in decisions if d.verdict == UNTESTED and d.readings]
    notes = [*notes, *untestable]
    if not tested:
        reason = "; ".join(untestable) or "nothing in this config measures it"
        return Verdict(claim, UNTESTED, list(decisions), reason, list(notes))
    verdicts = {d.verdict for d in tested}
    if len(verdicts) == 1:
        verdict = verdicts.pop()
        reasons = list(dict.fromkeys(d.reason for d in tested if d.reason))
        if len(reasons) > 1:
            reasons = [f"{d.statistic}: {d.reason}" for d in tested if d.reason]
        return Verdict(claim, verdict, list(decisions), "; ".join(reasons), list(notes))
    reason = "; ".join(f"{d.statistic} {d.verdict}" for d in tested)
    return Verdict(claim, DEPENDS, list(decisions), reason, list(notes))
