"""Running a step's command in its time box: stopped with its whole process group, its output
kept in the step's log, so that one hung step never takes the lease."""

from __future__ import annotations

import datetime
import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .plan import REPO

STOP_GRACE_S = 20
"""After a time box, how long a step's processes get to stop (SIGINT for Snakemake, SIGTERM else) before SIGKILL."""


@dataclass
class Ran:
    returncode: int | None
    wall_s: float
    stopped_at_limit: bool


def run_limited(
    command: list[str],
    log: Path,
    limit_s: float,
    cwd: Path = REPO,
    env: dict | None = None,
    stop_signal: int = signal.SIGTERM,
) -> Ran:
    """Run ``command`` with its output appended to ``log``; at ``limit_s``, send ``stop_signal``
    to its process group, then SIGKILL after ``STOP_GRACE_S``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log, "a") as handle:
        handle.write(
            f"\n$ {shlex.join(command)}   (in {cwd}, {datetime.datetime.now().isoformat(timespec='seconds')})\n"
        )
        handle.flush()
        process = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            returncode = process.wait(timeout=max(limit_s, 1))
            stopped = False
        except subprocess.TimeoutExpired:
            stopped = True
            os.killpg(process.pid, stop_signal)
            try:
                returncode = process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                returncode = process.wait()
            handle.write(f"\n[gpu_check] stopped at the step's limit of {limit_s:.0f} s\n")
    return Ran(returncode, time.perf_counter() - started, stopped)


def log_tail(path: Path, chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""
