"""LayerNorm Scaling (condensation.ln_scaling, arXiv 2502.05795): the forward against a hand-written
scaled model (GPT2 and Llama), no parameter for the constant, checkpoints folded so that a plain
``from_pretrained`` loads the function that trained, exact resume from the raw state, the scratch
study's chain through the stages (the method option ``ln_scaling`` from the CE run's weights, and
the init of an LN-scaled pretrain model), and the config's rules (an architecture from scratch: a
scratch method's option or a pretrain model's, refused in mid-training)."""

from __future__ import annotations

import copy
import json
import logging
import math
from pathlib import Path

import pytest
import safetensors.torch
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from condensation import ln_scaling as lns
from condensation.config.objectives import for_seed, resolve_method
from condensation.config.plan import built_arch, model_ln_scaling
from condensation.config.runs import RunPlan, TrainConfig
from condensation.config.validate import ConfigError, load_schema, validate_config
from condensation.models import (
    ModelError,
    ModelHandle,
    build_from_config,
    build_gpt2,
    load_model,
    prepare_local,
    save_model_dir,
)
from condensation.runtime.io import manifest_path
from condensation.training.loop import train
from condensation.training.vocabulary import cut_to_vocabulary, pad_vocabulary
from tests.helpers.training import (
    BLOCK,
    TRAIN_BLOCKS,
    VAL_BLOCKS,
    VOCAB,
    assert_same_weights,
    make_model,
    read_log,
)

ARCH = {"n_layer": 3, "n_embd": 32, "n_head": 2, "n_inner": 64, "n_positions": 64}


class DividedBy(torch.nn.Module):
    """The reference: a norm written as ``x -> norm(x) / sqrt(l)``, a module of its own."""

    def __init__(self, norm: torch.nn.Module, depth: int) -> None:
        super().__init__()
        self.norm, self.depth = norm, depth

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) / math.sqrt(self.depth)


def hand_scaled(model: torch.nn.Module, blocks: list, names: tuple[str, str]) -> torch.nn.Module:
    """A copy of an unscaled ``model`` whose block norms are ``DividedBy`` modules."""
    copied = copy.deepcopy(model)
    for depth, block in enumerate(blocks(copied), start=1):
        for name in names:
            setattr(block, name, DividedBy(getattr(block, name), depth))
    return copied


def outputs(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    out = model.eval()(ids, output_hidden_states=True)
    return out.logits, out.hidden_states


def assert_same_function(a: torch.nn.Module, b: torch.nn.Module, ids: torch.Tensor, atol: float = 2e-5) -> None:
    (logits_a, hidden_a), (logits_b, hidden_b) = outputs(a, ids), outputs(b, ids)
    assert len(hidden_a) == len(hidden_b)
    for x, y in zip(hidden_a, hidden_b, strict=True):
        assert torch.allclose(x, y, rtol=1e-5, atol=atol), (x - y).abs().max()
    assert torch.allclose(logits_a, logits_b, rtol=1e-5, atol=atol), (logits_a - logits_b).abs().max()


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer_dir):
    return AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))


def token_ids(vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (2, 24), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- the forward


def test_an_ln_scaled_gpt2_computes_what_a_hand_scaled_one_does(tokenizer):
    """Same seed, same weights; each block's ln_1 and ln_2 output divided by sqrt(l) (ln_f not),
    which changes the function (block 1's constant is 1, the others' are not)."""
    plain = build_gpt2(ARCH, tokenizer, seed=0)
    scaled = build_gpt2({**ARCH, "ln_scaling": True}, tokenizer, seed=0)
    assert_same_weights(scaled, plain)
    assert scaled.config.ln_scaling is True and not hasattr(plain.config, "ln_scaling")
    assert lns.scales(scaled) == {f"transformer.h.{i}.{norm}": 1 / math.sqrt(i + 1)
                                  for i in range(3) for norm in ("ln_1", "ln_2")}
    ids = token_ids(len(tokenizer))
    reference = hand_scaled(plain, lambda m: m.transformer.h, ("ln_1", "ln_2"))
    assert_same_function(scaled, reference, ids, atol=1e-5)
    assert not torch.allclose(outputs(scaled, ids)[0], outputs(plain, ids)[0], atol=1e-3)
    # the embedding output and block 1's input norms (constant 1) agree with the plain model
    assert torch.equal(outputs(scaled, ids)[1][0], outputs(plain, ids)[1][0])


def test_a_llama_style_model_scales_its_input_and_post_attention_norms():
    config = LlamaConfig(num_hidden_layers=3, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=50, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    plain = LlamaForCausalLM(config)
    with torch.no_grad():  # RMSNorm gains start at 1: draw some, so that a wrong fold would show
        for name, parameter in plain.named_parameters():
            if "norm" in name:
                parameter.uniform_(0.5, 1.5)
    scaled = lns.enable(copy.deepcopy(plain))
    reference = hand_scaled(plain, lambda m: m.model.layers, ("input_layernorm", "post_attention_layernorm"))
    ids = token_ids(50)
    assert_same_function(scaled, reference, ids, atol=1e-5)
    folded = copy.deepcopy(plain)
    folded.load_state_dict(lns.folded_state_dict(scaled))
    assert_same_function(folded, scaled, ids)
    assert "model.norm" not in lns.scales(scaled)  # the final norm is left alone


def test_the_constant_is_no_parameter_and_gets_no_gradient_of_its_own(tokenizer):
    """Parameters, buffers and state-dict keys are the plain model's; the gradients are the hand-
    scaled model's (the constant acts in the backward too); scaling twice is refused."""
    plain = build_gpt2(ARCH, tokenizer, seed=0)
    scaled = build_gpt2({**ARCH, "ln_scaling": True}, tokenizer, seed=0)
    assert [name for name, _ in scaled.named_parameters()] == [name for name, _ in plain.named_parameters()]
    assert [name for name, _ in scaled.named_buffers()] == [name for name, _ in plain.named_buffers()]
    assert list(scaled.state_dict()) == list(plain.state_dict())
    reference = hand_scaled(plain, lambda m: m.transformer.h, ("ln_1", "ln_2"))
    ids = token_ids(len(tokenizer))
    for model in (scaled, reference):
        model.eval()(ids, labels=ids).loss.backward()
    grads = dict(reference.named_parameters())
    for name, parameter in scaled.named_parameters():
        reference_name = name.replace("ln_1.", "ln_1.norm.").replace("ln_2.", "ln_2.norm.")
        assert torch.allclose(parameter.grad, grads[reference_name].grad, rtol=1e-4, atol=1e-6), name
    with pytest.raises(ValueError, match="scaled already"):
        lns.enable(scaled)


def test_an_unsupported_architecture_is_named(tiny_tokenizer_dir, tmp_path):
    from transformers import BloomConfig, BloomForCausalLM

    BloomForCausalLM(BloomConfig(n_layer=1, hidden_size=16, n_head=2, vocab_size=40)).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir)).save_pretrained(tmp_path)
    with pytest.raises(ModelError, match=r"BloomForCausalLM \(model_type 'bloom'\) is not supported"):
        build_from_config(prepare_local("b", str(tmp_path)), seed=0, ln_scaling=True)


# ----------------------------------------------------------------------------- saved and loaded


def test_a_saved_init_model_loads_plainly_as_the_same_function_and_rebuilds_scaled(tokenizer, tmp_path):
    """save_model_dir (an init model's weights): folded norms, ``ln_scaling`` in config.json and
    the manifest; ``from_pretrained`` installs no hook and computes the scaled model's function;
    ``build_from_config`` of that directory draws fresh weights in the scaled architecture."""
    scaled = build_gpt2({**ARCH, "ln_scaling": True}, tokenizer, seed=0)
    with torch.no_grad():  # a trained-looking gain and bias, so that the fold of both shows
        for name, parameter in scaled.named_parameters():
            if ".ln_" in name:
                parameter.uniform_(0.5, 1.5)
    save_model_dir(scaled, tokenizer, tmp_path / "init")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "init")
    assert not lns.is_scaled(loaded)
    assert_same_function(loaded, scaled, token_ids(len(tokenizer)))
    assert torch.allclose(loaded.transformer.h[2].ln_2.bias, scaled.transformer.h[2].ln_2.bias / math.sqrt(3))
    assert torch.equal(loaded.transformer.ln_f.weight, scaled.transformer.ln_f.weight)
    assert json.loads((tmp_path / "init" / "config.json").read_text())["ln_scaling"] is True
    assert "ln_scaling" in json.loads(manifest_path(tmp_path / "init").read_text())
    handle = prepare_local("init", str(tmp_path / "init"))
    rebuilt = build_from_config(handle, seed=0)
    assert lns.is_scaled(rebuilt)
    assert_same_weights(rebuilt, build_gpt2(ARCH, tokenizer, seed=0))  # fresh weights, not the folded ones
    assert not lns.is_scaled(build_from_config(handle, seed=0, ln_scaling=False))


def load_state_weights(model: torch.nn.Module, run: Path) -> torch.nn.Module:
    """``model`` with the weights of ``run``'s last resumable state (kept after the run finished),
    which trained with the vocabulary padded."""
    vocab = pad_vocabulary(model, TrainConfig.pad_vocab_to_multiple_of)
    safetensors.torch.load_model(model, str(run / "set_aside" / "finished-state" / "model.safetensors"))
    cut_to_vocabulary(model, vocab)
    return model


def short_config(**changes) -> TrainConfig:
    """8 steps of 2 blocks, states every 2 steps, checkpoints at 0, 4 and 8, no tracker or probe."""
    return TrainConfig(train_tokens=8 * 2 * BLOCK, block_size=BLOCK, micro_batch_size=2, lr=3e-3,
                       checkpoint_every=2, num_checkpoints=1, val_batches=1, tracker="none", probe_every=0, **changes)


def scaled_model(seed: int = 0) -> GPT2LMHeadModel:
    return lns.enable(make_model(seed))


@pytest.fixture(scope="module")
def scaled_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("scaled-run")
    model = scaled_model()
    result = train(model, TRAIN_BLOCKS, VAL_BLOCKS, short_config(), out)
    return model, result, out


def test_the_checkpoints_of_a_scaled_run_load_plainly_as_the_model_that_trained(scaled_run):
    """final/ and every evaluation checkpoint: plain from_pretrained gives the logits and hidden
    states of the training-time model (final/: the model ``train`` returns; step 0: the initial
    one); the resumable state kept the raw norms, which the scaled model needs, not the folded."""
    model, result, out = scaled_run
    ids = token_ids(VOCAB, seed=1)
    final = GPT2LMHeadModel.from_pretrained(out / "final")
    assert not lns.is_scaled(final) and final.config.ln_scaling is True
    assert_same_function(final, model, ids)
    assert_same_function(GPT2LMHeadModel.from_pretrained(result.checkpoint_dirs[0]), scaled_model(), ids)
    assert "ln_scaling" in json.loads(manifest_path(out / "final").read_text())
    # the pipeline's loader (extraction, scoring, `condensation measure`): the base model's hidden states too
    base = load_model(ModelHandle(name="final", location=str(out / "final")), dtype="float32", device="cpu")
    assert not lns.is_scaled(base)
    for x, y in zip(base(ids, output_hidden_states=True).hidden_states, outputs(model, ids)[1], strict=True):
        assert torch.allclose(x, y, rtol=1e-5, atol=2e-5)
    raw = load_state_weights(make_model(), out)
    assert_same_weights(raw, model)  # the state's weights are the trained parameters themselves
    assert_same_function(lns.enable(raw), final, ids)
    assert not torch.allclose(final.transformer.h[1].ln_1.weight, model.transformer.h[1].ln_1.weight)


def test_a_resumed_scaled_run_matches_the_uninterrupted_one(scaled_run, tmp_path):
    """Stopped after 3 steps and resumed by a model built with other weights: the state's raw
    norms under the resumed model's hooks, scaled once, continue the same run bit for bit."""
    reference, reference_result, reference_dir = scaled_run
    train(scaled_model(), TRAIN_BLOCKS, VAL_BLOCKS, short_config(), tmp_path, stop_after_steps=3)
    resumed = scaled_model(seed=123)
    result = train(resumed, TRAIN_BLOCKS, VAL_BLOCKS, short_config(), tmp_path)
    assert_same_weights(resumed, reference)
    assert result.final_val_loss == reference_result.final_val_loss
    assert [row["loss"] for row in read_log(tmp_path)] == [row["loss"] for row in read_log(reference_dir)]
    final, again = (GPT2LMHeadModel.from_pretrained(d / "final") for d in (tmp_path, reference_dir))
    assert_same_weights(final, again)


def test_a_state_of_the_other_forward_is_set_aside(tmp_path, caplog):
    """A state saved by an unscaled run does not continue a scaled run of the same directory."""
    train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, short_config(), tmp_path, stop_after_steps=2)
    with caplog.at_level(logging.INFO, logger="condensation"):
        result = train(scaled_model(), TRAIN_BLOCKS, VAL_BLOCKS, short_config(), tmp_path, stop_after_steps=2)
    assert "ln_scaling: saved False, now True" in caplog.text and result.steps == 2
    assert (tmp_path / "set_aside" / "state-1").is_dir()


# ----------------------------------------------------------------------------- through the stages


TRAIN_SETTINGS = {"train_tokens": 64, "block_size": 16, "micro_batch_size": 2, "num_checkpoints": 1,
                  "val_batches": 1, "tracker": "none", "probe_every": 0}
"""Two steps of two 16-token blocks: a scratch run through the stages, cheaply."""


@pytest.fixture(scope="module")
def stages(tiny_tokenizer_dir, tmp_path_factory):
    """A config with a plain pretrain model, an LN-scaled one and an init model of each, the init
    models prepared as their rule prepares them (the arch it passes, plan.built_arch), and the
    scratch study's blocks packed."""
    from condensation.stages.data import pack_training_data
    from condensation.stages.models import prepare_model

    root = tmp_path_factory.mktemp("stages")
    (root / "text.txt").write_text("\n\n".join(f"Paragraph {i} says a few plain words about the sea."
                                                for i in range(300)))
    toy = {"source": "pretrain", "arch": {**ARCH, "n_positions": 1024}}
    config = validate_config({
        "datasets": {"mine": {"source": "files", "files": [str(root / "text.txt")]}},
        "models": {"toy": toy, "toy-lns": {**toy, "ln_scaling": True},
                   "toy-init": {"source": "init", "of": "toy"}, "toy-lns-init": {"source": "init", "of": "toy-lns"}},
        "pretrain": {"dataset": "mine"},
    })
    handles = {}
    for name in ("toy-init", "toy-lns-init"):
        handles[name] = root / name / "handle.json"
        of = config["models"][name]["of"]
        prepare_model(name=name, spec=config["models"][name], handle_path=handles[name], weights_dir=root / name / "hf",
                      tokenizer_dir=tiny_tokenizer_dir, arch=built_arch(config, name, config["models"][of]["arch"]),
                      seed=0)
    blocks = root / "blocks.npy"
    pack_training_data(dataset="mine", spec=config["datasets"]["mine"], corpus_dir=None,
                       tokenizer_source=handles["toy-init"], block_size=16, validation_fraction=0.05, out_path=blocks)
    return config, handles, blocks


def planned(run: Path, study: str, model: str, method: dict, seed: int = 1) -> Path:
    """``run.json`` of a study run from an init model, as the rule plan_study_run writes it."""
    from condensation.stages.training import plan_study_run

    run.mkdir(parents=True)
    plan_study_run(study=study, model=model, method=method, train=TRAIN_SETTINGS, seed=seed,
                   out_path=run / "run.json", reinitialise=True)
    return run / "run.json"


def test_a_scratch_method_with_ln_scaling_starts_from_the_ce_runs_weights_scaled(stages, tmp_path):
    """``{objective: ce, ln_scaling: true}`` in the scratch study: its run of a seed draws the CE
    run's initial weights of that seed (another seed draws others) and scales them in the forward,
    as a hand-scaled copy does; with another objective too. The plan records the option only where
    it is set (a CE run's plan is as before)."""
    from condensation.stages.training import _starting_model

    config, handles, _ = stages
    handle = handles["toy-init"]
    plans = {name: RunPlan.load(planned(tmp_path / name, "scratch", "toy-init", method))
             for name, method in (("ce", {"objective": "ce"}), ("lns", {"objective": "ce", "ln_scaling": True}),
                                  ("disp-lns", {"objective": "dispersion", "ln_scaling": True}))}
    assert plans["lns"].method.as_dict() == {"objective": "ce", "ln_scaling": True}
    assert plans["ce"].method.as_dict() == {"objective": "ce"}
    assert plans["disp-lns"].method.kind == "auxiliary" and plans["disp-lns"].method.ln_scaling is True
    plain, _ = _starting_model(plans["ce"], handle, None)
    scaled, _ = _starting_model(plans["lns"], handle, None)
    assert not lns.is_scaled(plain) and lns.is_scaled(scaled)
    assert_same_weights(scaled, plain)
    other_seed = RunPlan.load(planned(tmp_path / "seed2", "scratch", "toy-init", {"objective": "ce"}, seed=2))
    assert not torch.equal(_starting_model(other_seed, handle, None)[0].transformer.h[0].attn.c_attn.weight,
                           plain.transformer.h[0].attn.c_attn.weight)  # the check above can tell seeds apart
    ids = token_ids(plain.config.vocab_size)
    assert_same_function(scaled, hand_scaled(plain, lambda m: m.transformer.h, ("ln_1", "ln_2")), ids, atol=1e-5)
    assert not torch.allclose(outputs(scaled, ids)[0], outputs(plain, ids)[0], atol=1e-3)
    dispersed, _ = _starting_model(plans["disp-lns"], handle, None)
    assert lns.scales(dispersed) == lns.scales(scaled)
    assert_same_weights(dispersed, plain)


def test_a_scratch_run_of_the_method_trains_scaled_and_saves_a_plain_checkpoint(stages, tmp_path):
    """The run through train_run: final/ loads with a plain from_pretrained (no hook, config and
    manifest say ln_scaling) as the function of the trained raw weights scaled, which differs from
    those weights unscaled; a midtrain run of the method is refused before a model is loaded."""
    from condensation.stages.training import train_run

    _, handles, blocks = stages
    plan = planned(tmp_path / "lns", "scratch", "toy-init", {"objective": "ce", "ln_scaling": True})
    train_run(plan_path=plan, blocks_path=blocks, handle_path=handles["toy-init"])
    run = plan.parent
    final = AutoModelForCausalLM.from_pretrained(run / "final")
    assert not lns.is_scaled(final) and final.config.ln_scaling is True
    assert "ln_scaling" in json.loads(manifest_path(run / "final").read_text())
    raw = load_state_weights(AutoModelForCausalLM.from_pretrained(run / "final"), run)  # the weights that trained
    ids = token_ids(final.config.vocab_size)
    assert_same_function(final, lns.enable(copy.deepcopy(raw)), ids)
    assert not torch.allclose(outputs(final, ids)[0], outputs(raw, ids)[0], atol=1e-3)

    midtrain = planned(tmp_path / "midtrain", "midtrain", "toy-init", {"objective": "ce", "ln_scaling": True})
    with pytest.raises(ValueError, match="method option ln_scaling: the midtrain study does not train"):
        train_run(plan_path=midtrain, blocks_path=blocks, handle_path=tmp_path / "no-handle.json")
    assert not (midtrain.parent / "final").exists()


def test_the_init_of_an_ln_scaled_pretrain_model_trains_scaled_through_the_stages(stages, tiny_tokenizer_dir,
                                                                                  tmp_path):
    """The init of an LN-scaled pretrain model (its arch says ln_scaling): a scratch run from it
    (reinitialised: scaled again by its config.json), its final/ loaded plainly as the function of
    the raw trained weights scaled; a pretrain plan builds scaled; the same init in a midtrain run
    is refused by the stage."""
    from condensation.stages.training import _starting_model, train_run

    config, handles, blocks = stages
    handle = handles["toy-lns-init"]
    plan = planned(tmp_path / "scratch", "scratch", "toy-lns-init", {"objective": "ce"})
    train_run(plan_path=plan, blocks_path=blocks, handle_path=handle)
    run = plan.parent
    final = AutoModelForCausalLM.from_pretrained(run / "final")
    raw = load_state_weights(AutoModelForCausalLM.from_pretrained(run / "final"), run)  # the weights that trained
    ids = token_ids(final.config.vocab_size)
    assert_same_function(final, lns.enable(raw), ids)
    assert not torch.allclose(outputs(final, ids)[0], outputs(lns.enable(copy.deepcopy(final)), ids)[0], atol=1e-3)

    arch = built_arch(config, "toy-lns", config["models"]["toy-lns"]["arch"])
    pretrain = RunPlan.from_json({**RunPlan.load(plan).to_json(), "kind": "pretrain", "arch": arch})
    assert lns.is_scaled(_starting_model(pretrain, None, tiny_tokenizer_dir)[0])
    midtrain = planned(tmp_path / "midtrain", "midtrain", "toy-lns-init", {"objective": "ce"})
    with pytest.raises(ValueError, match="does not train LN-scaled models"):
        train_run(plan_path=midtrain, blocks_path=blocks, handle_path=handle)
    assert not (midtrain.parent / "final").exists()


# ----------------------------------------------------------------------------- the config


BASE = {"datasets": {"austen": {"source": "austen"}}}
TOY = {"source": "pretrain", "arch": {"n_layer": 2, "n_positions": 1024}}
STUDY = {"dataset": "austen", "geometry_dataset": "austen", "methods": {"ce": {"objective": "ce"}}}


def test_ln_scaling_is_a_setting_of_pretrain_models_and_their_init_models_take_it():
    """A pretrain model's option, inherited by its init model (its architecture); an init model
    has no option of its own (the scratch study's is a method's), nor a model of another source."""
    config = validate_config({**BASE, "models": {
        "toy": TOY, "toy-lns": {**TOY, "ln_scaling": True},
        "init": {"source": "init", "of": "toy"}, "of-lns": {"source": "init", "of": "toy-lns"},
    }, "scratch": {**STUDY, "models": ["init", "of-lns"]}})
    scaled = {name: model_ln_scaling(config, name) for name in config["models"]}
    assert scaled == {"toy": False, "toy-lns": True, "init": False, "of-lns": True}
    arch = config["models"]["toy"]["arch"]
    assert built_arch(config, "init", arch) is arch  # unscaled: the rules' params as they were
    assert built_arch(config, "of-lns", arch) == {**arch, "ln_scaling": True}
    for source in ({"source": "hub", "id": "gpt2"}, {"source": "local", "path": "x"},
                   {"source": "init", "of": "toy"}):
        with pytest.raises(ConfigError, match=r"config\.models\.m\.ln_scaling"):
            validate_config({**BASE, "models": {"toy": TOY, "m": {**source, "ln_scaling": True}}})


LNS_RUN = {"source": "run", "study": "scratch", "of": "init", "method": "lns", "seed": 0}
"""A scratch run of the LN-scaled method, as a model."""


@pytest.mark.parametrize(("model", "source"), [("toy-lns", "config.models.toy-lns.ln_scaling"),
                                               ("of-lns", "config.models.toy-lns.ln_scaling"),
                                               ("lns-run", "config.scratch.methods.lns.ln_scaling")])
def test_midtraining_refuses_an_ln_scaled_model_naming_the_field(model, source):
    models = {"toy": TOY, "toy-lns": {**TOY, "ln_scaling": True}, "init": {"source": "init", "of": "toy"},
              "of-lns": {"source": "init", "of": "toy-lns"}, "lns-run": LNS_RUN,
              "ce-run": {**LNS_RUN, "method": "ce"}}
    scratch = {**STUDY, "models": ["init"], "methods": {"ce": {"objective": "ce"},
                                                        "lns": {"objective": "ce", "ln_scaling": True}}}
    with pytest.raises(ConfigError, match=rf"config\.midtrain\.models: '{model}' is LN-scaled "
                                          rf"\({source.replace('.', '[.]')}\).*not an option of mid-training"):
        validate_config({**BASE, "models": models, "scratch": scratch, "midtrain": {**STUDY, "models": [model]}})
    assert validate_config({**BASE, "models": models, "scratch": scratch,
                            "midtrain": {**STUDY, "models": ["toy", "ce-run"]}})


@pytest.mark.parametrize("method", [{"objective": "ce", "ln_scaling": True},
                                    {"objective": "dispersion", "weight": 0.2, "ln_scaling": True},
                                    {"objective": "decorrelation", "ln_scaling": False}])
def test_ln_scaling_is_a_method_option_of_the_scratch_study_with_any_objective(method):
    models = {"toy": TOY, "init": {"source": "init", "of": "toy"}}
    study = {**STUDY, "models": ["init"], "methods": {"ce": {"objective": "ce"}, "x": method}}
    config = validate_config({**BASE, "models": models, "scratch": study})
    resolved = resolve_method(config["scratch"]["methods"]["x"])
    assert resolved.ln_scaling is method["ln_scaling"] and resolved.objective == method["objective"]
    assert resolve_method(resolved.as_dict()) == resolved  # run.json round-trips it
    assert ("ln_scaling" in resolved.as_dict()) is method["ln_scaling"]  # recorded where set
    options = load_schema()["$defs"]["method"]["properties"]
    assert options["ln_scaling"]["type"] == "boolean"
    assert options["ln_scaling"]["description"].startswith("scratch study: LayerNorm Scaling")
    with pytest.raises(ConfigError, match=r"config\.scratch\.methods\.x\.ln_scaling: 1 is not of type 'boolean'"):
        validate_config({**BASE, "models": models, "scratch": {**study, "methods": {"x": {**method, "ln_scaling": 1}}}})
    with pytest.raises(ValueError, match="ln_scaling must be true or false"):
        resolve_method({**method, "ln_scaling": "yes"})


def test_midtraining_refuses_the_method_option_naming_the_field():
    models = {"toy": TOY, "init": {"source": "init", "of": "toy"}}
    for method in ({"objective": "ce", "ln_scaling": True}, {"objective": "dispersion", "ln_scaling": True}):
        study = {**STUDY, "models": ["toy"], "methods": {"ce": {"objective": "ce"}, "x": method}}
        with pytest.raises(ConfigError, match=r"config\.midtrain\.methods\.x\.ln_scaling: LayerNorm Scaling changes "
                                              r"the architecture.*method option of the scratch study only"):
            validate_config({**BASE, "models": models, "midtrain": study})
        assert validate_config({**BASE, "models": models, "scratch": {**study, "models": ["init"]}})
    # false is the model as it is: nothing to refuse
    assert validate_config({**BASE, "models": models, "midtrain": {
        **STUDY, "models": ["toy"], "methods": {"x": {"objective": "ce", "ln_scaling": False}}}})


def test_the_docs_snippet_validates():
    """The scratch-study snippet of docs/configs.md, as an overlay on config.yaml: the method
    beside the study's CE arm, scaled; every other method as it was."""
    import yaml

    page = (Path(__file__).resolve().parents[2] / "docs" / "configs.md").read_text()
    snippet = page.split("<!-- ln_scaling snippet -->")[1].split("```yaml")[1].split("```")[0]
    base = yaml.safe_load((Path(__file__).resolve().parents[2] / "config.yaml").read_text())
    overlay = yaml.safe_load(snippet)
    merged = {**base, "scratch": {**base["scratch"],
                                  "methods": {**base["scratch"]["methods"], **overlay["scratch"]["methods"]}}}
    config = validate_config(merged)
    methods = {name: resolve_method(for_seed(spec, 0)) for name, spec in config["scratch"]["methods"].items()}
    assert methods["ln_scaling"].ln_scaling and methods["ln_scaling"].objective == "ce"
    assert [name for name, method in methods.items() if method.ln_scaling] == ["ln_scaling"]
    assert "ce" in methods
