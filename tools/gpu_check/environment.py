"""The ``env`` step, and what it decides for the others: a step whose modules did not import, or
that needs CUDA where there is none, is not run, and the summary says why."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .plan import STEPS, Context, Step
from .probe import TOOLS, kit_report, probe


def env_modules(names: list[str]) -> list[str]:
    """What the named steps import; for ``env`` alone, what the default steps import (a first call
    that only installs the kit still checks what the next call's steps will need)."""
    modules = {module for name in names for module in STEPS[name].needs}
    return sorted(modules or {module for step in STEPS.values() if not step.optional for module in step.needs})


def run_env(ctx: Context, names: list[str], limit_s: float) -> dict[str, Any]:
    modules = env_modules(names)
    try:
        report = probe(ctx, modules, limit_s)
    except subprocess.TimeoutExpired:  # a loaded or cold machine: say so, rather than a bare error
        return {
            "status": "failed",
            "problems": [f"the import probe of {len(modules)} modules took over its {limit_s:.0f} s box"],
            "log": "logs/env.log",
        }
    missing = {module: error for module, error in report["modules"].items() if error}
    disk = {str(path): round(shutil.disk_usage(path).free / 2**30, 1) for path in (ctx.work, Path("/tmp"))}
    result: dict[str, Any] = {
        "python": platform.python_version(),
        "cuda": report["cuda"],
        "versions": report["versions"],
        "missing_modules": missing,
        "disk_free_gib": disk,
        "tools": {tool: shutil.which(tool) for tool in TOOLS},
        "kit": kit_report(),
        "log": "logs/env.log",
    }
    problems = [f"module {module}: {error}" for module, error in missing.items()] + env_problems(ctx, report)
    if not result["tools"]["dpkg-deb"]:
        problems.append("dpkg-deb is not on PATH (the workflow builds its corpus with it)")
    result["problems"] = problems
    kit = result["kit"] or {}
    # an image package older or newer than a carried wheel says it needs: named, not fatal (the imports decide)
    result["warnings"] = [f"{name}: {'; '.join(why)}" for name, why in kit.get("unmet", {}).items()]
    result["status"] = "passed" if not problems else "failed"
    return result


def env_problems(ctx: Context, report: dict[str, Any]) -> list[str]:
    """On a GPU call (not the rehearsal): no CUDA device, or CUDA without working bf16."""
    if ctx.cpu:
        return []
    cuda = report["cuda"]
    if not cuda.get("available"):
        return [f"no CUDA device visible to torch {report['versions'].get('torch')} {cuda.get('error', '')}"]
    if not cuda.get("bf16") or not cuda.get("bf16_matmul_ok"):
        return ["CUDA without working bf16"]
    return []


def blocked_by(step: Step, env: dict[str, Any], cpu: bool) -> str | None:
    """Why ``step`` cannot run after this environment check; None when it can."""
    if "cuda" not in env:
        return "the environment check did not finish"
    if not cpu and not env["cuda"].get("available"):
        return "no CUDA device"
    missing = sorted(set(step.needs) & set(env.get("missing_modules", {})))
    return f"missing module(s): {', '.join(missing)}" if missing else None
