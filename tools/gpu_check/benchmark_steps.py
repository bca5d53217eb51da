"""The benchmark steps (``dispersion``, ``training``, ``extraction``): each script in turn, in
what is left of the step's box, its JSON read into the headline numbers the targets judge."""

from __future__ import annotations

import json
import shlex
import time
from typing import Any

from .boxes import log_tail, run_limited
from .headlines import headline
from .plan import Context, Step


def run_benchmarks(ctx: Context, step: Step, limit_s: float) -> dict[str, Any]:
    """Each benchmark of the step in turn, in what is left of the step's box."""
    started = time.perf_counter()
    runs, numbers = [], {}
    for bench in step.benchmarks:
        left = limit_s - (time.perf_counter() - started)
        path = ctx.work / "benchmarks" / f"{bench.name}.json"
        path.unlink(missing_ok=True)
        if left < 10:
            runs.append({"name": bench.name, "status": "not run: the step's time was spent"})
            continue
        command = bench.command(ctx)
        ran = run_limited(command, ctx.log(step.name), left)
        status = (
            "stopped at the limit"
            if ran.stopped_at_limit
            else "done"
            if ran.returncode == 0 and path.exists()
            else "failed"
        )
        runs.append(
            {
                "name": bench.name,
                "command": shlex.join(["python", *command[1:]]),
                "status": status,
                "returncode": ran.returncode,
                "wall_s": round(ran.wall_s, 1),
            }
        )
        if path.exists():
            numbers[bench.name] = headline(bench.name, json.loads(path.read_text()))
    statuses = {run["status"] for run in runs}
    result = {
        "wall_s": round(time.perf_counter() - started, 1),
        "runs": runs,
        "numbers": numbers,
        "log": f"logs/{step.name}.log",
        "status": "done" if statuses == {"done"} else "failed" if "failed" in statuses else "stopped at the limit",
    }
    if result["status"] != "done":
        result["error"] = log_tail(ctx.log(step.name))
    return result
