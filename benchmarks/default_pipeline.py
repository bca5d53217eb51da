"""Wall time of the embedded default pipeline, where it goes, and what a config would take.

    python benchmarks/default_pipeline.py [--cores 2] [--keep DIR] [--before DIR]
    python benchmarks/default_pipeline.py --report DIR [--before DIR]
    python benchmarks/default_pipeline.py --estimate --times DIR [--configfile FILE ...] [--cores 2]

The first form copies the workflow into a scratch directory (nothing of an earlier run is
reused), runs the README's command (`snakemake --cores N --report results/report.html
--report-after-run`) on config.yaml and reports the run; ``--report`` reports a run already
finished in DIR (any run directory with Snakemake's log and the ``benchmark:`` files).

A report prints, per rule, the jobs and their mean wall and CPU seconds (Snakemake's
``benchmark:`` files: ``s`` and ``cpu_time``; CPU seconds hardly move with the load of a shared
machine, wall seconds do), side by side with ``--before`` and as ratios; then the schedule from
Snakemake's log: how long the cores sat idle, and whether for want of ready jobs (the DAG's
critical path) or while jobs waited to be started (Snakemake's own latency), and the critical
path. ``--estimate`` plans a config with ``snakemake -n`` and list-schedules its jobs on
``--cores`` cores in the rules' priority order, each job taking its time in the finished run
``--times`` (a job that run did not have takes its rule's mean): the wall time to expect before
adding seeds or models to the default.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also where a test loads this file by path
from _common import processor  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PROJECT_FILES = ["Snakefile", "rules", "workflow_scripts", "condensation", "report", "profiles", "config.yaml"]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"
TIMESTAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
JOB_HEADER = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
FINISHED = re.compile(r"^Finished jobid: (\d+) ")


@dataclass
class Job:
    """One job as Snakemake's log (or a dry run) prints it, with its times once known."""

    jobid: int
    rule: str
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    benchmark: str | None = None
    priority: int = 0
    start: float | None = None
    """Seconds after the run's first job started (from the log's timestamps, whole seconds)."""
    end: float | None = None
    seconds: float | None = None
    """Wall seconds of the job itself (its benchmark file's ``s``)."""
    cpu_seconds: float | None = None
    """CPU seconds of the job's processes (its benchmark file's ``cpu_time``)."""


# ----------------------------------------------------------------------------- reading a run


def parse_jobs(lines: list[str]) -> dict[int, Job]:
    """The jobs of Snakemake's console output or log (a real run or a dry run), by jobid."""
    jobs: dict[int, Job] = {}
    clock: float | None = None
    current: Job | None = None
    for line in lines:
        line = line.rstrip("\n")
        if stamp := TIMESTAMP.match(line):
            clock = datetime.strptime(stamp.group(1), "%a %b %d %H:%M:%S %Y").timestamp()
        elif header := JOB_HEADER.match(line):
            current = Job(jobid=-1, rule=header.group(1), start=clock)
        elif current is not None and line.startswith("    ") and ": " in line:
            key, value = line.strip().split(": ", 1)
            _set_job_field(current, key, value, jobs)
        elif finished := FINISHED.match(line):
            if int(finished.group(1)) in jobs:
                jobs[int(finished.group(1))].end = clock
        else:
            current = None
    starts = [job.start for job in jobs.values() if job.start is not None]
    for job in jobs.values():  # seconds since the first start
        job.start = None if job.start is None else job.start - min(starts)
        job.end = None if job.end is None else job.end - min(starts)
    return jobs


def _set_job_field(job: Job, key: str, value: str, jobs: dict[int, Job]) -> None:
    if key == "jobid":
        job.jobid = int(value)
        jobs[job.jobid] = job
    elif key in ("input", "output"):
        setattr(job, f"{key}s", [path.removesuffix(" (directory)") for path in value.split(", ")])
    elif key == "benchmark":
        job.benchmark = value
    elif key == "priority":
        job.priority = 10**9 if value == "highest" else int(float(value))


def read_benchmarks(root: Path, jobs: dict[int, Job]) -> None:
    """Each job's wall and CPU seconds from its ``benchmark:`` file under ``root``."""
    for job in jobs.values():
        if job.benchmark and (root / job.benchmark).is_file():
            with open(root / job.benchmark) as handle:
                row = next(csv.DictReader(handle, delimiter="\t"))
            job.seconds, job.cpu_seconds = float(row["s"]), float(row["cpu_time"])


def read_run(root: Path) -> dict[int, Job]:
    """The jobs of the last Snakemake run in ``root``, with their times."""
    logs = sorted((root / ".snakemake" / "log").glob("*.snakemake.log"))
    if not logs:
        raise SystemExit(f"{root}: no Snakemake log in .snakemake/log/")
    jobs = parse_jobs(logs[-1].read_text().splitlines())
    read_benchmarks(root, jobs)
    return {jobid: job for jobid, job in jobs.items() if job.rule != "all"}


def dependencies(jobs: dict[int, Job]) -> dict[int, set[int]]:
    """jobid -> the jobids whose outputs it reads (a directory output counts for paths inside it)."""
    producer = {path: job.jobid for job in jobs.values() for path in job.outputs}
    needs: dict[int, set[int]] = {}
    for job in jobs.values():
        needs[job.jobid] = set()
        for path in job.inputs:
            parts = Path(path).parts
            for depth in range(len(parts), 0, -1):  # the path itself, then the folders above it
                source = producer.get(str(Path(*parts[:depth])))
                if source is not None and source != job.jobid:
                    needs[job.jobid].add(source)
                    break
    return needs


# ----------------------------------------------------------------------------- the report


def rule_table(jobs: dict[int, Job]) -> dict[str, tuple[int, float, float]]:
    """rule -> (jobs, mean wall seconds, mean CPU seconds), from the benchmark files."""
    per_rule: dict[str, list[Job]] = defaultdict(list)
    for job in jobs.values():
        if job.seconds is not None:
            per_rule[job.rule].append(job)
    return {
        rule: (len(group), statistics.fmean(j.seconds for j in group), statistics.fmean(j.cpu_seconds for j in group))
        for rule, group in per_rule.items()
    }


def print_rules(after: dict[int, Job], before: dict[int, Job] | None) -> None:
    rows, old = rule_table(after), rule_table(before) if before else {}
    total = {name: sum(n * cpu for n, _, cpu in table.values()) for name, table in (("after", rows), ("before", old))}
    if old:
        print(f"  {'rule':<22} {'jobs':>9} {'wall s/job':>17} {'CPU s/job':>17} {'CPU ratio':>9} {'CPU s saved':>11}")
    else:
        print(f"  {'rule':<22} {'jobs':>4} {'wall s/job':>10} {'CPU s/job':>9} {'CPU share':>9}")
    for rule in sorted(set(rows) | set(old), key=lambda r: -(rows.get(r, (0, 0, 0))[0] * rows.get(r, (0, 0, 0))[2])):
        n, wall, cpu = rows.get(rule, (0, 0.0, 0.0))
        if not old:
            print(f"  {rule:<22} {n:>4} {wall:>10.1f} {cpu:>9.1f} {n * cpu / total['after']:>9.1%}")
            continue
        n0, wall0, cpu0 = old.get(rule, (0, 0.0, 0.0))
        ratio = f"x{cpu / cpu0:.2f}" if cpu0 and cpu else "-"
        print(f"  {rule:<22} {n0:>4}/{n:<4} {wall0:>8.1f}/{wall:<8.1f} {cpu0:>8.1f}/{cpu:<8.1f} {ratio:>9} "
              f"{n0 * cpu0 - n * cpu:>11.1f}")
    line = f"  all jobs: {total['after']:.0f} CPU s"
    if old:
        line += f" (before {total['before']:.0f}: x{total['after'] / total['before']:.2f})"
    print(line)


def print_schedule(jobs: dict[int, Job], cores: int) -> None:
    """Idle cores over the run, split by cause, and the critical path."""
    timed = [job for job in jobs.values() if job.start is not None and job.end is not None]
    wall = max(job.end for job in timed)
    needs = dependencies(jobs)
    idle_no_work = idle_waiting = 0.0
    for second in range(int(wall)):
        running = sum(job.start <= second < job.end for job in timed)
        ready = sum(
            job.start > second and all(jobs[d].end is not None and jobs[d].end <= second for d in needs[job.jobid])
            for job in timed
        )
        free = max(cores - running, 0)
        idle_waiting += min(free, ready)
        idle_no_work += free - min(free, ready)
    busy = sum(job.end - job.start for job in timed)
    print(f"  schedule: {wall:.0f} s wall on {cores} cores: {busy:.0f} core-s in jobs, "
          f"{idle_no_work:.0f} core-s idle with no job ready, {idle_waiting:.0f} core-s idle with a job ready "
          f"(Snakemake between jobs; whole-second timestamps)")
    path = critical_path(jobs, needs)
    chain = " -> ".join(f"{jobs[j].rule} {jobs[j].seconds:.0f}s" for j in path)
    print(f"  critical path: {sum(jobs[j].seconds for j in path):.0f} s of job time: {chain}")


def critical_path(jobs: dict[int, Job], needs: dict[int, set[int]]) -> list[int]:
    """The chain of dependent jobs with the most job seconds (benchmark ``s``)."""
    longest: dict[int, tuple[float, list[int]]] = {}

    def visit(jobid: int) -> tuple[float, list[int]]:
        if jobid not in longest:
            before = max((visit(d) for d in needs[jobid]), default=(0.0, []), key=lambda item: item[0])
            longest[jobid] = (before[0] + (jobs[jobid].seconds or 0.0), [*before[1], jobid])
        return longest[jobid]

    return max((visit(j) for j in jobs), key=lambda item: item[0])[1]


def report(root: Path, before: Path | None, cores: int, wall: float | None = None) -> None:
    after_jobs, before_jobs = read_run(root), read_run(before) if before else None
    print(f"device: CPU, {os.cpu_count()} cores visible, --cores {cores}, {processor()}")
    for name, jobs, measured in (("before", before_jobs, None), ("after", after_jobs, wall)):
        if jobs is None:
            continue
        span = max(job.end for job in jobs.values() if job.end is not None)
        shown = measured if measured is not None else span
        print(f"{name if before_jobs else 'run'}: {len(jobs)} jobs, {shown:.0f} s wall ({shown / 60:.1f} min)"
              + ("" if measured is not None else ", first job start to last job end"))
        print_schedule(jobs, cores)
    print_rules(after_jobs, before_jobs)


# ----------------------------------------------------------------------------- the estimate


def simulate(jobs: dict[int, Job], needs: dict[int, set[int]], cores: int, order: random.Random | None) -> float:
    """Makespan of list scheduling on ``cores``: whenever a core is free, the ready job of the
    highest priority starts (ties: jobid order, or a random order with ``order``)."""
    waiting = {jobid: set(deps) for jobid, deps in needs.items()}
    ties = {jobid: (order.random() if order else jobid) for jobid in jobs}
    ready = [(-jobs[j].priority, ties[j], j) for j, deps in waiting.items() if not deps]
    heapq.heapify(ready)
    running: list[tuple[float, int]] = []
    now = 0.0
    while ready or running:
        while ready and len(running) < cores:
            _, _, jobid = heapq.heappop(ready)
            heapq.heappush(running, (now + (jobs[jobid].seconds or 0.0), jobid))
        now, done = heapq.heappop(running)
        for jobid, deps in waiting.items():
            if done in deps:
                deps.discard(done)
                if not deps:
                    heapq.heappush(ready, (-jobs[jobid].priority, ties[jobid], jobid))
    return now


def estimate(configfiles: list[Path], times: Path, cores: int) -> None:
    """Plan the config (``snakemake -n``) and list-schedule it with the job times of a finished run."""
    command = [str(SNAKEMAKE), "-n", "--cores", str(cores)]
    if configfiles:
        command += ["--configfile", *map(str, configfiles)]
    planned = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout
    jobs = {jobid: job for jobid, job in parse_jobs(planned.splitlines()).items() if job.rule != "all"}
    measured = {job.benchmark: job for job in read_run(times).values()}
    by_rule: dict[str, list[float]] = defaultdict(list)
    for job in measured.values():
        if job.seconds is not None:
            by_rule[job.rule].append(job.seconds)
    unmatched = 0
    for job in jobs.values():
        known = measured.get(job.benchmark)
        if known is not None and known.seconds is not None:
            job.seconds = known.seconds
        else:
            unmatched += 1
            job.seconds = statistics.fmean(by_rule[job.rule]) if by_rule[job.rule] else 0.0
    needs = dependencies(jobs)
    work = sum(job.seconds for job in jobs.values())
    path = sum(jobs[j].seconds for j in critical_path(jobs, needs))
    ordered = simulate(jobs, needs, cores, None)
    shuffled = sorted(simulate(jobs, needs, cores, random.Random(seed)) for seed in range(20))
    print(f"{len(jobs)} jobs planned ({unmatched} timed by their rule's mean in {times}): {work:.0f} s of job time, "
          f"critical path {path:.0f} s, lower bound {max(work / cores, path):.0f} s on {cores} cores")
    print(f"list schedule on {cores} cores, the rules' priorities: {ordered:.0f} s ({ordered / 60:.1f} min) with ties "
          f"in jobid order; {shuffled[0]:.0f}-{shuffled[-1]:.0f} s over 20 random tie orders (Snakemake's latency "
          f"between jobs not included)")


# ----------------------------------------------------------------------------- running the default


def run_default(root: Path, cores: int) -> float:
    """Run the README's command on config.yaml in a fresh copy of the workflow at ``root``; its wall seconds."""
    for name in PROJECT_FILES:
        source, target = REPO / name, root / name
        if not target.exists():
            (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    (root / "resources").mkdir(exist_ok=True)
    if not (root / "resources" / "debs").exists():
        (root / "resources" / "debs").symlink_to(REPO / "resources" / "debs")
    started = time.perf_counter()
    # Not --quiet: Snakemake 9 then leaves the jobs' details out of .snakemake/log/ too, which the
    # report reads. Its output goes to a file instead of the terminal.
    command = [str(SNAKEMAKE), "--cores", str(cores), "--report", "results/report.html", "--report-after-run"]
    with open(root / "snakemake-output.txt", "w") as output:
        done = subprocess.run(command, cwd=root, stdout=output, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"snakemake failed (exit {done.returncode}); its output: {root / 'snakemake-output.txt'}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="run in this directory and keep it")
    parser.add_argument("--report", type=Path, metavar="DIR", help="report the finished run in DIR instead of running")
    parser.add_argument("--before", type=Path, metavar="DIR", help="a finished run to compare with, side by side")
    parser.add_argument("--estimate", action="store_true", help="estimate a config's wall time from --times")
    parser.add_argument("--times", type=Path, metavar="DIR", help="the finished run whose job times --estimate uses")
    parser.add_argument("--configfile", type=Path, nargs="*", default=[], help="the config(s) --estimate plans")
    args = parser.parse_args()
    if args.estimate:
        if args.times is None:
            parser.error("--estimate needs --times DIR (a finished run)")
        estimate(args.configfile, args.times, args.cores)
    elif args.report:
        report(args.report, args.before, args.cores)
    else:
        root = args.keep or Path(tempfile.mkdtemp(prefix="condensation-bench-"))
        root.mkdir(parents=True, exist_ok=True)
        wall = run_default(root, args.cores)
        report(root, args.before, args.cores, wall)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
