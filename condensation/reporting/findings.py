"""The paper's claims, checked against what a run measured: a findings page computed from the
results, never written by hand.

Every piece of evidence is a difference (or a slope) with an interval that covers the training
runs as well as the text sequences or test items (:mod:`condensation.reporting.statistics`), and
reads as:

- ``agrees``: the interval excludes zero in the paper's direction (for scores: the Holm-adjusted p
  is below 0.05 as well);
- ``disagrees``: it excludes zero the other way;
- ``inconclusive``: it holds zero, or the training noise is unmeasured (one run where a training
  here could have drawn another), said in words. Overlap is never agreement.

A claim's pieces are decided together (their p-values Holm-adjusted, so more evidence is not more
chances); the claim takes the direction its decided pieces share when none is decided the other
way, and is inconclusive when they contradict or none is decided, with the reason. ``cannot test``: the config measures nothing that bears
on it. Condensation is the deeper layers' mean cosine (``last_half``); Spearman rho and Kendall
tau (the paper's own statistics) are shown beside it, and the page says which one a verdict reads.

Replicates are rows with the same label: the same model trained (or initialised) with another
seed. A model named in ``drawn`` was drawn here (pre-trained or initialised by this workflow), so
a single run of it leaves its training noise unmeasured; any other model (a published
checkpoint) is one given object, a fixed reference.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Collection, Mapping, Sequence

import numpy as np
import pandas as pd

from condensation.reporting.condensation_effects import run_arm
from condensation.reporting.statistics import (
    Arm,
    SeedAwareEstimate,
    contrast,
    difference,
    holm,
)
from condensation.runtime.io import write_json, write_text

AGREES, DISAGREES, INCONCLUSIVE, UNTESTED = "agrees", "disagrees", "inconclusive", "cannot test"
ALPHA = 0.05


@dataclass(frozen=True)
class Evidence:
    text: str
    verdict: str
    reason: str = ""


@dataclass(frozen=True)
class Finding:
    claim: str
    verdict: str
    evidence: list[str]
    """One line per piece of evidence, numbers with their intervals and the verdict they give."""
    reason: str = ""
    notes: list[str] = field(default_factory=list)


def read(result: SeedAwareEstimate, direction: int, p_adjusted: float | None = None) -> tuple[str, str]:
    """The verdict of one seed-aware result on a claim that predicts the sign ``direction`` (+1
    or -1), and the reason when it is inconclusive."""
    if not result.measured:
        return INCONCLUSIVE, result.unmeasured
    if not (result.ci_low > 0 or result.ci_high < 0):
        return INCONCLUSIVE, "the interval holds zero"
    if p_adjusted is not None and not p_adjusted < ALPHA:
        return INCONCLUSIVE, f"Holm-adjusted p = {p_adjusted:.2g}, not below {ALPHA:g}"
    return (AGREES, "") if (result.ci_low > 0) == (direction > 0) else (DISAGREES, "")


def combine(claim: str, evidence: Sequence[Evidence], notes: Sequence[str] = ()) -> Finding:
    """A claim's verdict from its pieces of evidence: the direction its decided pieces share, when
    none is decided the other way (undecided pieces are counted in the reason); inconclusive when
    decided pieces contradict each other, or none is decided. Each piece was decided after Holm's
    adjustment over the claim's pieces (:func:`decide`), so more evidence is not more chances."""
    lines = [f"{e.text}: **{e.verdict}**" + (f" ({e.reason})" if e.reason else "") for e in evidence]
    if not evidence:
        return Finding(claim, UNTESTED, lines, "", list(notes))
    decided = {e.verdict for e in evidence if e.verdict in (AGREES, DISAGREES)}
    undecided = sum(e.verdict == INCONCLUSIVE for e in evidence)
    if len(decided) == 1:
        verdict = decided.pop()
        reason = f"{undecided} of {len(evidence)} pieces undecided" if undecided else ""
        return Finding(claim, verdict, lines, reason, list(notes))
    if decided:
        counts = ", ".join(f"{sum(e.verdict == v for e in evidence)} {v}" for v in (AGREES, DISAGREES, INCONCLUSIVE)
                           if any(e.verdict == v for e in evidence))
        return Finding(claim, INCONCLUSIVE, lines, f"the evidence splits: {counts}", list(notes))
    reasons = sorted({e.reason for e in evidence if e.reason})
    return Finding(claim, INCONCLUSIVE, lines, "; ".join(reasons), list(notes))


def decide(results: Sequence[SeedAwareEstimate], direction: int) -> list[tuple[str, str]]:
    """:func:`read` for each of a claim's pieces, their p-values Holm-adjusted together (an
    interval excluding zero decides a piece only when its adjusted p is below ALPHA too)."""
    adjusted = holm([r.p_value if r.measured else math.nan for r in results])
    return [read(r, direction, p if r.measured else None) for r, p in zip(results, adjusted)]


# --------------------------------------------------------------------------------------------
# Arms from the tables
# --------------------------------------------------------------------------------------------


def model_arm(rows: pd.DataFrame, label: str, drawn: Collection[str], column: str = "last_half") -> Arm:
    """The models of one label as an arm: a published model's one row is a fixed reference, rows
    of models drawn here are runs whose spread is training noise. A model listed twice (a published
    model paired twice) counts once."""
    rows = rows.drop_duplicates("model")
    return run_arm(rows, column, label, fixed=rows["model"].iloc[0] not in drawn)


def _interval(result: SeedAwareEstimate, digits: int = 3) -> str:
    if not result.measured:
        return f"{result.estimate:+.{digits}f}"
    text = f"{result.estimate:+.{digits}f} [{result.ci_low:+.{digits}f}, {result.ci_high:+.{digits}f}]"
    if result.per_seed and len(result.per_seed) > 1:
        text += " (per seed " + ", ".join(f"{d:+.{digits}f}" for d in result.per_seed) + ")"
    return text


def _means(rows: pd.DataFrame, column: str) -> str:
    values = rows.drop_duplicates("model")[column] if "model" in rows else rows[column]
    return " / ".join(f"{v:.3f}" for v in values)


# --------------------------------------------------------------------------------------------
# The claims
# --------------------------------------------------------------------------------------------


def size_evidence(name: str, table: pd.DataFrame, drawn: Collection[str],
                  column: str = "last_half") -> tuple[str, SeedAwareEstimate] | None:
    """The trend of ``column`` (the deeper layers' cosine by default, or another lens) over
    log10(parameters) across every size of one family (replicates: rows with the same label),
    seed-aware; the claim predicts a negative slope of condensation."""
    groups = [(label, rows) for label, rows in table.groupby("label", sort=False)]
    if len(groups) < 2 or column not in table:
        return None
    x = np.log10([float(rows["num_parameters"].iloc[0]) for _, rows in groups])
    if np.ptp(x) == 0:
        nothing = SeedAwareEstimate(math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan,
                                    unmeasured="every model has the same size: no size to compare")
        return f"{name}: every model has the same size", nothing
    c = (x - x.mean()) / ((x - x.mean()) ** 2).sum()
    slope = contrast([model_arm(rows, label, drawn, column) for label, rows in groups], c)
    rho = column == "last_half"
    sizes = "; ".join(f"{label} {_means(rows, column)}" + (f" (rho {_means(rows, 'spearman_rho')})" if rho else "")
                      for label, rows in groups)
    what = "deeper-layer cosine" if rho else column
    text = (f"{name}: {what} per size ({len(groups)} sizes; runs per size {'/'.join(str(len(r)) for _, r in groups)}) "
            f"{sizes}; slope per decade of parameters {_interval(slope)}")
    return text, slope


def size_claim(trend_tables: Mapping[str, pd.DataFrame], uncounted: Collection[str] = (),
               drawn: Collection[str] = (), lens=None) -> Finding:
    """A larger (or wider) model condenses less: a trend across all the sizes of each family, on
    each dataset. The datasets measure the same models again, so they are not independent
    evidence: the claim needs every one to agree. Groups of unrelated models (``uncounted``) are
    listed, not counted. With ``lens`` (of :mod:`condensation.lenses`): the same claim on that
    lens's deeper-half value with its jackknife interval, its own numbers shown, the predicted sign
    of the slope following the lens (IsoScore* and the effective rank rise as condensation falls)."""
    pieces, notes = [], []
    for name, table in trend_tables.items():
        if name in uncounted:
            notes.append(f"{name}: not counted (its models differ in more than size: compares_size is false)")
            continue
        found = size_evidence(name, table, drawn, "last_half" if lens is None else lens.name)
        if found is not None:
            pieces.append(found)
    if lens is None:
        return combine("A larger or wider model condenses less (Fig. 2, S1)", decided(pieces, -1), notes)
    arrow = "lower" if lens.condensed > 0 else "higher"
    return combine(f"The size ordering under {lens.title} ({arrow} in larger models)", decided(pieces, -lens.condensed))


def oriented(table: pd.DataFrame, lens) -> pd.DataFrame:
    """``table`` with a lens in place of the deeper-layer cosine, signed so that higher is more
    condensed (IsoScore* and the effective rank negated), so that every claim reads it as it
    reads the cosine. Rows without the lens are dropped."""
    if lens.name not in table:
        return table.iloc[0:0]
    sign = float(lens.condensed)
    low, high = table[f"{lens.name}_low"] * sign, table[f"{lens.name}_high"] * sign
    return table.assign(last_half=table[lens.name] * sign, last_half_low=np.minimum(low, high),
                        last_half_high=np.maximum(low, high)).dropna(subset=["last_half"])


def claims_under_lenses(
    trend_tables: Mapping[str, pd.DataFrame], pairs: Mapping[str, tuple[Sequence[str], pd.DataFrame]],
    series_tables: Mapping[str, pd.DataFrame], uncounted: Collection[str] = (), drawn: Collection[str] = (),
    series_labels: Mapping[str, str] | None = None, drawn_series: Collection[str] = (),
) -> dict[str, list[Finding]]:
    """Each condensation claim again under each lens of :mod:`condensation.lenses`: lens title ->
    the size claim on that lens (:func:`size_claim`), then the pair and series claims read on that lens
    (``oriented``: higher is more condensed, so the numbers of IsoScore* and the effective rank
    appear negated there). The dispersion claims read the training probe, which measures the
    cosine only."""
    from condensation.lenses import LENSES

    under = {}
    for lens in LENSES:
        found = [size_claim(trend_tables, uncounted, drawn, lens)]
        found += pair_claims({n: (labels, oriented(t, lens)) for n, (labels, t) in pairs.items()}, drawn)
        found.append(series_claim({n: oriented(t, lens) for n, t in series_tables.items()}, series_labels, drawn_series))
        under[lens.title] = found
    return under


def _pair_kind(labels: Sequence[str]) -> str | None:
    return "distill" if "distill" in labels[1].lower() else "init" if "init" in labels[0].lower() else None


def pair_claims(pairs: Mapping[str, tuple[Sequence[str], pd.DataFrame]], drawn: Collection[str] = ()) -> list[Finding]:
    """Distillation does not remove condensation (pairs labelled distilled: the distilled member
    is not less condensed), and condensation is highest at initialisation (pairs labelled init...:
    the first member, at initialisation, is the more condensed). Pairs whose members share labels
    are replicates of one comparison. A pair's reference row (``member`` 2, e.g. the teacher of
    a distilled student) is shown beside the evidence, not counted in it."""
    distill, init, distill_notes, init_labels = [], [], [], []
    for name, (labels, table) in pairs.items():
        kind = _pair_kind(labels)
        first, second = table[table["member"] == 0].reset_index(drop=True), table[table["member"] == 1].reset_index(drop=True)
        reference = table[table["member"] == 2].reset_index(drop=True)
        keys = pd.Series(list(zip(first["label"], second["label"])))
        for (label_a, label_b) in dict.fromkeys(keys):
            rows_a, rows_b = first[(keys == (label_a, label_b)).to_numpy()], second[(keys == (label_a, label_b)).to_numpy()]
            # the difference the claim predicts the sign of: distilled (second) minus the other
            # (the claim holds unless it is lower), else first minus second (init above trained)
            order = ((rows_b, label_b), (rows_a, label_a)) if kind == "distill" else ((rows_a, label_a), (rows_b, label_b))
            result = difference(*(model_arm(rows, label, drawn) for rows, label in order))
            rho = difference(*(model_arm(rows, label, drawn, "spearman_rho") for rows, label in order))
            text = (f"{name}: {label_a} {_means(rows_a, 'last_half')} vs {label_b} {_means(rows_b, 'last_half')}, "
                    f"{order[0][1]} - {order[1][1]} {_interval(result)}; Spearman rho {_means(rows_a, 'spearman_rho')} vs "
                    f"{_means(rows_b, 'spearman_rho')} ({_interval(rho, 2)})")
            if kind == "distill":
                if not reference.empty:
                    rows_r = reference[(keys == (label_a, label_b)).to_numpy()]
                    label_r = labels[2] if len(labels) > 2 else "reference"
                    text += f"; {label_r} {', '.join(dict.fromkeys(rows_r['label']))} {_means(rows_r, 'last_half')}"
                    to_teacher = difference(model_arm(rows_b, label_b, drawn), model_arm(rows_r, label_r, drawn))
                    distill_notes.append(f"{name}: {label_b} - {label_r} {_interval(to_teacher)} (shown, not counted: "
                                         f"how much of the {label_r}'s condensation the {label_b} model has)")
                distill.append((text, result))
            elif kind == "init":
                init.append((text, result))
                init_labels.append((label_a, float(rows_a["last_half"].mean()), float(rows_b["last_half"].mean())))
    init_evidence = decided(init, +1)
    notes = [width_note(*labels) for labels, e in zip(init_labels, init_evidence) if e.verdict == DISAGREES]
    return [
        combine("Distillation does not remove condensation (Fig. 3)", decided(distill, +1), distill_notes),
        combine("Condensation is highest at initialisation and falls with training (Fig. 4, pairs; verdict on "
                "the deeper-layer cosine, rho shown)", init_evidence, notes),
    ]


def decided(pieces: Sequence[tuple[str, SeedAwareEstimate]], direction: int) -> list[Evidence]:
    """Each piece's text with its verdict, decided together (:func:`decide`)."""
    verdicts = decide([result for _, result in pieces], direction)
    return [Evidence(text, verdict, reason) for (text, _), (verdict, reason) in zip(pieces, verdicts)]


def width_note(label: str, at_init: float, trained: float) -> str:
    """Why a model can start less condensed than it ends: narrow GPT2-style initialisation."""
    return (
        f"{label}: {at_init:.3f} at initialisation against {trained:.3f} trained. GPT2's initialisation "
        "(std 0.02) lets a narrow model's blocks write little into the residual stream, so its tokens start "
        "nearly unrelated and training raises their cosine; a full-width architecture at initialisation (a pair "
        "of this claim, where the config has one) shows where the claim applies."
    )


def series_claim(series_tables: Mapping[str, pd.DataFrame], labels: Mapping[str, str] | None = None,
                 drawn_series: Collection[str] = ()) -> Finding:
    """Condensation is highest at initialisation and falls over (pre-)training: the first
    checkpoint of each run against its last, paired by run, series of the same group (``labels``:
    series -> group; the workflow groups the runs of one family pre-trained here, every width and
    seed, as draws of one procedure, whose spread then holds the widths' differences too). ``drawn_series`` are runs of this workflow
    (else one given run). A checkpoint between them that peaks is named, with whether condensation
    falls from that peak to the end."""
    labels = dict(labels or {})
    groups: dict[str, list[str]] = {}
    for name in series_tables:
        groups.setdefault(labels.get(name, name), []).append(name)
    pieces = []
    for label, names in groups.items():
        firsts = pd.DataFrame([series_tables[n].iloc[0] for n in names])
        lasts = pd.DataFrame([series_tables[n].iloc[-1] for n in names])
        fixed = not any(n in drawn_series for n in names)
        result = difference(run_arm(firsts, "last_half", label, fixed), run_arm(lasts, "last_half", label, fixed))
        text = (f"{label} ({len(names)} run{'s' if len(names) > 1 else ''}): {firsts['checkpoint'].iloc[0]} "
                f"{_means(firsts, 'last_half')} (rho {_means(firsts, 'spearman_rho')}) -> "
                f"{lasts['checkpoint'].iloc[0]} {_means(lasts, 'last_half')} (rho {_means(lasts, 'spearman_rho')}), "
                f"first - last {_interval(result)}{_peaks(series_tables, names)}")
        pieces.append((text, result))
    return combine("Condensation is highest at initialisation and falls over pre-training (Fig. 4; verdict on "
                   "the deeper-layer cosine, rho shown)", decided(pieces, +1))


def _peaks(series_tables: Mapping[str, pd.DataFrame], names: Sequence[str]) -> str:
    peaks = []
    for name in names:
        table = series_tables[name].reset_index(drop=True)
        peak = table["last_half"].idxmax()
        if peak not in (0, len(table) - 1):
            row, last = table.loc[peak], table.iloc[-1]
            peaks.append(f"{row['last_half']:.3f} at {row['checkpoint']} (then {last['last_half']:.3f} at the end)")
    return "; peak " + ", ".join(peaks) if peaks else ""


def dispersion_condensation_claim(effects: Mapping[str, pd.DataFrame], method: str = "dispersion") -> Finding:
    """Dispersion lowers condensation: its deeper-layer cosine against CE's at the last checkpoint,
    with the seed-aware interval of the effects table."""
    pieces = []
    for name, table in effects.items():
        rows = table[table["method"] == method]
        if rows.empty:
            continue
        last = rows.loc[rows["step"].idxmax()]
        result = _from_columns(last, "difference", "ci_low", "ci_high", "p", "per_seed",
                               unmeasured=f"{int(last['n_seeds'])} seed(s) of {method}: training noise unmeasured")
        text = (f"{name}, step {int(last['step'])}: {method} {last['mean']:.3f} vs CE {last['reference_mean']:.3f} over "
                f"{int(last['n_seeds'])} seeds, difference {_interval(result)}, p = {last['p']:.2g}")
        pieces.append((text, result))
    return combine("The dispersion loss lowers condensation (Fig. 6)", decided(pieces, -1))


def _from_columns(row: Mapping, estimate: str, low: str, high: str, p: str, per_seed: str, unmeasured: str) -> SeedAwareEstimate:
    seeds = row.get(per_seed)
    values = tuple(float(v) for v in str(seeds).split(";")) if isinstance(seeds, str) and seeds else ()
    measured = pd.notna(row.get(low)) and pd.notna(row.get(high))
    return SeedAwareEstimate(
        float(row[estimate]), float(row[low]) if measured else math.nan, float(row[high]) if measured else math.nan,
        float(row[p]) if measured else math.nan, math.nan, math.nan, math.nan, values, "" if measured else unmeasured,
    )


def dispersion_score_claim(tables: Mapping[str, pd.DataFrame], method: str = "dispersion") -> Finding:
    """Dispersion improves scores: its difference from CE with the seed-aware interval, the
    Holm-adjusted p of its table (what :func:`decide` adjusts again over the claim's pieces), and
    the item-only interval beside them."""
    pieces = []
    for name, table in tables.items():
        for row in table[table["method"] == method].to_dict("records"):
            result = _from_columns(row, "diff_vs_ce", "ci_low_vs_ce", "ci_high_vs_ce", "p_vs_ce", "per_seed_vs_ce",
                                   unmeasured=f"{int(row['n_seeds'])} seed(s): training noise unmeasured")
            p_holm = row.get("p_holm_vs_ce")
            if result.measured and pd.notna(p_holm):
                result = replace(result, p_value=float(p_holm))
            text = (f"{name}, {row['model']}: {method} - CE = {_interval(result, 2)} points over {int(row['n_seeds'])} "
                    f"seeds, p = {row['p_vs_ce']:.2g}, Holm p = {p_holm:.2g}; items only (runs taken as fixed) "
                    f"[{row['items_ci_low_vs_ce']:+.2f}, {row['items_ci_high_vs_ce']:+.2f}], p = {row['items_p_vs_ce']:.2g} "
                    f"over {int(row['n_items_vs_ce'])} item pairs")
            pieces.append((text, result))
    return combine("The dispersion loss improves downstream scores (Tables 2, 4)", decided(pieces, +1))


# --------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------


def render(findings: Sequence[Finding], chance: Mapping[str, Mapping] | None = None,
           under_lenses: Mapping[str, Sequence[Finding]] | None = None) -> str:
    """The findings page as Markdown; ``under_lenses`` (:func:`claims_under_lenses`) adds the size
    ordering under each lens, with its evidence, and a table of each condensation claim's verdict
    under each lens (the claims in ``findings`` of the same names give the cosine's column)."""
    lines = [
        "# What this run finds, claim by claim",
        "",
        "Computed from the results of this run. Each piece of evidence is a difference (or a slope over",
        "sizes) with a 95 % interval that covers the training runs (a t interval over seeds) and the text",
        "sequences or test items; agrees / disagrees: the interval excludes zero in the paper's direction /",
        "the other way, and its p, Holm-adjusted over the claim's pieces (scores: also over the table), is",
        "below 0.05; inconclusive: otherwise, or a single run leaves the training noise unmeasured. A claim",
        "takes the direction its decided pieces share when none contradicts them.",
        "Cosines: the deeper layers' mean pairwise cosine. The other lenses (anisotropy, the within-sequence",
        "excess over it, IsoScore*, effective rank, PC1 share; README \"Measure a model\") read the same layers",
        "with a jackknife interval over groups of sequences.",
    ]
    sized = [found[0] for found in (under_lenses or {}).values()]
    for finding in [*findings, *sized]:
        reason = f" ({finding.reason})" if finding.reason else ""
        lines += ["", f"## {finding.claim}: **{finding.verdict}**{reason}", ""]
        lines += [f"- {line}" for line in finding.evidence] or ["- nothing in this config measures it"]
        lines += [f"- note: {note}" for note in finding.notes]
    if under_lenses:
        lines += _lens_table(findings, under_lenses)
    flagged = [task for task, flag in (chance or {}).items() if flag.get("at_chance")]
    if flagged:
        lines += ["", f"Tasks at chance for every model (left out of averages and tests): {', '.join(flagged)}."]
    return "\n".join(lines) + "\n"


def _lens_table(findings: Sequence[Finding], under_lenses: Mapping[str, Sequence[Finding]]) -> list[str]:
    """Claims as rows, the cosine and each lens as columns, a verdict per cell."""
    lenses = list(under_lenses)
    first = under_lenses[lenses[0]]
    # the size claim is titled per lens; the others keep the cosine's titles
    claims = [next(f.claim for f in findings if f.claim.startswith("A larger"))] + [f.claim for f in first[1:]]
    by_claim = {f.claim: f.verdict for f in findings}
    lines = ["", "## Each condensation claim under each lens", "",
             "The same claims, the deeper-layer cosine replaced by each lens over the same layers (its interval a",
             "jackknife over groups of sequences; IsoScore* and the effective rank counted with their sign flipped,",
             "since they fall as condensation rises). The evidence behind each cell is in findings.json.", "",
             "| claim | mean cosine | " + " | ".join(lenses) + " |", "|---" * (len(lenses) + 2) + "|"]
    for index, claim in enumerate(claims):
        cells = [under_lenses[lens][index].verdict for lens in lenses]
        lines.append(f"| {claim.split(' (')[0]} | {by_claim.get(claim, '')} | " + " | ".join(cells) + " |")
    return lines


def write_findings(findings: Sequence[Finding], markdown_path: str | os.PathLike, json_path: str | os.PathLike,
                   chance: Mapping[str, Mapping] | None = None,
                   under_lenses: Mapping[str, Sequence[Finding]] | None = None) -> None:
    write_text(markdown_path, render(findings, chance, under_lenses))
    write_json(json_path, {"findings": [asdict(f) for f in findings], "chance_flags": dict(chance or {}),
                           "under_lenses": {lens: [asdict(f) for f in found] for lens, found in (under_lenses or {}).items()}})


def read_tables(paths: Sequence[str | os.PathLike]) -> dict[str, pd.DataFrame]:
    """CSV tables keyed by their file's stem."""
    return {Path(path).stem: pd.read_csv(path) for path in paths}
