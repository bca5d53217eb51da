"""Wall time of the embedded default pipeline from scratch, and where it goes.

Copies the workflow into a scratch directory (nothing of an earlier run is reused), runs
the README's command (`snakemake --cores N --report results/report.html --report-after-run`) on
config.yaml, and prints the total wall time and the per-rule times that Snakemake's
`benchmark:` files recorded.

    python benchmarks/default_pipeline.py [--cores 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT_FILES = ["Snakefile", "rules", "workflow_scripts", "condensation", "report", "profiles", "config.yaml"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="run in this directory and keep it")
    args = parser.parse_args()

    root = args.keep or Path(tempfile.mkdtemp(prefix="condensation-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    for name in PROJECT_FILES:
        source, target = REPO / name, root / name
        if not target.exists():
            (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    (root / "resources").mkdir(exist_ok=True)
    if not (root / "resources" / "debs").exists():
        (root / "resources" / "debs").symlink_to(REPO / "resources" / "debs")

    snakemake = Path(sys.executable).parent / "snakemake"
    started = time.perf_counter()
    command = [str(snakemake), "--cores", str(args.cores), "--quiet", "rules",
               "--report", "results/report.html", "--report-after-run"]
    subprocess.run(command, cwd=root, check=True)
    wall = time.perf_counter() - started

    per_rule: dict[str, float] = defaultdict(float)
    for tsv in (root / "logs" / "benchmarks").rglob("*.tsv"):
        rule = tsv.relative_to(root / "logs" / "benchmarks").parts[0].removesuffix(".tsv")
        with open(tsv) as handle:
            per_rule[rule] += float(next(csv.DictReader(handle, delimiter="\t"))["s"])

    print(f"device: CPU, {os.cpu_count()} cores visible, --cores {args.cores}, {platform.processor() or platform.machine()}")
    print(f"default pipeline from scratch: {wall:.0f} s wall ({wall / 60:.1f} min)")
    for rule, seconds in sorted(per_rule.items(), key=lambda item: -item[1]):
        print(f"  {rule:<24} {seconds:8.1f} s  ({seconds / wall:5.1%})")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
