"""The call's header in the summary: when, where, on which driver and Python, and which commit,
so that every number the summary keeps can be traced to the code and machine that made it."""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
from typing import Any

from .plan import REPO, Context


def nvidia_driver() -> str | None:
    """The driver's version, which the summary's header names beside torch's CUDA."""
    if shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        check=False,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


def commit() -> dict[str, Any]:
    """The checkout's commit: ``GPU_CHECK_COMMIT`` where the call's command names it, else git's.
    The named one wins: the lent machine's copy of the tree may carry a ``.git`` of another branch
    (on 2026-11-26 it reported main's head for a tree of the findings branch)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=REPO, check=False, capture_output=True, text=True)
        except FileNotFoundError:
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    named = os.environ.get("GPU_CHECK_COMMIT")
    if named:
        return {"commit": named, "uncommitted_changes": None, "commit_from": "GPU_CHECK_COMMIT"}
    head = git("rev-parse", "HEAD")
    if head:
        changed = git("status", "--porcelain", "--untracked-files=no")
        return {"commit": head, "uncommitted_changes": bool(changed), "commit_from": "git"}
    return {"commit": None, "uncommitted_changes": None, "commit_from": None}


def call_header(ctx: Context) -> dict[str, Any]:
    """The summary's ``call``: what a number is read beside (date, host, mode, Python, driver, commit)."""
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": platform.node(),
        "mode": "cpu rehearsal" if ctx.cpu else "gpu",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "driver": nvidia_driver(),
        **commit(),
    }
