"""Snakemake's own cost on the default's DAG, with its default settings and with the profile's.

    python benchmarks/snakemake_overhead.py --times DIR [--scale 0.05]

Plans config.yaml (``snakemake -n``: the jobs, their dependencies and the rules' priorities) and
replays it as a workflow of the same jobs that only sleep, each for its wall time in the finished
run DIR times ``--scale``, with a ``benchmark:`` file each as the real rules have. The replay runs
twice at once on 2 cores, once with Snakemake's defaults (the ILP scheduler, its loop woken every
second) and once with the settings of ``profiles/default/profile.yaml``; the jobs cost no CPU, so
what each Snakemake process spends is its own. It prints Snakemake's own CPU seconds per minute
of run, its most threads, the makespan against the list-scheduling bound of
``default_pipeline.py``'s simulation, and how long it took to exit after its last job.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml
from _common import REPO, cpu_cores

_spec = importlib.util.spec_from_file_location("default_pipeline", REPO / "benchmarks" / "default_pipeline.py")
pipeline = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = pipeline
_spec.loader.exec_module(pipeline)

DEFAULTS = ["--scheduler", "ilp", "--max-jobs-per-timespan", "100/1s"]
"""Snakemake's own defaults for the two settings the profile changes."""


def profile_settings() -> list[str]:
    profile = yaml.safe_load((REPO / "profiles" / "default" / "profile.yaml").read_text())
    return ["--scheduler", profile["scheduler"], "--max-jobs-per-timespan", profile["max-jobs-per-timespan"]]


def replay(times: Path, scale: float, root: Path) -> float:
    """Write the sleeping replica of the planned default into ``root``; return its list-schedule bound."""
    planned = subprocess.run([str(pipeline.SNAKEMAKE), "-n"], cwd=REPO, capture_output=True, text=True, check=True)
    jobs = {jobid: job for jobid, job in pipeline.parse_jobs(planned.stdout.splitlines()).items() if job.rule != "all"}
    measured = {job.benchmark: job.seconds for job in pipeline.read_run(times).values()}
    needs = pipeline.dependencies(jobs)
    rules = ["localrules: all\n", "rule all:\n    input: " + ", ".join(f'"done/{j}"' for j in jobs) + "\n"]
    for jobid, job in jobs.items():
        job.seconds = (measured.get(job.benchmark) or 0.0) * scale
        inputs = ", ".join(f'"done/{d}"' for d in sorted(needs[jobid]))
        rules.append(f"rule job{jobid}:\n" + (f"    input: {inputs}\n" if inputs else "")
                     + f'    output: "done/{jobid}"\n'
                     f'    benchmark: "benchmarks/{jobid}.tsv"\n    priority: {job.priority}\n'
                     f'    shell: "sleep {job.seconds:.3f}; touch {{output}}"\n')
    (root / "Snakefile").write_text("\n".join(rules))
    return pipeline.simulate(jobs, needs, 2, None)


def run(root: Path, settings: list[str], report: dict) -> None:
    """Run the replica in ``root`` with ``settings``; put what Snakemake spent into ``report``."""
    started = time.perf_counter()
    with open(root / "snakemake.txt", "w") as log:
        process = subprocess.Popen([str(pipeline.SNAKEMAKE), "--cores", "2", "--workflow-profile", "none", *settings],
                                   cwd=root, stdout=log, stderr=subprocess.STDOUT)
    tick, own, threads, last_job = os.sysconf("SC_CLK_TCK"), 0.0, 0, None
    while process.poll() is None:
        try:  # this process's own user and system time, and its threads (not its jobs')
            fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            own, threads = (int(fields[11]) + int(fields[12])) / tick, max(threads, int(fields[17]))
        except (FileNotFoundError, ProcessLookupError):
            pass
        if last_job is None and "steps (100%) done" in (root / "snakemake.txt").read_text():
            last_job = time.perf_counter()
        time.sleep(0.2)
    wall = time.perf_counter() - started
    report.update(wall=wall, own=own, threads=threads, exit=wall - ((last_job or time.perf_counter()) - started),
                  span=max(job.end for job in pipeline.read_run(root).values()), ok=process.returncode == 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--times", type=Path, required=True, help="a finished run of the default")
    parser.add_argument("--scale", type=float, default=0.05, help="each job sleeps its wall time in --times times this")
    args = parser.parse_args()
    variants = {"Snakemake's defaults": DEFAULTS, "the profile's": profile_settings()}
    reports: dict[str, dict] = {name: {} for name in variants}
    with tempfile.TemporaryDirectory(prefix="snakemake-overhead-") as scratch:
        roots = {name: Path(scratch) / str(i) for i, name in enumerate(variants)}
        for root in roots.values():
            root.mkdir()
            bound = replay(args.times, args.scale, root)
        threads = [threading.Thread(target=run, args=(roots[name], settings, reports[name]))
                   for name, settings in variants.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    print(f"device: CPU, {cpu_cores()}; the default's DAG "
          f"replayed with sleeping jobs (x{args.scale} of {args.times}), list-schedule bound {bound:.0f} s")
    for name, settings in variants.items():
        r = reports[name]
        print(f"  {name:<22} ({' '.join(settings)}): Snakemake's own CPU {r['own']:.1f} s "
              f"({60 * r['own'] / r['wall']:.2f} s per minute), most threads {r['threads']}, "
              f"makespan {r['span']:.0f} s, "
              f"exit {r['exit']:.1f} s after the last job{'' if r['ok'] else ', FAILED'}")
    sys.exit(0 if all(r["ok"] for r in reports.values()) else 1)


if __name__ == "__main__":
    main()
