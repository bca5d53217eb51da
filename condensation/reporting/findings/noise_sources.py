"""Where the training noise comes from: the spread of runs that vary one source at a time.

A suite like PolyPythia trains one size with full seeds (a seed sets both the initial weights and
the data order) and with runs that vary only the data order or only the initial weights. In a
family that groups them (``compares_size: false``; replicates share a label, one label per source),
each group's runs were measured on the same sequences, so their spread is what that source moves
(plus each run's own sampling of the sequences: the run x sequence interaction, about the same for
every group, shown as its share). Each group's variance against the first group's (the full seeds:
the family's first model) is a ratio of two sample variances, with the F interval of independent
normal runs: with three runs a source is known to within a wide factor, which the interval shows.
Shown on the findings page beside the size claim, not counted in any verdict: the paper makes no
claim about it.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from condensation.intervals import CONFIDENCE
from condensation.reporting.tables.profiles import STATISTICS, Profiles


def _group_values(profiles: Profiles, label: str, statistic: str) -> tuple[np.ndarray, float]:
    """The runs' values of a linear ``statistic`` and one run's interaction variance (the
    sequences' sampling variance of a run's deviation from the group mean, averaged over runs)."""
    rows = np.flatnonzero(profiles.rows["label"].to_numpy() == label)
    per_unit = np.array([STATISTICS[statistic].compute(profiles.layers[i]) for i in rows])  # [runs, sequences]
    values = per_unit.mean(axis=1)
    if len(rows) < 2:
        return values, math.nan
    deviations = per_unit - per_unit.mean(axis=0)
    interaction = float((deviations.var(axis=1, ddof=1) / per_unit.shape[1]).sum() / (len(rows) - 1))
    return values, interaction


def variance_ratio(first: np.ndarray, reference: np.ndarray) -> tuple[float, float, float]:
    """``var(first) / var(reference)`` (sample variances) and its ``CONFIDENCE`` F interval."""
    ratio = float(first.var(ddof=1) / reference.var(ddof=1))
    tail = (1 - CONFIDENCE) / 2
    dfs = (first.size - 1, reference.size - 1)
    return ratio, ratio / float(stats.f.isf(tail, *dfs)), ratio / float(stats.f.ppf(tail, *dfs))


def noise_source_line(family: str, profiles: Profiles, statistic: str = "last_half") -> str | None:
    """One line for a family whose labels group runs by the noise source they vary: each group's
    run SD, the interaction's share of its variance, and its variance against the first group's.
    None unless at least one group has two or more runs (a spread to show)."""
    rows = profiles.rows.drop_duplicates("model")
    profiles = profiles.subset(profiles.rows.index.isin(rows.index))
    labels = list(dict.fromkeys(profiles.rows["label"]))
    groups = {label: _group_values(profiles, label, statistic) for label in labels}
    spread = [label for label, (values, _) in groups.items() if values.size >= 2]
    if not spread or len(labels) < 2:
        return None
    reference = spread[0]
    parts = []
    for label, (values, interaction) in groups.items():
        if values.size < 2:
            parts.append(f"{label} (1 run): no spread")
            continue
        variance = float(values.var(ddof=1))
        share = f", the sequences' own {interaction / variance:.0%} of it" if variance > 0 else ""
        text = f"{label} ({values.size} runs): run SD {math.sqrt(variance):.4f}{share}"
        if label != reference and groups[reference][0].var(ddof=1) > 0:
            ratio, low, high = variance_ratio(values, groups[reference][0])
            text += f", variance {ratio:.0%} of {reference}'s [{low:.0%}, {high:.0%}] (95 %, F over runs)"
        parts.append(text)
    return (f"{family}: training noise by source (shown, not counted; {STATISTICS[statistic].title}): "
            + "; ".join(parts))
