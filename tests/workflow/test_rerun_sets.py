"""tools/rerun_findings.py end to end: the tiny config in three seed sets through real Snakemake,
and the reduced overlay planned beside the default."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from plan_overlays import job_counts
from workflow_helpers import BIN, copy_run, copy_workflow, run

pytestmark = pytest.mark.slow

OFFSETS = (0, 1000, 2000)


def test_three_seed_sets_of_the_tiny_config_draw_their_own_runs_and_are_compared(repo, tiny_run, tmp_path):
    workdir = tmp_path / "rerun"
    # the set at offset 0 is the tiny config as it runs everywhere else: the session's finished run,
    # which the script finds finished (its copy of the checkout changes no rule); the others train
    copy_run(tiny_run, workdir / "offset-0")
    command = [sys.executable, str(repo / "tools/rerun_findings.py"), "--configfile",
               "tests/workflow/configs/tiny.yaml", "--cores", "2", "--workdir", str(workdir)]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=7200, check=False)
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((workdir / "rerun-report.json").read_text())
    assert result.returncode == (0 if report["passed"] else 1)
    assert (workdir / "rerun-report.md").read_text() in result.stdout
    assert report["configfiles"] == ["tests/workflow/configs/tiny.yaml"]
    assert "Nothing to be done" in (workdir / "offset-0/rerun.log").read_text()  # reused, not trained again
    for offset in OFFSETS[1:]:  # the others start from what no seed shapes in the first and train their own
        ran = job_counts((workdir / f"offset-{offset}/rerun.log").read_text())
        assert ran["pretrain"] == 2 and ran["train_study_run"] > 0, ran
        assert not {"build_corpus", "sample_dataset", "prepare_tokenizer", "build_eval_tasks"} & set(ran), ran
    for offset in OFFSETS:  # each set trained with its own seeds: the plans the runs read
        directory = workdir / f"offset-{offset}"
        assert json.loads((directory / "runs/pretrain/toy-wide/run.json").read_text())["train"]["seed"] == offset
        second = directory / "runs/midtrain/toy-wide/dispersion/seed1/run.json"
        assert json.loads(second.read_text())["train"]["seed"] == offset + 1
        assert report["minutes"][str(offset)] > 0 or offset == 0  # the reused set: seconds, 0.0 minutes
    # mid-training has two seeds per method: its pieces are compared in all three pairs, and they
    # moved between sets (the runs were drawn afresh), by an amount its errors are read against
    compared = report["comparisons"]
    assert report["checks"][0]["comparisons"] == len(compared) > 0
    assert {(c["first"], c["second"]) for c in compared} == {(0, 1000), (0, 2000), (1000, 2000)}
    assert all(c["difference"] != 0 and math.isfinite(c["z"]) and math.isfinite(c["z_seeds"]) for c in compared)
    # the single-run pieces (one pre-training seed per width, one from-scratch seed) are listed
    assert any("unmeasured (se NaN)" in line for line in report["not_compared"])


def planned_jobs(root, *configfiles: str) -> dict[str, int]:
    """Jobs per rule of a dry run."""
    result = run([str(BIN / "snakemake"), "-n", "--configfile", *configfiles], root)
    return job_counts(result.stdout)


def test_the_reduced_overlay_plans_every_job_of_the_default(repo, tmp_path):
    root = copy_workflow(repo, tmp_path / "project", (repo / "config.yaml").read_text())
    (root / "configs").mkdir()
    (root / "configs/rerun-reduced.yaml").write_text((repo / "configs/rerun-reduced.yaml").read_text())
    default = planned_jobs(root, "config.yaml")
    assert default["pretrain"] > 0 and default["train_study_run"] > 0 and default["findings"] == 1
    assert planned_jobs(root, "config.yaml", "configs/rerun-reduced.yaml") == default
