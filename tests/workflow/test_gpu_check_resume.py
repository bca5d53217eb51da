"""benchmarks/gpu_check.py's workflow steps stop at their limit and continue where they stopped:
the default config (CPU) run for two short calls in the step's own copy of the repository."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks/gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
sys.modules["gpu_check"] = gpu_check
spec.loader.exec_module(gpu_check)


def test_a_workflow_step_stops_at_its_limit_and_continues_on_the_next_call(tmp_path):
    step = gpu_check.Step("default", "the default config", workflow=gpu_check.Workflow(("config.yaml",), expected=("results/findings.md",)))
    stale = {"calls": [{"snakemake_s": 1000.0}], "jobs_total": 999}  # from a directory since deleted
    first = gpu_check.run_workflow(step, tmp_path, 60, stale)
    assert len(first["calls"]) == 1 and first["jobs_total"] != 999, "a fresh directory starts a fresh count"
    assert first["status"].startswith("stopped at the limit") and first["calls"][0]["stopped_at_limit"]
    assert 0 < first["jobs_left"] < first["jobs_total"]
    assert (tmp_path / "work/default/Snakefile").is_file() and (tmp_path / "work/default/resources/debs").is_symlink()
    assert not (ROOT / "gpu-check").exists() or not (ROOT / "gpu-check/work/default").exists()

    second = gpu_check.run_workflow(step, tmp_path, 60, first)
    assert len(second["calls"]) == 2 and second["jobs_total"] == first["jobs_total"]
    assert second["calls"][1]["jobs_left_before"] == first["jobs_left"]  # nothing redone that had finished
    assert second["jobs_left"] < first["jobs_left"]
    assert second["elapsed_s"] == pytest.approx(sum(call["snakemake_s"] for call in second["calls"]), abs=0.2)
    assert second["estimate_s"] > second["elapsed_s"] and second["remaining_s"] > 0
    assert "stopped at the step's limit" in (tmp_path / "logs/default.log").read_text()
