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
import sys
import tempfile
from pathlib import Path

from _common import REPO, job_cpu, medians, rotated, timed_process

from condensation.runtime.memory import JOB_MALLOC_SETTINGS

SETTINGS = ("glibc default", "workflow's")


def environment(setting: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in JOB_MALLOC_SETTINGS}
    return env | (dict(JOB_MALLOC_SETTINGS) if setting == "workflow's" else {})


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
            for setting in rotated(SETTINGS, rep):
                for job in ("training", "scoring"):
                    make = (training_command(args.run, Path(scratch), args.steps) if job == "training"
                            else scoring_command(args.run, Path(scratch)))
                    command, output = make
                    results.setdefault((job, setting), []).append(timed_process(command, environment(setting)))
                    outputs.setdefault((job, setting), set()).add(hashlib.sha256(output.read_bytes()).hexdigest())
    print(f"device: {job_cpu()}; {args.reps} reps, medians; settings {JOB_MALLOC_SETTINGS}")
    for job in ("training", "scoring"):
        base = medians(results[(job, SETTINGS[0])])
        what = f"pre-training {args.steps} steps" if job == "training" else "scoring 1200 items"
        for setting in SETTINGS:
            cpu, wall, faults = medians(results[(job, setting)])
            print(f"  {what:<24} {setting:<14} CPU {cpu:6.1f} s (x{cpu / base[0]:.2f})  wall {wall:6.1f} s "
                  f"(x{wall / base[1]:.2f})  minor faults {faults / 1e6:5.2f} M")
    same = all(len(outputs[(job, SETTINGS[0])] | outputs[(job, SETTINGS[1])]) == 1 for job in ("training", "scoring"))
    print(f"trained weights and scores identical under both settings: {same}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
