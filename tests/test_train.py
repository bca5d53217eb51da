"""The training loop: schedule, data order, loss, checkpoints, log, exact resume (graceful stop and
SIGKILL), NaN guard, skipping finished runs. Tiny GPT-2 on random tokens, CPU, no network."""

from __future__ import annotations

import csv
import json
import math
import os
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

from condensation.train import (
    TrainConfig,
    block_indices,
    checkpoint_steps,
    lr_at,
    resolve_mixed_precision,
    tokens_per_step,
    total_steps,
    train,
)

VOCAB, BLOCK = 97, 16
REPO = Path(__file__).resolve().parents[1]


def make_model(seed: int = 0) -> GPT2LMHeadModel:
    """Tiny GPT-2 with its default dropout (0.1), so exact resume needs the RNG states restored."""
    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=2, n_embd=32, n_head=2, n_positions=64, vocab_size=VOCAB, n_inner=64,
        bos_token_id=0, eos_token_id=0,  # GPT-2's 50256 lies outside the tiny vocabulary
    )
    return GPT2LMHeadModel(config)


def make_blocks(num_blocks: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, size=(num_blocks, BLOCK), dtype=np.int64)


def resume_config() -> TrainConfig:
    """20 steps of 2 x 4 blocks over 22 blocks: several epochs, batches straddling epoch ends,
    gradient accumulation, states every 4 steps, evaluation checkpoints at 0, 5, 10, 15, 20."""
    return TrainConfig(
        train_tokens=20 * 2 * 4 * BLOCK,
        block_size=BLOCK,
        micro_batch_size=4,
        grad_accum_steps=2,
        lr=1e-3,
        checkpoint_every=4,
        num_checkpoints=3,
        val_batches=2,
    )


TRAIN_BLOCKS, VAL_BLOCKS = make_blocks(22, seed=1), make_blocks(10, seed=2)


def read_log(out_dir: Path) -> list[dict[str, str]]:
    with open(out_dir / "log.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys()
    for name in pa:
        assert torch.equal(pa[name], pb[name]), f"{name} differs"


def assert_same_log_except_time(a: list[dict[str, str]], b: list[dict[str, str]]) -> None:
    strip = lambda rows: [{k: v for k, v in row.items() if k != "elapsed_s"} for row in rows]  # noqa: E731
    assert strip(a) == strip(b)


def state_step(progress: Path) -> int:
    return json.loads(progress.read_text())["step"]


def record_forward_kwargs(model: torch.nn.Module) -> list[dict]:
    calls: list[dict] = []
    model.register_forward_pre_hook(lambda module, args, kwargs: calls.append(dict(kwargs)), with_kwargs=True)
    return calls


def tiny_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    backend.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: on a busy 2-core machine OpenMP threads wait on each other for whole
    time slices (100x slower steps), and the SIGKILL test's subprocess must use the same thread
    count as this process for its floating point to be bit-identical."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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
    config = TrainConfig(
        train_tokens=60 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, lr=1e-2, num_checkpoints=1, val_batches=1
    )

    def must_not_run(hidden_states):
        raise AssertionError("aux loss called although aux_weight = 0")

    model = make_model()
    calls = record_forward_kwargs(model)
    result = train(model, blocks[:48], blocks[48:], config, tmp_path, aux_loss=must_not_run)

    rows = read_log(tmp_path)
    first_val, last_val = float(rows[0]["val_loss"]), float(rows[-1]["val_loss"])
    assert first_val > 4.0 and last_val < 0.5 * first_val
    assert float(rows[-1]["ce_loss"]) < 0.5 * float(rows[1]["ce_loss"])
    assert result.final_val_loss == pytest.approx(last_val, rel=1e-6)
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
    assert result.final_val_loss == pytest.approx(float(rows[-1]["val_loss"]), rel=1e-6)

    summary = (out_dir / "final" / "train_summary.json").read_text()
    assert '"steps": 20' in summary and "tokens_per_s" in summary
    final = GPT2LMHeadModel.from_pretrained(out_dir / "final")
    assert_same_weights(final, model)


def test_resume_after_stop_is_bit_identical(uninterrupted, tmp_path):
    reference, reference_result, reference_dir = uninterrupted
    partial = train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), tmp_path, stop_after_steps=6)
    assert partial.steps == 6 and partial.final_dir is None and not (tmp_path / "final").exists()
    assert [int(r["step"]) for r in read_log(tmp_path)] == list(range(7))

    # A different initialisation: every weight must come from the saved state.
    resumed = make_model(seed=123)
    result = train(resumed, TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), tmp_path)
    assert_same_weights(resumed, reference)
    assert result.final_train_loss == reference_result.final_train_loss
    assert result.final_val_loss == reference_result.final_val_loss
    assert_same_log_except_time(read_log(tmp_path), read_log(reference_dir))


KILLED_RUN = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path[:0] = [{repo!r}, {tests!r}]
    import torch
    torch.set_num_threads(1)
    from condensation.train import train
    from test_train import TRAIN_BLOCKS, VAL_BLOCKS, make_model, resume_config
    model = make_model()
    # Slow every forward down so the parent can kill mid-run; sleeping changes no number.
    model.register_forward_pre_hook(lambda *args: time.sleep(0.05))
    train(model, TRAIN_BLOCKS, VAL_BLOCKS, resume_config(), Path(sys.argv[1]))
    """
)


def test_resume_after_sigkill_is_bit_identical(uninterrupted, tmp_path):
    reference, _, reference_dir = uninterrupted
    script = KILLED_RUN.format(repo=str(REPO), tests=str(REPO / "tests"))
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
    config = TrainConfig(train_tokens=3 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, aux_weight=0.5)
    model = make_model()
    calls = record_forward_kwargs(model)
    train(model, TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path, aux_loss=aux_loss, tokenizer=tokenizer)

    assert len(seen) == 3  # one call per training micro-batch, none for validation
    assert seen[0] == [(4, BLOCK, 32)] * 3  # embedding output + 2 layers
    assert [kw["output_hidden_states"] for kw in calls if "output_hidden_states" in kw] == [True] * 3
    rows = read_log(tmp_path)[1:]
    assert len(rows) == 3
    for row in rows:
        assert float(row["aux_loss"]) > 0
        assert float(row["loss"]) == pytest.approx(float(row["ce_loss"]) + 0.5 * float(row["aux_loss"]), rel=1e-6)
    for path in (tmp_path / "final", tmp_path / "checkpoints" / "step-0000000"):
        assert (path / "tokenizer.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None, reason="torch.compile on CPU needs a C++ compiler")
def test_compiled_forward_trains_like_eager(tmp_path):
    # compile=True must give the eager run's losses and weights (up to kernel rounding: dropout is
    # off, since compiled dropout draws from its own RNG), save checkpoints without the compiled
    # wrapper's `_orig_mod.` prefix, and leave a state that an eager run resumes
    from torch._dynamo.utils import counters

    def fresh_model() -> GPT2LMHeadModel:
        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=64, vocab_size=VOCAB, n_inner=64,
                                          resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))

    def config(compile_forward: bool) -> TrainConfig:
        return TrainConfig(train_tokens=3 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, lr=1e-3, compile=compile_forward)

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
        train_tokens=10 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, aux_weight=1.0, checkpoint_every=1
    )
    with pytest.raises(RuntimeError, match=r"non-finite aux loss at step 3\b"):
        train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path, aux_loss=nan_after_two_steps)
    assert [int(r["step"]) for r in read_log(tmp_path)] == [0, 1, 2]
    assert state_step(tmp_path / "state" / "progress.json") == 2
    assert not (tmp_path / "checkpoints" / "step-0000003").exists() and not (tmp_path / "final").exists()


def test_resume_with_a_different_config_is_refused(tmp_path):
    config = TrainConfig(train_tokens=4 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4)
    train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path, stop_after_steps=1)
    changed = TrainConfig(train_tokens=4 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, lr=1e-3)
    with pytest.raises(ValueError, match=r"config\.lr: saved 5e-05, now 0\.001"):
        train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, changed, tmp_path)


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
    if not torch.cuda.is_available():
        assert resolve_mixed_precision("auto") == "no"


DDP_RUN = textwrap.dedent(
    """
    import hashlib, json, sys
    from pathlib import Path
    sys.path[:0] = [{repo!r}, {tests!r}]
    import torch
    torch.set_num_threads(1)
    from accelerate import PartialState
    from condensation.train import train
    from test_train import TRAIN_BLOCKS, VAL_BLOCKS, make_model, resume_config
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
