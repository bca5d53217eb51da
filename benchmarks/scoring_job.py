"""One scoring job of the default pipeline with lm-eval's response cache, with ours, and with none.

    python benchmarks/scoring_job.py --run DIR [--model toy-mlp256] [--reps 3]

DIR is a finished run of the default (``benchmarks/default_pipeline.py --keep DIR``): its built
tasks (``data/eval_tasks``, its config.yaml's tasks and shots, 3,600 requests in the default's)
and a model's handle. Each rep scores that model once in each way, each in a fresh process as a Snakemake job
runs (imports and model loading included), in an interleaved order:

* ``lm-eval``: ``simple_evaluate(use_cache=...)``, lm-eval's ``CachingLM`` (how the harness scored
  before ``ResponseCache``): a commit after every response written;
* ``ours``: ``harness.score_model`` with its ``ResponseCache`` (the same file, committed every 30 s);
* ``none``: ``harness.score_model`` without a cache;
* ``ours+env``: ``ours`` with lm-eval's report of the environment, which the harness skips
  (``harness._without_environment_report``: torch's ``collect_env``, ``pip list`` twice a call).

It prints the median wall and CPU seconds of each (CPU: the process's user + system time with its
subprocesses', steady on a shared machine; wall: also the waits for the disk) with ratios to
lm-eval's, and checks that all give the same per-item log-likelihoods.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path

from _common import job_cpu, medians, mkl_kernels, rotated, timed_process

MODES = ("lm-eval", "ours", "none", "ours+env")


def run_tasks(run: Path, model: str) -> dict[str, int]:
    """The run's tasks and their shots for ``model``, as its scoring jobs read them."""
    import yaml

    from condensation.config.plan import evaluation_tasks
    from condensation.config.validate import validate_config

    return evaluation_tasks(validate_config(yaml.safe_load((run / "config.yaml").read_text())), model)


def score_once(mode: str, handle_path: Path, task_dir: Path, prefix: Path, out: Path, tasks: dict[str, int]) -> None:
    """Score in this process as ``mode`` says; write each item's log-likelihoods to ``out``."""
    import torch

    from condensation import models
    from condensation.evaluation import harness

    torch.set_num_threads(1)  # as the scoring jobs run
    handle = models.ModelHandle.load(handle_path)
    tokenizer, model = (models.load_tokenizer(handle),
                        models.load_model(handle, dtype="auto", device="auto", causal_lm=True))
    settings = harness.EvalSettings()
    if mode == "ours+env":  # the harness as it was before it skipped lm-eval's environment report
        harness._without_environment_report = contextlib.nullcontext
    if mode == "lm-eval":
        loglikelihoods = _score_with_lm_eval_cache(model, tokenizer, task_dir, prefix, settings, tasks)
    else:
        run = harness.score_model(model, tokenizer, tasks, settings, include_path=task_dir,
                                  cache_prefix=prefix if mode.startswith("ours") else None)
        loglikelihoods = {f"{row['subtask']}/{row['doc_id']}": row["loglikelihoods"] for row in run.samples}
    out.write_text(json.dumps(loglikelihoods, sort_keys=True))


def _score_with_lm_eval_cache(model, tokenizer, task_dir: Path, prefix: Path, settings,
                              tasks: dict[str, int]) -> dict[str, list[float]]:
    """The harness's calls as they were: one ``simple_evaluate`` per shot count, lm-eval's cache."""
    import torch
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    model.eval()
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=settings.batch_size)
    manager = TaskManager(include_path=[str(task_dir.resolve())], include_defaults=False)
    loglikelihoods = {}
    for shots in sorted(set(tasks.values())):
        with torch.no_grad():
            out = simple_evaluate(
                model=lm, tasks=[name for name, n in tasks.items() if n == shots], num_fewshot=shots,
                task_manager=manager, bootstrap_iters=settings.bootstrap_iters, log_samples=True, use_cache=str(prefix),
                random_seed=settings.seed, numpy_random_seed=settings.seed, torch_random_seed=settings.seed,
                fewshot_random_seed=settings.seed,
            )
        for task, samples in out["samples"].items():
            for sample in samples:
                loglikelihoods[f"{task}/{sample['doc_id']}"] = [float(r[0]) for r in sample["filtered_resps"]]
    return loglikelihoods


def timed_child(mode: str, args: argparse.Namespace, scratch: Path, rep: int) -> tuple[float, float, Path]:
    """Wall and CPU seconds of one scoring process, and where it wrote its log-likelihoods."""
    out = scratch / f"{mode}-{rep}.json"
    command = [sys.executable, __file__, "--one", mode, "--run", str(args.run), "--model", args.model,
               "--prefix", str(scratch / "cache" / f"{mode}-{rep}" / "job"), "--out", str(out)]
    cpu, wall, _ = timed_process(command)
    return wall, cpu, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished run of the default")
    parser.add_argument("--model", default="toy-mlp256", help="the model scored (its models/<name>/handle.json)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)  # a child process: score once
    parser.add_argument("--prefix", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    handle, task_dir = args.run / "models" / args.model / "handle.json", args.run / "data" / "eval_tasks"
    if args.one:
        score_once(args.one, handle, task_dir, args.prefix, args.out, run_tasks(args.run, args.model))
        return
    for needed in (handle, task_dir):
        if not needed.exists():
            parser.error(f"{needed} is missing: --run must be a finished run of the default")
    times: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="scoring-job-") as scratch:
        for rep in range(args.reps):
            for mode in rotated(MODES, rep):
                wall, cpu, out = timed_child(mode, args, Path(scratch), rep)
                times[mode].append((wall, cpu))
                results.setdefault(mode, out.read_text())
    print(f"device: {job_cpu()}{mkl_kernels()}")  # the children inherit this process's LD_PRELOAD
    tasks, items = len(run_tasks(args.run, args.model)), len(json.loads(results["none"]))
    print(f"scoring {args.model} on {tasks} tasks ({items} items), {args.reps} reps, median of each:")
    reference = medians(times["lm-eval"])
    for mode in MODES:
        wall, cpu = medians(times[mode])
        print(f"  {mode:<9} wall {wall:6.1f} s (x{wall / reference[0]:.2f})   "
              f"CPU {cpu:6.1f} s (x{cpu / reference[1]:.2f})")
    same = len(set(results.values())) == 1
    print(f"per-item log-likelihoods identical in all {len(MODES)}: {same}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
