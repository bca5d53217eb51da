"""What a workflow copy's run leaves that comes back from the lent machine: its records (job
logs, benchmark files, run records, tables; no weights) packed within the size a returned file
may have, and each rule's finished jobs timed, to size the next lease's box by."""

from __future__ import annotations

import importlib.util
import sys
import tarfile
from pathlib import Path

from .plan import REPO

RECORD_MAX_BYTES = 2**20
"""A workflow copy's file larger than this stays there (weights, activations, score samples)."""
RECORDS_MAX_BYTES = 12 * 2**20
"""All of a workflow copy's records together, under the 16 MiB a file that comes back may have."""
RECORD_FOLDERS = ("logs", "results", "runs", "benchmarks")
"""Where a workflow copy's records are (not data/ or models/: inputs, rebuilt from the sources)."""


def job_seconds(work: Path) -> dict[str, dict[str, float]]:
    """Each rule's finished jobs, read as ``benchmarks/default_pipeline.py --report`` reads a run
    (Snakemake's log, then each job's ``benchmark:`` file): how many, their total and longest wall
    seconds (what to size the next lease's box by)."""
    default_pipeline = sys.modules.get("default_pipeline")
    if default_pipeline is None:  # a script beside the benchmarks, not a package: loaded by path
        spec = importlib.util.spec_from_file_location("default_pipeline", REPO / "benchmarks" / "default_pipeline.py")
        default_pipeline = sys.modules["default_pipeline"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(default_pipeline)  # its dataclasses look their module up
    if not any((work / ".snakemake" / "log").glob("*.snakemake.log")):
        return {}
    by_rule: dict[str, list[float]] = {}
    for job in default_pipeline.read_run(work).values():
        # finished as Snakemake's log says: a job's benchmark file is written before Snakemake
        # registers the job, so a run stopped at its box can leave one of an unfinished job
        if job.seconds is not None and job.end is not None:
            by_rule.setdefault(job.rule, []).append(job.seconds)
    return {
        rule: {"jobs": len(times), "total_s": round(sum(times), 1), "longest_s": round(max(times), 1)}
        for rule, times in by_rule.items()
    }


def pack_records(work: Path, archive_path: Path) -> list[str]:
    """A workflow copy's records (``RECORD_FOLDERS``, files up to ``RECORD_MAX_BYTES``, smallest
    first until ``RECORDS_MAX_BYTES``) into ``archive_path``; returns what stayed for size."""
    files = sorted(
        (path for folder in RECORD_FOLDERS for path in (work / folder).rglob("*") if path.is_file()),
        key=lambda path: (path.stat().st_size, str(path)),
    )
    left, total = [], 0
    partial = archive_path.with_name(archive_path.name + ".partial")
    with tarfile.open(partial, "w:gz") as archive:
        for path in files:
            size = path.stat().st_size
            if size > RECORD_MAX_BYTES or total + size > RECORDS_MAX_BYTES:
                left.append(str(path.relative_to(work)))
                continue
            archive.add(path, arcname=str(path.relative_to(work)))
            total += size
    partial.replace(archive_path)
    return left
