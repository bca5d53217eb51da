"""The workflow steps (``workflow``, ``smollm2``): Snakemake in a fresh copy of the sources,
stopped at its box with SIGINT so that it finishes writing what it registered, and what the run
shows of the GPU's use."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
from pathlib import Path
from typing import Any

from .boxes import log_tail, run_limited
from .plan import REPO, Context, Step
from .records import job_seconds

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
