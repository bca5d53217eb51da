"""Trend tables: a group of models' per-layer trend statistics as CSV and Markdown."""

from __future__ import annotations

import os

import pandas as pd

from condensation.reporting.tables.table_files import to_markdown, write_csv
from condensation.runtime.io import write_text

UNITS = (
    "Each row is one model measured once: its intervals (`_low`, `_high`, 95 %) cover the text sequences only, "
    "not the training runs (the findings page adds those). Rho, tau, last-n: over the layers' mean cosines; "
    "last_half and depth_slope: a bootstrap over sequences; the other lenses: a delete-a-group jackknife over "
    "groups of sequences, read with the t of G - 1 degrees of freedom."
)


def write_trend_table(
    table: pd.DataFrame, *, family: str, dataset: str, csv_path: str | os.PathLike,
    markdown_path: str | os.PathLike,
) -> pd.DataFrame:
    """A family's condensation trend on one dataset (one row per model, e.g. from the geometry
    stage's ``trend_rows``) as CSV and Markdown, numbers to 4 decimals, with ``family`` and
    ``dataset`` as the first two columns. Returns the written frame; ``table`` is not changed."""
    table = table.copy()
    table.insert(0, "dataset", dataset)
    table.insert(0, "family", family)
    write_csv(table, csv_path, "%.4f")
    write_text(markdown_path, f"# {family} on {dataset}\n\n{UNITS}\n\n" + to_markdown(table, float_format=".4f") + "\n")
    return table
