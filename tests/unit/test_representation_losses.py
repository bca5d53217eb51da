"""The representation losses (JREG, SimReg): equal to their loop-based float64 reference in value
and gradient, known answers, the settings and the registry's new kind, and training with each
through the loop and through the workflow's stages."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from condensation.config.objectives import (
    OBJECTIVES,
    JregConfig,
    Objective,
    RepresentationLossConfig,
    SimRegConfig,
    TrainingMethod,
    register,
    resolve_method,
)
from condensation.config.validate import ConfigError, load_schema, validate_config
from condensation.training.checkpointing import resume_mismatch
from condensation.training.losses import (
    AuxiliaryLoss,
    RepresentationLoss,
    reference_representation_loss,
    reference_supervised_contrastive,
    representation_loss,
)

REPRESENTATION = [name for name, objective in OBJECTIVES.items() if objective.kind == "representation"]

# non-default settings too, so that a loss that ignored one would differ from its reference
SETTINGS = {
    "jreg-last": JregConfig(),
    "jreg-first": JregConfig(layer=1),
    "jreg-middle": JregConfig(layer=-2),
    "simreg-last": SimRegConfig(),
    "simreg-all": SimRegConfig(placement="all", tau=0.3),
    "simreg-late": SimRegConfig(placement="late_half", tau=1.0),
}


def random_states(layers=4, batch=2, tokens=7, features=5, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, tokens, features, generator=gen, dtype=torch.float64).to(dtype) for _ in range(layers)]


# labels (ids[t + 1]) repeat within each sequence: [2, 3, 2, 3, 2, 1] and [4, 4, 5, 6, 5, 1]
IDS = torch.tensor([[1, 2, 3, 2, 3, 2, 1], [4, 4, 4, 5, 6, 5, 1]])


def value_and_grads(fn, states):
    states = [z.detach().clone().requires_grad_(True) for z in states]
    value = fn(states)
    grads = torch.autograd.grad(value, states, allow_unused=True)
    return value.detach(), [torch.zeros_like(z) if g is None else g for z, g in zip(states, grads, strict=True)]


# ----------------------------------------------------------------------------------------------
# against the reference formula


@pytest.mark.parametrize("case", SETTINGS)
def test_matches_reference_value_and_gradient(case):
    config = SETTINGS[case]
    states = random_states(seed=len(case))
    value, grads = value_and_grads(lambda s: representation_loss(s, IDS, config), states)
    ref_value, ref_grads = value_and_grads(lambda s: reference_representation_loss(s, IDS, config), states)
    assert value.shape == () and value.dtype == torch.float64
    torch.testing.assert_close(value, ref_value, rtol=1e-10, atol=1e-12)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref_grad, rtol=1e-8, atol=1e-10)
    assert max(g.abs().max() for g in grads) > 1e-3  # the comparison is not between two zeros


@pytest.mark.parametrize("name", REPRESENTATION)
def test_every_representation_objective_matches_its_reference_with_its_defaults(name):
    """Every loss of the kind in the registry, with its defaults: one without a reference fails here."""
    config = resolve_method({"objective": name}).settings
    states = random_states(seed=3)
    value, grads = value_and_grads(lambda s: representation_loss(s, IDS, config), states)
    ref_value, ref_grads = value_and_grads(lambda s: reference_representation_loss(s, IDS, config), states)
    torch.testing.assert_close(value, ref_value, rtol=1e-10, atol=1e-12)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref_grad, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("case", SETTINGS)
def test_gradcheck(case):
    config = SETTINGS[case]
    states = tuple(z.requires_grad_(True) for z in random_states(layers=3, tokens=5, features=4, seed=9))
    assert torch.autograd.gradcheck(lambda *s: representation_loss(s, IDS[:, :5], config), states)


@pytest.mark.parametrize("case", ["jreg-last", "simreg-all"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_narrow_states_compute_in_float32_near_the_reference(case, dtype):
    config = SETTINGS[case]
    states = random_states(seed=5)
    value = representation_loss([z.to(dtype) for z in states], IDS, config)
    reference = reference_representation_loss([z.to(dtype) for z in states], IDS, config)
    assert value.dtype == torch.float32
    torch.testing.assert_close(value.double(), reference, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# JREG: known answers and the pair it reads


def two_layers(before, after):
    """A hidden-state tuple of an embedding output and two blocks, ``before`` then ``after``."""
    embedding = torch.randn(before.shape, dtype=before.dtype, generator=torch.Generator().manual_seed(7))
    return [embedding, before, after]


def test_jreg_of_identical_or_rescaled_consecutive_layers_is_zero():
    h = random_states(layers=1)[0]
    assert representation_loss(two_layers(h, h.clone()), IDS, JregConfig()).item() == pytest.approx(0.0, abs=1e-12)
    scaled = h * torch.linspace(0.5, 4.0, h.shape[1], dtype=h.dtype)[None, :, None]  # cosine ignores norms
    assert representation_loss(two_layers(h, scaled), IDS, JregConfig()).item() == pytest.approx(0.0, abs=1e-12)


def test_jreg_of_orthogonal_layers_is_one_and_of_opposite_layers_two():
    eye = torch.eye(4, dtype=torch.float64)
    before = eye[[0, 1, 2, 3, 0, 1, 2]].expand(2, 7, 4)
    after = eye[[1, 2, 3, 0, 3, 0, 1]].expand(2, 7, 4) * 3.0
    assert representation_loss(two_layers(before, after), IDS, JregConfig()).item() == pytest.approx(1.0)
    assert representation_loss(two_layers(before, -before), IDS, JregConfig()).item() == pytest.approx(2.0)
    half = torch.cat([after[:, :3], before[:, 3:]], dim=1)  # 3 of 7 tokens turned by 90 degrees
    assert representation_loss(two_layers(before, half), IDS, JregConfig()).item() == pytest.approx(3 / 7)


def test_jreg_layer_picks_the_block_whose_jump_counts():
    eye = torch.eye(4, dtype=torch.float64)
    e0, e1 = eye[0].expand(2, 7, 4), eye[1].expand(2, 7, 4)
    states = [e0, e0, e1, e1]  # the jump is block 2's: hidden_states[1] -> [2]
    loss = {layer: representation_loss(states, IDS, JregConfig(layer=layer)).item() for layer in (1, 2, 3, -1, -2, -3)}
    assert loss == pytest.approx({1: 0.0, 2: 1.0, 3: 0.0, -1: 0.0, -2: 1.0, -3: 0.0})
    with pytest.raises(ValueError, match="layer -4 has no layer before it in 4 hidden states"):
        representation_loss(states, IDS, JregConfig(layer=-4))
    with pytest.raises(ValueError, match="layer 4 has no layer before it"):
        representation_loss(states, IDS, JregConfig(layer=4))


def test_jreg_reads_the_last_block_s_input_and_its_output_as_the_head_reads_it():
    """On a GPT2, hidden_states[-1] is ln_f(the last block's output): the pair JREG compares is the
    last block's input and that, the last pair of the lens layer_angle."""
    from tests.helpers.training import make_model

    model = make_model().eval()
    outputs = {}
    for index, block in enumerate(model.transformer.h):
        block.register_forward_hook(lambda module, args, out, index=index: outputs.__setitem__(
            index, out[0] if isinstance(out, tuple) else out))
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        hidden = model(ids, output_hidden_states=True).hidden_states
        head_input = model.transformer.ln_f(outputs[1])
        cos = torch.nn.functional.cosine_similarity(outputs[0], head_input, dim=-1)
        torch.testing.assert_close(representation_loss(hidden, ids, JregConfig()), (1 - cos).mean())
        raw = torch.nn.functional.cosine_similarity(outputs[0], outputs[1], dim=-1)
        assert abs((1 - raw).mean() - (1 - cos).mean()) > 1e-3  # the final norm's rotation counts


# ----------------------------------------------------------------------------------------------
# SimReg: known answers


def states_at_last_layer(z):
    """A tuple whose last block's output is ``z`` (SimReg's default placement reads that one)."""
    return [torch.randn(z.shape, dtype=z.dtype, generator=torch.Generator().manual_seed(3)), z]


def test_simreg_hand_computed_three_positions():
    """ids [11, 7, 9, 7]: positions 0, 1, 2 labelled 7, 9, 7 (position 3 has no label). z0 = (1, 0),
    z1 = (0, 1), z2 = (2, 2): anchor 0's positive is 2 (cos c = 1/sqrt 2, against z1's 0), anchor 2's
    is 0 (cos c, as z1's), anchor 1 has none: (log(1 + exp(-c / tau)) + log 2) / 2."""
    tau, c = 0.5, 1 / math.sqrt(2)
    z = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [5.0, -3.0]]], dtype=torch.float64)
    ids = torch.tensor([[11, 7, 9, 7]])
    expected = (math.log(1 + math.exp(-c / tau)) + math.log(2)) / 2
    assert representation_loss(states_at_last_layer(z), ids, SimRegConfig(tau=tau)).item() == pytest.approx(expected)
    assert reference_representation_loss(states_at_last_layer(z), ids, SimRegConfig(tau=tau)).item() == pytest.approx(
        expected)


def test_simreg_with_every_label_distinct_adds_zero_with_a_zero_gradient():
    z = random_states(layers=1, tokens=8)[0].requires_grad_(True)
    ids = torch.arange(16).reshape(2, 8)
    loss = representation_loss(states_at_last_layer(z), ids, SimRegConfig())
    (grad,) = torch.autograd.grad(loss, z)
    assert loss.item() == 0.0 and torch.equal(grad, torch.zeros_like(grad))
    short = representation_loss(states_at_last_layer(z[:, :2]), ids[:, :2], SimRegConfig())  # one labelled position
    assert short.item() == 0.0 and short.isfinite()


def test_simreg_pairs_positions_within_a_sequence_only():
    """Sequence 0's labels all differ, and so do sequence 1's; the two share every label."""
    z = random_states(layers=1, tokens=5)[0]
    ids = torch.tensor([[0, 1, 2, 3, 4], [9, 1, 2, 3, 4]])
    assert representation_loss(states_at_last_layer(z), ids, SimRegConfig()).item() == 0.0


def test_simreg_labels_are_the_next_tokens_and_the_last_position_has_none():
    z = random_states(layers=1)[0].requires_grad_(True)
    loss = representation_loss(states_at_last_layer(z), IDS, SimRegConfig())
    (grad,) = torch.autograd.grad(loss, z)
    assert torch.equal(grad[:, -1], torch.zeros_like(grad[:, -1])) and grad[:, :-1].abs().min() > 0
    first_changed = IDS.clone()
    first_changed[:, 0] = 50  # position 0's id is no position's label
    assert representation_loss(states_at_last_layer(z), first_changed, SimRegConfig()).item() == loss.item()
    last_changed = IDS.clone()
    last_changed[:, -1] = 2  # the last id is position T-2's label: sequence 0 gains a positive pair
    assert representation_loss(states_at_last_layer(z), last_changed, SimRegConfig()).item() != loss.item()


def test_simreg_pulls_a_positive_pair_together():
    """One gradient step on the states raises the cosine of same-label positions."""
    z = random_states(layers=1, seed=4)[0].requires_grad_(True)
    loss = representation_loss(states_at_last_layer(z), IDS, SimRegConfig())
    (grad,) = torch.autograd.grad(loss, z)
    stepped = z.detach() - 0.05 * grad

    def cos(states, i, j):
        return torch.nn.functional.cosine_similarity(states[0, i], states[0, j], dim=0).item()

    # sequence 0's positions 0, 2, 4 share label 2: each pair moves closer
    assert all(cos(stepped, i, j) > cos(z.detach(), i, j) for i, j in [(0, 2), (0, 4), (2, 4)])


def test_simreg_max_tokens_uses_a_shared_random_subset_of_the_labelled_positions():
    states = random_states(tokens=12)
    ids = torch.randint(0, 3, (2, 12), generator=torch.Generator().manual_seed(1))
    exact = SimRegConfig(placement="all")
    for enough in (11, 40):  # at least the 11 labelled positions: exact
        sampled = dataclasses.replace(exact, max_tokens=enough)
        assert representation_loss(states, ids, sampled).item() == representation_loss(states, ids, exact).item()
    torch.manual_seed(123)
    value = representation_loss(states, ids, dataclasses.replace(exact, max_tokens=6))
    torch.manual_seed(123)
    keep = torch.randperm(11)[:6].sort().values
    labels = ids[:, 1:][:, keep]
    expected = sum(reference_supervised_contrastive(z[:, :-1][:, keep], labels, exact.tau) for z in states[1:]) / 3
    torch.testing.assert_close(value, expected, rtol=1e-10, atol=1e-12)
    assert abs(value.item() - representation_loss(states, ids, exact).item()) > 1e-6  # a subset, not all


# ----------------------------------------------------------------------------------------------
# settings, registry, schema, term


def test_the_kind_its_options_and_their_checks():
    assert {name: OBJECTIVES[name].kind for name in ("jreg", "simreg")} == {"jreg": "representation",
                                                                             "simreg": "representation"}
    assert OBJECTIVES["jreg"].options == ("weight", "layer")
    assert OBJECTIVES["simreg"].options == ("weight", "tau", "placement", "max_tokens")
    assert resolve_method({"objective": "jreg"}) == TrainingMethod("jreg", JregConfig())
    method = resolve_method({"objective": "simreg", "weight": 0.3, "tau": 0.2})
    assert method.settings == SimRegConfig(weight=0.3, tau=0.2) and method.weight == 0.3
    assert method.as_dict() == {"objective": "simreg", "weight": 0.3, "tau": 0.2, "placement": "last",
                                "max_tokens": None}
    for bad, message in [({"layer": 0}, "layer must be a non-zero int"), ({"layer": True}, "layer must be"),
                         ({"weight": -1.0}, "weight must be a finite number")]:
        with pytest.raises(ValueError, match=message):
            JregConfig(**bad)
    for bad, message in [({"tau": 0.0}, r"tau must be a finite number in \(0\.0, inf\)"),
                         ({"max_tokens": 1}, "max_tokens must be None or an int >= 2"),
                         ({"placement": "middle"}, "unknown placement 'middle'")]:
        with pytest.raises(ValueError, match=message):
            SimRegConfig(**bad)
    with pytest.raises(ValueError, match="loss 'simreg' takes SimRegConfig, not JregConfig"):
        JregConfig(name="simreg")
    with pytest.raises(ValueError, match=r"option\(s\) \['tau'\] do not apply to objective 'jreg'"):
        resolve_method({"objective": "jreg", "tau": 0.1})


def study(method):
    return {"datasets": {"austen": {"source": "austen"}}, "models": {"m": {"source": "hub", "id": "gpt2"}},
            "midtrain": {"models": ["m"], "dataset": "austen", "geometry_dataset": "austen", "methods": {"x": method}}}


def test_a_config_naming_either_validates_and_the_schema_spells_their_options():
    for method in ({"objective": "jreg", "weight": 0.05, "layer": -1},
                   {"objective": "simreg", "tau": 0.1, "placement": "all", "max_tokens": 128}):
        config = validate_config(study(method))
        assert resolve_method(config["midtrain"]["methods"]["x"]).as_dict() | method == resolve_method(method).as_dict()
    options = load_schema()["$defs"]["method"]["properties"]
    assert options["layer"]["type"] == "integer" and options["layer"]["description"].startswith("jreg: The block")
    assert "simreg: Temperature of the softmax over cosines" in options["tau"]["description"]
    assert "simreg: Which hidden states get the loss" in options["placement"]["description"]
    with pytest.raises(ConfigError, match=r"methods\.x\.layer: 1\.5 is not of type 'integer'"):
        validate_config(study({"objective": "jreg", "layer": 1.5}))
    with pytest.raises(ConfigError, match=r"methods\.x: layer must be a non-zero int"):
        validate_config(study({"objective": "jreg", "layer": 0}))
    with pytest.raises(ConfigError, match=r"option\(s\) \['layer'\] do not apply to objective 'simreg'"):
        validate_config(study({"objective": "simreg", "layer": 2}))


@pytest.mark.parametrize("name", REPRESENTATION)
def test_the_docs_snippet_of_each_validates_on_config_yaml(name):
    """docs/configs.md's snippet for each, as an overlay after config.yaml (methods merge)."""
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[2]
    page = (repo / "docs" / "configs.md").read_text()
    snippet = page.split(f"<!-- {name} snippet -->")[1].split("```yaml")[1].split("```")[0]
    base, overlay = yaml.safe_load((repo / "config.yaml").read_text()), yaml.safe_load(snippet)
    methods = {**base["midtrain"]["methods"], **overlay["midtrain"]["methods"]}
    config = validate_config({**base, "midtrain": {**base["midtrain"], "methods": methods}})
    assert resolve_method(config["midtrain"]["methods"][name]).objective == name
    assert set(config["midtrain"]["methods"]) == set(base["midtrain"]["methods"]) | {name}


def test_an_inconsistent_representation_entry_is_refused():
    with pytest.raises(ValueError, match="its own subclass of RepresentationLossConfig"):
        register(Objective("bad", RepresentationLossConfig, loss="x:y"))
    with pytest.raises(ValueError, match=r"a representation loss needs loss='module:function'"):
        register(Objective("bad", JregConfig))
    with pytest.raises(ValueError, match="stacked applies to an auxiliary loss only"):
        register(Objective("bad", JregConfig, loss="x:y", stacked="x:z"))
    assert "bad" not in OBJECTIVES


def test_the_built_term_adds_the_weighted_loss_and_its_identity_names_the_loss():
    jreg, simreg = (resolve_method({"objective": name, "weight": 0.2}).build() for name in ("jreg", "simreg"))
    assert isinstance(jreg, RepresentationLoss) and jreg.weight == 0.2 and jreg.needs_hidden_states
    states = random_states()
    added = simreg.added_loss(logits=None, hidden_states=tuple(states), input_ids=IDS, autocast=None)
    assert added.item() == representation_loss(states, IDS, SimRegConfig(weight=0.2)).item() > 0
    identities = [term.identity() for term in (jreg, simreg, resolve_method({"objective": "jreg", "layer": -2}).build(),
                                               AuxiliaryLoss(resolve_method({"objective": "dispersion"}).settings))]
    assert identities[0]["representation_loss"] == {"name": "jreg", "weight": 0.2, "layer": -1}
    for i, saved in enumerate(identities):  # a state saved by one method does not resume another
        for j, now in enumerate(identities):
            assert (resume_mismatch(saved, now) is None) == (i == j), (saved, now)


# ----------------------------------------------------------------------------------------------
# training


@pytest.mark.parametrize("name", REPRESENTATION)
def test_trains_through_the_loop_with_the_term_logged(name, tmp_path, one_thread):
    from condensation.config.runs import TrainConfig
    from condensation.training.loop import train
    from tests.helpers.training import BLOCK, make_model, read_log

    blocks = np.random.default_rng(0).integers(0, 6, size=(16, BLOCK), dtype=np.int64)  # labels repeat
    config = TrainConfig(train_tokens=3 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, probe_every=0,
                         tracker="none")
    method = resolve_method({"objective": name, "weight": 0.5})
    model = make_model()
    before = [p.detach().clone() for p in model.parameters()]
    train(model, blocks[:12], blocks[12:], config, tmp_path, method=method.build())
    rows = read_log(tmp_path)[1:]
    assert len(rows) == 3
    for row in rows:
        aux = float(row["aux_loss"])
        assert math.isfinite(aux) and aux > 0
        assert float(row["loss"]) == pytest.approx(float(row["ce_loss"]) + 0.5 * aux, rel=1e-6)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize("method", [{"objective": "jreg", "weight": 0.5}, {"objective": "simreg", "tau": 0.2}])
def test_trains_one_step_through_the_stages(method, one_step_study):
    from condensation.runtime.io import read_json
    from condensation.training.checkpointing import RunDir

    run = one_step_study(method)
    assert read_json(run / "run.json")["method"] == resolve_method(method).as_dict()
    log = RunDir(run).log.read_text().splitlines()
    header, last = log[0].split(","), log[-1].split(",")
    assert last[header.index("step")] == "1", log
    assert last[header.index("aux_loss")] not in ("", "nan", "0.0"), log
