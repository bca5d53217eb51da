"""The GPU check's CPU rehearsal in the project's environment (docs/gpu.md): every step at toy
size, the summary it writes after each, and a step stopped at its time box (the workflow, given
BOX_S, 20 s: its first jobs take seconds) still recorded with what it finished."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tools.gpu_check.boxes import STOP_GRACE_S

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BOX_S = 20
"""The workflow step's box here: long enough for the tiny config's first jobs (seconds), short of its end."""


def test_the_cpu_rehearsal_runs_every_step_and_writes_its_summary(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    command = [sys.executable, "-m", "tools.gpu_check", "--cpu", "--out", str(out), "--work", str(work)]
    steps = ["env", "tests", "dispersion", "training", "extraction", "workflow", "smollm2"]
    env = os.environ | {"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [*command, "--box", f"workflow={BOX_S}", *steps],
        cwd=ROOT,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # the workflow stopped at its box
    summary = json.loads((out / "summary.json").read_text())
    status = {name: step["status"] for name, step in summary["steps"].items()}
    assert status == {
        "env": "passed",
        "tests": "collected (all skipped without CUDA)",
        "dispersion": "done",
        "training": "done",
        "extraction": "done",
        "workflow": "stopped at the limit",
        "smollm2": "planned (dry run)",
    }, done.stdout[-3000:]
    tests = summary["steps"]["tests"]
    assert summary["call"]["mode"] == "cpu rehearsal"
    assert tests["passed"] == tests["failed"] == 0 and tests["skipped"] >= 20  # test_gpu.py, all collected
    numbers = {name: values for step in summary["steps"].values() for name, values in step.get("numbers", {}).items()}
    assert set(numbers) == {"dispersion-all", "dispersion-last", "training", "extraction"}
    assert (
        numbers["dispersion-all"]["ce+compiled step / ce step"] > 0
        and numbers["dispersion-last"]["placement"] == "last"
    )
    assert (
        numbers["training"]["ours+compile / plain tokens/s"] > 0 and numbers["extraction"]["ours time / bare time"] > 0
    )
    assert all(
        row["met"] is None and row["measured"] is not None for row in summary["targets"] if "MFU" not in row["target"]
    )
    workflow = summary["steps"]["workflow"]
    done_jobs, planned = map(int, re.fullmatch(r"(\d+) of (\d+)", workflow["jobs_done"]).groups())
    # stopped at its box: Snakemake's process ran the box, then at most the grace before SIGKILL
    assert 0 < done_jobs < planned and workflow["wall_s"] < BOX_S + STOP_GRACE_S + 10
    assert "configs/smollm2-gpu.yaml" in summary["steps"]["smollm2"]["command"]
    assert "not judged (CPU)" in (out / "summary.md").read_text()
    with tarfile.open(out / "logs.tar.gz") as archive:
        names = set(archive.getnames())
    assert {"logs/env.log", "logs/dispersion.log", "logs/workflow.log", "benchmarks/training.json"} <= names
    # what the stopped workflow finished comes back too: its job logs and benchmark files
    with tarfile.open(out / workflow["records"]) as archive:
        records = set(archive.getnames())
    assert any(name.startswith("logs/benchmarks/") for name in records), sorted(records)[:20]
    assert 0 < sum(rule["jobs"] for rule in workflow["job_seconds"].values()) <= done_jobs
