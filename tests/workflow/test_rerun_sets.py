"""tools/rerun_findings.py end to end: a small config in three seed sets through real Snakemake,
called twice (the second finds every set finished), and the reduced overlay planned beside the
default."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from tests.helpers.plan_overlays import job_counts
from tests.helpers.workflow import BIN, copy_workflow, run

pytestmark = pytest.mark.slow

OFFSETS = (0, 1000, 2000)
CONFIG = "tests/workflow/configs/rerun.yaml"
"""Mid-training with two seeds per method, Fig. 4's series and one task: each kind of piece the
comparison meets, in a third of the tiny config's jobs (that config's point is every rule)."""


def rerun(repo, workdir) -> dict:
    """The tool run on ``CONFIG`` in ``workdir``; its report."""
    command = [sys.executable, str(repo / "tools/rerun_findings.py"), "--configfile", CONFIG, "--cores", "2",
               "--workdir", str(workdir)]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    result = subprocess.run(command, cwd=workdir.parent, env=env, capture_output=True, text=True, timeout=7200,
                            check=False)
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((workdir / "rerun-report.json").read_text())
    assert result.returncode == (0 if report["passed"] else 1)
    assert (workdir / "rerun-report.md").read_text() in result.stdout
    return report


def test_three_seed_sets_draw_their_own_runs_are_compared_and_a_second_call_reuses_them(repo, tmp_path):
    workdir = tmp_path / "rerun"
    report = rerun(repo, workdir)
    assert report["configfiles"] == [CONFIG]
    for offset in OFFSETS[1:]:  # the others start from what no seed shapes in the first and train their own
        ran = job_counts((workdir / f"offset-{offset}/rerun.log").read_text())
        assert ran["pretrain"] == 1 and ran["train_study_run"] == 4, ran
        assert not {"build_corpus", "sample_dataset", "prepare_tokenizer", "build_eval_tasks"} & set(ran), ran
    for offset in OFFSETS:  # each set trained with its own seeds: the plans the runs read
        directory = workdir / f"offset-{offset}"
        assert json.loads((directory / "runs/pretrain/toy-wide/run.json").read_text())["train"]["seed"] == offset
        second = directory / "runs/midtrain/toy-wide/dispersion/seed1/run.json"
        assert json.loads(second.read_text())["train"]["seed"] == offset + 1
        assert report["minutes"][str(offset)] > 0
    # mid-training has two seeds per method: its pieces are compared in all three pairs, and they
    # moved between sets (the runs were drawn afresh), by an amount its errors are read against
    compared = report["comparisons"]
    assert report["checks"][0]["comparisons"] == len(compared) > 0
    assert {(c["first"], c["second"]) for c in compared} == {(0, 1000), (0, 2000), (1000, 2000)}
    assert all(c["difference"] != 0 and math.isfinite(c["z"]) and math.isfinite(c["z_seeds"]) for c in compared)
    # listed, not compared: Fig. 4's single pre-training run, and what no set moved
    assert any("unmeasured (se NaN)" in line for line in report["not_compared"]), report["not_compared"]
    assert any("saturated (one value for every run)" in line for line in report["not_compared"]), report["not_compared"]
    # a second call finds every set finished: nothing trains again, the same comparisons
    logs = {offset: workdir / f"offset-{offset}/rerun.log" for offset in OFFSETS}
    before = {offset: len(log.read_text()) for offset, log in logs.items()}
    again = rerun(repo, workdir)
    for offset, log in logs.items():
        assert "Nothing to be done" in log.read_text()[before[offset]:], log.read_text()[-2000:]
    assert again["comparisons"] == compared


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
