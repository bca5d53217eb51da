"""The files of one score: the record, lm-eval's per-item rows and lm-eval's aggregated results.

A scoring job writes all three beside each other under one stem (the record last: it marks a
complete job). ``SCORE_FILES`` names them; the rules build their outputs from it.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from condensation.runtime.io import atomic_path

if TYPE_CHECKING:
    import pandas as pd

SCORE_FILES = {"record": ".json", "item_rows": ".samples.jsonl.gz", "lm_eval": ".lm_eval.json"}
"""A score's files by role, as suffixes of its stem: ``record`` (scores and what was scored),
``item_rows`` (one row per scored item; lm-eval calls these "samples"), ``lm_eval`` (lm-eval's own
aggregated output)."""

# The columns every per-item row has, in file order; metric columns (acc, acc_norm, ...) and
# "loglikelihoods" follow.
ITEM_ROW_KEYS = ("task", "subtask", "doc_id", "filter", "num_fewshot", "target")


def write_item_rows(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write per-item rows as gzipped JSON lines, atomically; the bytes depend on the rows only."""
    with atomic_path(path) as tmp, open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed:
            for row in rows:
                packed.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))


def read_item_rows(path: str | Path) -> pd.DataFrame:
    """The per-item rows of a samples file (see :class:`ScoreRun`) as a DataFrame, one row per
    (task, subtask, doc_id, filter), in file order; metric columns are floats."""
    # deferred: pandas is heavy; the scoring job only writes rows
    import pandas as pd  # noqa: PLC0415

    with gzip.open(path, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    frame = pd.DataFrame.from_records(rows)
    for key in ITEM_ROW_KEYS:
        if key not in frame:
            frame[key] = pd.Series(dtype=object)
    return frame[[*ITEM_ROW_KEYS, *[c for c in frame.columns if c not in ITEM_ROW_KEYS]]]


def item_rows_path(record_path: str | Path) -> Path:
    """Where :func:`score_checkpoint` writes the per-item rows of the score record at ``record_path``."""
    record_path = Path(record_path)
    return record_path.with_name(record_path.stem + SCORE_FILES["item_rows"])


def lm_eval_path(record_path: str | Path) -> Path:
    """Where :func:`score_checkpoint` writes lm-eval's aggregated results for ``record_path``."""
    record_path = Path(record_path)
    return record_path.with_name(record_path.stem + SCORE_FILES["lm_eval"])
