"""Configuration: schema validation with clear errors, defaults, and typed views for each stage.

The Snakefile and the tests both go through :func:`validate_config`, so a bad key fails the same
way everywhere: one message per problem, naming its place in the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

class ConfigError(ValueError):
    """The configuration is invalid; the message lists every problem with its key path."""


def load_schema() -> dict[str, Any]:
    text = resources.files("condensation").joinpath("schemas/config.schema.yaml").read_text()
    return yaml.safe_load(text)


def _with_defaults(validator_class: type) -> type:
    """A validator that also fills in each property's ``default`` (the jsonschema FAQ recipe)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = _copy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _copy(value: Any) -> Any:
    """A deep copy in plain YAML types; mapping order is kept (it orders tables and figures)."""
    return yaml.safe_load(yaml.safe_dump(value, sort_keys=False))


_Validator = _with_defaults(jsonschema.Draft202012Validator)


def _where(path) -> str:
    return "config" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def validate_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return a validated copy of ``config`` with defaults filled in, or raise :class:`ConfigError`."""
    config = _copy(dict(config))
    validator = _Validator(load_schema())
    problems = [
        f"{_where(error.absolute_path)}: {error.message}"
        for error in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    ]
    if not problems:
        problems = _cross_check(config)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))
    return config


def load_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    return validate_config(yaml.safe_load(path.read_text()) or {})


def _cross_check(config: dict[str, Any]) -> list[str]:
    """Checks a schema cannot express: names that refer to other entries."""
    problems: list[str] = []
    models, datasets = config["models"], config["datasets"]

    def need(kind: str, names: dict, name: str, where: str) -> None:
        if name not in names:
            problems.append(f"{where}: unknown {kind} '{name}' (known: {', '.join(sorted(names))})")

    for name, spec in models.items():
        if spec["source"] == "init":
            need("model", models, spec["of"], f"config.models.{name}.of")
            if spec["of"] in models and models[spec["of"]]["source"] != "pretrain":
                problems.append(f"config.models.{name}.of: '{spec['of']}' is not a pretrain model")
    for family, spec in config["families"].items():
        for model in spec["models"]:
            need("model", models, model, f"config.families.{family}.models")
        for dataset in spec["datasets"]:
            need("dataset", datasets, dataset, f"config.families.{family}.datasets")
    for pair, spec in config["pairs"].items():
        if len(spec["first"]) != len(spec["second"]):
            problems.append(
                f"config.pairs.{pair}: 'first' has {len(spec['first'])} models but 'second' has "
                f"{len(spec['second'])}; they are compared one to one"
            )
        for model in spec["first"] + spec["second"]:
            need("model", models, model, f"config.pairs.{pair}")
        need("dataset", datasets, spec["dataset"], f"config.pairs.{pair}.dataset")
    for family, names in config["dataset_robustness"].items():
        need("family", config["families"], family, "config.dataset_robustness")
        for dataset in names:
            need("dataset", datasets, dataset, f"config.dataset_robustness.{family}")
    if any(spec["source"] == "pretrain" for spec in models.values()):
        dataset = config["pretrain"]["dataset"]
        need("dataset", datasets, dataset, "config.pretrain.dataset")
        for name, spec in models.items():
            if spec["source"] == "pretrain" and spec["arch"]["n_positions"] < config["pretrain"]["train"]["block_size"]:
                problems.append(f"config.models.{name}.arch.n_positions is below config.pretrain.train.block_size")
    problems += _check_midtrain(config)
    problems += _check_evaluation(config)
    sampling = config["sampling"]
    if sampling["min_words"] < sampling["seq_len"]:
        problems.append(
            f"config.sampling.min_words ({sampling['min_words']}) is below seq_len ({sampling['seq_len']}): "
            "sequences could come out shorter than seq_len tokens"
        )
    return problems


METHOD_OPTIONS = {
    "ce": set(),
    "dispersion": {"weight", "tau", "placement", "max_tokens", "norm_weight", "margin"},
    "noisy_embedding": {"alpha"},
    "active_forgetting": {"every", "tied_head"},
}
for _loss in ("decorrelation", "l2_repel", "orthogonalization"):
    METHOD_OPTIONS[_loss] = METHOD_OPTIONS["dispersion"]


def _check_midtrain(config: dict[str, Any]) -> list[str]:
    section, problems = config["midtrain"], []
    if not section["models"]:
        return problems
    for model in section["models"]:
        if model not in config["models"]:
            problems.append(f"config.midtrain.models: unknown model '{model}'")
    for key in ("dataset", "geometry_dataset"):
        if section[key] not in config["datasets"]:
            problems.append(f"config.midtrain.{key}: unknown dataset '{section[key]}'")
    for name, spec in section["methods"].items():
        extra = set(spec) - {"objective"} - METHOD_OPTIONS[spec["objective"]]
        if extra:
            problems.append(
                f"config.midtrain.methods.{name}: option(s) {sorted(extra)} do not apply to objective '{spec['objective']}'"
            )
    methods = midtrain_methods(config)
    for row in section["figure_rows"]:
        if row not in methods:
            problems.append(f"config.midtrain.figure_rows: unknown method '{row}' (known: {', '.join(methods)})")
    for model in section["ablation"]["models"] or []:
        if model not in section["models"]:
            problems.append(f"config.midtrain.ablation.models: '{model}' is not in config.midtrain.models")
    clashes = set(section["methods"]) & set(_ablation_methods(section))
    if clashes:
        problems.append(f"config.midtrain.methods: names {sorted(clashes)} clash with generated ablation runs")
    return problems


def _check_evaluation(config: dict[str, Any]) -> list[str]:
    section, problems = config["evaluation"], []
    for name in section["local_tasks"]:
        if name not in section["tasks"]:
            problems.append(f"config.evaluation.local_tasks.{name}: built but never scored; add it to config.evaluation.tasks")
    for key in section["fewshot"]:
        if key != "default" and key not in config["models"]:
            problems.append(f"config.evaluation.fewshot: '{key}' is neither 'default' nor a model name")
    if section["tasks"] and config["midtrain"]["models"]:
        methods = midtrain_methods(config)
        if section["reference"] not in methods:
            problems.append(
                f"config.evaluation.reference: unknown method '{section['reference']}' (known: {', '.join(methods)})"
            )
    return problems


def evaluation_tasks(config: Mapping[str, Any], model: str) -> dict[str, int]:
    """lm-eval task name -> num_fewshot for ``model``: 0 for `zero` tasks, the model's few-shot
    count (or the default, else 0) for `few` tasks."""
    section = config["evaluation"]
    shots = section["fewshot"].get(model, section["fewshot"].get("default", 0))
    return {task: (0 if kind == "zero" else shots) for task, kind in section["tasks"].items()}


def ablation_grid(config: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """Method name -> (weight, tau) of every dispersion run of Table 3: the ablation grid plus
    each configured method that is the plain dispersion loss (the paper's default row)."""
    grid = {name: _plain_dispersion(spec) for name, spec in midtrain_methods(config).items()}
    return {name: point for name, point in grid.items() if point is not None}


def midtrain_checkpoints(config: Mapping[str, Any]) -> list[str]:
    """Names (``step-0000049``) of the evaluation checkpoints every mid-training run writes;
    known before training, since the step count follows from the token budget."""
    from .settings import checkpoint_steps, total_steps

    train = train_config(config["midtrain"]["train"], seed=0)
    world = max(1, config["midtrain"]["gpus_per_run"])
    return [f"step-{step:07d}" for step in checkpoint_steps(total_steps(train, world), train.num_checkpoints)]


def _plain_dispersion(spec: Mapping[str, Any]) -> tuple[float, float] | None:
    """(weight, tau) of a method that is the dispersion loss with nothing else changed, else None."""
    from .settings import AuxLossConfig

    if spec["objective"] != "dispersion" or not set(spec) <= {"objective", "weight", "tau"}:
        return None
    defaults = AuxLossConfig("dispersion")
    return float(spec.get("weight", defaults.weight)), float(spec.get("tau", defaults.tau))


def _ablation_methods(section: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The grid's runs, minus points a configured method already trains (the paper's default
    lambda=0.1, tau=1 sits in its own grid): no run is trained twice."""
    grid = section["ablation"]
    configured = {_plain_dispersion(spec) for spec in section["methods"].values()}
    return {
        f"dispersion-lam{weight:g}-tau{tau:g}": {"objective": "dispersion", "weight": weight, "tau": tau}
        for weight in grid["weights"]
        for tau in grid["taus"]
        if (float(weight), float(tau)) not in configured
    }


def midtrain_methods(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every mid-training method: the configured ones, then the ablation grid's dispersion runs."""
    return {**config["midtrain"]["methods"], **_ablation_methods(config["midtrain"])}


def midtrain_runs(config: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(model, method, seed) of every mid-training run; ablation runs use the ablation's seeds."""
    section = config["midtrain"]
    ablation = _ablation_methods(section)
    ablation_models = section["ablation"]["models"] or section["models"]
    runs = [(model, method, seed) for model in section["models"] for method in section["methods"] for seed in section["seeds"]]
    runs += [(model, method, seed) for model in ablation_models for method in ablation for seed in section["ablation"]["seeds"]]
    return runs


# ---------------------------------------------------------------------------------------------
# Typed views, one per stage. Scripts build these from the validated config and pass them on.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplingConfig:
    num_sequences: int
    """N sequences per dataset; the paper uses 100."""
    seq_len: int
    """T tokens per sequence after tokenisation; the paper uses 512."""
    min_words: int
    """Whitespace words gathered per sequence, at least ``seq_len`` so T tokens are guaranteed."""
    seed: int
    """Base seed: sequence ``r`` is drawn with ``numpy.random.default_rng([seed, r])``."""


@dataclass(frozen=True)
class ExtractionConfig:
    batch_size: int
    """Sequences per forward pass; all have T tokens, so batches need no padding."""
    dtype: str
    """Model weights' dtype; ``auto`` = bfloat16 on a CUDA device that supports it, else float32."""
    device: str
    """``auto`` = CUDA when available."""


@dataclass(frozen=True)
class TrendConfig:
    include_embedding_layer: bool
    """Correlate layer 0 too (the published figures do)."""
    include_diagonal: bool
    """Use the mean over all N^2 pairs (paper) rather than over i != j."""


def train_config(train: Mapping[str, Any], seed: int, aux_weight: float = 0.0):
    """The training loop's config from a validated ``train`` section."""
    from .settings import TrainConfig

    return TrainConfig(**train, seed=seed, aux_weight=aux_weight)


def sampling_config(config: Mapping[str, Any]) -> SamplingConfig:
    return SamplingConfig(**config["sampling"])


def extraction_config(config: Mapping[str, Any]) -> ExtractionConfig:
    return ExtractionConfig(**config["extraction"])


def trend_config(config: Mapping[str, Any]) -> TrendConfig:
    return TrendConfig(**config["trend"])
