"""The training step's speed-ups, each leaving the run as it was: the next-token CE compiled with
the model (as eager to 1e-5, no more graph breaks than before), the vocabulary padded for training
(bit-identical logits, no gradient into the padded rows, checkpoints at the true vocabulary, the
same run), and the NaN guard without a host sync per step (fused AdamW skips a non-finite step's
update on the device; the same run, the same errors). Tiny GPT-2, float32, CPU."""

from __future__ import annotations

import dataclasses
import os
import shutil

import pytest
import torch
from transformers import GPT2LMHeadModel

from condensation.config.runs import TrainConfig
from condensation.training import loop
from condensation.training.baselines import untie_output_head
from condensation.training.batches import forward_and_ce
from condensation.training.loop import train
from condensation.training.terms import HiddenStateLoss
from condensation.training.vocabulary import pad_vocabulary, true_vocabulary
from tests.helpers.training import (
    BLOCK,
    TRAIN_BLOCKS,
    VAL_BLOCKS,
    VOCAB,
    assert_same_log_except_time,
    assert_same_series_except_timings,
    make_model,
    read_log,
    read_series,
    resume_config,
    state_step,
)

PADDED = 128
"""``VOCAB`` (97) padded to a multiple of 64."""

GRAPH_BREAKS = {False: 0, True: 2}
"""Graph breaks of the compiled training forward, without and with the hidden states. Before the CE
joined it (``torch.compile`` of the model alone, the CE eager; 2026-11-27, torch 2.13, transformers
5.23) they were 0 and 1: the one at transformers' ``output_capturing.maybe_install_capturing_hooks``
(a lock), where the hidden states are asked for. Now the CE-only forward is still one graph, the
CE in it. With the hidden states, that break inside the model also ends the enclosing function's
graph, so the CE after the model returns is a graph of its own: 2 breaks, 3 graphs (the body, the
head, the CE), the CE compiled where it ran eagerly before."""


def batch(seed: int = 3) -> torch.Tensor:
    return torch.randint(0, VOCAB, (4, BLOCK), generator=torch.Generator().manual_seed(seed))


def untied(model: GPT2LMHeadModel) -> GPT2LMHeadModel:
    untie_output_head(model)
    return model


@pytest.mark.parametrize("head", [lambda model: model, untied], ids=["tied", "untied"])
def test_padding_appends_zero_rows_and_draws_no_random_numbers(head):
    model, reference = head(make_model()), head(make_model())
    rng = torch.get_rng_state()
    assert pad_vocabulary(model, 64) == VOCAB
    assert torch.equal(torch.get_rng_state(), rng)
    for weight, original in ((model.transformer.wte.weight, reference.transformer.wte.weight),
                             (model.lm_head.weight, reference.lm_head.weight)):
        assert weight.shape == (PADDED, 32) and not weight[VOCAB:].any()
        assert torch.equal(weight[:VOCAB], original)
    assert (model.lm_head.weight is model.transformer.wte.weight) == (head is not untied)
    assert pad_vocabulary(model, 64) == PADDED  # already a multiple: left as it is


@pytest.mark.parametrize("head", [lambda model: model, untied], ids=["tied", "untied"])
def test_padded_logits_are_bit_identical_and_the_padded_rows_get_no_gradient(head):
    plain, padded = head(make_model()), head(make_model())
    pad_vocabulary(padded, 64)
    ids = batch()
    results = []
    for model in (plain, padded):
        torch.manual_seed(5)  # the same dropout masks
        ce, logits, hidden_states = forward_and_ce(model, {"input_ids": ids}, ids, VOCAB, output_hidden_states=False)
        ce.backward()
        results.append((ce, logits))
        assert hidden_states is None
    (plain_ce, plain_logits), (padded_ce, padded_logits) = results
    assert padded_logits.shape[-1] == VOCAB and padded_logits.untyped_storage().nbytes() > plain_logits.nbytes
    assert torch.equal(padded_logits, plain_logits) and torch.equal(padded_ce, plain_ce)
    for name in ("transformer.wte.weight", "lm_head.weight"):
        grad, plain_grad = padded.get_parameter(name).grad, plain.get_parameter(name).grad
        assert not grad[VOCAB:].any(), name
        assert torch.equal(grad[:VOCAB], plain_grad), name


def test_within_true_vocabulary_the_model_is_the_original_architecture(tmp_path):
    model = make_model()
    pad_vocabulary(model, 64)
    weight = model.transformer.wte.weight
    with true_vocabulary(model, VOCAB):
        assert model.lm_head.weight is model.transformer.wte.weight  # still tied
        assert model.transformer.wte.weight.data_ptr() == weight.data_ptr()  # a view, no copy
        model.save_pretrained(tmp_path)
    assert model.transformer.wte.weight is weight and model.lm_head.weight is weight  # what the optimizer holds
    saved = GPT2LMHeadModel.from_pretrained(tmp_path)
    assert saved.config.vocab_size == VOCAB and saved.lm_head.weight.shape == (VOCAB, 32)
    assert torch.equal(saved.transformer.wte.weight, weight[:VOCAB])


def test_a_padded_run_trains_exactly_as_an_unpadded_one(tmp_path):
    """The tiny run of the resume tests (gradient accumulation, dropout, probe, clipping), with
    and without padding: the same log, the same weights bit for bit, checkpoints at the true
    vocabulary; the padding is real while it trains, and gone from the caller's model after."""
    config = dataclasses.replace(resume_config(), tracker="none")
    head_widths: dict[int, list[int]] = {}
    models = {}
    for multiple in (1, 64):
        model = models[multiple] = make_model()
        widths = head_widths[multiple] = []
        model.lm_head.register_forward_hook(lambda module, args, out, widths=widths: widths.append(out.shape[-1]))
        train(model, TRAIN_BLOCKS, VAL_BLOCKS, dataclasses.replace(config, pad_vocab_to_multiple_of=multiple),
              tmp_path / str(multiple))
    assert set(head_widths[1]) == {VOCAB} and set(head_widths[64]) == {VOCAB, PADDED}  # validation: the true one
    assert_same_log_except_time(read_log(tmp_path / "1"), read_log(tmp_path / "64"))
    plain, padded = models[1].state_dict(), models[64].state_dict()
    assert all(torch.equal(plain[name], padded[name]) for name in plain)
    assert models[64].transformer.wte.weight.shape == (VOCAB, 32)
    for path in (tmp_path / "64" / "final", tmp_path / "64" / "checkpoints" / "step-0000010"):
        saved = GPT2LMHeadModel.from_pretrained(path)
        assert saved.config.vocab_size == VOCAB
        assert torch.equal(saved.transformer.wte.weight, GPT2LMHeadModel.from_pretrained(
            tmp_path / "1" / path.relative_to(tmp_path / "64")).transformer.wte.weight)


@pytest.mark.parametrize("output_hidden_states", [False, True])
def test_the_compiled_training_forward_breaks_no_more_graphs_than_before(output_hidden_states):
    model = make_model()
    pad_vocabulary(model, 64)
    ids = batch()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(forward_and_ce)(model, {"input_ids": ids}, ids, VOCAB, output_hidden_states)
    assert explained.graph_break_count <= GRAPH_BREAKS[output_hidden_states], explained.break_reasons
    compiled_calls = [node.target for graph in explained.graphs for node in graph.graph.nodes]
    assert torch.nn.functional.cross_entropy in compiled_calls  # the CE is compiled, not eager


@pytest.mark.slow
@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "c++")) is None,
                    reason="torch.compile on CPU needs a C++ compiler")
def test_the_compiled_ce_and_its_gradients_equal_eager():
    model = make_model()
    for module in model.modules():  # compiled dropout draws from its own RNG
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    pad_vocabulary(model, 64)
    ids = batch()
    results = []
    for forward in (forward_and_ce, torch.compile(forward_and_ce)):
        model.zero_grad(set_to_none=True)
        ce, _, _ = forward(model, {"input_ids": ids}, ids, VOCAB, False)
        ce.backward()
        results.append((ce.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}))
    (eager_ce, eager_grads), (compiled_ce, compiled_grads) = results
    torch.testing.assert_close(compiled_ce, eager_ce, rtol=1e-5, atol=1e-5)
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-5, atol=1e-5, msg=name)
    assert not compiled_grads["transformer.wte.weight"][VOCAB:].any()


# ----------------------------------------------------------------------------- the NaN guard without a sync per step


@pytest.fixture
def fused_adamw(monkeypatch):
    """Fused AdamW on the CPU, as on CUDA: the loop then leaves a step's numbers on the device
    until the next step when it may (``Trainer._numbers_may_wait``)."""
    monkeypatch.setattr(loop, "fused_adamw", lambda device: True)


def test_numbers_read_a_step_late_give_the_same_run(tmp_path, fused_adamw, monkeypatch):
    """Steps whose end only reports them are read during the next step; the log, the tracker's
    series and the weights are those of a run that reads every step at once."""
    config = dataclasses.replace(resume_config(), checkpoint_every=7)
    waited: list[int] = []
    may_wait = loop.Trainer._numbers_may_wait

    def recorded(self, step, stop_at):
        waits = may_wait(self, step, stop_at)
        if waits:
            waited.append(step)
        return waits

    monkeypatch.setattr(loop.Trainer, "_numbers_may_wait", recorded)
    late = make_model()
    train(late, TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path / "late")
    assert waited == [1, 2, 4, 8, 11, 13, 16, 17, 19]  # not 3, 6, ... (probe), 5, 10, 15 (evaluation), 7, 14, 20
    monkeypatch.setattr(loop.Trainer, "_numbers_may_wait", lambda self, step, stop_at: False)
    at_once = make_model()
    train(at_once, TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path / "at-once")
    assert_same_log_except_time(read_log(tmp_path / "late"), read_log(tmp_path / "at-once"))
    assert_same_series_except_timings(read_series(tmp_path / "late"), read_series(tmp_path / "at-once"))
    assert all(torch.equal(a, b) for a, b in zip(late.state_dict().values(), at_once.state_dict().values()))


@pytest.mark.parametrize("nan_step", [3, 4], ids=["read-late", "read-at-once"])
def test_the_nan_guard_with_fused_adamw_skips_the_update_and_writes_nothing(tmp_path, fused_adamw, nan_step):
    """Step 3's numbers are read during step 4 (step 4 saves a state, so its own at once): either
    way the run stops naming the step, before its update (fused AdamW skipped it on the device),
    with nothing written for it."""
    def nan_at(hidden_states):
        nan_at.calls += 1
        return hidden_states[-1].pow(2).mean() * (float("nan") if nan_at.calls == nan_step else 1.0)

    nan_at.calls = 0
    config = TrainConfig(train_tokens=10 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, checkpoint_every=2,
                         probe_every=0, tracker="none")
    model = make_model()
    with pytest.raises(RuntimeError, match=rf"non-finite aux loss at step {nan_step}\b.*state is from step 2"):
        train(model, TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path, method=HiddenStateLoss(nan_at, 1.0))
    assert [int(r["step"]) for r in read_log(tmp_path)] == list(range(nan_step))
    assert state_step(tmp_path / "state" / "progress.json") == 2
    assert not (tmp_path / "final").exists()


@pytest.mark.gpu
def test_on_cuda_steps_read_late_train_as_steps_read_at_once(tmp_path, monkeypatch):
    """On CUDA as it runs there (fused AdamW, batches through pinned memory, the numbers of a
    step that only reports them read during the next step): the losses of a run that reads every
    step at once, up to the GPU kernels' run-to-run rounding; and a NaN at such a step stops the
    run naming it, with nothing written for it (fused AdamW skipped its update on the device)."""
    config = dataclasses.replace(resume_config(), tracker="none", mixed_precision="no", checkpoint_every=7)
    logs = {}
    for name, may_wait in (("late", loop.Trainer._numbers_may_wait), ("at-once", lambda self, step, stop_at: False)):
        monkeypatch.setattr(loop.Trainer, "_numbers_may_wait", may_wait)
        train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path / name)
        logs[name] = read_log(tmp_path / name)
    assert [row["step"] for row in logs["late"]] == [row["step"] for row in logs["at-once"]]
    for late, at_once in zip(logs["late"][1:], logs["at-once"][1:]):
        for key in ("ce_loss", "grad_norm"):
            assert float(late[key]) == pytest.approx(float(at_once[key]), rel=1e-4), (late["step"], key)

    monkeypatch.undo()

    def nan_at_step_3(hidden_states):
        nan_at_step_3.calls += 1
        return hidden_states[-1].pow(2).mean() * (float("nan") if nan_at_step_3.calls == 3 else 1.0)

    nan_at_step_3.calls = 0
    guarded = dataclasses.replace(config, checkpoint_every=2, probe_every=0, grad_accum_steps=1)
    with pytest.raises(RuntimeError, match=r"non-finite aux loss at step 3\b.*state is from step 2"):
        train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, guarded, tmp_path / "nan",
              method=HiddenStateLoss(nan_at_step_3, 1.0))
    assert [int(row["step"]) for row in read_log(tmp_path / "nan")] == [0, 1, 2]
