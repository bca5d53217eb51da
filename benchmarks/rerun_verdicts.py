"""Run the default pipeline twice with different seed offsets and print what moved.

Every training and initialisation seed of a run is shifted by ``seed_offset`` (config.yaml), so
the second run draws the training randomness afresh while texts and test items stay the same.
A finding that holds up gives the same verdict in both; the numbers beside it move by the
training noise its interval is meant to cover.

    python benchmarks/rerun_verdicts.py                      # offsets 0 and 1, in /tmp/condensation-rerun
    python benchmarks/rerun_verdicts.py --compare-only       # compare two finished runs again

Each run works in a copy of the repository's files (``git ls-files``) under ``--workdir``, with
that copy first on PYTHONPATH, so editing the checkout meanwhile changes neither run. A second
call refreshes the copies with the checkout's files (unchanged files keep their times) and
Snakemake reruns what the changes shape, keeping the rest. Exit status 0 when every verdict is the same in both runs, 1 if
any moved.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def copy_repository(target: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for name in files:
        source = ROOT / name
        destination = target / name
        if source.is_file() and not (destination.exists() and destination.read_bytes() == source.read_bytes()):
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    debs = ROOT / "resources/debs"  # the text packages tools/install.sh fetched (git-ignored)
    if debs.is_dir() and not (target / "resources/debs").exists():
        (target / "resources").mkdir(parents=True, exist_ok=True)
        (target / "resources/debs").symlink_to(debs)


def run(directory: Path, offset: int, cores: str, extra: list[str]) -> float:
    """The default pipeline in ``directory`` with ``seed_offset=offset``; its wall time in seconds."""
    copy_repository(directory)  # the code as it is now; results already made are kept
    env = dict(os.environ, PYTHONPATH=str(directory))
    command = [sys.executable, "-m", "snakemake", "--cores", cores, "--config", f"seed_offset={offset}", *extra]
    print(f"[rerun] offset {offset}: {' '.join(command)} in {directory}", flush=True)
    start = time.perf_counter()
    with open(directory / "rerun.log", "a") as log:
        subprocess.run(command, cwd=directory, env=env, check=True, stdout=log, stderr=subprocess.STDOUT)
    return time.perf_counter() - start


def verdicts(directory: Path) -> dict[str, str]:
    data = json.loads((directory / "results/metrics/findings.json").read_text())
    return {finding["claim"]: finding["verdict"] for finding in data["findings"]}


def numbers(directory: Path) -> dict[str, str]:
    """The numbers the README quotes, as text: score differences with their seed-aware intervals,
    the condensation effects at the last step, and each size's deeper-layer cosine."""
    results, shown = directory / "results", {}
    for table in ("table2", "table4"):
        path = results / "tables" / f"{table}.csv"
        if path.exists():
            for row in pd.read_csv(path).itertuples():
                if row.method == "dispersion":
                    shown[f"{table} {row.model}: dispersion - CE"] = (
                        f"{row.diff_vs_ce:+.2f} [{row.ci_low_vs_ce:+.2f}, {row.ci_high_vs_ce:+.2f}] p={row.p_vs_ce:.2g} "
                        f"(per seed {row.per_seed_vs_ce})")
    for path in sorted(results.glob("*/*/condensation_effects.csv")):
        effects = pd.read_csv(path)
        last = effects[effects["method"] == "dispersion"].sort_values("step").iloc[-1]
        shown[f"{path.parts[-3]} {path.parts[-2]}: deep cos dispersion - CE"] = (
            f"{last['difference']:+.3f} [{last['ci_low']:+.3f}, {last['ci_high']:+.3f}]")
    for path in sorted((results / "tables" / "trend").glob("*.csv")):
        table = pd.read_csv(path)
        for label, rows in table.groupby("label", sort=False):
            shown[f"{path.stem} {label}: deep cos"] = " / ".join(f"{v:.3f}" for v in rows["last_half"])
    return shown


def compare(first: Path, second: Path) -> bool:
    """Print verdicts and numbers side by side; True when no verdict moved."""
    a, b = verdicts(first), verdicts(second)
    same = True
    print("\nverdicts (offset 0 | offset 1):")
    for claim in a:
        moved = a[claim] != b.get(claim)
        same &= not moved
        print(f"  {'MOVED ' if moved else 'same  '} {a[claim]:>12} | {b.get(claim, '-'):<12} {claim}")
    print("\nnumbers (offset 0 | offset 1):")
    x, y = numbers(first), numbers(second)
    for key in x:
        print(f"  {key}\n      {x[key]}\n      {y.get(key, '-')}")
    print(f"\n{'every verdict held' if same else 'some verdicts moved'} across the two runs")
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/condensation-rerun"),
                        help="where the two copies run (default: %(default)s)")
    parser.add_argument("--offsets", type=int, nargs=2, default=(0, 1), help="the two seed offsets (default: 0 1)")
    parser.add_argument("--cores", default="all", help="snakemake --cores (default: all)")
    parser.add_argument("--compare-only", action="store_true", help="compare two finished runs, run nothing")
    parser.add_argument("snakemake_args", nargs="*", help="more snakemake arguments, after --")
    args = parser.parse_args()
    directories = [args.workdir / f"offset-{offset}" for offset in args.offsets]
    if not args.compare_only:
        for directory, offset in zip(directories, args.offsets):
            seconds = run(directory, offset, args.cores, args.snakemake_args)
            print(f"[rerun] offset {offset}: {seconds / 60:.1f} min", flush=True)
    return 0 if compare(*directories) else 1


if __name__ == "__main__":
    sys.exit(main())
