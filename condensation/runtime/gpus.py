"""Which of this machine's GPUs a job uses, when Snakemake runs jobs on the machine itself.

Snakemake's ``gpu`` resource caps how many GPUs busy jobs take at once, but it does not say
which: every job would start on GPU 0. A job claims GPUs of its own with an exclusive lock per
GPU (held as long as the process lives) and sees only those (``CUDA_VISIBLE_DEVICES``). Under a
scheduler that already set that variable (SLURM) nothing is claimed. Torch-free:

    python -m condensation.runtime.gpus 2 -- accelerate launch ... train_run.py ...

becomes a command (here a two-process DDP run) on two GPUs of its own.
"""

from __future__ import annotations

import fcntl
import glob
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

log = logging.getLogger("condensation")

GPU_LOCKS = Path(tempfile.gettempdir()) / "condensation-gpus"
"""One lock file per GPU of this machine."""

_HELD: list = []  # the open lock files: closing one would release its GPU


def claim_gpus(count: int, total: int | None = None, locks: Path = GPU_LOCKS) -> list[int]:
    """Claim ``count`` GPUs for this process and set ``CUDA_VISIBLE_DEVICES`` to them; wait while
    all are busy. Nothing when the variable is already set, or the machine has no GPU."""
    if count < 1 or "CUDA_VISIBLE_DEVICES" in os.environ:
        return []
    total = len(glob.glob("/dev/nvidia[0-9]*")) if total is None else total
    wanted = min(count, total)
    if wanted < 1:
        return []
    locks.mkdir(parents=True, exist_ok=True)
    claimed: list[int] = []
    while True:
        for index in range(total):
            if len(claimed) < wanted and index not in claimed and _lock(locks / f"gpu{index}.lock"):
                claimed.append(index)
        if len(claimed) == wanted:
            break
        time.sleep(1.0)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, claimed))
    log.info("claimed GPU(s) %s", os.environ["CUDA_VISIBLE_DEVICES"])
    return claimed


def _lock(path: Path) -> bool:
    handle = open(path, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return False
    _HELD.append(handle)
    return True


def main(argv: list[str]) -> NoReturn:
    """``<count> -- command ...``: become the command, on ``count`` GPUs of its own.

    Exec, not a child: a scheduler's SIGTERM (a time limit, a preemption) then reaches the
    training process itself, and nothing between it and the job step dies of the signal while
    it saves its state (a dead wrapper ends the step, and SLURM kills what is left). The GPU
    locks pass to the command, held while it lives."""
    count, separator, *command = argv
    if separator != "--" or not command:
        raise SystemExit("usage: python -m condensation.runtime.gpus <count> -- command ...")
    claim_gpus(int(count))
    for handle in _HELD:
        os.set_inheritable(handle.fileno(), True)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        hint = " (a run over several nodes runs under SLURM: docs/cluster.md)" if command[0] == "srun" else ""
        raise SystemExit(f"condensation.runtime.gpus: {command[0]}: command not found{hint}") from None


if __name__ == "__main__":
    main(sys.argv[1:])
