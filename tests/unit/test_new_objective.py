"""A new objective is one registry entry: written in a module of its own (here a temporary one), its
settings a subclass of ``AuxLossConfig`` with its own option, registered, it is accepted by the
config with that option in the schema and checked, compared with its reference formula, and trains
through the pipeline's stages; nothing else is edited."""

from __future__ import annotations

import textwrap

import pytest
import torch

from condensation.config.objectives import (
    OBJECTIVES,
    Objective,
    register,
    resolve_method,
)
from condensation.config.validate import ConfigError, load_schema, validate_config

MODULE = '''
"""A user's loss: the mean |cosine|^power of distinct tokens (power is its own option)."""
from dataclasses import dataclass

import torch

from condensation.config.objectives import AuxLossConfig


@dataclass(frozen=True)
class CosinePowerConfig(AuxLossConfig):
    power: float = 2.0
    """Exponent on |cos|: 2 weighs every pair by its squared cosine."""

    def __post_init__(self):
        super().__post_init__()
        if not self.power > 0:
            raise ValueError(f"power must be > 0, got {self.power!r}")


def cosine_power(z, config):
    unit = torch.nn.functional.normalize(z, dim=-1)
    cos = unit @ unit.mT
    distinct = ~torch.eye(z.shape[1], dtype=torch.bool, device=z.device)
    return cos[:, distinct].abs().pow(config.power).mean()


def reference_cosine_power(z, config):
    batch, tokens, _ = z.shape
    terms = [
        (torch.dot(z[b, i], z[b, j]) / (z[b, i].norm() * z[b, j].norm())).abs() ** config.power
        for b in range(batch) for i in range(tokens) for j in range(tokens) if i != j
    ]
    return torch.stack(terms).mean()
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_objective.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    from my_objective import CosinePowerConfig

    registered = []

    def add(name: str, reference: str = "my_objective:reference_cosine_power") -> Objective:
        entry = Objective(name, CosinePowerConfig, loss="my_objective:cosine_power", reference=reference,
                          summary="mean |cos|^power of distinct tokens")
        registered.append(register(entry))
        return entry

    yield add
    for entry in registered:
        OBJECTIVES.pop(entry.name)


def study(method):
    return {
        "datasets": {"mine": {"source": "austen"}},
        "models": {"m": {"source": "hub", "id": "gpt2"}},
        "midtrain": {"models": ["m"], "dataset": "mine", "geometry_dataset": "mine", "methods": {"x": method}},
    }


def test_registered_objective_is_in_the_schema_with_its_own_option_checked(user_module):
    user_module("cosine_power")
    method = load_schema()["$defs"]["method"]["properties"]
    assert "cosine_power" in method["objective"]["enum"]
    described = "cosine_power: Exponent on |cos|: 2 weighs every pair by its squared cosine"
    assert method["power"] == {"type": "number", "description": described}
    assert "cosine_power: mean |cos|^power" in method["objective"]["description"]
    config = validate_config(study({"objective": "cosine_power", "power": 3.0, "weight": 0.2}))
    assert resolve_method(config["midtrain"]["methods"]["x"]).settings.power == 3.0
    with pytest.raises(ConfigError, match=r"config\.midtrain\.methods\.x: power must be > 0, got -1"):
        validate_config(study({"objective": "cosine_power", "power": -1}))
    with pytest.raises(ConfigError, match=r"option\(s\) \['power'\] do not apply to objective 'dispersion'"):
        validate_config(study({"objective": "dispersion", "power": 2}))


def test_registered_loss_matches_its_reference_and_one_without_is_named(user_module):
    from condensation.training.losses import layer_loss, reference_layer_loss

    user_module("cosine_power")
    config = resolve_method({"objective": "cosine_power", "power": 3.0}).settings
    z = torch.randn(2, 5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(layer_loss(z, config), reference_layer_loss(z, config), rtol=1e-10, atol=1e-12)
    user_module("cosine_power_unchecked", reference="")
    unchecked = resolve_method({"objective": "cosine_power_unchecked"}).settings
    with pytest.raises(NotImplementedError, match="objective 'cosine_power_unchecked' has no reference formula"):
        reference_layer_loss(z, unchecked)


def test_an_inconsistent_entry_is_refused_when_registered():
    from condensation.config.objectives import AuxLossConfig

    with pytest.raises(ValueError, match="an auxiliary loss' settings must be its own subclass of AuxLossConfig"):
        register(Objective("bad", AuxLossConfig, loss="x:y"))
    with pytest.raises(ValueError, match=r"an auxiliary loss needs loss='module:function'"):
        register(Objective("bad", OBJECTIVES["dispersion"].settings))
    with pytest.raises(ValueError, match=r"a baseline objective needs build='module:attribute'"):
        register(Objective("bad", OBJECTIVES["noisy_embedding"].settings))
    with pytest.raises(ValueError, match="already registered"):
        register(OBJECTIVES["dispersion"])
    assert "bad" not in OBJECTIVES


def test_registered_objective_trains_one_step_through_the_stages(user_module, one_step_study):
    from condensation.runtime.io import read_json
    from condensation.training.checkpointing import RunDir

    user_module("cosine_power")
    run = one_step_study({"objective": "cosine_power", "power": 2.0, "weight": 0.5})
    assert read_json(run / "run.json")["method"] == {"objective": "cosine_power", "weight": 0.5, "placement": "all",
                                                      "max_tokens": None, "power": 2.0}
    log = (RunDir(run).log).read_text().splitlines()
    assert len(log) >= 2, log  # a header and the one step
    assert "aux_loss" in log[0] and log[-1].split(",")[log[0].split(",").index("aux_loss")] not in ("", "nan")
