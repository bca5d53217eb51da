"""One scoring job of the default pipeline with lm-eval's response cache, with ours, and with none.

    python benchmarks/scoring_job.py --run DIR [--model toy-mlp256] [--reps 3]

DIR is a finished run of the default (``benchmarks/default_pipeline.py --keep DIR``): its built
tasks (``data/eval_tasks``, config.yaml's four Persuasion tasks, 4,800 requests) and a model's
handle. Each rep scores that model once in each way, each in a fresh process as a Snakemake job
runs (imports and model loading included), in an interleaved order:

* ``lm-eval``: ``simple_evaluate(use_cache=...)``, lm-eval's ``CachingLM`` (how the harness scored
  before ``ResponseCache``): a commit after every response written;
* ``ours``: ``harness.score_model`` with its ``ResponseCache`` (the same file, committed every 30 s);
* ``none``: ``harness.score_model`` without a cache.

It prints the median wall and CPU seconds of each (CPU: the process's user + system time, steady
on a shared machine; wall: also the waits for the disk) with ratios to lm-eval's, and checks
that the three give the same per-item log-likelihoods.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _common import job_cpu, medians, rotated, timed_process

TASKS = {"persuasion_cloze": 0, "persuasion_next_sentence": 0, "persuasion_word_order": 0, "persuasion_word_choice": 1}
"""config.yaml's tasks and shots (evaluation.tasks, fewshot.default 1)."""
MODES = ("lm-eval", "ours", "none")


def score_once(mode: str, handle_path: Path, task_dir: Path, prefix: Path, out: Path) -> None:
    """Score in this process as ``mode`` says; write each item's log-likelihoods to ``out``."""
    import torch

    from condensation import models
    from condensation.evaluation import harness

    torch.set_num_threads(1)  # as the scoring jobs run
    handle = models.ModelHandle.load(handle_path)
    tokenizer, model = (models.load_tokenizer(handle),
                        models.load_model(handle, dtype="auto", device="auto", causal_lm=True))
    settings = harness.EvalSettings()
    if mode == "lm-eval":
        loglikelihoods = _score_with_lm_eval_cache(model, tokenizer, task_dir, prefix, settings)
    else:
        run = harness.score_model(model, tokenizer, TASKS, settings, include_path=task_dir,
                                  cache_prefix=prefix if mode == "ours" else None)
        loglikelihoods = {f"{row['subtask']}/{row['doc_id']}": row["loglikelihoods"] for row in run.samples}
    out.write_text(json.dumps(loglikelihoods, sort_keys=True))


def _score_with_lm_eval_cache(model, tokenizer, task_dir: Path, prefix: Path, settings) -> dict[str, list[float]]:
    """The harness's calls as they were: one ``simple_evaluate`` per shot count, lm-eval's cache."""
    import torch
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    model.eval()
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=settings.batch_size)
    manager = TaskManager(include_path=[str(task_dir.resolve())], include_defaults=False)
    loglikelihoods = {}
    for shots in sorted(set(TASKS.values())):
        with torch.no_grad():
            out = simple_evaluate(
                model=lm, tasks=[name for name, n in TASKS.items() if n == shots], num_fewshot=shots,
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
        score_once(args.one, handle, task_dir, args.prefix, args.out)
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
    print(f"device: {job_cpu()}")
    print(f"scoring {args.model} on {sum(1 for _ in TASKS)} tasks ({len(json.loads(results['none']))} items), "
          f"{args.reps} reps, median of each:")
    reference = medians(times["lm-eval"])
    for mode in MODES:
        wall, cpu = medians(times[mode])
        print(f"  {mode:<8} wall {wall:6.1f} s (x{wall / reference[0]:.2f})   "
              f"CPU {cpu:6.1f} s (x{cpu / reference[1]:.2f})")
    same = len(set(results.values())) == 1
    print(f"per-item log-likelihoods identical in the three: {same}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
