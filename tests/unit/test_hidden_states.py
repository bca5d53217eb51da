"""``measure`` on the models as researchers hold them: TransformerLens, nnsight and a plain callable
give the numbers of the plain Hugging Face model with the same weights (tiny random models, built
offline from configs)."""

from __future__ import annotations

from importlib.metadata import version

import numpy as np
import pytest
import torch

from condensation.hidden_states import UnsupportedModelError, source_of
from condensation.measurement import MeasureError, measure
from tests.helpers.float_bounds import U32, mean_cosine_bound

VOCAB, LAYERS, WIDTH, HEADS, CONTEXT = 96, 3, 32, 4, 64


@pytest.fixture(scope="module")
def hf_gpt2(tmp_path_factory):
    """A random GPT2 with its LM head, eager attention (what a TransformerLens forward computes), in
    float64: another implementation's forward (another order) gives the same states to ~1e-16, not
    to float32 rounding through every block, and the measurement casts them to float32 itself."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=LAYERS, n_embd=WIDTH, n_head=HEADS, n_positions=CONTEXT, vocab_size=VOCAB,
                        bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    model = GPT2LMHeadModel(config).eval().double()
    directory = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(directory)
    return model, directory


@pytest.fixture(scope="module")
def token_ids():
    return torch.randint(0, VOCAB, (6, 40), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def reference(hf_gpt2, token_ids):
    return measure(hf_gpt2[0], token_ids=token_ids, progress=False, extraction={"batch_size": 4})


# Another float64 forward: its states cast to float32 may differ from the reference's by one
# rounding (roundings=2: the cast, and that); each side's cosine means then lie within a mean's
# bound of the exact ones (mean_cosine, stored in float32, one rounding more).
OTHER_FORWARD = 2 * mean_cosine_bound(WIDTH, 6 * 40 * 40, roundings=2) + 2 * U32


def assert_same_numbers(result, reference, atol):
    """``atol`` 0: the same forward, bit-identical numbers; else ``OTHER_FORWARD``."""
    a, b = result.statistics, reference.statistics
    names = ("layer_mean", "layer_mean_offdiag", "sequence_layer_mean", "sequence_layer_mean_offdiag", "mean_cosine")
    for name in names:
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=0, atol=atol, err_msg=name)
    # not derived: the spectral lenses (eigenvalues of a float32 covariance, floored at 1e-6 of the
    # largest) have no simple bound; 1e-5 is some 170 float32 roundings of a lens of size 1
    np.testing.assert_allclose(a.lenses.values, b.lenses.values, rtol=0, atol=atol and 1e-5)
    assert result.trend.spearman_rho == reference.trend.spearman_rho


def test_the_reference_is_the_hugging_face_hidden_states(hf_gpt2, token_ids, reference):
    """Layer 0 is the embedding output and layer L the final LayerNorm's output: what the adapters
    below must reproduce."""
    hidden = hf_gpt2[0](token_ids[:1], output_hidden_states=True).hidden_states
    assert len(hidden) == LAYERS + 1 == reference.statistics.num_layers
    embedded = hf_gpt2[0].transformer.wte(token_ids[:1]) + hf_gpt2[0].transformer.wpe(torch.arange(40))
    torch.testing.assert_close(hidden[0], embedded)


def test_a_callable_returning_hidden_states(hf_gpt2, token_ids, reference):
    model = hf_gpt2[0]

    def hidden_states(input_ids):
        return model(input_ids, output_hidden_states=True).hidden_states

    assert_same_numbers(measure(hidden_states, token_ids=token_ids, progress=False,
                                extraction={"batch_size": 4}), reference, atol=0)
    stacked = measure(lambda ids: torch.stack(hidden_states(ids)), token_ids=token_ids, progress=False,
                      extraction={"batch_size": 4})
    assert_same_numbers(stacked, reference, atol=0)


def test_a_callable_that_returns_something_else_is_named(token_ids):
    with pytest.raises(MeasureError, match=r"hidden states of layer 0 have shape \(4, 40\); expected \[4, 40, d\]"):
        measure(lambda ids: [ids.float(), ids.float()], token_ids=token_ids, progress=False,
                extraction={"batch_size": 4})
    with pytest.raises(MeasureError, match="returned dict, not per-layer hidden states"):
        measure(lambda ids: {"h": ids}, token_ids=token_ids, progress=False, extraction={"batch_size": 4})
    with pytest.raises(MeasureError, match="needs its tokenizer"):
        measure(lambda ids: ids, ["some text"], progress=False)
    with pytest.raises(MeasureError, match="TransformerLens HookedTransformer or TransformerBridge, an nnsight"):
        measure(42, token_ids=token_ids, progress=False)
    with pytest.raises(UnsupportedModelError):
        source_of("not a model")


def hooked_transformer(hf_model):
    """The same weights as a TransformerLens HookedTransformer, without weight processing."""
    transformer_lens = pytest.importorskip("transformer_lens")
    try:
        transformer_lens.HookedTransformer  # noqa: B018 - TransformerLens 4 raises ImportError here
    except (ImportError, AttributeError):
        pytest.skip(f"transformer-lens {version('transformer-lens')} has no HookedTransformer (TransformerLens 4 "
                    "removed it; its TransformerBridge is tested)")
    from transformer_lens.pretrained.weight_conversions.gpt2 import convert_gpt2_weights

    config = transformer_lens.HookedTransformerConfig(
        n_layers=LAYERS, d_model=WIDTH, n_heads=HEADS, d_head=WIDTH // HEADS, d_mlp=4 * WIDTH, d_vocab=VOCAB,
        n_ctx=CONTEXT, act_fn="gelu_new", normalization_type="LN", eps=hf_model.config.layer_norm_epsilon,
        default_prepend_bos=False, dtype=hf_model.dtype,
    )
    with pytest.warns(DeprecationWarning):  # TransformerLens 3 keeps it, deprecated; 4 removed it
        model = transformer_lens.HookedTransformer(config)
    model.load_state_dict(convert_gpt2_weights(hf_model, config), strict=False)
    return model.eval()


def test_a_transformer_lens_hooked_transformer(hf_gpt2, token_ids, reference):
    model = hooked_transformer(hf_gpt2[0])
    result = measure(model, token_ids=token_ids, progress=False, extraction={"batch_size": 4})
    assert source_of(model).kind == "transformer_lens" and source_of(model).max_positions == CONTEXT
    assert_same_numbers(result, reference, atol=OTHER_FORWARD)  # another implementation of the blocks


def test_a_transformer_lens_bridge(hf_gpt2, token_ids, reference):
    bridge_module = pytest.importorskip("transformer_lens.model_bridge")
    import copy

    # a copy: the bridge takes over the modules of the model it is given
    hf_model = copy.deepcopy(hf_gpt2[0])
    bridge = bridge_module.TransformerBridge.boot_transformers(str(hf_gpt2[1]), hf_model=hf_model, device="cpu")
    source = source_of(bridge)
    assert source.kind == "transformer_bridge" and source.max_positions == CONTEXT
    # the states themselves, float64 on both sides. Not derived: 1e-12 is some 9000 float64 roundings of
    # a state of size 1; TransformerLens 3.9 and 4.3 give them within 2e-15, a wrong layer or norm by 1e-2
    expected = hf_gpt2[0](token_ids[:2], output_hidden_states=True).hidden_states
    torch.testing.assert_close(tuple(source(token_ids[:2])), expected, rtol=0, atol=1e-12)
    assert_same_numbers(measure(bridge, token_ids=token_ids, progress=False,
                                extraction={"batch_size": 4}), reference, atol=OTHER_FORWARD)


def test_an_nnsight_language_model(hf_gpt2, token_ids, reference, tiny_tokenizer_dir):
    nnsight = pytest.importorskip("nnsight")
    import warnings

    from transformers import AutoTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "LanguageModel is deprecated": still the common form
        model = nnsight.LanguageModel(hf_gpt2[0], tokenizer=AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir)))
    source = source_of(model)
    assert source.kind == "nnsight" and source.tokenizer is not None and source.max_positions == CONTEXT
    assert_same_numbers(measure(model, token_ids=token_ids, progress=False,
                                extraction={"batch_size": 4}), reference, atol=0)
