"""Training baselines: NEFTune noisy embeddings and active forgetting, alone and inside the training
loop (trajectory, reset schedule, optimizer state, tied heads, exact resume). Tiny GPT-2, CPU, no
network."""

from __future__ import annotations

import json
import logging
import math
import re
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from condensation.training.baselines import (
    ActiveForgetting,
    ActiveForgettingConfig,
    NoisyEmbedding,
    NoisyEmbeddingConfig,
    TrainingBaseline,
    make_baseline,
)
from condensation.training.loop import train
from tests.helpers.baselines import BASELINES, BLOCK, HIDDEN, TRAIN_BLOCKS, VAL_BLOCKS, VOCAB, make_model, short_config

REPO = Path(__file__).resolve().parents[2]


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys()
    for name in pa:
        assert torch.equal(pa[name], pb[name]), f"{name} differs"


def adam_after_steps(model: torch.nn.Module, steps: int = 2) -> torch.optim.AdamW:
    """An AdamW with non-zero moments for every parameter, as after `steps` training updates."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.as_tensor(TRAIN_BLOCKS[:4])
    for _ in range(steps):
        model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return optimizer


def clone_state(optimizer: torch.optim.Optimizer) -> dict:
    return {p: {k: v.clone() for k, v in s.items()} for p, s in optimizer.state.items()}



# ----------------------------------------------------------------------------- configuration


def test_configs_reject_bad_values_naming_the_field():
    with pytest.raises(ValueError, match="alpha"):
        NoisyEmbeddingConfig(alpha=-0.1)
    with pytest.raises(ValueError, match="alpha"):
        NoisyEmbeddingConfig(alpha=float("nan"))
    with pytest.raises(ValueError, match="every"):
        ActiveForgettingConfig(every=0)
    with pytest.raises(ValueError, match="tied_head"):
        ActiveForgettingConfig(tied_head="keep")
    with pytest.raises(ValueError, match="std"):
        ActiveForgettingConfig(std=0.0)
    assert NoisyEmbeddingConfig().alpha == 1.0
    assert ActiveForgettingConfig() == ActiveForgettingConfig(every=1000, tied_head="untie", std=None)


def test_make_baseline_by_name():
    noisy = make_baseline("noisy_embedding", alpha=5.0)
    assert isinstance(noisy, NoisyEmbedding) and noisy.config.alpha == 5.0
    forgetting = make_baseline("active_forgetting", every=7, tied_head="reset")
    assert isinstance(forgetting, ActiveForgetting) and forgetting.config == ActiveForgettingConfig(7, "reset")
    assert forgetting.describe() == {"name": "active_forgetting", "every": 7, "tied_head": "reset", "std": None}
    with pytest.raises(ValueError, match=r"unknown training baseline 'dropout'.*noisy_embedding"):
        make_baseline("dropout")
    with pytest.raises(ValueError, match=r"option\(s\) \['every'\] do not apply to objective 'noisy_embedding'"):
        make_baseline("noisy_embedding", every=3)
    with pytest.raises(ValueError, match="every"):
        make_baseline("active_forgetting", every=0)


# ----------------------------------------------------------------------------- noisy embeddings


@pytest.mark.parametrize("alpha", [1.0, 5.0])
def test_noise_is_uniform_within_the_neftune_bound(alpha):
    model = make_model()
    ids = torch.randint(0, VOCAB, (64, 32), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    embeds = NoisyEmbedding(NoisyEmbeddingConfig(alpha)).inputs_embeds(model, ids)
    clean = model.get_input_embeddings()(ids)
    noise = (embeds - clean).detach()
    bound = alpha / math.sqrt(32 * HIDDEN)  # T = 32 tokens, H = 32 wide; the tolerance covers float rounding
    assert noise.shape == clean.shape and embeds.requires_grad  # gradients still reach the embeddings
    assert noise.abs().max() <= bound * (1 + 1e-5)
    assert noise.max() > 0.999 * bound and noise.min() < -0.999 * bound  # 65536 draws reach both ends
    assert abs(noise.mean()) < 0.02 * bound
    assert noise.std() == pytest.approx(bound / math.sqrt(3), rel=0.02)  # the std of Uniform(-m, m)


def test_zero_alpha_adds_no_noise():
    model = make_model()
    ids = torch.as_tensor(TRAIN_BLOCKS[:4])
    embeds = NoisyEmbedding(NoisyEmbeddingConfig(alpha=0.0)).inputs_embeds(model, ids)
    assert torch.equal(embeds, model.get_input_embeddings()(ids))


def test_noise_only_in_training_forwards(tmp_path):
    calls = []

    class Recording(NoisyEmbedding):
        def inputs_embeds(self, model, input_ids):
            calls.append(tuple(input_ids.shape))
            return super().inputs_embeds(model, input_ids)

    plain = train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, short_config(3), tmp_path / "plain", stop_after_steps=0)
    noisy = train(
        make_model(), TRAIN_BLOCKS, VAL_BLOCKS, short_config(3), tmp_path / "noisy", stop_after_steps=0,
        method=Recording(NoisyEmbeddingConfig(alpha=50.0)),
    )
    assert noisy.final_val_loss == plain.final_val_loss  # step 0: validation of the same weights, no noise
    assert calls == []
    train(
        make_model(), TRAIN_BLOCKS, VAL_BLOCKS, short_config(3), tmp_path / "noisy",
        method=Recording(NoisyEmbeddingConfig(alpha=50.0)),
    )
    assert calls == [(2, BLOCK)] * 6  # one per training micro-batch (3 steps x 2), none for validation


def test_noisy_training_changes_the_trajectory_reproducibly(tmp_path):
    def run(name, baseline):
        model = make_model()
        train(model, TRAIN_BLOCKS, VAL_BLOCKS, short_config(3), tmp_path / name, method=baseline)
        return model

    plain = run("plain", None)
    noisy, again = run("noisy", NoisyEmbedding()), run("again", NoisyEmbedding())
    assert_same_weights(noisy, again)
    wte = lambda m: m.transformer.wte.weight  # noqa: E731
    assert not torch.equal(wte(noisy), wte(plain))
    assert not torch.equal(noisy.transformer.h[1].mlp.c_fc.weight, plain.transformer.h[1].mlp.c_fc.weight)
    summary = json.loads((tmp_path / "noisy" / "final" / "train_summary.json").read_text())
    assert summary["baseline"] == {"name": "noisy_embedding", "alpha": 1.0}


# ----------------------------------------------------------------------------- active forgetting


def test_untie_gives_the_head_its_own_copy():
    model = make_model()
    assert model.lm_head.weight is model.transformer.wte.weight  # GPT-2 ties them
    ActiveForgetting().prepare(model)
    assert model.lm_head.weight is not model.transformer.wte.weight
    assert torch.equal(model.lm_head.weight, model.transformer.wte.weight)
    assert model.config.tie_word_embeddings is False
    assert len(list(model.parameters())) == len(list(make_model().parameters())) + 1
    reset = make_model()
    ActiveForgetting(ActiveForgettingConfig(tied_head="reset")).prepare(reset)
    assert reset.lm_head.weight is reset.transformer.wte.weight


def test_reset_reinitialises_embeddings_and_their_adam_state():
    model = make_model()
    forgetting = ActiveForgetting(ActiveForgettingConfig(every=5))
    forgetting.prepare(model)
    optimizer = adam_after_steps(model)
    wte, head = model.transformer.wte.weight, model.lm_head.weight
    before, head_before, state_before = wte.detach().clone(), head.detach().clone(), clone_state(optimizer)

    forgetting.after_step(4, model, optimizer, seed=3)  # not a multiple of 5: nothing happens
    assert torch.equal(wte, before)
    assert all(torch.equal(state_before[wte][k], v) for k, v in optimizer.state[wte].items())

    forgetting.after_step(5, model, optimizer, seed=3)
    assert not torch.equal(wte, before)
    assert wte.std().item() == pytest.approx(0.02, rel=0.05)  # GPT-2's initializer_range; 3104 draws
    assert abs(wte.mean().item()) < 0.002
    state = optimizer.state[wte]
    assert not state["exp_avg"].any() and not state["exp_avg_sq"].any() and state["step"].item() == 0
    for param, saved in state_before.items():  # everything else untouched, the output head included
        if param is not wte:
            assert all(torch.equal(saved[k], v) for k, v in optimizer.state[param].items())
    assert torch.equal(head, head_before) and head is not wte

    # The reset depends on (seed, step) only, not on the global RNG: identical on every DDP rank.
    other = make_model()
    ActiveForgetting().prepare(other)
    torch.manual_seed(12345)
    forgetting.after_step(5, other, adam_after_steps(other), seed=3)
    assert torch.equal(other.transformer.wte.weight, wte)
    forgetting.after_step(10, other, torch.optim.AdamW(other.parameters()), seed=3)
    assert not torch.equal(other.transformer.wte.weight, wte)


def test_reset_with_a_tied_head_resets_both():
    model = make_model()
    forgetting = ActiveForgetting(ActiveForgettingConfig(every=2, tied_head="reset", std=0.5))
    forgetting.prepare(model)
    optimizer = adam_after_steps(model)
    before = model.lm_head.weight.detach().clone()
    forgetting.after_step(2, model, optimizer)
    assert model.lm_head.weight is model.transformer.wte.weight  # still tied
    assert not torch.equal(model.lm_head.weight, before)
    assert model.lm_head.weight.std().item() == pytest.approx(0.5, rel=0.05)


def test_reset_zeroes_the_padding_row_and_needs_prepare():
    model = make_model()
    model.transformer.wte.padding_idx = 5  # GPT-2 has none; Qwen3's embedding may
    forgetting = ActiveForgetting(ActiveForgettingConfig(every=1))
    forgetting.prepare(model)
    forgetting.after_step(1, model, torch.optim.AdamW(model.parameters()))
    wte = model.transformer.wte.weight
    assert not wte[5].any() and wte[4].all()
    with pytest.raises(RuntimeError, match="prepare"):  # a tied model that was never untied
        forgetting.after_step(1, make_model(), torch.optim.AdamW(make_model().parameters()))


def test_untied_checkpoint_round_trips(tmp_path):
    model = make_model()
    forgetting = ActiveForgetting(ActiveForgettingConfig(every=1))
    forgetting.prepare(model)
    forgetting.after_step(1, model, torch.optim.AdamW(model.parameters()))  # head and embeddings now differ
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert loaded.lm_head.weight is not loaded.transformer.wte.weight
    assert_same_weights(loaded, model)
    ids = torch.as_tensor(VAL_BLOCKS[:2])
    model.eval()
    assert torch.equal(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


def test_resets_in_training_at_multiples_of_every(tmp_path):
    """9 steps, every 3: resets after steps 3 and 6, not after the last step (9), whose model is
    the final one. The output head keeps learning across resets."""
    resets = []

    class Recording(ActiveForgetting):
        def after_step(self, step, model, optimizer, **kwargs):
            before = model.get_input_embeddings().weight.detach().clone()
            super().after_step(step, model, optimizer, **kwargs)
            if not torch.equal(model.get_input_embeddings().weight, before):
                resets.append(step)
                assert optimizer.state[model.get_input_embeddings().weight]["step"].item() == 0

    model = make_model()
    config = short_config(9)
    train(model, TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path, method=Recording(ActiveForgettingConfig(every=3)))
    assert resets == [3, 6]
    assert model.lm_head.weight is not model.transformer.wte.weight
    # Untied before the optimizer was built, so the optimizer trained the head's own copy.
    assert not torch.equal(model.lm_head.weight, make_model().lm_head.weight)
    final = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    assert_same_weights(final, model)
    summary = json.loads((tmp_path / "final" / "train_summary.json").read_text())
    assert summary["baseline"] == {"name": "active_forgetting", "every": 3, "tied_head": "untie", "std": None}


# ----------------------------------------------------------------------------- exact resume


@pytest.fixture(scope="module")
def uninterrupted(one_thread, tmp_path_factory):
    """8 steps per baseline in one go: the references."""
    models = {}
    for name, baseline in BASELINES.items():
        models[name] = make_model()
        out_dir = tmp_path_factory.mktemp(name)
        train(models[name], TRAIN_BLOCKS, VAL_BLOCKS, short_config(8), out_dir, method=baseline())
    return models


@pytest.mark.parametrize(
    "name, stop",
    [("noisy", 4), ("forgetting", 2), ("forgetting", 3), ("forgetting", 5), ("forgetting-reset", 3)],
)
def test_resume_is_bit_identical(uninterrupted, tmp_path, name, stop):
    """Stops before a reset (2, 5), right after one (3: the state holds the new embeddings)."""
    config, baseline = short_config(8), BASELINES[name]
    train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path, stop_after_steps=stop, method=baseline())
    resumed = make_model(seed=123)  # every weight must come from the saved state
    result = train(resumed, TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path, method=baseline())
    assert result.steps == 8
    assert_same_weights(resumed, uninterrupted[name])


def test_a_state_of_another_baseline_is_set_aside_and_the_run_starts_over(tmp_path, caplog):
    def attempt(baseline) -> str:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="condensation"):
            train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, short_config(4), tmp_path, method=baseline,
                  stop_after_steps=1)
        return caplog.text

    attempt(NoisyEmbedding())
    assert re.search(r"starting over: .*baseline: saved \{.*'noisy_embedding'\}, now None", attempt(None))
    assert re.search(r"baseline: .*now \{'name': 'active_forgetting'", attempt(ActiveForgetting()))
    assert re.search(r"baseline: .*now \{'name': 'noisy_embedding', 'alpha': 5\.0\}",
                     attempt(make_baseline("noisy_embedding", alpha=5.0)))
    assert "resuming at step 1" in attempt(make_baseline("noisy_embedding", alpha=5.0))  # the same baseline resumes
    kept = sorted(path.name for path in (tmp_path / "set_aside").iterdir() if path.is_dir())
    assert kept == ["state-1", "state-2", "state-3"]


def test_the_base_class_changes_nothing(tmp_path):
    plain, hooked = make_model(), make_model()
    train(plain, TRAIN_BLOCKS, VAL_BLOCKS, short_config(2), tmp_path / "plain")
    train(hooked, TRAIN_BLOCKS, VAL_BLOCKS, short_config(2), tmp_path / "hooked", method=TrainingBaseline())
    assert_same_weights(plain, hooked)


DDP_RUN = textwrap.dedent(
    """
    import hashlib, json, os, sys
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    import torch
    torch.set_num_threads(1)
    from condensation.training.loop import train
    from tests.helpers.baselines import BASELINES, TRAIN_BLOCKS, VAL_BLOCKS, make_model, short_config
    # torchrun's variable: a PartialState made before train()'s Accelerator would see one process.
    out, rank = Path(sys.argv[1]), int(os.environ["RANK"])
    report = {{}}
    for name in ("noisy", "forgetting"):
        reference = make_model()
        train(reference, TRAIN_BLOCKS, VAL_BLOCKS, short_config(8), out / name / "a", method=BASELINES[name]())
        train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, short_config(8), out / name / "b", stop_after_steps=2,
              method=BASELINES[name]())
        resumed = make_model(seed=123)
        train(resumed, TRAIN_BLOCKS, VAL_BLOCKS, short_config(8), out / name / "b", method=BASELINES[name]())
        digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in reference.parameters()))
        report[name] = {{
            "weights": digest.hexdigest(),
            "resume_exact": all(torch.equal(p, q) for p, q in zip(reference.parameters(), resumed.parameters())),
        }}
    (out / f"rank{{rank}}.json").write_text(json.dumps(report))
    """
)


def test_ddp_two_processes_on_cpu(run_on_two_ranks):
    """Two gloo processes: embeddings fed from outside the DDP forward still get all-reduced
    gradients, both ranks reset to the same embeddings and end equal, and resume is exact. On two
    ranks short_config(8) is 4 steps: the reset after step 3 falls in the resumed part."""
    ranks = run_on_two_ranks(DDP_RUN)
    assert ranks[0] == ranks[1]
    assert all(run["resume_exact"] for run in ranks[0].values())
