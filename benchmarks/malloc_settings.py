"""A training job and a scoring job with glibc's default malloc settings and with the workflow's.

    python benchmarks/malloc_settings.py --run DIR [--steps 40] [--reps 2]

DIR is a finished run of the default (``benchmarks/default_pipeline.py --keep DIR``): its
pre-training tokenizer and blocks, its toy MLP 256 and its built tasks. Each rep runs, each in a
fresh process as a Snakemake job does and in an alternating order, (1) pre-training of the toy
MLP 256 as config.yaml sets it, cut to ``--steps`` steps, and (2) one scoring job of that model
(``benchmarks/scoring_job.py``'s, with the response cache), once with glibc's defaults and once
with ``condensation.runtime.memory.JOB_MALLOC_SETTINGS`` (what the Snakefile gives every job).
It prints the median CPU seconds (user + system), wall seconds and minor page faults of each,
with ratios, and checks that the trained weights and the scores are identical.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from condensation.runtime.memory import JOB_MALLOC_SETTINGS

REPO = Path(__file__).resolve().parents[1]

SETTINGS = ("glibc default", "workflow's")


def environment(setting: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in JOB_MALLOC_SETTINGS}
    return env | (dict(JOB_MALLOC_SETTINGS) if setting == "workflow's" else {})


def measured(command: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """CPU seconds, wall seconds and minor page faults of one process (and what it waits for)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(command)} failed ({status})")
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - started, usage.ru_minflt


def training_command(run: Path, scratch: Path, steps: int) -> tuple[list[str], Path]:
    """Pre-training of the run's toy MLP 256, cut to ``steps`` steps, in a fresh run directory."""
    plan = json.loads((run / "runs/pretrain/toy-mlp256/run.json").read_text())
    plan["train"]["train_tokens"] = steps * plan["train"]["micro_batch_size"] * plan["train"]["block_size"]
    directory = Path(tempfile.mkdtemp(dir=scratch))
    (directory / "run.json").write_text(json.dumps(plan))
    command = [sys.executable, str(REPO / "workflow_scripts/train_run.py"), "--plan", str(directory / "run.json"),
               "--tokenizer", str(run / "runs/pretrain/tokenizer"), "--blocks", str(run / "runs/pretrain/blocks.npy")]
    return command, directory / "final" / "model.safetensors"


def scoring_command(run: Path, scratch: Path) -> tuple[list[str], Path]:
    directory = Path(tempfile.mkdtemp(dir=scratch))
    command = [sys.executable, str(REPO / "benchmarks/scoring_job.py"), "--one", "ours", "--run", str(run),
               "--prefix", str(directory / "cache" / "job"), "--out", str(directory / "scores.json")]
    return command, directory / "scores.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished run of the default")
    parser.add_argument("--steps", type=int, default=40, help="pre-training steps per training job")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    results: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    outputs: dict[tuple[str, str], set[str]] = {}
    with tempfile.TemporaryDirectory(prefix="malloc-settings-") as scratch:
        for rep in range(args.reps):
            for setting in SETTINGS if rep % 2 == 0 else SETTINGS[::-1]:
                for job in ("training", "scoring"):
                    make = (training_command(args.run, Path(scratch), args.steps) if job == "training"
                            else scoring_command(args.run, Path(scratch)))
                    command, output = make
                    results.setdefault((job, setting), []).append(measured(command, environment(setting)))
                    outputs.setdefault((job, setting), set()).add(hashlib.sha256(output.read_bytes()).hexdigest())
    print(f"device: CPU, {os.cpu_count()} cores visible, one torch thread, "
          f"{platform.processor() or platform.machine()}, "
          f"load average {os.getloadavg()[0]:.1f} at the end; {args.reps} reps, medians; "
          f"settings {JOB_MALLOC_SETTINGS}")
    for job in ("training", "scoring"):
        base = [statistics.median(r[i] for r in results[(job, SETTINGS[0])]) for i in range(3)]
        what = f"pre-training {args.steps} steps" if job == "training" else "scoring 1200 items"
        for setting in SETTINGS:
            cpu, wall, faults = (statistics.median(r[i] for r in results[(job, setting)]) for i in range(3))
            print(f"  {what:<24} {setting:<14} CPU {cpu:6.1f} s (x{cpu / base[0]:.2f})  wall {wall:6.1f} s "
                  f"(x{wall / base[1]:.2f})  minor faults {faults / 1e6:5.2f} M")
    same = all(len(outputs[(job, SETTINGS[0])] | outputs[(job, SETTINGS[1])]) == 1 for job in ("training", "scoring"))
    print(f"trained weights and scores identical under both settings: {same}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
