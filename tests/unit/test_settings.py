"""The settings model: one registry of objectives, one set of training defaults, the run plan."""

import dataclasses
import inspect

import pytest

from condensation import measurement
from condensation.config.objectives import (
    OBJECTIVES,
    PLACEMENTS,
    ActiveForgettingConfig,
    AuxLossConfig,
    DispersionConfig,
    TrainingMethod,
    loss_names,
    method_options,
    resolve_method,
)
from condensation.config.runs import RunPlan, TrainConfig, plan_run
from condensation.config.specs import SECTIONS, ExtractionConfig, SamplingConfig, TrendConfig
from condensation.config.validate import ConfigError, load_schema, validate_config

MINIMAL = {"datasets": {"austen": {"source": "austen"}}, "models": {"m": {"source": "hub", "id": "gpt2"}}}


def with_method(spec):
    return {**MINIMAL,
            "midtrain": {"models": ["m"], "dataset": "austen", "geometry_dataset": "austen", "methods": {"x": spec}}}


def test_schema_takes_objective_names_and_training_defaults_from_settings():
    schema = load_schema()
    assert schema["$defs"]["method"]["properties"]["objective"]["enum"] == list(OBJECTIVES)
    train = validate_config(MINIMAL)["midtrain"]["train"]
    expected = dataclasses.asdict(TrainConfig())
    for key, value in train.items():
        assert value == (list(expected[key]) if isinstance(expected[key], tuple) else expected[key]), key
    assert set(train) == set(expected) - {"seed"}


def test_the_workflow_measure_and_the_command_start_from_the_same_settings():
    """sampling, extraction and trend: the dataclass is the one home of each default."""
    config = validate_config(MINIMAL)
    for section, cls in SECTIONS.items():
        assert config[section] == dataclasses.asdict(cls()), section
    assert config["sampling"]["min_words"] == 2 * config["sampling"]["seq_len"] == 1024  # derived, as documented
    defaults = {name: p.default for name, p in inspect.signature(measurement.measure).parameters.items()}
    assert (defaults["sampling"], defaults["extraction"], defaults["trend"]) == (
        SamplingConfig(), ExtractionConfig(), TrendConfig())
    args = measurement._parser().parse_args(["some-model"])
    assert (args.seq_len, args.num_sequences, args.seed) == (512, 100, 0)
    assert (args.batch_size, args.dtype, args.device, args.lens_tokens, args.heatmap_size) == (8, "auto", "auto",
                                                                                                 1024, 512)
    with pytest.raises(ConfigError, match=r"config\.sampling: min_words \(100\) is below seq_len \(512\)"):
        validate_config({**MINIMAL, "sampling": {"min_words": 100}})


def test_each_objective_takes_exactly_its_settings_fields_and_the_schema_spells_them_from_there():
    assert {name: objective.options for name, objective in OBJECTIVES.items()} == {
        "ce": (),
        "dispersion": ("weight", "placement", "max_tokens", "tau", "clamp", "kernel", "products"),
        "decorrelation": ("weight", "placement", "max_tokens"),
        "l2_repel": ("weight", "placement", "max_tokens", "tau", "norm_weight"),
        "orthogonalization": ("weight", "placement", "max_tokens", "clamp", "margin"),
        "jreg": ("weight", "layer"),
        "simreg": ("weight", "tau", "placement", "max_tokens"),
        "noisy_embedding": ("alpha",),
        "active_forgetting": ("every", "tied_head", "std"),
        "distillation": ("teacher", "weight", "temperature"),
    }
    assert loss_names() == ("dispersion", "decorrelation", "l2_repel", "orthogonalization")
    options = load_schema()["$defs"]["method"]["properties"]
    assert method_options() == ("ln_scaling",)  # every method's, whatever its objective: TrainingMethod's fields
    taken = {option for objective in OBJECTIVES.values() for option in objective.options}
    assert set(options) == {"objective", *method_options()} | taken
    # types and choices from the annotations, descriptions from the fields' docstrings
    assert options["placement"]["enum"] == list(PLACEMENTS)
    assert options["kernel"]["enum"] == ["auto", "eager", "compiled", "triton"]
    assert options["max_tokens"]["type"] == ["integer", "null"] and options["every"]["type"] == "integer"
    assert options["weight"]["type"] == "number" and "teacher" in options and "anyOf" in options["teacher"]
    assert options["weight"]["description"].startswith("dispersion, decorrelation, l2_repel, orthogonalization: lambda")
    assert "; distillation: The mix" in options["weight"]["description"]
    assert options["margin"]["description"] == (
        "orthogonalization: Pairs closer than this angular distance are penalised; 1/2 is 90 degrees, i.e. the loss "
        "asks for orthogonal tokens and ignores already-spread pairs")
    with pytest.raises(ConfigError, match=r"methods\.x\.placement: 'middle' is not one of"):
        validate_config(with_method({"objective": "dispersion", "placement": "middle"}))
    with pytest.raises(ConfigError, match=r"methods\.x\.every: 2\.5 is not of type 'integer'"):
        validate_config(with_method({"objective": "active_forgetting", "every": 2.5}))
    with pytest.raises(ConfigError, match=r"methods\.x: tau must be a finite number in \(0\.0, inf\), got -1"):
        validate_config(with_method({"objective": "dispersion", "tau": -1}))


def test_a_loss_built_by_name_is_its_own_settings_class():
    """``AuxLossConfig(name=...)``, the flat config of earlier versions, builds the loss' subclass."""
    built = AuxLossConfig("dispersion", weight=0.5, tau=0.2)
    assert type(built) is DispersionConfig and built == DispersionConfig(weight=0.5, tau=0.2)
    assert dataclasses.replace(built, weight=0.1) == DispersionConfig(tau=0.2)
    with pytest.raises(ValueError, match=r"option\(s\) \['margin'\] do not apply to loss 'dispersion'"):
        AuxLossConfig("dispersion", margin=0.3)
    with pytest.raises(ValueError, match="loss 'l2_repel' takes L2RepelConfig, not DispersionConfig"):
        DispersionConfig(name="l2_repel")


def test_every_objective_resolves_to_its_implementation():
    from condensation.training import baselines, losses

    assert OBJECTIVES["dispersion"].load() is losses.dispersion
    assert OBJECTIVES["orthogonalization"].load() is losses.orthogonalization
    assert OBJECTIVES["active_forgetting"].load() is baselines.ActiveForgetting
    for objective in OBJECTIVES.values():
        if objective.kind != "ce":
            assert callable(objective.load()), objective.name


def test_resolve_method_fills_defaults_and_names_a_misplaced_option():
    method = resolve_method({"objective": "dispersion", "weight": 0.5})
    assert method == TrainingMethod("dispersion", DispersionConfig(weight=0.5)) and method.weight == 0.5
    forgetting = resolve_method({"objective": "active_forgetting"})
    assert forgetting.settings == ActiveForgettingConfig() and forgetting.weight == 0.0
    assert resolve_method({"objective": "ce"}) == TrainingMethod("ce") and TrainingMethod("ce").weight == 0.0
    with pytest.raises(ValueError, match=r"option\(s\) \['tau'\] do not apply to objective 'decorrelation'"):
        resolve_method({"objective": "decorrelation", "tau": 2.0})
    with pytest.raises(ValueError, match="unknown objective 'dropout'"):
        resolve_method({"objective": "dropout"})


def test_config_names_the_method_with_a_misplaced_option():
    with pytest.raises(ConfigError, match=r"config\.midtrain\.methods\.x: option\(s\) \['margin'\] do not apply"):
        validate_config(with_method({"objective": "dispersion", "margin": 0.3}))
    with pytest.raises(ConfigError, match=r"config\.midtrain\.methods\.x\.objective: 'dropout' is not one of"):
        validate_config(with_method({"objective": "dropout"}))


def test_run_plan_round_trips_through_json(tmp_path):
    plan = plan_run("midtrain", "m",
                    {"train_tokens": 1000, "block_size": 8, "micro_batch_size": 2, "betas": [0.9, 0.99]},
                    seed=3, method={"objective": "l2_repel", "weight": 0.2, "norm_weight": 0.05})
    assert plan.train.seed == 3 and plan.method.weight == 0.2 and plan.train.betas == (0.9, 0.99)
    assert "aux_weight" not in plan.to_json()["train"]  # the weight is saved once, as the method's
    plan.save(tmp_path / "run.json")
    again = RunPlan.load(tmp_path / "run.json")
    assert again == plan
    assert again.method.as_dict() == {
        "objective": "l2_repel", "weight": 0.2, "placement": "all", "max_tokens": None, "tau": 1.0, "norm_weight": 0.05,
    }
    assert set(again.provenance["versions"]) >= {"torch", "transformers", "condensation"}
    assert again.reinitialise is False
    fresh = plan_run("scratch", "m-init", {"train_tokens": 1000, "block_size": 8, "micro_batch_size": 2}, seed=1,
                     reinitialise=True)
    fresh.save(tmp_path / "fresh.json")
    assert RunPlan.load(tmp_path / "fresh.json").reinitialise is True



def test_the_command_line_lists_every_registered_objective_with_its_options():
    import subprocess
    import sys

    listed = subprocess.run([sys.executable, "-m", "condensation", "objectives"], capture_output=True, text=True,
                            check=True).stdout
    table, common = listed.split("\n\n", 1)
    rows = {line.split()[0]: line for line in table.splitlines()}
    assert list(rows) == list(OBJECTIVES)
    assert common.startswith("Every method also takes:") and "ln_scaling: scratch study: LayerNorm Scaling" in common
    for name, objective in OBJECTIVES.items():
        assert objective.kind in rows[name] and all(option in rows[name] for option in objective.options), name
    assert "the paper's loss" in rows["dispersion"]
