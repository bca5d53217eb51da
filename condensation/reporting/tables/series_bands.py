"""Fig. 4 over seeds: condensation at each checkpoint of several training runs of one configuration
(a published suite's seeds of one size, or toys pre-trained here with one shape), estimated over
the runs with an interval that covers them.

Each run's series table wrote its per-sequence layer means beside it (``<table>.profiles.npz``,
:mod:`condensation.reporting.tables.profiles`); every run was measured on the same sequences.
At each checkpoint the runs are one arm of a panel (:mod:`condensation.reporting.statistics.panel`):
the estimate is their mean, its standard error the runs' spread (training noise) plus the part
of the sequences' sampling error that moves every run alike, each counted once. A checkpoint that
not every run has is left out (the table says which).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from condensation.intervals import CONFIDENCE
from condensation.reporting.statistics.panel import contrast
from condensation.reporting.tables.profiles import STATISTICS, Profiles

BAND_STATISTICS = ("last_half", "spearman_rho")
"""The two panels of the figure: the deeper layers' mean cosine (the size of condensation) and the
paper's Spearman rho (its shape over depth)."""


ARM = "checkpoint"


def common_checkpoints(series: Mapping[str, Profiles]) -> list[str]:
    """The checkpoints every run has, in the first run's order."""
    labels = [[str(label) for label in table.rows["checkpoint"]] for table in series.values()]
    shared = set(labels[0]).intersection(*map(set, labels[1:]))
    return [label for label in labels[0] if label in shared]


def _at_checkpoint(series: Mapping[str, Profiles], checkpoint: str) -> Profiles:
    """One row per run: its profiles at ``checkpoint``."""
    chosen = []
    for name, table in series.items():
        row = table.subset(table.rows["checkpoint"].astype(str) == checkpoint)
        if row.layers[0] is None:
            raise ValueError(f"series {name}, checkpoint {checkpoint}: no per-sequence layer means (a file written "
                             "before they were stored); re-run its extraction")
        chosen.append(row)
    return Profiles.concat(chosen)


def band_table(series: Mapping[str, Profiles]) -> pd.DataFrame:
    """One row per statistic and checkpoint (each statistic's in training order): its training tokens, the number of
    runs, their mean with its ``CONFIDENCE`` interval (``low``, ``high``; NaN when it cannot be
    measured), standard error and degrees of freedom, what the interval covers, and each run's
    value (``run:<series>`` columns)."""
    if len(series) < 2:
        raise ValueError(f"a seeds' band needs two or more runs, got {len(series)}: {list(series)}")
    names = list(series)
    rows: dict[str, list[dict]] = {statistic: [] for statistic in BAND_STATISTICS}
    for checkpoint in common_checkpoints(series):
        combined = _at_checkpoint(series, checkpoint)
        tokens = combined.rows["tokens"].iloc[0] if "tokens" in combined.rows else np.nan
        for statistic in BAND_STATISTICS:
            panel = combined.panel(statistic, [ARM] * len(names), names)
            estimate = contrast(panel, {ARM: 1.0})
            low, high = estimate.interval(CONFIDENCE)
            rows[statistic].append({
                "statistic": statistic, "title": STATISTICS[statistic].title, "checkpoint": checkpoint,
                "tokens": tokens, "runs": len(names), "mean": estimate.estimate, "low": low, "high": high,
                "se": estimate.se, "dof": estimate.dof, "covers": estimate.covers,
                **{f"run:{name}": value for name, value in zip(names, panel.values, strict=True)},
            })
    return pd.DataFrame([row for statistic in BAND_STATISTICS for row in rows[statistic]])


def left_out(series: Mapping[str, Profiles]) -> list[str]:
    """Checkpoints some run lacks, as ``series: checkpoint`` (not drawn in the band)."""
    shared = set(common_checkpoints(series))
    return [f"{name}: {label}" for name, table in series.items() for label in table.rows["checkpoint"].astype(str)
            if label not in shared]
