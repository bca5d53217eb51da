"""The training loop: schedule, data order, loss, checkpoints, log, exact resume (graceful stop and
SIGKILL), NaN guard, skipping finished runs. Tiny GPT-2 on random tokens, CPU, no network."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from condensation import cosine_extraction
from condensation.config.runs import (
    TrainConfig,
    checkpoint_steps,
    lr_at,
    tokens_per_step,
    total_steps,
)
from condensation.cosine_extraction import condensation_probe
from condensation.runtime.run_dir import RunDir, select_step
from condensation.stages import logged
from condensation.training import loop
from condensation.training.batches import block_indices
from condensation.training.loop import train
from condensation.training.precision import resolve_mixed_precision
from condensation.training.terms import HiddenStateLoss
from condensation.trend import trend_statistics
from tests.helpers.float_bounds import LOGGED_REL, mean_cosine_bound
from tests.helpers.training import (
    BLOCK,
    TRAIN_BLOCKS,
    VAL_BLOCKS,
    VOCAB,
    assert_same_log_except_time,
    assert_same_series_except_timings,
    assert_same_weights,
    make_model,
    read_log,
    read_series,
    resume_config,
    state_step,
    tiny_tokenizer,
)

REPO = Path(__file__).resolve().parents[2]

PROBE_STEPS = [0, 3, 6, 9, 12, 15, 18, 20]  # resume_config's probe: every 3 steps and the last


def record_forward_kwargs(model: torch.nn.Module) -> list[dict]:
    calls: list[dict] = []
    model.register_forward_pre_hook(lambda module, args, kwargs: calls.append(dict(kwargs)), with_kwargs=True)
    return calls


@pytest.fixture(scope="module")
def uninterrupted(one_thread, tmp_path_factory):
    """Run A: the reference, trained in one go."""
    out_dir = tmp_path_factory.mktemp("uninterrupted")
    model = make_model()
    result = train(model, TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), out_dir)
    return model, result, out_dir


# ----------------------------------------------------------------------------- pure functions


def test_lr_schedule_matches_hand_computed_values():
    config = TrainConfig(train_tokens=1, block_size=BLOCK, micro_batch_size=1, lr=1e-3, min_lr_ratio=0.1)
    # 10 steps, 20 % warmup -> W = 2: lr * (s + 1) / 3 for s = 0, 1, peak at s = 2, then a cosine
    # reaching lr * 0.1 = 1e-4 at s = 10, half-way (5.5e-4) at s = 6.
    assert lr_at(0, 10, config) == pytest.approx(1e-3 / 3)
    assert lr_at(1, 10, config) == pytest.approx(2e-3 / 3)
    assert lr_at(2, 10, config) == pytest.approx(1e-3)
    assert lr_at(6, 10, config) == pytest.approx(5.5e-4)
    assert lr_at(10, 10, config) == pytest.approx(1e-4)
    decay = [lr_at(s, 10, config) for s in range(2, 11)]
    assert decay == sorted(decay, reverse=True)
    no_warmup = TrainConfig(train_tokens=1, block_size=BLOCK, micro_batch_size=1, lr=1e-3, warmup_ratio=0.0)
    assert lr_at(0, 10, no_warmup) == pytest.approx(1e-3)
    assert lr_at(10, 10, no_warmup) == pytest.approx(0.0)


def test_steps_from_token_budget():
    config = TrainConfig(train_tokens=1000, block_size=16, micro_batch_size=4, grad_accum_steps=2)
    assert tokens_per_step(config) == 128
    assert total_steps(config) == 8  # ceil(1000 / 128): the budget is a minimum
    assert total_steps(config, world_size=2) == 4  # ceil(1000 / 256)
    exact = TrainConfig(train_tokens=1024, block_size=16, micro_batch_size=4, grad_accum_steps=2)
    assert total_steps(exact) == 8


def test_checkpoint_steps_include_zero_and_final():
    assert checkpoint_steps(20, 3) == [0, 5, 10, 15, 20]
    assert checkpoint_steps(7, 2) == [0, 2, 4, 7]
    assert checkpoint_steps(2, 5) == [0, 1, 2]  # too short for 5 distinct inner steps
    assert checkpoint_steps(10, 0) == [0, 10]


def test_data_order_is_a_seeded_permutation_per_epoch():
    stream = block_indices(10, seed=3, start=0, count=30)
    epochs = stream.reshape(3, 10)
    for epoch in epochs:
        assert sorted(epoch) == list(range(10))
    assert not np.array_equal(epochs[0], epochs[1])  # a fresh order every epoch
    # Any window equals the same slice of the stream: a batch may straddle an epoch boundary.
    np.testing.assert_array_equal(block_indices(10, seed=3, start=7, count=8), stream[7:15])
    assert not np.array_equal(block_indices(10, seed=4, start=0, count=10), epochs[0])


# ----------------------------------------------------------------------------- training


def test_ce_loss_decreases_on_a_repeated_pattern(tmp_path):
    pattern = np.random.default_rng(0).permutation(VOCAB)[:11]  # period 11, coprime with the block
    stream = np.tile(pattern, 64 * BLOCK // 11 + 1)
    blocks = stream[: 64 * BLOCK].reshape(64, BLOCK).astype(np.int64)
    config = TrainConfig(  # probe off: its hidden-state forwards are tested on their own
        train_tokens=60 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, lr=1e-2, num_checkpoints=1, val_batches=1,
        probe_every=0,
    )

    def must_not_run(hidden_states):
        raise AssertionError("aux loss called although aux_weight = 0")

    model = make_model()
    calls = record_forward_kwargs(model)
    result = train(model, blocks[:48], blocks[48:], config, tmp_path, method=HiddenStateLoss(must_not_run, 0.0))

    rows = read_log(tmp_path)
    first_val, last_val = float(rows[0]["val_loss"]), float(rows[-1]["val_loss"])
    assert first_val > 4.0 and last_val < 0.5 * first_val
    assert float(rows[-1]["ce_loss"]) < 0.5 * float(rows[1]["ce_loss"])
    assert result.final_val_loss == pytest.approx(last_val, rel=LOGGED_REL)  # log.csv's 8 digits
    assert all(row["aux_loss"] == "" for row in rows)
    # CE computed once, by the loop: no labels handed to the model, no hidden states requested.
    assert calls and all("labels" not in kw and not kw.get("output_hidden_states") for kw in calls)


def test_checkpoints_log_and_final(uninterrupted):
    model, result, out_dir = uninterrupted
    expected_steps = [0, 5, 10, 15, 20]
    assert result.steps == 20 and result.tokens == 20 * tokens_per_step(resume_config())
    assert result.checkpoint_dirs == [out_dir / "checkpoints" / f"step-{s:07d}" for s in expected_steps]
    assert sorted(p.name for p in (out_dir / "checkpoints").iterdir()) == [f"step-{s:07d}" for s in expected_steps]
    for path in result.checkpoint_dirs:
        assert (path / "config.json").exists() and (path / "model.safetensors").exists()
    assert not [p for p in out_dir.iterdir() if p.name.startswith(".")]  # no temporaries left behind

    rows = read_log(out_dir)
    assert [int(r["step"]) for r in rows] == list(range(21))
    assert [int(r["step"]) for r in rows if r["val_loss"]] == expected_steps
    assert rows[0]["loss"] == "" and all(r["loss"] and r["grad_norm"] for r in rows[1:])
    assert float(rows[1]["lr"]) == pytest.approx(lr_at(0, 20, resume_config()))
    assert result.final_val_loss == pytest.approx(float(rows[-1]["val_loss"]), rel=LOGGED_REL)  # log.csv's 8 digits

    summary = (out_dir / "final" / "train_summary.json").read_text()
    assert '"steps": 20' in summary and "tokens_per_s" in summary
    final = GPT2LMHeadModel.from_pretrained(out_dir / "final")
    assert_same_weights(final, model)


def test_checkpoint_index_of_a_finished_run(uninterrupted):
    _, result, out_dir = uninterrupted
    run = RunDir(out_dir)
    entries = run.read_index()
    assert [entry["step"] for entry in entries] == [0, 5, 10, 15, 20]
    assert [run.checkpoint(entry["step"]) for entry in entries] == result.checkpoint_dirs
    assert [entry["name"] for entry in entries] == [path.name for path in result.checkpoint_dirs]
    rows = {int(row["step"]): row for row in read_log(out_dir)}
    for entry in entries:
        info = json.loads((run.checkpoint(entry["step"]) / "checkpoint.json").read_text())
        assert entry["tokens"] == info["tokens"] == int(rows[entry["step"]]["tokens"])
        logged = float(rows[entry["step"]]["val_loss"])  # log.csv's 8 digits; the JSON files keep every bit
        assert entry["val_loss"] == info["val_loss"] == pytest.approx(logged, rel=LOGGED_REL)
    selected = select_step({step: float(row["val_loss"]) for step, row in rows.items() if row["val_loss"]})
    assert json.loads(run.index.read_text())["selected"] == selected > 0


def test_a_finished_run_rerun_after_its_outputs_went_trains_again(uninterrupted, tmp_path, caplog):
    """What `snakemake --forcerun` does to a finished run (its outputs final/, the index and the
    log removed): the finished run's state was set aside when final/ was written, so the rerun
    trains from its initial weights again (to the same weights: training is deterministic)."""
    reference, _, reference_dir = uninterrupted
    assert not (reference_dir / "state").exists()
    assert (reference_dir / "set_aside" / "finished-state" / "progress.json").is_file()
    assert "the run finished" in (reference_dir / "set_aside" / "finished-state.why.txt").read_text()
    shutil.copytree(reference_dir, tmp_path, dirs_exist_ok=True)
    shutil.rmtree(tmp_path / "final")
    (tmp_path / "checkpoints.json").unlink()
    (tmp_path / "log.csv").unlink()
    with caplog.at_level(logging.INFO, logger="condensation"):
        result = train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), tmp_path)
    assert "(starting)" in caplog.text and "resuming" not in caplog.text
    assert result.final_dir == tmp_path / "final" and result.steps == 20
    assert (tmp_path / "checkpoints.json").read_text() == (reference_dir / "checkpoints.json").read_text()
    assert_same_weights(GPT2LMHeadModel.from_pretrained(tmp_path / "final"), reference)
    assert_same_log_except_time(read_log(tmp_path), read_log(reference_dir))
    assert_same_series_except_timings(read_series(tmp_path), read_series(reference_dir))


def test_resume_after_stop_is_bit_identical(uninterrupted, tmp_path):
    reference, reference_result, reference_dir = uninterrupted
    partial = train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), tmp_path, stop_after_steps=6)
    assert partial.steps == 6 and partial.final_dir is None and not (tmp_path / "final").exists()
    assert not (tmp_path / "checkpoints.json").exists()  # the index is written when the run ends
    assert [int(r["step"]) for r in read_log(tmp_path)] == list(range(7))

    # A different initialisation: every weight must come from the saved state.
    resumed = make_model(seed=123)
    result = train(resumed, TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), tmp_path)
    assert_same_weights(resumed, reference)
    assert result.final_train_loss == reference_result.final_train_loss
    assert result.final_val_loss == reference_result.final_val_loss
    assert_same_log_except_time(read_log(tmp_path), read_log(reference_dir))
    assert_same_series_except_timings(read_series(tmp_path), read_series(reference_dir))
    # val losses of checkpoints before the stop come from disk, those after it from the resumed run
    assert (tmp_path / "checkpoints.json").read_text() == (reference_dir / "checkpoints.json").read_text()


KILLED_RUN = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    import torch
    torch.set_num_threads(1)
    from condensation.training.loop import train
    from tests.helpers.training import TRAIN_BLOCKS, VAL_BLOCKS, make_model, resume_config
    model = make_model()
    # Slow every forward down so the parent can kill mid-run; sleeping changes no number.
    model.register_forward_pre_hook(lambda *args: time.sleep(0.05))
    train(model, TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), Path(sys.argv[1]))
    """
)


def test_resume_after_sigkill_is_bit_identical(uninterrupted, tmp_path):
    reference, _, reference_dir = uninterrupted
    script = KILLED_RUN.format(repo=str(REPO))
    process = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stderr=subprocess.DEVNULL)
    progress = tmp_path / "state" / "progress.json"

    def state_exists_and_log_ran_past_it() -> bool:
        try:
            return len(read_log(tmp_path)) > 1 + state_step(progress)
        except FileNotFoundError:  # nothing yet, or the state directory is being replaced
            return False

    try:
        # Kill once a state exists and the log has run past it, so the resume must drop rows.
        deadline = time.monotonic() + 120
        while not state_exists_and_log_ran_past_it():
            assert process.poll() is None, "training subprocess exited before it could be killed"
            assert time.monotonic() < deadline, "no state written within 120 s"
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not (tmp_path / "final").exists()
    killed_at = state_step(progress)
    assert 0 < killed_at < 20
    (tmp_path / "checkpoints" / ".step-0000005.x1y2.tmp").mkdir()  # as a kill mid-save leaves it

    resumed = make_model(seed=123)
    train(resumed, TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), tmp_path)
    assert_same_weights(resumed, reference)
    rows = read_log(tmp_path)
    assert [int(r["step"]) for r in rows] == list(range(21))  # no duplicate, no missing row
    assert_same_log_except_time(rows, read_log(reference_dir))
    assert not list(tmp_path.glob(".*.tmp")) and not list((tmp_path / "checkpoints").glob(".*.tmp"))
    series = read_series(tmp_path)  # the tracker's rows after the state were dropped and logged again
    assert [step for step, _ in series["train/ce"]] == list(range(1, 21))
    assert [step for step, _ in series["probe/rho"]] == PROBE_STEPS
    assert_same_series_except_timings(series, read_series(reference_dir))


def test_sigterm_saves_the_step_it_ends_and_the_rerun_resumes_there_bit_identically(uninterrupted, tmp_path):
    """A scheduler's preemption or time limit (SIGTERM, then a kill after a grace period): the run
    ends the step under way, saves that step's state, fails naming it, and a rerun resumes there:
    no step trained twice, weights as an uninterrupted run's."""
    reference, _, reference_dir = uninterrupted
    script = KILLED_RUN.format(repo=str(REPO))
    process = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "log.csv").exists() or len(read_log(tmp_path)) < 4:  # a few steps in
            assert process.poll() is None, "training subprocess exited before the signal"
            assert time.monotonic() < deadline, "no steps logged within 120 s"
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)  # the grace: one step and a save
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 1, stderr[-2000:]
    assert "TrainingStopped" in stderr and "stopped on SIGTERM after step" in stderr, stderr[-2000:]
    assert not (tmp_path / "final").exists()
    rows = read_log(tmp_path)
    stopped_at = state_step(tmp_path / "state" / "progress.json")
    assert 3 <= stopped_at < 20 and int(rows[-1]["step"]) == stopped_at  # the state is the last step logged
    assert f"after step {stopped_at} of 20" in stderr

    resumed = make_model(seed=123)
    train(resumed, TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), tmp_path)
    assert_same_weights(resumed, reference)
    rows = read_log(tmp_path)
    assert [int(r["step"]) for r in rows] == list(range(21))
    assert_same_log_except_time(rows, read_log(reference_dir))


def test_sigterm_while_a_steps_numbers_wait_ends_the_next_step_and_resumes_bit_identically(
        one_thread, tmp_path, monkeypatch):
    """The path CUDA takes (fused AdamW skips a non-finite update on the device, so a step whose end
    only reports it leaves its numbers there for the next step to read), on the CPU: the signal
    lands in step 2, whose numbers wait; step 3 runs and reads them, the run stops after step 3
    with its state and log row, and the rerun resumes to an uninterrupted run's weights and log."""
    from condensation.training.preemption import TrainingStopped

    monkeypatch.setattr(loop, "fused_adamw", lambda device: True)
    reference = make_model()
    train(reference, TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), tmp_path / "reference")

    model, forwards = make_model(), []

    def preempt_in_step_2(module, args):
        forwards.append(module.training)
        if forwards.count(True) == 3:  # step 2's first micro-batch (two a step); step 2 ends only reporting
            os.kill(os.getpid(), signal.SIGTERM)

    model.register_forward_pre_hook(preempt_in_step_2)
    with pytest.raises(TrainingStopped, match="after step 3 of 20"):
        train(model, TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), tmp_path / "run")
    assert state_step(tmp_path / "run" / "state" / "progress.json") == 3
    assert [int(row["step"]) for row in read_log(tmp_path / "run")] == [0, 1, 2, 3]

    resumed = make_model(seed=123)
    train(resumed, TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), tmp_path / "run")
    assert_same_weights(resumed, reference)
    assert_same_log_except_time(read_log(tmp_path / "run"), read_log(tmp_path / "reference"))


def test_the_stop_signal_takes_a_repeated_sigterm_as_the_same_request_and_gives_the_handler_back():
    """SLURM signals every process of a step and torchrun passes its own signal on: a rank gets
    the request twice, and must live to save its state."""
    from condensation.training.preemption import StopSignal

    before = signal.getsignal(signal.SIGTERM)
    with StopSignal() as stop:
        assert not stop.requested
        for _ in range(2):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)  # Python runs the handler between bytecodes of the main thread
        assert stop.requested
    assert signal.getsignal(signal.SIGTERM) is before


def test_finished_run_is_skipped(uninterrupted):
    _, reference_result, out_dir = uninterrupted
    summary = out_dir / "final" / "train_summary.json"
    stamps = (os.stat(out_dir / "final").st_mtime_ns, os.stat(summary).st_mtime_ns)
    fresh = make_model(seed=7)
    before = {k: v.clone() for k, v in fresh.state_dict().items()}
    result = train(fresh, TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), out_dir)
    assert (os.stat(out_dir / "final").st_mtime_ns, os.stat(summary).st_mtime_ns) == stamps
    assert all(torch.equal(before[k], v) for k, v in fresh.state_dict().items())  # not trained
    assert result.steps == reference_result.steps
    assert result.final_val_loss == reference_result.final_val_loss
    assert result.checkpoint_dirs == reference_result.checkpoint_dirs


def test_aux_loss_gets_hidden_states_and_is_logged(tmp_path):
    seen = []

    def aux_loss(hidden_states):
        seen.append([tuple(h.shape) for h in hidden_states])
        assert all(h.requires_grad for h in hidden_states)
        return hidden_states[-1].pow(2).mean()

    tokenizer = tiny_tokenizer()
    config = TrainConfig(train_tokens=3 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, probe_every=0)
    model = make_model()
    calls = record_forward_kwargs(model)
    train(model, TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path, method=HiddenStateLoss(aux_loss, 0.5), tokenizer=tokenizer)

    assert len(seen) == 3  # one call per training micro-batch, none for validation
    assert seen[0] == [(4, BLOCK, 32)] * 3  # embedding output + 2 layers
    assert [kw["output_hidden_states"] for kw in calls if "output_hidden_states" in kw] == [True] * 3
    rows = read_log(tmp_path)[1:]
    assert len(rows) == 3
    for row in rows:
        assert float(row["aux_loss"]) > 0
        assert float(row["loss"]) == pytest.approx(float(row["ce_loss"]) + 0.5 * float(row["aux_loss"]),
                                                   rel=LOGGED_REL)  # log.csv's 8 digits
    for path in (tmp_path / "final", tmp_path / "checkpoints" / "step-0000000"):
        assert (path / "tokenizer.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None,
                    reason="torch.compile on CPU needs a C++ compiler")
def test_compiled_forward_trains_like_eager(tmp_path):
    # compile=True must give the eager run's losses and weights (up to kernel rounding: dropout is
    # off, since compiled dropout draws from its own RNG), save checkpoints without the compiled
    # wrapper's `_orig_mod.` prefix, and leave a state that an eager run resumes
    from torch._dynamo.utils import counters

    def fresh_model() -> GPT2LMHeadModel:
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=64, vocab_size=VOCAB, n_inner=64,
                                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                          eos_token_id=0))

    def config(compile_forward: bool) -> TrainConfig:
        return TrainConfig(train_tokens=3 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, lr=1e-3,
                           compile=compile_forward)

    counters.clear()
    eager = fresh_model()
    train(eager, TRAIN_BLOCKS, VAL_BLOCKS, config(False), tmp_path / "eager")
    assert counters["stats"]["unique_graphs"] == 0
    # steps 1-2 compiled, stopped, step 3 resumed without compile (a different model object)
    result = train(fresh_model(), TRAIN_BLOCKS, VAL_BLOCKS, config(True), tmp_path / "mixed", stop_after_steps=2)
    assert result.steps == 2 and counters["stats"]["unique_graphs"] >= 1  # the forward went through dynamo
    resumed = fresh_model()
    train(resumed, TRAIN_BLOCKS, VAL_BLOCKS, config(False), tmp_path / "mixed")

    eager_log, mixed_log = read_log(tmp_path / "eager"), read_log(tmp_path / "mixed")
    assert [row["step"] for row in mixed_log] == [row["step"] for row in eager_log] == ["0", "1", "2", "3"]
    for a, b in zip(eager_log[1:], mixed_log[1:]):
        assert float(b["ce_loss"]) == pytest.approx(float(a["ce_loss"]), rel=1e-5)
        assert float(b["grad_norm"]) == pytest.approx(float(a["grad_norm"]), rel=1e-3)
    for name, param in eager.named_parameters():
        torch.testing.assert_close(dict(resumed.named_parameters())[name], param, rtol=1e-4, atol=1e-5)
    checkpoint = GPT2LMHeadModel.from_pretrained(tmp_path / "mixed" / "checkpoints" / "step-0000002")
    assert all(not key.startswith("_orig_mod") for key in checkpoint.state_dict())


def test_nan_guard_names_the_step_and_writes_nothing(tmp_path):
    def nan_after_two_steps(hidden_states):
        nan_after_two_steps.calls += 1
        scale = float("nan") if nan_after_two_steps.calls > 2 else 1.0
        return hidden_states[-1].pow(2).mean() * scale

    nan_after_two_steps.calls = 0
    config = TrainConfig(
        train_tokens=10 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, checkpoint_every=1
    )
    with pytest.raises(RuntimeError, match=r"non-finite aux loss at step 3\b"):
        train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path,
              method=HiddenStateLoss(nan_after_two_steps, 1.0))
    assert [int(r["step"]) for r in read_log(tmp_path)] == [0, 1, 2]
    assert state_step(tmp_path / "state" / "progress.json") == 2
    assert not (tmp_path / "checkpoints" / "step-0000003").exists() and not (tmp_path / "final").exists()


def test_a_state_of_another_config_or_code_is_set_aside_and_the_run_starts_over(tmp_path, monkeypatch, caplog):
    config = TrainConfig(train_tokens=4 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4)
    train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path, stop_after_steps=1)
    changed = TrainConfig(train_tokens=4 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, lr=1e-3)
    with caplog.at_level(logging.INFO, logger="condensation"):
        result = train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, changed, tmp_path, stop_after_steps=2)
    assert "starting over" in caplog.text and "config.lr: saved 5e-05, now 0.001" in caplog.text
    assert result.steps == 2 and [int(r["step"]) for r in read_log(tmp_path)] == [0, 1, 2]
    assert state_step(tmp_path / "set_aside" / "state-1" / "progress.json") == 1  # kept, not deleted
    assert "config.lr" in (tmp_path / "set_aside" / "state-1.why.txt").read_text()

    # The same settings but other package code: that state is set aside too.
    other_code = {**loop.code_version(), "source_sha256": "0" * 64}
    monkeypatch.setattr(loop, "code_version", lambda: other_code)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="condensation"):
        result = train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, changed, tmp_path)
    assert "code.source_sha256" in caplog.text and result.steps == 4
    assert state_step(tmp_path / "set_aside" / "state-2" / "progress.json") == 2


def test_config_rejects_fp16_and_bad_values():
    with pytest.raises(ValueError, match="mixed_precision"):
        TrainConfig(train_tokens=1, block_size=BLOCK, micro_batch_size=1, mixed_precision="fp16")
    with pytest.raises(ValueError, match="grad_accum_steps"):
        TrainConfig(train_tokens=1, block_size=BLOCK, micro_batch_size=1, grad_accum_steps=0)
    assert math.isclose(TrainConfig(train_tokens=1, block_size=BLOCK, micro_batch_size=1).warmup_ratio, 0.2)


def test_bf16_autocast_trains_in_the_same_process(tmp_path):
    """bf16 autocast (runs on CPU too) after the fp32 runs above: precision is per call, not fixed
    per process as accelerate's own setting would be. Master weights stay float32."""
    config = TrainConfig(train_tokens=3 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, mixed_precision="bf16")
    model = make_model()
    result = train(model, TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path)
    assert result.steps == 3 and math.isfinite(result.final_train_loss) and math.isfinite(result.final_val_loss)
    assert json.loads((tmp_path / "final" / "train_summary.json").read_text())["mixed_precision"] == "bf16"
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_auto_precision_follows_what_accelerate_config_chose(tmp_path, monkeypatch):
    """`accelerate launch` exports the user's choice; with train.mixed_precision auto the loop
    trains in it (here bf16 on a CPU, which only a choice can give)."""
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    config = TrainConfig(train_tokens=2 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, tracker="none")
    train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path)
    assert json.loads((tmp_path / "final" / "train_summary.json").read_text())["mixed_precision"] == "bf16"


def test_mixed_precision_order_config_then_accelerate_then_device(tmp_path):
    no_file = tmp_path / "absent.yaml"
    bf16_file, no_choice_file = tmp_path / "bf16.yaml", tmp_path / "no.yaml"
    bf16_file.write_text("compute_environment: LOCAL_MACHINE\nmixed_precision: bf16\n")
    no_choice_file.write_text("mixed_precision: no\n")  # unquoted: YAML 1.1 reads false
    launched = {"ACCELERATE_MIXED_PRECISION": "bf16"}
    # 1. an explicit setting in our config wins over anything accelerate says
    assert resolve_mixed_precision("no", launched, bf16_file) == ("no", "train.mixed_precision")
    assert resolve_mixed_precision("bf16", {}, no_choice_file) == ("bf16", "train.mixed_precision")
    # 2. auto: what `accelerate launch` exported, else the file `accelerate config` wrote
    assert resolve_mixed_precision("auto", launched, no_file) == ("bf16",
                                                                  "ACCELERATE_MIXED_PRECISION=bf16 (accelerate launch)")
    assert resolve_mixed_precision("auto", {}, bf16_file) == ("bf16", f"accelerate config file {bf16_file}")
    assert resolve_mixed_precision("auto", {}, no_choice_file) == ("no", f"accelerate config file {no_choice_file}")
    # `accelerate launch --mixed_precision no` beside a config file that says bf16
    assert resolve_mixed_precision("auto", {"ACCELERATE_MIXED_PRECISION": "no"}, bf16_file)[0] == "no"
    # 3. then the device; `accelerate launch` exports "no" by itself without any config file: no choice
    device = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    assert resolve_mixed_precision("auto", {}, no_file)[0] == device
    assert resolve_mixed_precision("auto", {"ACCELERATE_MIXED_PRECISION": "no"}, no_file)[0] == device
    if device == "no":
        assert resolve_mixed_precision("auto", {}, no_file) == ("no", "auto: no CUDA device with bf16")
    with pytest.raises(ValueError, match=r"ACCELERATE_MIXED_PRECISION=fp16 .* asks for 'fp16'"):
        resolve_mixed_precision("auto", {"ACCELERATE_MIXED_PRECISION": "fp16"}, no_file)


# ----------------------------------------------------------------------------- watching a run


def test_tracker_series_of_a_run(uninterrupted):
    """One DVCLive series per metric, one row per step it was measured at, the values of log.csv."""
    _, _, out_dir = uninterrupted
    series = read_series(out_dir)
    train_names = {"train/loss", "train/ce", "train/lr", "train/grad_norm", "train/tokens_per_s"}  # no aux loss here
    assert set(series) == train_names | {"val/loss", "probe/rho", "probe/tau", "probe/deep_cos", "probe/seconds"}
    for name in train_names:
        assert [step for step, _ in series[name]] == list(range(1, 21)), name
    assert [step for step, _ in series["val/loss"]] == [0, 5, 10, 15, 20]
    for name in ("probe/rho", "probe/tau", "probe/deep_cos", "probe/seconds"):
        assert [step for step, _ in series[name]] == PROBE_STEPS, name
    rows = {int(row["step"]): row for row in read_log(out_dir)}
    for name, column in (("train/ce", "ce_loss"), ("train/lr", "lr"), ("train/grad_norm", "grad_norm"),
                         ("val/loss", "val_loss")):
        # the tracker keeps every bit, log.csv 8 digits
        assert all(value == pytest.approx(float(rows[step][column]), rel=LOGGED_REL)
                   for step, value in series[name]), name
    assert all(value > 0 for _, value in series["train/tokens_per_s"] + series["probe/seconds"])
    summary = json.loads((out_dir / "dvclive" / "metrics.json").read_text())  # what `dvc exp show` reads
    assert summary["step"] == 20 and summary["train"]["ce"] == series["train/ce"][-1][1]
    assert summary["val"]["loss"] == series["val/loss"][-1][1]
    from ruamel.yaml import (
        YAML,  # YAML 1.2, as DVC reads it (1.1 would read `no` as false)
    )

    params = YAML(typ="safe").load(out_dir / "dvclive" / "params.yaml")
    assert params["lr"] == 0.001 and params["precision"] == "no" and params["betas"] == [0.9, 0.95]


def test_resume_drops_the_series_rows_logged_after_the_state(uninterrupted, tmp_path):
    """What a kill leaves behind, made certain: the tracker logged steps 5-9, the state is from
    step 4. The resumed run drops those rows and logs them again: one row per step, no gap."""
    _, _, reference_dir = uninterrupted
    run, saved = tmp_path / "run", tmp_path / "state-at-4"
    train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), run, stop_after_steps=4)
    shutil.copytree(run / "state", saved)
    train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), run, stop_after_steps=9)
    assert read_series(run)["train/ce"][-1][0] == 9 and read_series(run)["probe/rho"][-1][0] == 9
    shutil.rmtree(run / "state")
    shutil.copytree(saved, run / "state")

    train(make_model(seed=123), TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), run)
    series = read_series(run)
    assert [step for step, _ in series["train/ce"]] == list(range(1, 21))
    assert [step for step, _ in series["val/loss"]] == [0, 5, 10, 15, 20]
    assert [step for step, _ in series["probe/rho"]] == PROBE_STEPS
    assert_same_series_except_timings(series, read_series(reference_dir))


def test_probe_values_equal_an_independent_measurement(uninterrupted):
    """The probe at a checkpoint's step = the extraction code run on that checkpoint's weights
    and the first probe_sequences validation blocks, then the trend statistics."""
    _, _, out_dir = uninterrupted
    series = {name: dict(read_series(out_dir)[f"probe/{name}"]) for name in ("rho", "tau", "deep_cos")}
    assert len(set(series["deep_cos"].values())) > 1  # training moves it: the comparison can fail
    probe_ids = torch.as_tensor(VAL_BLOCKS[: resume_config().probe_sequences])
    # The same hidden states (same weights, batches and kernels), whose cosines the probe and the
    # extraction sum in two float32 orders: layer means within twice a mean's bound of each other,
    # so equal ranks (rho, tau: the layer means lie further apart) and deep_cos within that bound
    bound = 2 * mean_cosine_bound(32, probe_ids.numel() * BLOCK)
    for step in (0, 15, 20):  # the steps with both a probe and a checkpoint
        model = GPT2LMHeadModel.from_pretrained(out_dir / "checkpoints" / f"step-{step:07d}")
        stats = cosine_extraction.extract_cosine_statistics(model, probe_ids, batch_size=4)
        trend = trend_statistics(stats.layer_mean)
        expected = {"rho": trend.spearman_rho, "tau": trend.kendall_tau, "deep_cos": trend.last_n["last_half"]}
        found = {name: values[step] for name, values in series.items()}
        assert found == pytest.approx(expected, rel=0, abs=bound), step


def test_probe_draws_no_random_numbers_and_restores_the_mode():
    # dropout 0.1: a forward in train mode would draw from the RNG; float64, so that the batching
    # below moves the hidden states by ~1e-16 only, not by float32 rounding of the forward
    model = make_model().double()
    ids = torch.as_tensor(VAL_BLOCKS[:5])
    weights = {name: value.clone() for name, value in model.state_dict().items()}
    model.train()
    rng = torch.get_rng_state()
    values = condensation_probe(model, ids, batch_size=2)
    assert model.training and torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(weights[name], value) for name, value in model.state_dict().items())
    model.eval()
    again = condensation_probe(model, ids, batch_size=5)  # the batching does not change the values
    # float32 cosines of the states cast to float32 (one rounding, one more for the float64
    # forwards' difference), summed in float64: two probes differ by twice a mean's bound
    bound = 2 * mean_cosine_bound(32, ids.numel() * BLOCK, roundings=2)
    assert not model.training and again == pytest.approx(values, rel=0, abs=bound)
    assert set(values) == {"rho", "tau", "deep_cos"} and -1.0 <= values["rho"] <= 1.0


def test_progress_lines_in_the_job_log(tmp_path):
    """The job log (as a stage writes it: logging, stdout and stderr into one file) gets a line
    every log_every_steps steps with speed, ETA, losses and the probe, and no carriage return
    (the libraries' tqdm bars are off while stderr is a file)."""
    config = TrainConfig(
        train_tokens=6 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, log_every_steps=2, log_every_seconds=0,
        probe_every=2, num_checkpoints=1,
    )
    with logged(tmp_path / "first.log"):
        train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path / "run", stop_after_steps=3)
    with logged(tmp_path / "second.log"):
        train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path / "run")
    # bytes: read_text() would turn a bar's "\r" into "\n" and hide it
    first, second = ((tmp_path / name).read_bytes().decode() for name in ("first.log", "second.log"))
    assert "\r" not in first + second and "Writing model shards" not in first + second
    assert "(starting): 6 steps of 64 tokens, mixed precision" in first and "(resuming at step 3)" in second
    assert [int(step) for step in re.findall(r"INFO step (\d+)/6 ", first)] == [0, 2]
    assert [int(step) for step in re.findall(r"INFO step (\d+)/6 ", second)] == [4, 6]
    line = next(line for line in first.splitlines() if " step 2/6 " in line)
    assert re.search(r"step 2/6 \(33\.3 %\) \| [\d,.]+ tok/s \| ETA \w+ \| ce [\d.]+ \| val [\d.]+ "
                     r"\| rho [-\d.]+ \| tau [-\d.]+ \| deep_cos [-\d.]+$", line)
    assert re.search(r"step 6/6 \(100\.0 %\) \| done in \w+ \| ce", second)


def test_a_missing_tracker_package_stops_before_training(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "dvclive", None)  # as if not installed
    config = TrainConfig(train_tokens=2 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4)
    model = make_model()
    weights = {name: value.clone() for name, value in model.state_dict().items()}
    with pytest.raises(ModuleNotFoundError,
                       match=r"train\.tracker is 'dvclive' but the package 'dvclive' is not installed"):
        train(model, TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path / "run")
    assert not (tmp_path / "run" / "log.csv").exists() and not (tmp_path / "run" / "checkpoints").exists()
    assert all(torch.equal(weights[name], value) for name, value in model.state_dict().items())
    # tracker: none needs no package
    result = train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, dataclasses.replace(config, tracker="none"),
                   tmp_path / "none")
    assert result.steps == 2 and not (tmp_path / "none" / "dvclive").exists()


def test_an_unwritable_tracker_directory_stops_before_training(tmp_path):
    (tmp_path / "dvclive").write_text("a file where the tracker's directory goes")
    config = TrainConfig(train_tokens=2 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4)
    with pytest.raises(OSError,
                       match=rf"dvclive tracker cannot write its directory {re.escape(str(tmp_path / 'dvclive'))}"):
        train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path)
    assert not (tmp_path / "log.csv").exists() and not (tmp_path / "state").exists()


def test_a_run_may_resume_with_other_watch_settings(tmp_path):
    """Tracker, probe and progress settings change what is watched, not what is computed."""
    watched = TrainConfig(train_tokens=4 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, tracker="none",
                          probe_every=0)
    train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, watched, tmp_path, stop_after_steps=2)
    changed = dataclasses.replace(watched, tracker="dvclive", probe_every=1, probe_sequences=2, log_every_steps=1)
    result = train(make_model(seed=123), TRAIN_BLOCKS, VAL_BLOCKS, changed, tmp_path)
    assert result.steps == 4
    series = read_series(tmp_path)  # the tracker starts where it was switched on
    assert [step for step, _ in series["train/ce"]] == [3, 4] and [step for step, _ in series["probe/rho"]] == [3, 4]


DDP_RUN = textwrap.dedent(
    """
    import hashlib, json, sys
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    import torch
    torch.set_num_threads(1)
    from accelerate import PartialState
    from condensation.training.loop import train
    from tests.helpers.training import TRAIN_BLOCKS, VAL_BLOCKS, make_model, resume_config
    out = Path(sys.argv[1])
    reference = make_model()
    result = train(reference, TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), out / "a")
    train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), out / "b", stop_after_steps=3)
    resumed = make_model(seed=123)
    train(resumed, TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), out / "b")
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in reference.parameters()))
    rank = PartialState().process_index
    (out / f"rank{{rank}}.json").write_text(json.dumps({{
        "world": PartialState().num_processes,
        "steps": result.steps,
        "val_loss": result.final_val_loss,
        "weights": digest.hexdigest(),
        "resume_exact": all(torch.equal(p, q) for p, q in zip(reference.parameters(), resumed.parameters())),
    }}))
    """
)


def test_ddp_two_processes_on_cpu(tmp_path, run_on_two_ranks):
    """Two gloo processes under torchrun: the collectives match up (no hang), ranks end with the
    same weights and loss, steps halve, files come from one writer, and resume is exact."""
    ranks = run_on_two_ranks(DDP_RUN)
    assert ranks[0] == ranks[1]
    assert ranks[0]["world"] == 2 and ranks[0]["steps"] == 10 and ranks[0]["resume_exact"]
    for run in ("a", "b"):
        assert [int(r["step"]) for r in read_log(tmp_path / run)] == list(range(11))
    assert_same_log_except_time(read_log(tmp_path / "a"), read_log(tmp_path / "b"))
