"""How far along a job is and how fast it goes: ``ProgressLog`` writes one readable line every so
often to the ``condensation`` logger (training, extraction, checkpoint measurement);
``MetricTracker`` keeps a training run's per-step metric series for DVC (``dvc plots``,
``dvc exp show``) while the run trains; ``CsvLog`` writes the run's ``log.csv``.

Lines are plain log records, never carriage-return bars: they read the same in a terminal and
in the per-job log files Snakemake keeps. Nothing here imports torch at module level; dvclive
and transformers are imported only when a tracker is opened or the libraries' bars are switched.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import importlib.util
import logging
import math
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from condensation.runtime.io import atomic_path

logger = logging.getLogger("condensation")

TRACKER_DIR = "dvclive"
"""The tracker's directory inside a run directory."""


# ----------------------------------------------------------------------------- progress lines


def format_duration(seconds: float) -> str:
    """``42s``, ``4m05s``, ``1h12m``, ``2d03h``: two units at most, rounded down."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600:02d}h"


def format_rate(rate: float) -> str:
    """``5,210`` above 100 per second (digits grouped), three significant digits below."""
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


class ProgressLog:
    """One line per report: ``step 120/1526 (7.9 %) | 5,210 tok/s | ETA 1h12m | ce 3.412``.

    ``update(n)`` advances by ``n`` units; a line is written when the position crosses a multiple
    of ``every`` units (0: never by count), when ``every_seconds`` have passed since the last line
    (0: never by time), and at ``total``. Speed and ETA are taken over the interval since the last
    line, so they follow the current pace (a slow first step or a compile weighs only on the first
    line). ``work`` = ``(amount per unit, name)`` reports the speed in that work instead of in
    units, e.g. ``(tokens per step, "tok")``. Values passed to ``update`` (ce, val, ...) are kept
    until replaced (None replaces nothing), so a validation loss measured at a checkpoint stays on
    the lines after it; a line shows them in the order of the last ``update``'s keywords.

    For extraction, the per-batch callback is ``ProgressLog(total=N, unit="seq", every=1).update``,
    called with the batch's number of sequences.
    """

    def __init__(
        self,
        total: int,
        unit: str = "step",
        *,
        every: int = 0,
        every_seconds: float = 60.0,
        work: tuple[float, str] | None = None,
        done: int = 0,
        label: str = "",
        log: logging.Logger = logger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if total < 1 or every < 0 or every_seconds < 0:
            raise ValueError(f"ProgressLog needs total >= 1, every >= 0, every_seconds >= 0; "
                             f"got {total}, {every}, {every_seconds}")
        self.total, self.unit, self.every, self.every_seconds = total, unit, every, every_seconds
        self.work, self.label, self.log, self.clock = work, label, log, clock
        self.position = done
        self.values: dict[str, float] = {}
        self.started = self._last_time = clock()
        self._last_position = done

    def update(self, n: int = 1, **values: float | None) -> bool:
        """Advance by ``n`` units and remember ``values`` (None is skipped); True if a line was written."""
        before, self.position = self.position, self.position + n
        # in the order of this call, a None keeping the value before; values not named stay, after them
        named = {name: self.values.get(name) if value is None else value for name, value in values.items()}
        self.values = {name: value for name, value in named.items() if value is not None} | {
            name: value for name, value in self.values.items() if name not in named
        }
        due = (
            self.position >= self.total
            or (self.every > 0 and self.position // self.every > before // self.every)
            or (self.every_seconds > 0 and self.clock() - self._last_time >= self.every_seconds)
        )
        if due:
            self.report()
        return due

    def report(self) -> None:
        """Write a line now; the next line's speed is measured from here."""
        now = self.clock()
        self.log.info(self.line(now))
        self._last_time, self._last_position = now, self.position

    def line(self, now: float) -> str:
        """The report at time ``now``: position, speed and ETA since the last line, then the values."""
        position = min(self.position, self.total)
        parts = [f"{self.unit} {position}/{self.total} ({100.0 * position / self.total:.1f} %)"]
        seconds, advanced = now - self._last_time, self.position - self._last_position
        per_second = advanced / seconds if seconds > 0 else math.nan
        amount, name = self.work if self.work is not None else (1.0, self.unit)
        if position >= self.total:
            parts.append(f"done in {format_duration(now - self.started)}")
        elif per_second > 0:
            parts.append(f"{format_rate(per_second * amount)} {name}/s")
            parts.append(f"ETA {format_duration((self.total - position) / per_second)}")
        parts += [f"{key} {value:.4g}" for key, value in self.values.items()]
        return (f"{self.label}: " if self.label else "") + " | ".join(parts)


@contextlib.contextmanager
def library_bars_off_in_files(stream: TextIO | None = None) -> Iterator[None]:
    """Switch off the Hugging Face libraries' tqdm bars while ``stream`` (default: stderr) is not
    a terminal: in a job's log file a bar is a run of carriage returns (a checkpoint save draws
    "Writing model shards", a model load "Loading weights"). A terminal keeps them."""
    # deferred: transformers is heavy; runtime/ stays light
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    stream = sys.stderr if stream is None else stream
    if stream.isatty() or not hf_logging.is_progress_bar_enabled():
        yield
        return
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.enable_progress_bar()


# ----------------------------------------------------------------------------- log.csv


LOG_COLUMNS = ("step", "tokens", "lr", "loss", "ce_loss", "aux_loss", "grad_norm", "val_loss", "elapsed_s")
"""The columns of a run's ``log.csv`` (the workflow's loss tables read it)."""


class CsvLog:
    """``log.csv``, one row per step, flushed as written; a no-op on non-main processes."""

    def __init__(self, path: Path, *, append: bool, enabled: bool) -> None:
        self.path = path
        self._handle = None
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(path, "a" if append else "w", newline="", encoding="utf-8")
            self._writer = csv.writer(self._handle)
            if not append:
                self._writer.writerow(LOG_COLUMNS)

    def append(self, row: dict[str, Any]) -> None:
        if self._handle is not None:
            self._writer.writerow([_format(row.get(column)) for column in LOG_COLUMNS])
            self._handle.flush()

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.flush()

    def __enter__(self) -> CsvLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.8g}"
    return str(value)


# ----------------------------------------------------------------------------- metric tracker


TRACKER_PACKAGES = {"dvclive": "dvclive"}
"""Tracker name -> the package it needs (``none`` needs none)."""


def check_tracker(kind: str, directory: Path) -> None:
    """Before training: the tracker's package is importable and ``directory`` can be written,
    else an error that names the package or the directory."""
    if kind == "none":
        return
    package = TRACKER_PACKAGES[kind]
    if importlib.util.find_spec(package) is None:
        raise ModuleNotFoundError(
            f"train.tracker is {kind!r} but the package {package!r} is not installed: install it "
            f"(pip install -c constraints.txt {package}) or set train.tracker: none"
        )
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        raise OSError(f"the {kind} tracker cannot write its directory {directory}: "
                      f"{error.strerror or error}") from error


class MetricTracker:
    """A training run's metric series, in DVCLive's format: ``plots/metrics/<name>.tsv`` (a
    ``step`` column and the value; a name with ``/`` gets a subdirectory) appended as each step
    is logged, and ``metrics.json`` (the latest values) rewritten by ``write_summary``.

    Only ``Live.log_metric`` and ``Live.make_summary`` are used while training: DVCLive's
    ``next_step`` (which accelerate's tracker calls on every log) re-reads every series file on
    each call, a cost that grows with the run. ``resume_after`` (the step of the state a run
    resumes from) drops the rows a killed run logged after that step, since the resumed run logs
    those steps again: the series stays one row per step, without duplicates or gaps."""

    def __init__(self, directory: Path, resume_after: int | None) -> None:
        self.directory = Path(directory)
        if resume_after is not None:
            drop_rows_after(self.directory, resume_after)
        # DVCLive logs "Resuming from step N" with the last step its files saw, which after a kill
        # is not where the run resumes; the training log's own line says that.
        logging.getLogger("dvclive").setLevel(logging.WARNING)
        self.live = _live_class()(str(self.directory), resume=resume_after is not None, save_dvc_exp=False,
                                  dvcyaml=False)

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.live.log_params(dict(params))

    def log(self, step: int, values: Mapping[str, float | None]) -> None:
        """One row per named value at ``step``; None values are left out."""
        self.live.step = step
        for name, value in values.items():
            if value is not None:
                self.live.log_metric(name, float(value))

    def write_summary(self) -> None:
        self.live.make_summary()

    def close(self) -> None:
        # Not Live.end(): without the repository hook it adds only a DVC Studio report, and it
        # re-reads every series file to build it.
        self.live.make_summary()


class NoTracker:
    """``tracker: none``, and every process but the main one: logs nothing."""

    def log_params(self, params: Mapping[str, Any]) -> None:
        pass

    def log(self, step: int, values: Mapping[str, float | None]) -> None:
        pass

    def write_summary(self) -> None:
        pass

    def close(self) -> None:
        pass


def open_tracker(kind: str, directory: Path, resume_after: int | None) -> MetricTracker | NoTracker:
    """The tracker of a run (``kind`` as ``TrainConfig.tracker``), resuming after a step or fresh."""
    return NoTracker() if kind == "none" else MetricTracker(directory, resume_after)


def drop_rows_after(directory: Path, step: int) -> None:
    """Remove the rows of steps after ``step`` from every series file under ``directory``. A file
    a kill left empty goes too (DVCLive writes the header only when it creates the file)."""
    for path in sorted((Path(directory) / "plots" / "metrics").rglob("*.tsv")):
        lines = path.read_text(encoding="utf-8").splitlines()
        if not lines:
            path.unlink()
            continue
        header, *rows = lines
        columns = header.split("\t")
        kept = [row for row in rows if _row_step(row, columns) <= step]
        if len(kept) < len(rows):
            with atomic_path(path) as tmp:
                tmp.write_text("\n".join([header, *kept]) + "\n", encoding="utf-8")


def _row_step(row: str, columns: list[str]) -> float:
    """The step of a series row; a row cut short by a kill counts as after every step."""
    fields = row.split("\t")
    try:
        return int(fields[columns.index("step")]) if len(fields) == len(columns) else math.inf
    except ValueError:
        return math.inf


@functools.lru_cache(maxsize=1)
def _live_class() -> type:
    # deferred: dvclive is of the workflow extra; only a run's tracker needs it
    from dvclive import Live  # noqa: PLC0415

    class RunLive(Live):
        """``Live`` without its repository hook: ``Live()`` opens the DVC repository of the working
        directory (and runs ``dvc init`` and ``git add`` in a git repository that has none) to name
        and save DVC experiments. A run writes only into its run directory, and DVC reads the series
        through the project's dvc.yaml, so the hook is skipped."""

        def _init_dvc(self) -> None:
            pass

    return RunLive


__all__ = [
    "LOG_COLUMNS",
    "TRACKER_DIR",
    "CsvLog",
    "MetricTracker",
    "NoTracker",
    "ProgressLog",
    "check_tracker",
    "drop_rows_after",
    "format_duration",
    "format_rate",
    "library_bars_off_in_files",
    "open_tracker",
]
