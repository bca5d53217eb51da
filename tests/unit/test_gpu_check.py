"""benchmarks/gpu_check.py on a machine without CUDA: the plan it prints, and the pieces that
read Snakemake's output, time-limit a step, estimate a run and write the summary."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks/gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
sys.modules["gpu_check"] = gpu_check  # dataclasses look their module up
spec.loader.exec_module(gpu_check)


def run_script(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = os.environ | {"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}  # no CUDA, even on a GPU machine
    return subprocess.run([sys.executable, str(ROOT / "benchmarks/gpu_check.py"), "--out", str(tmp_path / "out"), *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_without_cuda_it_says_which_steps_it_would_run_and_exits_0(tmp_path):
    done = run_script(tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("No CUDA device is visible")
    for name in gpu_check.STEPS:
        assert f"  {name}: " in done.stdout
    assert "python -m pytest -m gpu" in done.stdout
    assert "--configfile configs/paper.yaml configs/paper-miniature.yaml configs/paper-miniature-cuda.yaml" in done.stdout
    assert "benchmarks/dispersion_loss.py --device cuda" in done.stdout and "--placement last" in done.stdout
    assert "benchmarks/training_loop.py --device cuda --preset gpt2-small --compile" in done.stdout
    assert "benchmarks/extraction.py --device cuda" in done.stdout
    assert "--configfile configs/smollm2.yaml" in done.stdout
    assert not (tmp_path / "out").exists(), "nothing is run or written without CUDA"


def test_named_steps_only_and_unknown_steps_refused(tmp_path):
    done = run_script("--plan", "smollm2", "tests", tmp_path=tmp_path)
    assert done.returncode == 0
    named = [line.split(":")[0].strip() for line in done.stdout.splitlines() if line.startswith("  ") and not line.startswith("      ")]
    assert named == ["tests", "smollm2", "then"]  # in the script's order
    refused = run_script("gpu", tmp_path=tmp_path)
    assert refused.returncode == 2 and "unknown step(s) gpu" in refused.stderr


def test_every_command_of_the_plan_names_files_that_exist():
    for step in gpu_check.STEPS.values():
        for bench in step.benchmarks:
            assert (ROOT / bench.args[0]).is_file()
        if step.workflow:
            assert all((ROOT / config).is_file() for config in step.workflow.configfiles)


def test_benchmark_flags_are_ones_the_scripts_take():
    """Each benchmark command parses (--help lists every flag the plan passes)."""
    for step in gpu_check.STEPS.values():
        for bench in step.benchmarks:
            helped = subprocess.run([sys.executable, str(ROOT / bench.args[0]), "--help"], capture_output=True, text=True, timeout=120,
                                    env=os.environ | {"PYTHONPATH": str(ROOT)})
            assert helped.returncode == 0, helped.stderr[-2000:]
            for flag in (arg for arg in bench.args[1:] if arg.startswith("--")):
                assert flag in helped.stdout, f"{bench.args[0]} takes no {flag}"


# ---------------------------------------------------------------------------------------------
# reading Snakemake


SNAKEFILE = """
rule all:
    input: expand("out/{i}.txt", i=range(3)), "out/final.txt"
rule part:
    output: "out/{i}.txt"
    shell: "sleep 1; echo {wildcards.i} > {output}"
rule join:
    input: expand("out/{i}.txt", i=range(3))
    output: "out/final.txt"
    shell: "sleep 2; cat {input} > {output}"
"""


@pytest.fixture(scope="module")
def tiny_workflow(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-workflow")
    (root / "Snakefile").write_text(SNAKEFILE)
    snakemake = [sys.executable, "-m", "snakemake", "--cores", "1"]
    planned = subprocess.run([*snakemake, "-n"], cwd=root, capture_output=True, text=True, timeout=120)
    ran = subprocess.run(snakemake, cwd=root, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    again = subprocess.run([*snakemake, "-n"], cwd=root, capture_output=True, text=True, timeout=120)
    log = max((root / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda path: path.stat().st_mtime).read_text()
    return planned.stdout + planned.stderr, log, again.stdout + again.stderr


def test_job_stats_of_a_dry_run(tiny_workflow):
    planned, _, again = tiny_workflow
    stats = gpu_check.job_stats(planned)
    assert stats == {"part": 3, "join": 1, "all": 1} and gpu_check.count_jobs(stats) == 4
    assert gpu_check.job_stats(again) == {}  # nothing left


def test_job_durations_from_a_snakemake_log(tiny_workflow):
    _, log, _ = tiny_workflow
    durations = gpu_check.job_durations(log)
    assert sorted(durations) == ["all", "join", "part"] and len(durations["part"]) == 3
    assert all(1 <= seconds <= 10 for seconds in durations["part"])  # sleep 1 (stamps are whole seconds)
    assert 2 <= durations["join"][0] <= 10


def test_estimate_adds_each_job_left_at_its_rule_s_mean():
    estimate = gpu_check.estimate_total(100.0, {"train": 2, "score": 3, "figure": 1, "all": 1}, {"train": [40.0, 60.0], "score": [10.0]})
    # 2 x 50 + 3 x 10 + 1 x the mean of every finished job (110 / 3)
    assert estimate["estimate_s"] == pytest.approx(100 + 100 + 30 + 110 / 3, abs=0.1)
    assert estimate["rules_without_a_finished_job"] == ["figure"]
    assert gpu_check.estimate_total(5.0, {"train": 1}, {}) is None


# ---------------------------------------------------------------------------------------------
# the time limit


def test_a_step_is_stopped_at_its_limit_with_its_children(tmp_path):
    marker = tmp_path / "child.pid"
    script = (f"import subprocess, time; child = subprocess.Popen(['sleep', '60']); "
              f"open({str(marker)!r}, 'w').write(str(child.pid)); time.sleep(60)")
    started = time.perf_counter()
    ran = gpu_check.run_limited([sys.executable, "-c", script], tmp_path / "log", limit_s=3)
    assert ran.stopped_at_limit and ran.returncode != 0 and time.perf_counter() - started < 30
    child = int(marker.read_text())
    time.sleep(0.5)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2], "the child outlived the step"
    assert "stopped at the step's limit of 3 s" in (tmp_path / "log").read_text()
    quick = gpu_check.run_limited([sys.executable, "-c", "print('hello')"], tmp_path / "log", limit_s=60)
    assert quick.returncode == 0 and not quick.stopped_at_limit and "hello" in (tmp_path / "log").read_text()


# ---------------------------------------------------------------------------------------------
# numbers, targets and the summary


DISPERSION = {
    "device": "NVIDIA H100", "dtype": "torch.bfloat16",
    "loss": {"variants": {"tiled": {"time_s": 0.03}, "compiled": {"time_s": 0.02}}},
    "train": {"placement": "all", "tiled_over_compiled_overhead": 1.4,
              "variants": {"ce": {"time_s": 0.100, "memory_bytes": 1000}, "ce+tiled": {"time_s": 0.110, "memory_bytes": 1080},
                           "ce+compiled": {"time_s": 0.104, "memory_bytes": 1030}}},
}
TRAINING = {"device": "NVIDIA H100", "variants": {"ours": {"tokens_per_s": 300_000.0, "mfu": 0.35},
                                                 "plain": {"tokens_per_s": 100_000.0}}}
EXTRACTION = {"device": "NVIDIA H100", "ratios": {"ours_over_reference": 25.0, "bare_over_ours": 1.2}}


def test_headline_numbers_and_targets():
    steps = {
        "dispersion": {"numbers": {"dispersion-all": gpu_check.headline("dispersion-all", DISPERSION)}},
        "training": {"numbers": {"training": gpu_check.headline("training", TRAINING)}},
        "extraction": {"numbers": {"extraction": gpu_check.headline("extraction", EXTRACTION)}},
        "smollm2": {"status": "stopped at the limit: run the step again to continue", "estimate_s": 2400.0},
    }
    rows = {row["target"]: row for row in gpu_check.target_rows(steps)}
    assert rows["dispersion step <= 1.05x the CE step (all layers, compiled tile body)"]["measured"] == pytest.approx(1.04)
    assert rows["dispersion step <= 1.05x the CE step (all layers, compiled tile body)"]["met"] is True
    assert rows["extra peak memory of the dispersion step <= 5 %"]["met"] is True  # 3 %
    assert rows["dispersion step <= 1.01x the CE step with placement last"]["met"] is None  # not measured
    assert rows["kernel auto = compiled on CUDA is the faster tile body (tiled / compiled > 1)"]["measured"] == pytest.approx(1.5)
    assert rows["CE step >= 40 % MFU"]["met"] is False
    assert rows["CE step >= 2x a plain Hugging Face loop"]["measured"] == pytest.approx(3.0)
    assert rows["extraction >= 20x the one-sequence float32 loop"]["met"] is True
    assert rows["extraction <= 1.1x a bare forward pass"]["met"] is False
    smollm2 = rows["configs/smollm2.yaml end to end in under 30 minutes"]
    assert smollm2["met"] is None and smollm2["estimate_s"] == 2400.0


def test_summary_round_trip_and_markdown(tmp_path):
    summary = {
        "environment": {"date": "2026-11-24T10:00:00+00:00", "host": "gpu-box", "torch": "2.11.0+cu130", "cuda": "13.0",
                        "driver": "580.159.04", "commit": "abc123", "uncommitted_changes": False,
                        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_gib": 79.2, "capability": "9.0"}]},
        "steps": {
            "tests": {"status": "failed", "date": "d", "commit": "abc123", "device": "NVIDIA H100", "log": "logs/tests.log",
                      "passed": 18, "failed": 1, "skipped": 1, "wall_s": 80.0,
                      "failed_tests": ["tests.unit.test_gpu::test_x"], "skipped_tests": ["tests.unit.test_gpu::test_y: needs two GPUs"]},
            "dispersion": {"status": "done", "numbers": {"dispersion-all": gpu_check.headline("dispersion-all", DISPERSION)},
                           "runs": [{"name": "dispersion-all", "command": "python benchmarks/dispersion_loss.py", "status": "done",
                                     "wall_s": 100.0, "json": "benchmarks/dispersion-all.json"}]},
            "smollm2": {"status": "done", "calls": [{"snakemake_s": 900.0}, {"snakemake_s": 500.0}], "elapsed_s": 1400.0,
                        "jobs_total": 68, "jobs_left": 0, "work": "work/smollm2", "all_on_gpu": True,
                        "table2": "| method | avg |\n|---|---|\n| ce | 40.1 |", "findings": "# Findings\n\n* agrees"},
            "miniature": {"status": "failed", "error": "RuntimeError: snakemake -n failed: No module named snakemake"},
        },
    }
    out = tmp_path / "out"
    out.mkdir()
    gpu_check.save_summary(out, summary)
    assert gpu_check.load_summary(out)["steps"]["smollm2"]["elapsed_s"] == 1400.0
    text = (out / "summary.md").read_text()
    assert "NVIDIA H100 80GB HBM3 (79.2 GiB); driver 580.159.04; torch 2.11.0+cu130 (CUDA 13.0); commit abc123" in text
    assert "| configs/smollm2.yaml end to end in under 30 minutes | <= 1800 s | 1,400 | yes |" in text
    assert "| CE step >= 40 % MFU | >= 0.40 |  | not measured |" in text
    assert "### tests: failed" in text and "* failed: `tests.unit.test_gpu::test_x`" in text
    assert "2 call(s), Snakemake ran 1400.0 s in all; 68 of 68 jobs done." in text
    assert "| ce | 40.1 |" in text and "No module named snakemake" in text
    assert "### extraction: not run" in text
    assert gpu_check.load_summary(tmp_path / "nothing") == {"steps": {}}


def test_junit_counts():
    xml = """<testsuites><testsuite>
      <testcase classname="tests.unit.test_gpu" name="test_a"/>
      <testcase classname="tests.unit.test_gpu" name="test_b"><failure message="boom"/></testcase>
      <testcase classname="tests.unit.test_gpu" name="test_c"><skipped message="needs two GPUs"/></testcase>
    </testsuite></testsuites>"""
    counts = gpu_check.junit_counts(xml)
    assert (counts["passed"], counts["failed"], counts["skipped"]) == (1, 1, 1)
    assert counts["failed_tests"] == ["tests.unit.test_gpu::test_b"]
    assert counts["skipped_tests"] == ["tests.unit.test_gpu::test_c: needs two GPUs"]


@pytest.mark.slow  # builds the stand-in Hub (shared with the other tests that serve it)
def test_stand_in_hub_is_served_while_the_step_runs(tmp_path, stand_in_hub):
    """The miniature's Hub: a built tree is reused (not rebuilt), served at an address that
    answers, and stopped after."""
    import urllib.request

    (tmp_path / "hub-tree").symlink_to(stand_in_hub.root)
    (tmp_path / "hub-tree.built").write_text("")
    hub = gpu_check.StandInHub(tmp_path)
    env = hub.__enter__()
    try:
        assert env["HF_ENDPOINT"].startswith("http://127.0.0.1:") and env["HF_HUB_CACHE"].startswith(str(tmp_path / "hub-clients"))
        with urllib.request.urlopen(f"{env['HF_ENDPOINT']}/api/models/openai-community/gpt2", timeout=30) as answer:
            assert json.loads(answer.read())["id"] == "openai-community/gpt2"
    finally:
        hub.__exit__()
    assert hub.process.returncode is not None
