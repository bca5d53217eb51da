"""How long Snakemake takes to plan the paper's full workflow (a dry run of configs/paper.yaml).

Planning happens on every invocation, on a login node for SLURM, so it must stay quick: the
target is under 10 s. Runs in a scratch directory (no results, so every job is planned) and
prints the median of a few runs and the number of jobs.

    python benchmarks/paper_plan.py [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, cpu_cores

TARGET_S = 10.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    snakemake = Path(sys.executable).parent / "snakemake"
    command = [str(snakemake), "-n", "--configfile", "configs/paper.yaml", "-s", str(REPO / "Snakefile")]
    times, jobs = [], None
    with tempfile.TemporaryDirectory(prefix="paper-plan-") as scratch:
        for _ in range(args.reps):
            started = time.perf_counter()
            done = subprocess.run([*command, "-d", scratch], cwd=REPO, capture_output=True, text=True, check=True)
            times.append(time.perf_counter() - started)
            totals = [line.split() for line in done.stdout.splitlines() if line.startswith("total")]
            jobs = int(totals[0][1]) if totals else None
    median = statistics.median(times)
    print(f"device: CPU, {cpu_cores()}")
    print(f"snakemake -n --configfile configs/paper.yaml: {jobs} jobs planned")
    print(f"  wall time median {median:.2f} s over {args.reps} runs (min {min(times):.2f} s, max {max(times):.2f} s)")
    print(f"  target {TARGET_S:.0f} s: {'met' if median < TARGET_S else 'MISSED'} (ratio {median / TARGET_S:.2f})")


if __name__ == "__main__":
    main()
