"""SIGTERM as a request to stop training at the next step, with its state saved.

A scheduler sends SIGTERM before it kills a job: SLURM when it preempts one or its time runs out
(``KillWait`` seconds later, or at the time ``--signal`` asks for), Kubernetes and most batch
systems alike. :func:`condensation.training.loop.train` then finishes the step under way, saves
the resumable state of that step and raises :class:`TrainingStopped`, so the job fails and its
retry (the SLURM profile's ``retries``, or ``snakemake`` again) resumes at that step with weights
bit-identical to an uninterrupted run's and no step trained twice.

A scheduler signals every process of a job step at once, and a launcher in it (torchrun) passes
its own SIGTERM on to the ranks: a rank gets the one request twice. So a repeated SIGTERM is the
same request, not an order to die; what ends a run that does not stop in time is the SIGKILL
that follows (SLURM's ``KillWait`` later, torchrun's 30 s later).

Every rank watches for the signal on its own; the loop adds each rank's flag to the numbers it
already reduces over ranks every step, so all ranks stop after the same step without a
collective of their own.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

log = logging.getLogger("condensation")

__all__ = ["StopSignal", "TrainingStopped"]


class TrainingStopped(RuntimeError):
    """Training stopped on a signal; its state is saved and a rerun resumes it."""


class StopSignal:
    """While entered, SIGTERM sets :attr:`requested` instead of ending the process (a repeat is the
    same request). Outside the main thread, where Python cannot handle signals, it changes nothing
    and :attr:`requested` stays False."""

    def __init__(self, signum: int = signal.SIGTERM):
        self.signum = signum
        self.requested = False
        self._previous: object = None
        self._installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:  # the same request again, by another path (module docstring)
            return
        self.requested = True
        log.warning("%s received: training stops after this step and saves its state",
                    signal.Signals(signum).name)

    def __enter__(self) -> StopSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(self.signum, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._installed:
            signal.signal(self.signum, signal.SIG_DFL if self._previous is None else self._previous)
            self._installed = False
