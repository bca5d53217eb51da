"""A training job and a scoring job with and without one of the settings the workflow gives its jobs.

    python benchmarks/job_settings.py --run DIR --setting malloc|mkl [--steps 40] [--reps 2]

The Snakefile gives every job's process two settings in its environment, neither of which
changes what a job computes:

* ``malloc``: glibc's malloc thresholds (``condensation.runtime.memory.JOB_MALLOC_SETTINGS``): a
  process keeps the memory it frees. The weights and the scores must be identical with and
  without (the script exits 1 otherwise).
* ``mkl``: on an AMD CPU, the library that answers MKL's vendor check
  (``condensation.runtime.mkl_on_amd``), so that MKL picks its matrix-product kernels by the
  CPU's features. Products may differ in their last bits (as between two CPUs), so the trained
  weights are compared by their largest difference and the scores by the largest difference in
  a choice's log-likelihood and the items whose first-ranked choice changes (the script exits 1
  above ``MKL_LOGLIKELIHOOD_TOLERANCE``). On any other CPU the setting
  does nothing, and the script says so and stops.

DIR is a finished run of the default (``benchmarks/default_pipeline.py --keep DIR``): its
pre-training tokenizer and blocks, its toy MLP 256 and its built tasks. Each rep runs, each in a
fresh process as a Snakemake job does and in an alternating order, (1) pre-training of the toy
MLP 256 as config.yaml sets it, cut to ``--steps`` steps, and (2) one scoring job of that model
(``benchmarks/scoring_job.py``'s, with the response cache), once without the setting and once
with it; the other setting is the workflow's in both. It prints the median CPU seconds (user +
system), wall seconds and minor page faults of each, with ratios.
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

from condensation.runtime import mkl_on_amd
from condensation.runtime.memory import JOB_MALLOC_SETTINGS

WITHOUT, WITH = "without", "with"
MKL_LOGLIKELIHOOD_TOLERANCE = 1e-3
"""The largest change in a choice's log-likelihood that ``--setting mkl`` accepts: float32 rounding
over a few hundred tokens is orders of magnitude below it, a wrong product far above."""
JOBS = ("training", "scoring")


def environment(setting: str, on: bool) -> dict[str, str]:
    """This process's environment with the settings the Snakefile gives a job, less the compared
    one unless ``on``."""
    removed = {*JOB_MALLOC_SETTINGS, "LD_PRELOAD"}
    env = {name: value for name, value in os.environ.items() if name not in removed}
    if on or setting != "malloc":
        env |= JOB_MALLOC_SETTINGS
    if (on or setting != "mkl") and mkl_on_amd.wanted() is None:
        env["LD_PRELOAD"] = str(mkl_on_amd.build_shim())
    return env


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


def largest_weight_difference(a: Path, b: Path) -> float:
    from safetensors.numpy import load_file

    left, right = load_file(a), load_file(b)
    return max(float(abs(left[name].astype("float64") - right[name].astype("float64")).max()) for name in left)


def loglikelihoods(path: Path) -> dict[str, list[float]]:
    """A scoring job's output: each item's log-likelihoods of its choices."""
    return json.loads(path.read_text())


def scoring_difference(a: Path, b: Path) -> tuple[float, int]:
    """The largest difference in any choice's log-likelihood, and how many items change the choice
    they rank first (what accuracy reads)."""
    left, right = loglikelihoods(a), loglikelihoods(b)
    largest, flipped = 0.0, 0
    for item in left.keys() & right.keys():
        x, y = left[item], right[item]
        largest = max(largest, *(abs(u - v) for u, v in zip(x, y, strict=True)))
        flipped += x.index(max(x)) != y.index(max(y))
    return largest, flipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished run of the default")
    parser.add_argument("--setting", choices=("malloc", "mkl"), required=True, help="the setting compared")
    parser.add_argument("--steps", type=int, default=40, help="pre-training steps per training job")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    if args.setting == "mkl" and (reason := mkl_on_amd.wanted()) is not None:
        print(f"the mkl setting does nothing on this machine: {reason}")
        return
    results: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
    outputs: dict[tuple[str, str], list[Path]] = {}
    with tempfile.TemporaryDirectory(prefix="job-settings-") as scratch:
        for rep in range(args.reps):
            for variant in rotated((WITHOUT, WITH), rep):
                for job in JOBS:
                    command, output = (training_command(args.run, Path(scratch), args.steps) if job == "training"
                                       else scoring_command(args.run, Path(scratch)))
                    env = environment(args.setting, variant == WITH)
                    results.setdefault((job, variant), []).append(timed_process(command, env))
                    outputs.setdefault((job, variant), []).append(output)
        shown = JOB_MALLOC_SETTINGS if args.setting == "malloc" else {"LD_PRELOAD": str(mkl_on_amd.shim_path())}
        print(f"device: {job_cpu()}; {args.reps} reps, medians; setting {args.setting}: {shown}")
        for job in JOBS:
            base = medians(results[(job, WITHOUT)])
            what = f"pre-training {args.steps} steps" if job == "training" else "scoring 1200 items"
            for variant in (WITHOUT, WITH):
                cpu, wall, faults = medians(results[(job, variant)])
                print(f"  {what:<24} {variant:<8} CPU {cpu:6.1f} s (x{cpu / base[0]:.2f})  wall {wall:6.1f} s "
                      f"(x{wall / base[1]:.2f})  minor faults {faults / 1e6:5.2f} M")
        digests = {key: {hashlib.sha256(path.read_bytes()).hexdigest() for path in paths}
                   for key, paths in outputs.items()}
        identical = {job: len(digests[(job, WITHOUT)] | digests[(job, WITH)]) == 1 for job in JOBS}
        weights = largest_weight_difference(outputs[("training", WITHOUT)][0], outputs[("training", WITH)][0])
        score, flipped = scoring_difference(outputs[("scoring", WITHOUT)][0], outputs[("scoring", WITH)][0])
    print(f"trained weights identical with and without: {identical['training']} (largest difference {weights:.2e}); "
          f"log-likelihoods identical: {identical['scoring']} (largest difference {score:.2e}; "
          f"{flipped} items rank another choice first)")
    ok = all(identical.values()) if args.setting == "malloc" else score <= MKL_LOGLIKELIHOOD_TOLERANCE
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
