"""The paper's claims, checked against what a run measured: a findings page computed from the
results, never written by hand.

For each claim, the evidence the config produced (with its intervals) and a verdict:
``agrees`` (the interval or the screen shows the claimed direction), ``disagrees`` (it shows the
opposite), ``inconclusive`` (the interval holds zero, or the effect is within the seed spread), or
``cannot test`` (the config measures nothing that bears on it, e.g. no distilled models offline).
Condensation is read as the deeper layers' mean cosine (``last_half``, with its bootstrap interval
over sequences) beside Spearman rho, since rho saturates at 1 for models whose trend is monotone.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Collection, Iterable, Mapping, Sequence

import pandas as pd

from condensation.runtime.io import write_json, write_text

AGREES, DISAGREES, INCONCLUSIVE, UNTESTED = "agrees", "disagrees", "inconclusive", "cannot test"


@dataclass(frozen=True)
class Finding:
    claim: str
    verdict: str
    evidence: list[str]
    """One line per piece of evidence, numbers with their intervals."""


def _interval(row: Mapping, column: str = "last_half") -> tuple[float, float, float]:
    return float(row[column]), float(row.get(f"{column}_low", math.nan)), float(row.get(f"{column}_high", math.nan))


def _cos(value: float, low: float, high: float) -> str:
    return f"{value:.3f} [{low:.3f}, {high:.3f}]" if math.isfinite(low) else f"{value:.3f}"


def _vote(directions: Iterable[int]) -> str:
    """+1 claimed direction and outside the noise, -1 opposite and outside it, 0 within it."""
    directions = list(directions)
    if not directions:
        return UNTESTED
    if all(d > 0 for d in directions):
        return AGREES
    if all(d < 0 for d in directions):
        return DISAGREES
    return INCONCLUSIVE


def _lower(first: tuple[float, float, float], second: tuple[float, float, float]) -> int:
    """Whether ``second`` lies below ``first`` beyond both intervals (+1), above (-1), or neither."""
    if second[2] < first[1]:
        return 1
    if second[1] > first[2]:
        return -1
    return 0


def size_claim(trend_tables: Mapping[str, pd.DataFrame], uncounted: Collection[str] = ()) -> Finding:
    """A larger (or wider) model condenses less: the largest model of each family against the
    smallest, on the deeper layers' mean cosine. Tables named in ``uncounted`` (groups of
    unrelated models, ``compares_size: false``) are listed, not counted."""
    evidence, votes = [], []
    for name, table in trend_tables.items():
        if name in uncounted:
            evidence.append(f"{name}: not counted (its models differ in more than size: compares_size is false)")
            continue
        if len(table) < 2:
            continue
        small, large = table.iloc[0], table.iloc[-1]
        vote = _lower(_interval(small), _interval(large))
        votes.append(vote)
        evidence.append(
            f"{name}: deeper-layer mean cosine {_cos(*_interval(small))} for {small['label']}, "
            f"{_cos(*_interval(large))} for {large['label']}; Spearman rho {small['spearman_rho']:.2f} -> "
            f"{large['spearman_rho']:.2f}"
        )
    return Finding("A larger or wider model condenses less (Fig. 2, S1)", _vote(votes), evidence)


def pair_claims(pairs: Mapping[str, tuple[Sequence[str], pd.DataFrame]]) -> list[Finding]:
    """Distillation does not remove condensation (pairs labelled distilled), and training lowers
    the condensation a model has at initialisation (pairs labelled init...)."""
    distill, init = [], []
    for name, (labels, table) in pairs.items():
        kind = "distill" if "distill" in labels[1].lower() else "init" if "init" in labels[0].lower() else None
        for first, second in zip(table[table["member"] == 0].itertuples(), table[table["member"] == 1].itertuples()):
            a, b = _interval(first._asdict()), _interval(second._asdict())
            line = f"{name}: {first.label} {_cos(*a)} vs {second.label} {_cos(*b)}"
            if kind == "distill":  # the claim: the distilled member is not clearly less condensed
                distill.append((1 if _lower(a, b) <= 0 else -1, line))
            elif kind == "init":
                init.append((_lower(a, b), line))
    return [
        Finding("Distillation does not remove condensation (Fig. 3)", _vote(v for v, _ in distill), [e for _, e in distill]),
        Finding("Condensation is highest at initialisation and falls with training (Fig. 4, pairs)",
                _vote(v for v, _ in init), [e for _, e in init]),
    ]


def series_claim(series_tables: Mapping[str, pd.DataFrame]) -> Finding:
    """Condensation is highest at initialisation and falls over (pre-)training: the first
    checkpoint of each series against the last. Where a checkpoint between them peaks, the
    evidence also says whether condensation falls from that peak to the end (it does in the toys,
    whose small random initialisation starts nearly uncondensed)."""
    evidence, votes = [], []
    for name, table in series_tables.items():
        first, last = table.iloc[0], table.iloc[-1]
        votes.append(_lower(_interval(first), _interval(last)))
        line = (
            f"{name}: {first['checkpoint']} {_cos(*_interval(first))} (rho {first['spearman_rho']:.2f}) -> "
            f"{last['checkpoint']} {_cos(*_interval(last))} (rho {last['spearman_rho']:.2f})"
        )
        peak = table.loc[table["last_half"].idxmax()]
        if peak.name not in (table.index[0], table.index[-1]):
            after = {1: "falls beyond both intervals", -1: "rises", 0: "stays within the intervals"}
            line += f"; peak {_cos(*_interval(peak))} at {peak['checkpoint']}, after which it {after[_lower(_interval(peak), _interval(last))]}"
        evidence.append(line)
    return Finding("Condensation is highest at initialisation and falls over pre-training (Fig. 4)", _vote(votes), evidence)


def dispersion_condensation_claim(effects: Mapping[str, pd.DataFrame], method: str = "dispersion") -> Finding:
    """Dispersion lowers condensation: its deeper-layer mean cosine against CE's at the last
    checkpoint, beyond the spread between seeds."""
    evidence, votes = [], []
    for name, table in effects.items():
        rows = table[table["method"] == method]
        if rows.empty:
            continue
        last = rows.loc[rows["step"].idxmax()]
        beyond = last["exceeds_seed_spread"]
        votes.append(0 if pd.isna(beyond) or not beyond else (1 if last["difference"] < 0 else -1))
        spread = (
            "one seed each: no seed spread to compare with" if pd.isna(last["pooled_std"])
            else f"pooled seed std {last['pooled_std']:.3f}, beyond the seed spread: {'yes' if beyond else 'no'}"
        )
        evidence.append(
            f"{name}, step {int(last['step'])}: {method} {last['mean']:.3f} vs CE {last['reference_mean']:.3f} "
            f"(difference {last['difference']:+.3f}, {spread})"
        )
    return Finding("The dispersion loss lowers condensation (Fig. 6)", _vote(votes), evidence)


def dispersion_score_claim(tables: Mapping[str, pd.DataFrame], method: str = "dispersion") -> Finding:
    """Dispersion improves scores: its item-level difference from CE with its 95 % interval."""
    evidence, votes = [], []
    for name, table in tables.items():
        for row in table[table["method"] == method].to_dict("records"):
            low, high = row["ci_low_vs_ce"], row["ci_high_vs_ce"]
            votes.append(1 if low > 0 else -1 if high < 0 else 0)
            evidence.append(
                f"{name}, {row['model']}: {method} - CE = {row['diff_vs_ce']:+.2f} points "
                f"[{low:+.2f}, {high:+.2f}], p = {row['p_vs_ce']:.3g} over {int(row['n_items_vs_ce'])} item pairs"
            )
    return Finding("The dispersion loss improves downstream scores (Tables 2, 4)", _vote(votes), evidence)


def render(findings: Sequence[Finding], chance: Mapping[str, Mapping] | None = None) -> str:
    """The findings page as Markdown."""
    lines = [
        "# What this run finds, claim by claim",
        "",
        "Computed from the results of this run; verdicts: agrees, disagrees, inconclusive (the",
        "interval holds zero or the effect is within the seed spread), cannot test (nothing in this",
        "config bears on the claim). Cosines are the deeper layers' mean with a 95 % bootstrap",
        "interval over sequences.",
    ]
    for finding in findings:
        lines += ["", f"## {finding.claim}: **{finding.verdict}**", ""]
        lines += [f"- {line}" for line in finding.evidence] or ["- nothing in this config measures it"]
    flagged = [task for task, flag in (chance or {}).items() if flag.get("at_chance")]
    if flagged:
        lines += ["", f"Tasks at chance for every model (scores on them say nothing): {', '.join(flagged)}."]
    return "\n".join(lines) + "\n"


def write_findings(findings: Sequence[Finding], markdown_path: str | os.PathLike, json_path: str | os.PathLike,
                   chance: Mapping[str, Mapping] | None = None) -> None:
    write_text(markdown_path, render(findings, chance))
    write_json(json_path, {"findings": [asdict(f) for f in findings], "chance_flags": dict(chance or {})})


def read_tables(paths: Sequence[str | os.PathLike]) -> dict[str, pd.DataFrame]:
    """CSV tables keyed by their file's stem."""
    return {Path(path).stem: pd.read_csv(path) for path in paths}
