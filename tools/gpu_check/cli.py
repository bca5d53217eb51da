"""The command line: which steps, in which order, in which boxes; each step run in turn and the
summary rewritten after each; the exit status says whether every step went as it should."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import time
from pathlib import Path
from typing import Any

from . import __doc__ as ABOUT
from .benchmark_steps import run_benchmarks
from .boxes import STOP_GRACE_S
from .environment import blocked_by, run_env
from .gpu_tests import run_tests
from .header import call_header
from .plan import REPO, STEPS, Context
from .summary import save_summary
from .workflow import run_workflow, workflow_command

OK = {"passed", "done", "collected (all skipped without CUDA)", "planned (dry run)"}
"""The statuses of a step that went as it should; any other makes the call exit 1."""


def run_step(ctx: Context, name: str, names: list[str], summary: dict[str, Any]) -> dict[str, Any]:
    """One step in its box (shrunk to what the deadline leaves); a step that raises is recorded
    as failed, and the next still runs."""
    step = STEPS[name]
    box = step.box(ctx)
    if ctx.deadline is not None:  # what is left before the deadline, less the time to stop and write
        box = min(box, ctx.deadline - time.monotonic() - STOP_GRACE_S - 5)
    started = time.perf_counter()
    try:
        if box < 10:
            result = {"status": "not run: the call's deadline"}
        elif name == "env":
            result = run_env(ctx, names, box)
        elif (reason := blocked_by(step, summary["steps"].get("env", {}), ctx.cpu)) is not None:
            result = {"status": f"not run: {reason}"}
        elif name == "tests":
            result = run_tests(ctx, box)
        elif step.benchmarks:
            result = run_benchmarks(ctx, step, box)
        else:
            result = run_workflow(ctx, step, box)
    except Exception as error:  # noqa: BLE001 - recorded, and the next step still runs
        result = {"status": "failed", "error": f"{type(error).__name__}: {error}"}
    return {"box_s": box, "took_s": round(time.perf_counter() - started, 1)} | result


def print_plan(ctx: Context, names: list[str]) -> None:
    """``--plan``: each step's commands and box, run nothing (what a lease's call will do)."""
    for name in names:
        step = STEPS[name]
        print(f"  {name}: {step.what} (time box {step.box(ctx):.0f} s)")
        for bench in step.benchmarks:
            print(f"      {shlex.join(['python', *bench.command(ctx)[1:]])}")
        if step.configfiles:
            print(f"      {shlex.join(['snakemake', *workflow_command(ctx, step)[3:]])}")
    total = sum(STEPS[name].box(ctx) for name in names)
    print(f"  at most {total:.0f} s in all; then {ctx.out / 'summary.md'}, summary.json and logs.tar.gz")


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.gpu_check",
        description=ABOUT.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(ABOUT.split("\n\n")[1:]),
    )
    parser.add_argument("steps", nargs="*", metavar="STEP", help=f"of: {', '.join(STEPS)} (default: all but smollm2)")
    parser.add_argument("--cpu", action="store_true", help="the rehearsal: every step at toy size on the CPU")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT") or REPO / "gpu-check" / "out"),
        help="where summary.json, summary.md and logs.tar.gz go (default $OUT, else gpu-check/out)",
    )
    parser.add_argument("--work", type=Path, default=REPO / "gpu-check", help="logs, benchmark JSON, workflow copies")
    parser.add_argument(
        "--box", action="append", default=[], metavar="STEP=SECONDS", help="another time box for a step"
    )
    parser.add_argument(
        "--deadline", type=float, metavar="SECONDS", help="end within this many seconds: late steps' boxes shrink"
    )
    parser.add_argument("--plan", action="store_true", help="print what each step runs and exit")
    return parser


def parse_args(argv: list[str] | None) -> tuple[Context, list[str], bool]:
    """The call's context, the steps to run (``env`` first) and whether only the plan is asked for."""
    options = parser()
    args = options.parse_args(argv)
    try:
        boxes = {name: float(seconds) for name, _, seconds in (box.partition("=") for box in args.box)}
    except ValueError:
        options.error(f"--box takes STEP=SECONDS, not {args.box}")
    unknown = [name for name in [*args.steps, *boxes] if name not in STEPS]
    if unknown:
        options.error(f"unknown step(s) {', '.join(unknown)}; the steps: {', '.join(STEPS)}")
    # named steps run in the order named (the SmolLM2 call runs smollm2 first, then what time is left for)
    chosen = list(dict.fromkeys(args.steps)) or [name for name, step in STEPS.items() if not step.optional]
    deadline = time.monotonic() + args.deadline if args.deadline else None
    ctx = Context(out=args.out.resolve(), work=args.work.resolve(), cpu=args.cpu, boxes=boxes, deadline=deadline)
    return ctx, ["env", *(name for name in chosen if name != "env")], args.plan


def main(argv: list[str] | None = None) -> int:
    """Run the steps, the summary rewritten after each; 0 when every step went as it should."""
    ctx, names, plan_only = parse_args(argv)
    if plan_only:
        print_plan(ctx, names)
        return 0
    for folder in ("logs", "benchmarks"):
        shutil.rmtree(ctx.work / folder, ignore_errors=True)
        (ctx.work / folder).mkdir(parents=True)
    summary: dict[str, Any] = {"call": call_header(ctx), "steps": {}}
    for name in names:
        print(f"[gpu_check] {name}: {STEPS[name].what} (box {STEPS[name].box(ctx):.0f} s)", flush=True)
        summary["steps"][name] = result = run_step(ctx, name, names, summary)
        save_summary(ctx, summary)
        print(f"[gpu_check] {name}: {result['status']} in {result['took_s']:.0f} s", flush=True)
        for problem in result.get("problems", []):
            print(f"[gpu_check]   {problem}", flush=True)
    print(f"[gpu_check] summary: {ctx.out / 'summary.md'}")
    return 0 if all(step["status"] in OK for step in summary["steps"].values()) else 1
