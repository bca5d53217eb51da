"""Whether two finished runs of the workflow produced the same results, timings aside.

    python tools/same_outputs.py RUN_A RUN_B [--trees results runs models]

Compares every file under the given trees of two run directories (by default ``results/``, the
trained weights and logs in ``runs/`` and the prepared ``models/``). A file is *identical* when
its bytes are; otherwise it is *the same but for timings and code version* when it differs only
where a run records how long it took, when it ran or which code ran it: the ``seconds`` of a
score record or of a geometry file's metadata, a training summary's ``wall_time_s`` and
``tokens_per_s``, a training log's ``elapsed_s``, DVCLive's timing series, a gzip header's date,
the ``code``/``provenance`` of a plan or manifest, the function source lm-eval's records keep
and the checksums a manifest keeps (of files compared here in their own right). Anything else is
a difference, listed; exit status 1 if there is one. A change that only makes the pipeline faster
must leave every file identical or the same but for timings and code version.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

TIMING_KEYS = {"seconds", "wall_time_s", "tokens_per_s", "elapsed_s", "train/tokens_per_s", "probe/seconds",
               "timestamp"}
"""Keys and columns that hold how long something took or when (they differ between any two runs)."""
PROVENANCE_KEYS = {"code", "provenance", "custom_dataset"}
"""Keys that name the code that ran (they differ whenever the code does): lm-eval's records keep
the source text of a task's ``custom_dataset`` function."""
SKIPPED = ("eval_cache/", ".snakemake/", "/set_aside/")
"""Caches and set-aside states: not results, and SQLite files differ in their page layout."""


def without_timings(value):
    """``value`` (parsed JSON) with every timing and code-version key removed, at any depth."""
    if isinstance(value, dict):
        return {key: without_timings(item) for key, item in value.items() if key not in TIMING_KEYS | PROVENANCE_KEYS}
    if isinstance(value, list):
        return [without_timings(item) for item in value]
    return value


def same_npz(a: bytes, b: bytes) -> bool:
    with np.load(io.BytesIO(a)) as first, np.load(io.BytesIO(b)) as second:
        if set(first.files) != set(second.files):
            return False
        for name in first.files:
            if name == "meta":
                if without_timings(json.loads(str(first[name]))) != without_timings(json.loads(str(second[name]))):
                    return False
            elif not np.array_equal(first[name], second[name], equal_nan=first[name].dtype.kind in "fc"):
                return False
    return True


def same_csv(a: bytes, b: bytes) -> bool:
    first, second = (pd.read_csv(io.BytesIO(data), sep=None, engine="python") for data in (a, b))
    keep = [column for column in first.columns
            if column not in TIMING_KEYS and column.split("/")[-1] not in TIMING_KEYS]
    return list(first.columns) == list(second.columns) and first[keep].equals(second[keep])


def same_but_timings(path: str, a: bytes, b: bytes) -> bool:
    """Whether two versions of ``path`` differ only in timings and code version."""
    if path.endswith(".npz"):
        return same_npz(a, b)
    if path.endswith(".gz"):
        return gzip.decompress(a) == gzip.decompress(b)
    if path.endswith((".csv", ".tsv")):
        return same_csv(a, b)
    if path.endswith(".json"):
        first, second = json.loads(a), json.loads(b)
        if Path(path).name == "manifest.json" or path.endswith(".manifest.json"):
            return without_timings(_strip_checksums(first)) == without_timings(_strip_checksums(second))
        return without_timings(first) == without_timings(second)
    return False


def _strip_checksums(manifest):
    """A manifest with the names of its files but not their checksums (each file is compared itself)."""
    stripped = {key: value for key, value in manifest.items() if key != "sha256"}
    if isinstance(stripped.get("files"), dict):
        stripped["files"] = sorted(stripped["files"])
    return stripped


def compare(first: Path, second: Path, trees: list[str]) -> tuple[Counter, list[str]]:
    counts: Counter = Counter()
    differences: list[str] = []
    for tree in trees:
        names = {p.relative_to(first).as_posix() for p in (first / tree).rglob("*") if p.is_file()}
        names |= {p.relative_to(second).as_posix() for p in (second / tree).rglob("*") if p.is_file()}
        for name in sorted(names):
            if any(part in f"/{name}" for part in SKIPPED):
                continue
            a, b = first / name, second / name
            if not (a.is_file() and b.is_file()):
                differences.append(f"{name}: only in {first if a.is_file() else second}")
                continue
            # a file that names its own run's directory (a model handle, lm-eval's task paths) names it alike
            data_a, data_b = (path.read_bytes().replace(bytes(root.resolve()), b"<run>")
                              for path, root in ((a, first), (b, second)))
            if data_a == data_b:
                counts["identical"] += 1
            elif same_but_timings(name, data_a, data_b):
                counts["the same but for timings and code version"] += 1
            else:
                differences.append(f"{name}: differs")
    return counts, differences


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--trees", nargs="+", default=["results", "runs", "models"])
    args = parser.parse_args()
    counts, differences = compare(args.first, args.second, args.trees)
    print(", ".join(f"{n} {what}" for what, n in counts.items()) or "no files")
    for line in differences:
        print(f"  {line}")
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
