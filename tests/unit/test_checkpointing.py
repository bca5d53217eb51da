"""A run directory's layout, checkpoint names, the checkpoint choice, the checkpoint index, and the
resumable state written and read back outside the loop (the loop's own resume tests, graceful stop
and SIGKILL, are in test_train.py). CPU, no network."""

from __future__ import annotations

import io
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate import Accelerator

from condensation.runtime.io import write_json
from condensation.runtime.run_dir import (
    PROGRESS_NAME,
    STEP_PATTERN,
    RunDir,
    parse_step,
    select_step,
    step_name,
)
from condensation.training.checkpointing import (
    CheckpointManager,
    TrainState,
    capture_rng_state,
    restore_rng_state,
    resume_mismatch,
)

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- names and layout


def test_step_names_are_zero_padded_and_parse_back():
    assert step_name(0) == "step-0000000"
    assert step_name(49) == "step-0000049"
    assert step_name(1234567) == "step-1234567"
    assert parse_step("step-0000049") == 49
    assert parse_step(Path("results/geometry/run/step-0000120.npz")) == 120  # a suffix is ignored
    assert all(parse_step(step_name(step)) == step for step in (0, 7, 10_000))
    assert re.fullmatch(STEP_PATTERN, step_name(5)) and not re.fullmatch(STEP_PATTERN, "step-5")
    with pytest.raises(ValueError, match=">= 0"):
        step_name(-1)
    for bad in ("step-49", "step-00000049", "final", "stepx0000049"):
        with pytest.raises(ValueError, match="not a checkpoint name"):
            parse_step(bad)


def test_run_dir_layout(tmp_path):
    run = RunDir(str(tmp_path))
    assert run.root == tmp_path
    assert (run.log, run.index, run.state) == (tmp_path / "log.csv", tmp_path / "checkpoints.json", tmp_path / "state")
    assert run.checkpoint(5) == tmp_path / "checkpoints" / "step-0000005"
    assert run.summary == tmp_path / "final" / "train_summary.json"
    assert run.checkpoint_steps() == []
    for step in (10, 0, 5):
        run.checkpoint(step).mkdir(parents=True)
    (run.checkpoints / ".step-0000015.ab12.tmp").mkdir()  # a temporary is no checkpoint
    (run.checkpoints / "step-15").mkdir()
    assert run.checkpoint_steps() == [0, 5, 10]

    assert not run.is_finished()
    run.final.mkdir()
    assert not run.is_finished()  # final/ without its summary is not finished
    run.summary.write_text("{}")
    assert run.is_finished()


def test_stale_temporaries_are_removed(tmp_path):
    run = RunDir(tmp_path)
    run.checkpoint(5).mkdir(parents=True)
    stale = [tmp_path / ".state.x1.tmp", run.checkpoints / ".step-0000010.y2.tmp"]
    for path in stale:
        (path / "inner").mkdir(parents=True)
    run.remove_stale_temporaries()
    assert not any(path.exists() for path in stale)
    assert run.checkpoint(5).is_dir()


def test_the_module_imports_without_torch():
    code = ("import sys, condensation.training.checkpointing; "
            "print(sorted({'torch', 'numpy', 'accelerate'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- the checkpoint choice


def test_select_step_known_answers():
    assert select_step({0: 3.0, 5: 2.5, 10: 2.0, 15: 2.2}) == 10
    assert select_step({5: 2.0, 10: 2.0, 15: 2.0}) == 5  # ties go to the earliest step
    assert select_step([(15, 1.0), (5, 1.0)]) == 5  # pairs in any order
    assert select_step({0: 0.1, 5: 2.0, 10: 3.0}) == 5  # step 0 is never chosen, even when lowest
    assert select_step({5: float("nan"), 10: None, 15: 4.0, 20: float("inf")}) == 15  # non-finite skipped
    for no_candidate in ({}, {0: 1.0}, {0: 1.0, 5: None, 10: float("nan")}):
        with pytest.raises(ValueError, match="no checkpoint after step 0"):
            select_step(no_candidate)


def write_checkpoint_info(run: RunDir, step: int, val_loss: float | None) -> None:
    run.checkpoint(step).mkdir(parents=True)
    write_json(run.checkpoint(step) / "checkpoint.json", {"step": step, "tokens": 64 * step, "val_loss": val_loss})


def test_index_lists_checkpoints_in_step_order_with_the_selected_step(tmp_path):
    run = RunDir(tmp_path)
    losses = {0: 4.0, 5: 3.25, 10: 3.5, 15: 3.25}
    for step, loss in losses.items():
        write_checkpoint_info(run, step, loss)
    run.write_index([15, 0, 10, 5])
    assert run.read_index() == [
        {"step": step, "name": step_name(step), "tokens": 64 * step, "val_loss": loss} for step, loss in losses.items()
    ]
    assert json.loads(run.index.read_text())["selected"] == 5
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically


def test_index_without_a_candidate_selects_none(tmp_path):
    run = RunDir(tmp_path)
    write_checkpoint_info(run, 0, 4.0)
    write_checkpoint_info(run, 3, float("nan"))
    run.write_index([0, 3])
    assert json.loads(run.index.read_text())["selected"] is None
    assert [entry["step"] for entry in run.read_index()] == [0, 3]


# ----------------------------------------------------------------------------- resumable state


def test_train_state_reads_progress_with_extra_keys():
    progress = {
        "step": 8, "blocks_consumed": 64, "elapsed_s": 1.5, "train_loss": 3.0, "val_loss": None,
        "config": {"lr": 1e-3}, "world_size": 1, "epoch": 2, "position": 4,
    }
    assert TrainState.from_progress(progress) == TrainState(8, 64, 1.5, 3.0, None)
    assert TrainState() == TrainState(step=0, blocks_consumed=0, elapsed_s=0.0, train_loss=None, val_loss=None)


def test_resume_mismatch_names_every_differing_field():
    identity = {"config": {"lr": 1e-3, "betas": (0.9, 0.95)}, "world_size": 2, "baseline": None,
                "code": {"version": "0.1.0", "source_sha256": "aaa"}}
    saved = json.loads(json.dumps(identity)) | {"step": 3}  # tuples come back from JSON as lists
    assert resume_mismatch(saved, identity) is None
    changed = identity | {"config": {"lr": 1e-2, "betas": (0.9, 0.95)}, "world_size": 1,
                          "code": {"version": "0.1.0", "source_sha256": "bbb"}}
    message = resume_mismatch(saved, changed)
    assert "config.lr: saved 0.001, now 0.01" in message and "world_size: saved 2, now 1" in message
    assert "code.source_sha256: saved 'aaa', now 'bbb'" in message
    assert "betas" not in message and "version" not in message
    # a state saved before code versions were recorded is another code's
    assert "code.source_sha256: saved None" in resume_mismatch({k: v for k, v in saved.items() if k != "code"},
                                                               identity)


def test_rng_states_round_trip():
    device = torch.device("cpu")
    state = capture_rng_state(device)
    first = (random.random(), np.random.rand(), torch.rand(3))
    restore_rng_state(torch.load(save_to_buffer(state), weights_only=True), device)
    again = (random.random(), np.random.rand(), torch.rand(3))
    assert first[:2] == again[:2] and torch.equal(first[2], again[2])


def save_to_buffer(obj) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


def test_state_round_trips_through_the_manager(tmp_path):
    """Weights, optimizer moments, RNG and the log as of the saved step come back; progress.json
    keeps the keys older states have."""
    torch.manual_seed(0)
    module = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-2)
    module(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    run = RunDir(tmp_path)
    run.log.write_text("step\n0\n1\n")
    identity = {"config": {"lr": 1e-2}, "world_size": 1, "train_blocks_shape": [10, 16], "baseline": None}
    accelerator = Accelerator(mixed_precision="no")  # as train() makes it
    manager = CheckpointManager(run, accelerator, identity)
    state = TrainState(step=1, blocks_consumed=24, elapsed_s=0.5, train_loss=2.0, val_loss=None)
    manager.save_state(module, optimizer, state)
    expected_draw = torch.rand(2)
    progress = json.loads((run.state / PROGRESS_NAME).read_text())
    assert set(progress) == {
        "step", "blocks_consumed", "elapsed_s", "train_loss", "val_loss",
        "config", "world_size", "train_blocks_shape", "baseline", "epoch", "position",
    }
    assert (progress["epoch"], progress["position"]) == (2, 4)

    weights = {name: p.detach().clone() for name, p in module.named_parameters()}
    moments = [s["exp_avg"].clone() for s in optimizer.state.values()]
    with torch.no_grad():
        for p in module.parameters():
            p.add_(1.0)
    optimizer.step()
    run.log.write_text("step\n0\n1\n2\n")  # a row written after the state, before a kill
    assert manager.has_state()
    restored = manager.load_state(module, optimizer)
    assert restored == state
    assert all(torch.equal(p, weights[name]) for name, p in module.named_parameters())
    assert all(torch.equal(s["exp_avg"], m) for s, m in zip(optimizer.state.values(), moments))
    assert torch.equal(torch.rand(2), expected_draw)
    assert run.log.read_text() == "step\n0\n1\n"

    other = CheckpointManager(run, accelerator, identity | {"world_size": 2})
    with pytest.raises(ValueError, match="world_size: saved 1, now 2"):
        other.load_state(module, optimizer)
