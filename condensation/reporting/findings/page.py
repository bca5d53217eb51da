"""The findings page (Markdown) and its machine-readable twin (JSON) from the claims' verdicts."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from condensation.intervals import CONFIDENCE
from condensation.lenses import LENSES
from condensation.reporting.findings.claims import CLAIM_KEYS, DISTILLATION, SIZE
from condensation.reporting.statistics.decisions import (
    AGREES,
    ALPHA,
    DISAGREES,
    INCONCLUSIVE,
    POWER,
    Decision,
    EvidencePiece,
    Reading,
    Verdict,
)
from condensation.reporting.tables.comparisons import ABOVE_CHANCE
from condensation.reporting.tables.score_tables import COUNTED_COLUMN, COUNTED_SEPARATOR
from condensation.runtime.io import write_json, write_text

if TYPE_CHECKING:
    import pandas as pd

INTRODUCTION = f"""\
# What this run finds, claim by claim

Computed from this run's results, never written by hand. Each piece of evidence is an estimate
with a 95 % interval that says which units it covers: the training runs (seeds: initialisation and
data order) and the text sequences or test items every run was measured on, each noise counted once
(a t interval over seeds whose variance adds only the units' main effect). A piece agrees or
disagrees when its test rejects "no effect" at {ALPHA:g} in the paper's direction or against it;
otherwise it is inconclusive, and then the smallest effect the design would find with {POWER:.0%}
power at the level it was tested at is printed beside it. A claim's counted pieces are adjusted
together (Holm) once; it agrees when one agrees and none disagrees. Robustness checks (the same
models measured on another text) are shown, not counted. The condensation claims are decided on the
deeper layers' mean cosine and on the paper's Spearman rho (Kendall tau follows rho); a claim takes
a verdict only when both give it, else it *depends on the statistic*. Distillation is an equivalence
claim: it agrees when the share of the CE-to-teacher gap that distillation closes is shown below its
margin.
"""


def _reading_line(reading: Reading) -> str:
    role = "" if reading.counted else "robustness check, not counted: "
    parts = [f"- {role}{reading.piece.text}: **{reading.verdict}**"]
    detail = []
    # an equivalence piece is judged on its interval, a saturated one on nothing: no p for either
    directional = reading.piece.margin is None and not reading.piece.estimate.saturated
    raw = reading.piece.estimate.p_value if directional else math.nan
    if math.isfinite(raw):
        detail.append(f"p = {raw:.2g}")
    # the p a piece was judged on is Holm-adjusted over its claim's counted pieces where there are several
    adjusted = directional and math.isfinite(reading.p_value) and not math.isclose(reading.p_value, raw, rel_tol=1e-9)
    if adjusted:
        detail.append(f"Holm-adjusted p = {reading.p_value:.2g}")
    if reading.reason and not (adjusted and reading.reason.startswith("Holm-adjusted")):
        detail.append(reading.reason)
    # a saturated statistic (1.00 for every run) has no spread, so no detectable effect to state
    if reading.verdict == INCONCLUSIVE and math.isfinite(reading.detectable) and not reading.piece.estimate.saturated:
        if reading.piece.margin is not None:
            detail.append(f"the design shows a share below the margin with {POWER:.0%} power only when it is "
                          f"{reading.detectable:.0%} or less")
        else:
            detail.append(f"smallest effect this design detects with {POWER:.0%} power: {abs(reading.detectable):.3g}")
    return parts[0] + (f" ({'; '.join(detail)})" if detail else "")


def _decision_lines(decision: Decision, heading: bool) -> list[str]:
    lines = []
    if heading:
        reason = f" ({decision.reason})" if decision.reason else ""
        lines += [f"On the {decision.statistic}: **{decision.verdict}**{reason}", ""]
    lines += [_reading_line(r) for r in decision.readings] or ["- nothing in this config measures it"]
    return lines + [""]


def render(verdicts: Sequence[Verdict], under_lenses: Mapping[str, Sequence[Verdict]] | None = None,
           tasks: Mapping[str, Any] | None = None) -> str:
    """The page: the introduction, a summary table, then each claim with its pieces per statistic,
    the claims under the other lenses, and how the scored tasks were chosen."""
    lines = [INTRODUCTION, "| claim | " + " | ".join(_statistics(verdicts)) + " | verdict |",
             "|---" * (len(_statistics(verdicts)) + 2) + "|"]
    for verdict in verdicts:
        cells = {d.statistic: d.verdict for d in verdict.decisions}
        lines.append(f"| {verdict.claim} | " + " | ".join(cells.get(s, "") for s in _statistics(verdicts))
                     + f" | **{verdict.verdict}** |")
    for verdict in verdicts:
        reason = f" ({verdict.reason})" if verdict.reason else ""
        lines += ["", f"## {verdict.claim}: **{verdict.verdict}**{reason}", ""]
        several = len(verdict.decisions) > 1
        for decision in verdict.decisions:
            lines += _decision_lines(decision, several)
        lines += [f"- note: {note}" for note in verdict.notes]
    if under_lenses:
        lines += _lens_table(under_lenses)
    if tasks:
        lines += ["", "## The scored tasks", "", tasks.get("sentence", "")]
    return "\n".join(lines).rstrip() + "\n"


def _statistics(verdicts: Sequence[Verdict]) -> list[str]:
    return list(dict.fromkeys(d.statistic for v in verdicts for d in v.decisions))


NO_SIGN_WORDS = {AGREES: "rises", DISAGREES: "falls", INCONCLUSIVE: "no clear change"}
"""How a lens with no predicted sign reads a directional verdict: ``claims_under_lenses`` orients
it so that "agrees" is the lens rising with size, or falling with training."""


def _lens_table(under_lenses: Mapping[str, Sequence[Verdict]]) -> list[str]:
    """One row per lens, one column per claim the lenses read; a lens with no predicted sign says
    which way it moves ("rises", "falls" along the claim's axis: size, or training) rather than
    agrees or disagrees."""
    titles = list(under_lenses)
    claims = [v.claim for v in under_lenses[titles[0]]]
    by_title = {lens.title: lens for lens in LENSES}
    lines = ["", "## Each condensation claim under each lens", "",
             "The same claims with each lens of `condensation.lenses` over the same layers in place of the cosine, its",
             "interval a delete-a-group jackknife over groups of sequences and over seeds (t with G - 1 degrees "
             "of freedom, or the seeds' if fewer);",
             "IsoScore* and the effective rank fall as condensation rises, so their predicted signs are flipped.",
             "The last lenses do not measure condensation (no predicted sign, marked -): their cells say which way",
             "they move with size (a larger model) or with training (initialisation -> trained), or the",
             "distillation verdict on the share of the gap. The evidence behind each cell is in findings.json.", "",
             "| lens | " + " | ".join(claim.split(" (")[0] for claim in claims) + " |",
             "|---" * (len(claims) + 1) + "|"]
    for title in titles:
        lens = by_title.get(title)
        no_sign = lens is not None and not lens.condensed
        cells = []
        for claim, verdict in zip(claims, under_lenses[title]):
            word = verdict.verdict
            if no_sign and claim != DISTILLATION:
                word = NO_SIGN_WORDS.get(word, word)
                if word in ("rises", "falls"):
                    word = (f"{word} with size" if claim == SIZE
                            else {"rises": "falls with training", "falls": "rises with training"}[word])
            cells.append(word)
        lines.append(f"| {title}{' (-)' if no_sign else ''} | " + " | ".join(cells) + " |")
    return lines


def _interval(piece: EvidencePiece) -> tuple[float, float, float]:
    """The interval a piece is judged by, with its level: Fieller's for a share (an equivalence
    piece), else the estimate's t interval at the reported level."""
    if piece.ratio is not None:
        return piece.ratio.ci_low, piece.ratio.ci_high, piece.ratio.confidence
    return (*piece.estimate.interval(), CONFIDENCE)


def _reading_json(reading: Reading) -> dict[str, Any]:
    result = reading.piece.estimate
    low, high, level = _interval(reading.piece)
    return {
        "piece": reading.piece.name, "text": reading.piece.text, "counted": reading.counted, "verdict": reading.verdict,
        "reason": reading.reason, "estimate": result.estimate, "se": result.se, "dof": result.dof,
        "seed_se": result.seed_se, "unit_se": result.unit_se, "ci_low": low, "ci_high": high, "ci_level": level,
        "covers": result.covers, "saturated": bool(result.saturated),
        "p": result.p_value, "p_judged": reading.p_value, "level": reading.level, "detectable": reading.detectable,
        "margin": reading.piece.margin, "per_seed": list(result.per_seed),
        **({"share_ci_low": reading.piece.ratio.ci_low, "share_ci_high": reading.piece.ratio.ci_high}
           if reading.piece.ratio else {}),
    }


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    return {"claim": verdict.claim, "verdict": verdict.verdict, "reason": verdict.reason, "notes": verdict.notes,
            "decisions": [{"statistic": d.statistic, "verdict": d.verdict, "reason": d.reason, "rule": d.rule,
                           "pieces": [_reading_json(r) for r in d.readings]} for d in verdict.decisions]}


STATISTIC_KEYS = {"deeper-layer cosine": "deep_cos", "Spearman rho": "rho", "accuracy": "accuracy",
                  "validation loss": "val_loss"}
"""Each deciding statistic's short name in the summary."""


def summary_json(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """The findings' main numbers, a few per claim, for `dvc metrics diff` and `dvc exp show`:
    each claim's verdict and, per statistic, its first counted piece (the size slope, the share of
    the gap distillation closes, Table 2's difference, ...): estimate and the interval it is judged by
    (95 %; Fieller's 90 % for a share)."""
    summary: dict[str, Any] = {}
    for verdict in verdicts:
        claim: dict[str, Any] = {"verdict": verdict.verdict}
        for decision in verdict.decisions:
            counted = [reading for reading in decision.readings if reading.counted]
            if not counted:
                continue
            piece = counted[0].piece
            low, high, _ = _interval(piece)
            numbers = {"estimate": piece.estimate.estimate, "ci_low": low, "ci_high": high}
            if piece.ratio is not None:
                numbers |= {"share": piece.ratio.estimate, "share_ci_low": piece.ratio.ci_low,
                            "share_ci_high": piece.ratio.ci_high}
            # unmeasured (NaN) as null: DVC counts NaN against NaN as a change
            numbers = {name: value if math.isfinite(value) else None for name, value in numbers.items()}
            claim[STATISTIC_KEYS.get(decision.statistic, decision.statistic)] = {"piece": piece.name, **numbers}
        summary[CLAIM_KEYS.get(verdict.claim, verdict.claim)] = claim
    return summary


STUDY_TABLES = {"midtrain": "table2", "scratch": "table4"}
"""The score table each study's runs are compared in (the findings read both)."""


def counted_tasks(tasks: Sequence[str], counted: Sequence[str] | str | None,
                  tables: Mapping[str, pd.DataFrame] | None = None) -> dict[str, Any]:
    """Which scored tasks the averages and tests read (``evaluation.counted_tasks``, else every
    task), with the page's sentence saying so. Under the rule ``above_chance`` each score table
    chose its own (its ``counted_tasks`` column): ``counted`` is then ``{study: tasks}`` by
    :data:`STUDY_TABLES`."""
    if counted == ABOVE_CHANCE:
        chosen = {study: table_counted(tables or {}, name, tasks) for study, name in STUDY_TABLES.items()
                  if name in (tables or {})}
        listed = "; ".join(f"{STUDY_TABLES[study]} ({study}): {', '.join(found)}" for study, found in chosen.items())
        sentence = (f"Averages and tests read, in each score table, the tasks its runs answer above chance pooled "
                    f"over every run (evaluation.counted_tasks: {ABOVE_CHANCE}, a rule that reads no method's label, "
                    f"so it cannot favour one): {listed or 'no score table'}. Each table's caption names the tasks "
                    "left out.")
        return {"counted": chosen, "sentence": sentence}
    chosen = list(counted) if counted else list(tasks)
    left_out = [task for task in tasks if task not in chosen]
    sentence = ""
    if tasks:
        which = f"the counted tasks {', '.join(chosen)}" if counted else f"every scored task ({', '.join(chosen)})"
        sentence = (f"Averages and tests read {which}, as evaluation.counted_tasks fixes them before any compared "
                    "row is seen" + (f"; {', '.join(left_out)} shown but not counted." if left_out else "."))
    return {"counted": chosen, "sentence": sentence}


def table_counted(tables: Mapping[str, pd.DataFrame], name: str, tasks: Sequence[str]) -> list[str]:
    """The tasks score table ``name`` counted (its ``counted_tasks`` column), else every task."""
    table = tables.get(name)
    if table is None or COUNTED_COLUMN not in table or table.empty:
        return list(tasks)
    return str(table[COUNTED_COLUMN].iloc[0]).split(COUNTED_SEPARATOR)


def write_findings(verdicts: Sequence[Verdict], markdown_path: str | os.PathLike, json_path: str | os.PathLike,
                   summary_path: str | os.PathLike, under_lenses: Mapping[str, Sequence[Verdict]] | None = None,
                   tasks: Mapping[str, Any] | None = None) -> None:
    write_text(markdown_path, render(verdicts, under_lenses, tasks))
    write_json(json_path, {"findings": [verdict_json(v) for v in verdicts],
                           "under_lenses": {lens: [verdict_json(v) for v in found]
                                            for lens, found in (under_lenses or {}).items()},
                           "tasks": dict(tasks or {})})
    write_json(summary_path, summary_json(verdicts))
