"""One command that proves the GPU path on a CUDA machine, and records its numbers.

    python benchmarks/gpu_check.py                # every step, in order
    python benchmarks/gpu_check.py tests smollm2  # these steps only (any of them, in any order)
    python benchmarks/gpu_check.py --plan         # what each step runs, on any machine

Run it from a fresh clone with the project's environment active. Each step stays under 10 minutes
(``--limit``, 540 s by default): a step that reaches its limit is stopped and recorded as such;
the two workflow steps (``miniature``, ``smollm2``) stop Snakemake there and continue where they
stopped when run again (Snakemake keeps what finished; an interrupted training run resumes from its
last saved state), adding up their time over the calls. Each call updates one summary,
``<out>/summary.json`` and ``<out>/summary.md`` (``--out``, default ``gpu-check/``): the device,
driver, torch and commit of the call, and per step its outcome, its numbers against the issue's
targets, and its logs.

The steps:

``tests``       ``pytest -m gpu``: the tests marked ``gpu`` (tests/unit/test_gpu.py: bf16 training
                with each objective, the compiled tile body against the eager one, bf16 extraction
                and scoring against float32, GPU claiming by two concurrent jobs).
``miniature``   the paper's DAG in miniature (``configs/paper.yaml`` + ``configs/paper-miniature.yaml``)
                against the stand-in Hub, with ``configs/paper-miniature-cuda.yaml`` putting extraction
                on the GPU too (training and scoring take it by themselves), under
                ``profiles/workstation``; then checks that every figure and table was written and
                that the measurements and training runs used the GPU.
``dispersion``  ``benchmarks/dispersion_loss.py`` at GPT2-small, T = 1024, bf16: the loss on every
                block output, then on the last only.
``training``    ``benchmarks/training_loop.py --preset gpt2-small --compile``: tokens/s against a
                plain Hugging Face loop, and MFU.
``extraction``  ``benchmarks/extraction.py``: against the authors' one-sequence float32 method and
                a bare forward pass.
``smollm2``     ``configs/smollm2.yaml`` end to end under ``profiles/workstation``, timed; while
                unfinished, the full run's time is estimated from the jobs done so far. Once
                finished, its Table 2 and findings are copied into the summary.

Workflow steps run in their own copy of the repository's tracked files (``<out>/work/<step>``,
refreshed on each call, so a fix to the code reaches the next call) and never touch the
checkout's own ``results/``. Without CUDA the script prints the plan and exits 0: nothing runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "gpu-check"
DEFAULT_LIMIT_S = 540
"""Each step's wall-clock limit: under the 10 minutes a step may take, with room to stop."""
STOP_GRACE_S = 90
"""After the limit, how long Snakemake gets to stop its jobs (SIGINT, as Ctrl-C) before SIGKILL."""
SMOLLM2_TARGET_S = 30 * 60

PYTHON = sys.executable
SNAKEMAKE = [PYTHON, "-m", "snakemake"]
WORKSTATION = ["--workflow-profile", "profiles/workstation", "--cores", "all"]


# ---------------------------------------------------------------------------------------------
# the steps


@dataclass(frozen=True)
class Benchmark:
    """One benchmark script's call: its arguments and where its JSON goes (``<out>/benchmarks``)."""

    name: str
    args: tuple[str, ...]

    def command(self, out: Path) -> list[str]:
        return [PYTHON, *self.args, "--json", str(out / "benchmarks" / f"{self.name}.json")]


@dataclass(frozen=True)
class Workflow:
    """A Snakemake run in a copy of the repository; ``hub``: served the stand-in Hub."""

    configfiles: tuple[str, ...]
    hub: bool = False
    expected: tuple[str, ...] = ()
    """Files (globs, relative to the run's directory) a finished run must have written."""

    def command(self, *extra: str) -> list[str]:
        return [*SNAKEMAKE, *WORKSTATION, "--configfile", *self.configfiles, *extra]


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    benchmarks: tuple[Benchmark, ...] = ()
    workflow: Workflow | None = None
    pytest_args: tuple[str, ...] = ()

    def commands(self, out: Path) -> list[str]:
        """The commands this step runs, as a person would type them (for the plan)."""
        if self.pytest_args:
            return [shlex.join(["python", "-m", "pytest", *self.pytest_args])]
        if self.benchmarks:
            return [shlex.join(["python", *bench.args, "--json", str(out / "benchmarks" / f"{bench.name}.json")])
                    for bench in self.benchmarks]
        assert self.workflow is not None
        prefix = "HF_ENDPOINT=<the stand-in Hub> " if self.workflow.hub else ""
        where = out / "work" / self.name
        first = [f"python -m stand_in_hub build {out / 'hub-tree'} && python -m stand_in_hub serve {out / 'hub-tree'}"] if self.workflow.hub else []
        return [*first, f"cd {where} && {prefix}" + shlex.join(["snakemake", *self.workflow.command()[3:]])]


GPT2_SMALL = ("--n-layer", "12", "--n-embd", "768", "--n-head", "12", "--vocab", "50257")
MINIATURE_FIGURES = (
    "results/figures/family/*.png", "results/figures/paired/*.png", "results/figures/series/*.png",
    "results/figures/midtrain/*_condensation.png", "results/figures/scratch/*_condensation.png",
    "results/figures/datasets/*.png", "results/tables/table2.md", "results/tables/table3.md",
    "results/tables/table4.md", "results/findings.md",
)
STEPS: dict[str, Step] = {
    step.name: step
    for step in (
        Step("tests", "the tests marked gpu", pytest_args=("-m", "gpu", "-p", "no:cacheprovider", "-rs", "tests")),
        Step("miniature", "the paper's DAG in miniature against the stand-in Hub, on the GPU",
             workflow=Workflow(("configs/paper.yaml", "configs/paper-miniature.yaml", "configs/paper-miniature-cuda.yaml"),
                               hub=True, expected=MINIATURE_FIGURES)),
        Step("dispersion", "the dispersion loss at GPT2-small, T = 1024: on every block output, then on the last", benchmarks=(
            Benchmark("dispersion-all", ("benchmarks/dispersion_loss.py", "--device", "cuda", *GPT2_SMALL, "--batch", "16",
                                         "--tokens", "1024", "--loss-batch", "16", "--loss-tokens", "1024")),
            Benchmark("dispersion-last", ("benchmarks/dispersion_loss.py", "--device", "cuda", *GPT2_SMALL, "--batch", "16",
                                          "--tokens", "1024", "--only", "train", "--placement", "last")),
        )),
        Step("training", "our training loop against a plain Hugging Face loop, GPT2-small", benchmarks=(
            Benchmark("training", ("benchmarks/training_loop.py", "--device", "cuda", "--preset", "gpt2-small", "--compile")),
        )),
        Step("extraction", "batched bf16 extraction against the authors' method and a bare forward pass", benchmarks=(
            Benchmark("extraction", ("benchmarks/extraction.py", "--device", "cuda")),
        )),
        Step("smollm2", "configs/smollm2.yaml end to end, timed",
             workflow=Workflow(("configs/smollm2.yaml",), expected=("results/tables/table2.md", "results/findings.md"))),
    )
}


# ---------------------------------------------------------------------------------------------
# the machine and the commit


def environment() -> dict[str, Any]:
    """Device, driver, torch, commit and the versions of the packages the steps need."""
    from importlib import metadata

    import torch

    info: dict[str, Any] = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpus": os.cpu_count(),
        **commit(),
    }
    if torch.cuda.is_available():
        info["gpus"] = [
            {"name": torch.cuda.get_device_name(index), "memory_gib": round(torch.cuda.get_device_properties(index).total_memory / 2**30, 1),
             "capability": ".".join(map(str, torch.cuda.get_device_capability(index)))}
            for index in range(torch.cuda.device_count())
        ]
        info["bf16"] = torch.cuda.is_bf16_supported()
    info["driver"] = nvidia_driver()
    packages = {}
    for name in ("condensation", "transformers", "accelerate", "lm_eval", "datasets", "snakemake", "dvc", "triton", "pytest"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    info["packages"] = packages
    return info


def nvidia_driver() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True)
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


def commit() -> dict[str, Any]:
    """The checkout's commit, and whether tracked files differ from it."""
    def git(*args: str) -> str | None:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    changed = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": head, "uncommitted_changes": bool(changed) if changed is not None else None}


# ---------------------------------------------------------------------------------------------
# running with a time limit


@dataclass
class Ran:
    returncode: int | None
    wall_s: float
    stopped_at_limit: bool


def run_limited(command: list[str], log: Path, limit_s: float, cwd: Path = REPO, env: dict | None = None,
                stop_signal: int = signal.SIGTERM) -> Ran:
    """Run ``command`` with its output appended to ``log``; at ``limit_s``, send ``stop_signal``
    to its process group, then SIGKILL after ``STOP_GRACE_S``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log, "a") as handle:
        handle.write(f"\n$ {shlex.join(command)}   (in {cwd}, {datetime.datetime.now().isoformat(timespec='seconds')})\n")
        handle.flush()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
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


# ---------------------------------------------------------------------------------------------
# step: tests


def run_tests(step: Step, out: Path, limit_s: float) -> dict[str, Any]:
    report = out / "logs" / "tests.xml"
    report.unlink(missing_ok=True)
    ran = run_limited([PYTHON, "-m", "pytest", *step.pytest_args, f"--junitxml={report}"], out / "logs" / "tests.log", limit_s)
    result: dict[str, Any] = {"wall_s": round(ran.wall_s, 1), "returncode": ran.returncode, "log": "logs/tests.log"}
    if report.exists():
        result |= junit_counts(report.read_text())
    if ran.stopped_at_limit:
        result["status"] = "stopped at the limit"
    elif ran.returncode == 0 and result.get("passed", 0) > 0:
        result["status"] = "passed"
    else:
        result["status"] = "failed"
    return result


def junit_counts(xml: str) -> dict[str, Any]:
    """Passed, failed, skipped counts and the names of the tests that failed, from pytest's JUnit XML."""
    root = ElementTree.fromstring(xml)
    failed, skipped, total = [], [], 0
    for case in root.iter("testcase"):
        total += 1
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        elif case.find("skipped") is not None:
            skipped.append(f"{name}: {case.find('skipped').get('message', '')}")
    return {"passed": total - len(failed) - len(skipped), "failed": len(failed), "skipped": len(skipped),
            "failed_tests": failed, "skipped_tests": skipped}


# ---------------------------------------------------------------------------------------------
# steps: benchmarks, with their numbers against the targets


def run_benchmarks(step: Step, out: Path, limit_s: float) -> dict[str, Any]:
    started = time.perf_counter()
    runs, numbers = [], {}
    for bench in step.benchmarks:
        left = limit_s - (time.perf_counter() - started)
        path = out / "benchmarks" / f"{bench.name}.json"
        path.unlink(missing_ok=True)
        if left < 30:
            runs.append({"name": bench.name, "status": "not run: the step's time was spent"})
            continue
        ran = run_limited(bench.command(out), out / "logs" / f"{step.name}.log", left)
        entry = {"name": bench.name, "command": shlex.join(["python", *bench.args]), "returncode": ran.returncode,
                 "wall_s": round(ran.wall_s, 1), "json": f"benchmarks/{bench.name}.json" if path.exists() else None}
        entry["status"] = "stopped at the limit" if ran.stopped_at_limit else ("done" if ran.returncode == 0 and path.exists() else "failed")
        runs.append(entry)
        if path.exists():
            numbers[bench.name] = headline(bench.name, json.loads(path.read_text()))
    statuses = {run["status"] for run in runs}
    return {"wall_s": round(time.perf_counter() - started, 1), "runs": runs, "numbers": numbers, "log": f"logs/{step.name}.log",
            "status": "done" if statuses == {"done"} else "failed" if "failed" in statuses else "stopped at the limit"}


def headline(name: str, report: dict) -> dict[str, Any]:
    """The figures of a benchmark's JSON that the issue's targets read (missing ones are left out)."""
    numbers: dict[str, Any] = {"device": report.get("device"), "dtype": report.get("dtype")}
    if name.startswith("dispersion"):
        train = report.get("train", {})
        variants = train.get("variants", {})
        base = variants.get("ce", {})
        for variant in ("ce+tiled", "ce+compiled"):
            row = variants.get(variant)
            if row and base:
                numbers[f"{variant} step / ce step"] = row["time_s"] / base["time_s"]
                numbers[f"{variant} extra memory / ce memory"] = (row["memory_bytes"] - base["memory_bytes"]) / base["memory_bytes"]
        for key in ("tiled_over_compiled_overhead", "tiled_over_compiled_loss_alone"):
            if train.get(key) is not None:
                numbers[f"step: {key}"] = train[key]
        loss = report.get("loss", {}).get("variants", {})
        if "tiled" in loss and "compiled" in loss:
            numbers["loss alone: tiled / compiled"] = loss["tiled"]["time_s"] / loss["compiled"]["time_s"]
        if "placement" in train:
            numbers["placement"] = train["placement"]
    elif name == "training":
        variants = report.get("variants", {})
        if "ours" in variants and "plain" in variants:
            numbers["ours / plain tokens/s"] = variants["ours"]["tokens_per_s"] / variants["plain"]["tokens_per_s"]
        for variant, row in variants.items():
            numbers[f"{variant} tokens/s"] = row["tokens_per_s"]
            if row.get("mfu") is not None:
                numbers[f"{variant} MFU"] = row["mfu"]
    elif name == "extraction":
        ratios = report.get("ratios", {})
        if "ours_over_reference" in ratios:
            numbers["ours / reference (speed-up)"] = ratios["ours_over_reference"]
        if "bare_over_ours" in ratios:
            numbers["ours time / bare time"] = ratios["bare_over_ours"]
    return numbers


@dataclass(frozen=True)
class Target:
    what: str
    benchmark: str
    number: str
    compare: Callable[[float], bool]
    bound: str


TARGETS = (
    Target("dispersion step <= 1.05x the CE step (all layers, compiled tile body)", "dispersion-all", "ce+compiled step / ce step",
           lambda value: value <= 1.05, "<= 1.05"),
    Target("extra peak memory of the dispersion step <= 5 %", "dispersion-all", "ce+compiled extra memory / ce memory",
           lambda value: value <= 0.05, "<= 0.05"),
    Target("dispersion step <= 1.01x the CE step with placement last", "dispersion-last", "ce+compiled step / ce step",
           lambda value: value <= 1.01, "<= 1.01"),
    Target("kernel auto = compiled on CUDA is the faster tile body (tiled / compiled > 1)", "dispersion-all",
           "loss alone: tiled / compiled", lambda value: value > 1, "> 1"),
    Target("CE step >= 40 % MFU", "training", "ours MFU", lambda value: value >= 0.40, ">= 0.40"),
    Target("CE step >= 2x a plain Hugging Face loop", "training", "ours / plain tokens/s", lambda value: value >= 2, ">= 2"),
    Target("extraction >= 20x the one-sequence float32 loop", "extraction", "ours / reference (speed-up)", lambda value: value >= 20, ">= 20"),
    Target("extraction <= 1.1x a bare forward pass", "extraction", "ours time / bare time", lambda value: value <= 1.1, "<= 1.1"),
)


def target_rows(steps: dict[str, dict]) -> list[dict[str, Any]]:
    """Each target with what the summary holds for it: measured (met or not) or not yet measured."""
    numbers = {name: values for step in steps.values() for name, values in step.get("numbers", {}).items()}
    rows = []
    for target in TARGETS:
        value = numbers.get(target.benchmark, {}).get(target.number)
        rows.append({"target": target.what, "bound": target.bound, "measured": value,
                     "met": None if value is None else bool(target.compare(value))})
    smollm2 = steps.get("smollm2", {})
    value = smollm2.get("elapsed_s") if smollm2.get("status") == "done" else None
    rows.append({"target": "configs/smollm2.yaml end to end in under 30 minutes", "bound": "<= 1800 s", "measured": value,
                 "met": None if value is None else value <= SMOLLM2_TARGET_S,
                 **({"estimate_s": smollm2["estimate_s"]} if value is None and smollm2.get("estimate_s") else {})})
    return rows


# ---------------------------------------------------------------------------------------------
# steps: workflows (resumable)


def sync_tree(work: Path) -> None:
    """The repository's tracked files (as a fresh clone has them, with this checkout's edits) into
    ``work``, over what an earlier call left; the offline .deb files linked, not copied."""
    work.mkdir(parents=True, exist_ok=True)
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    archive = subprocess.run(["tar", "--null", "-T", "-", "-cf", "-"], cwd=REPO, input=files, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-xf", "-"], cwd=work, input=archive, check=True)
    debs = work / "resources" / "debs"
    if not debs.exists() and (REPO / "resources" / "debs").exists():
        debs.parent.mkdir(parents=True, exist_ok=True)
        debs.symlink_to(REPO / "resources" / "debs")


def dry_run(workflow: Workflow, work: Path, env: dict) -> dict[str, int]:
    """Jobs left per rule (Snakemake's job stats of a dry run); {} when nothing is left."""
    done = subprocess.run(workflow.command("-n"), cwd=work, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"snakemake -n failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return job_stats(done.stdout + done.stderr)


def job_stats(text: str) -> dict[str, int]:
    """``{rule: count}`` from the first "Job stats" table of Snakemake's output (no total)."""
    match = re.search(r"Job stats:\n\s*job\s+count\n[-\s]+\n(.*?)\n\s*total\s+(\d+)", text, re.S)
    if match is None:
        return {}
    counts = {}
    for line in match.group(1).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    return counts


def count_jobs(stats: dict[str, int]) -> int:
    """Jobs that do work: the target rule ``all`` left out."""
    return sum(count for rule, count in stats.items() if rule != "all")


_STAMP = r"\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]"


def job_durations(log_text: str) -> dict[str, list[float]]:
    """Seconds of each finished job per rule, from a Snakemake log: a job starts at the stamp above
    its ``rule NAME:`` block (``jobid: N``) and ends at the stamp above ``Finished jobid: N``."""
    def stamp(text: str) -> datetime.datetime:
        return datetime.datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y")

    starts: dict[str, datetime.datetime] = {}
    durations: dict[str, list[float]] = {}
    for match in re.finditer(_STAMP + r"\n(?:local)?rule (\w+):\n(?:    .*\n)*?    jobid: (\d+)", log_text):
        starts[match.group(3)] = stamp(match.group(1))
    for match in re.finditer(_STAMP + r"\nFinished jobid: (\d+) \(Rule: (\w+)\)", log_text):
        if match.group(2) in starts:
            seconds = (stamp(match.group(1)) - starts.pop(match.group(2))).total_seconds()
            durations.setdefault(match.group(3), []).append(seconds)
    return durations


def estimate_total(elapsed_s: float, remaining: dict[str, int], durations: dict[str, list[float]]) -> dict[str, Any] | None:
    """The full run's time: what it took so far, plus each remaining job at its rule's mean time
    so far (a rule with none finished: the mean over all finished jobs), added up one after the
    other (one GPU runs the GPU jobs one at a time; the CPU jobs beside them make this an upper
    bound). None before any job finished."""
    every = [seconds for values in durations.values() for seconds in values]
    if not every:
        return None
    overall = sum(every) / len(every)
    left, unmeasured = 0.0, []
    for rule, count in remaining.items():
        if rule == "all":
            continue
        times = durations.get(rule)
        left += count * (sum(times) / len(times) if times else overall)
        if not times:
            unmeasured.append(rule)
    return {"estimate_s": round(elapsed_s + left, 1), "remaining_s": round(left, 1), "rules_without_a_finished_job": unmeasured}


class StandInHub:
    """The stand-in Hub for the miniature: built once under ``<out>/hub-tree`` (``hub-tree.built``
    beside it marks a finished build), served while the step runs; entering gives the clients'
    environment (``HF_ENDPOINT`` and fresh caches under ``<out>/hub-clients``)."""

    def __init__(self, out: Path) -> None:
        self.tree, self.caches = out / "hub-tree", out / "hub-clients"
        self.built = out / "hub-tree.built"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> dict[str, str]:
        from stand_in_hub import client_env

        if not self.built.exists():
            subprocess.run([PYTHON, "-m", "stand_in_hub", "build", str(self.tree)], cwd=REPO, check=True,
                           env=os.environ | {"PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL)
            self.built.write_text("")
        self.process = subprocess.Popen([PYTHON, "-m", "stand_in_hub", "serve", str(self.tree)], cwd=REPO, stdout=subprocess.PIPE,
                                        text=True, env=os.environ | {"PYTHONPATH": str(REPO)})
        url = self.process.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the stand-in Hub did not start (it printed {url!r})")
        return client_env(url, str(self.caches))

    def __exit__(self, *exc) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)


def run_workflow(step: Step, out: Path, limit_s: float, previous: dict[str, Any]) -> dict[str, Any]:
    workflow = step.workflow
    started = time.perf_counter()
    work = out / "work" / step.name
    if not (work / "Snakefile").exists():
        previous = {}  # a fresh run: the times of an earlier directory do not carry over
    sync_tree(work)
    log = out / "logs" / f"{step.name}.log"
    hub = StandInHub(out) if workflow.hub else None
    env_extra = hub.__enter__() if hub else {}
    try:
        env = os.environ | env_extra | {"PYTHONPATH": str(work)}
        subprocess.run(workflow.command("--unlock"), cwd=work, env=env, capture_output=True)  # a lock left by a killed call
        before = dry_run(workflow, work, env)
        jobs_total = previous.get("jobs_total") or count_jobs(before)
        left = limit_s - (time.perf_counter() - started) - 30  # room for the dry run after it
        ran = run_limited(workflow.command(), log, left, cwd=work, env=env, stop_signal=signal.SIGINT) if before else Ran(0, 0.0, False)
        after = dry_run(workflow, work, env)
    finally:
        if hub:
            hub.__exit__()
    calls = [*previous.get("calls", []), {"date": datetime.datetime.now().isoformat(timespec="seconds"), "snakemake_s": round(ran.wall_s, 1),
                                          "returncode": ran.returncode, "stopped_at_limit": ran.stopped_at_limit,
                                          "jobs_left_before": count_jobs(before), "jobs_left_after": count_jobs(after)}]
    elapsed = sum(call["snakemake_s"] for call in calls)
    result: dict[str, Any] = {"work": str(work.relative_to(out)), "log": str(log.relative_to(out)), "calls": calls,
                              "elapsed_s": round(elapsed, 1), "jobs_total": jobs_total,
                              "jobs_left": count_jobs(after)}
    if not after and ran.returncode == 0:
        missing = [pattern for pattern in workflow.expected if not list(work.glob(pattern))]
        result["status"] = "done" if not missing else "failed"
        result["missing_outputs"] = missing
        result |= workflow_checks(step.name, work)
    elif ran.stopped_at_limit:
        result["status"] = "stopped at the limit: run the step again to continue"
    else:
        result["status"] = "failed"
    if result["status"] != "done":
        durations: dict[str, list[float]] = {}
        for path in sorted((work / ".snakemake" / "log").glob("*.snakemake.log")):
            for rule, values in job_durations(path.read_text(errors="replace")).items():
                durations.setdefault(rule, []).extend(values)
        estimate = estimate_total(elapsed, after, durations)
        if estimate:
            result |= estimate
    return result


def workflow_checks(name: str, work: Path) -> dict[str, Any]:
    """What a finished run shows of the GPU's use: the device each measurement recorded and the
    precision each training run chose; for smollm2, its Table 2 and findings."""
    import numpy as np

    devices: dict[str, int] = {}
    for path in work.glob("results/**/*.npz"):
        with np.load(path, allow_pickle=False) as data:
            if "meta" in data.files:
                device = json.loads(str(data["meta"])).get("device", "?")
                devices[device] = devices.get(device, 0) + 1
    precisions: dict[str, int] = {}
    for path in work.glob("runs/**/final/train_summary.json"):
        precision = json.loads(path.read_text()).get("mixed_precision", "?")
        precisions[precision] = precisions.get(precision, 0) + 1
    checks: dict[str, Any] = {"measurement_devices": devices, "training_precisions": precisions,
                              "all_on_gpu": bool(devices) and all(device.startswith("cuda") for device in devices)
                              and (not precisions or set(precisions) == {"bf16"})}
    if name == "smollm2":
        for key, relative in (("table2", "results/tables/table2.md"), ("findings", "results/findings.md")):
            path = work / relative
            checks[key] = path.read_text() if path.exists() else None
    return checks


# ---------------------------------------------------------------------------------------------
# the summary


def load_summary(out: Path) -> dict[str, Any]:
    path = out / "summary.json"
    return json.loads(path.read_text()) if path.exists() else {"steps": {}}


def save_summary(out: Path, summary: dict[str, Any]) -> None:
    summary["targets"] = target_rows(summary["steps"])
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (out / "summary.md").write_text(render(summary))


def number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return "" if value is None else str(value)


def render(summary: dict[str, Any]) -> str:
    env = summary.get("environment", {})
    gpus = ", ".join(f"{gpu['name']} ({gpu['memory_gib']} GiB)" for gpu in env.get("gpus", [])) or "none"
    lines = [
        "# GPU check", "",
        f"Last call: {env.get('date')} on {env.get('host')}: {gpus}; driver {env.get('driver')}; torch {env.get('torch')} "
        f"(CUDA {env.get('cuda')}); commit {env.get('commit')}{' with uncommitted changes' if env.get('uncommitted_changes') else ''}. "
        "Each step below names the commit and device of the call that ran it.", "",
        "## Targets", "",
        "| target | bound | measured | met |", "|---|---|---|---|",
    ]
    for row in summary.get("targets", []):
        met = {True: "yes", False: "**no**", None: "not measured"}[row["met"]]
        measured = number(row["measured"]) if row["measured"] is not None else (
            f"estimate {row['estimate_s']:.0f} s" if row.get("estimate_s") else "")
        lines.append(f"| {row['target']} | {row['bound']} | {measured} | {met} |")
    lines += ["", "## Steps", ""]
    for name in STEPS:
        step = summary["steps"].get(name)
        if step is None:
            lines += [f"### {name}: not run", ""]
            continue
        lines += [f"### {name}: {step.get('status')}", "",
                  f"{step.get('date')}, commit {step.get('commit')}, {step.get('device')}; log `{step.get('log')}`", ""]
        if step.get("error"):
            lines += ["```", step["error"][-3000:], "```", ""]
        if name == "tests":
            lines.append(f"{step.get('passed', 0)} passed, {step.get('failed', 0)} failed, {step.get('skipped', 0)} skipped "
                         f"in {step.get('wall_s')} s")
            lines += [f"* failed: `{test}`" for test in step.get("failed_tests", [])]
            lines += [f"* skipped: {test}" for test in step.get("skipped_tests", [])]
        for run in step.get("runs", []):
            lines.append(f"* `{run.get('command', run['name'])}`: {run['status']}, {run.get('wall_s', '')} s, {run.get('json') or 'no JSON'}")
        for bench, values in step.get("numbers", {}).items():
            lines.append(f"* {bench}: " + "; ".join(f"{key} {number(value)}" for key, value in values.items()))
        if "calls" in step:
            sentence = (f"{len(step['calls'])} call(s), Snakemake ran {step['elapsed_s']} s in all; "
                        f"{step['jobs_total'] - step['jobs_left']} of {step['jobs_total']} jobs done")
            if step.get("estimate_s"):
                sentence += (f"; the full run estimated at {step['estimate_s']:.0f} s (what ran, plus each job left at its rule's "
                             f"mean time so far, one after the other)")
            lines += [sentence + ".", ""]
            lines += [f"* {key.replace('_', ' ')}: {step[key]}"
                      for key in ("missing_outputs", "measurement_devices", "training_precisions", "all_on_gpu") if key in step]
            for key in ("table2", "findings"):
                if step.get(key):
                    lines += ["", f"#### {key} (from `{step['work']}`)", "", step[key].strip()]
        lines.append("")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------


def print_plan(out: Path, names: list[str], limit_s: float) -> None:
    for name in names:
        step = STEPS[name]
        print(f"  {name}: {step.what} (at most {limit_s:.0f} s a call)")
        for command in step.commands(out):
            print(f"      {command}")
    print(f"  then: {out / 'summary.md'} and {out / 'summary.json'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("steps", nargs="*", metavar="STEP", help=f"of: {', '.join(STEPS)} (default: all, in this order)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the summary, logs, benchmark JSON and work directories go")
    parser.add_argument("--limit", type=float, default=DEFAULT_LIMIT_S, help="seconds each step may run in one call")
    parser.add_argument("--plan", action="store_true", help="print what each step runs and exit")
    args = parser.parse_args(argv)
    unknown = [name for name in args.steps if name not in STEPS]
    if unknown:
        parser.error(f"unknown step(s) {', '.join(unknown)}; the steps: {', '.join(STEPS)}")
    names = [name for name in STEPS if name in args.steps] if args.steps else list(STEPS)
    out = args.out.resolve()

    import torch

    if args.plan or not torch.cuda.is_available():
        if not args.plan:
            print(f"No CUDA device is visible to torch {torch.__version__}: nothing is run here. On a CUDA machine these steps would run:")
        print_plan(out, names, args.limit)
        return 0

    out.mkdir(parents=True, exist_ok=True)
    summary = load_summary(out)
    summary["environment"] = env = environment()
    device = ", ".join(gpu["name"] for gpu in env.get("gpus", []))
    failed = False
    for name in names:
        step = STEPS[name]
        print(f"[gpu_check] {name}: {step.what}", flush=True)
        stamp = {"date": env["date"], "commit": env["commit"], "device": device}
        try:
            if step.pytest_args:
                result = run_tests(step, out, args.limit)
            elif step.benchmarks:
                result = run_benchmarks(step, out, args.limit)
            else:
                result = run_workflow(step, out, args.limit, summary["steps"].get(name, {}))
        except Exception as error:  # noqa: BLE001 - recorded, and the next step still runs
            result = {"status": "failed", "error": f"{type(error).__name__}: {error}"}
        summary["steps"][name] = stamp | result
        save_summary(out, summary)
        failed |= result["status"] == "failed"
        print(f"[gpu_check] {name}: {result['status']}", flush=True)
    print(f"[gpu_check] summary: {out / 'summary.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
