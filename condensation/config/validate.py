"""Configuration: schema validation with clear errors, and every default filled in.

The Snakefile and the tests both go through :func:`validate_config`, so a bad key fails the same
way everywhere: one message per problem, naming its place in the file.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from condensation.config.corpora import CORPORA
from condensation.config.datasets import check_datasets, check_local_tasks
from condensation.config.objectives import (
    OBJECTIVES,
    Objective,
    TrainingMethod,
    check_objective,
    field_docs,
    method_options,
)
from condensation.config.plan import (
    STUDIES,
    check_series,
    check_sharding,
    check_study,
    series_models,
    study_methods,
    study_runs,
)
from condensation.config.runs import TrainConfig, dataclass_defaults
from condensation.config.specs import SECTIONS, read_schema


class ConfigError(ValueError):
    """The configuration is invalid; the message lists every problem with its key path."""


def load_schema() -> dict[str, Any]:
    """The JSON schema, completed from the code: the defaults of the settings dataclasses
    (``config.specs.SECTIONS``, ``config.runs.TrainConfig``), the objective names
    (``config.objectives``) and the built-in corpora (``config.corpora``) live there only, so the
    schema and the code cannot disagree."""

    schema = read_schema()
    properties = schema["properties"]
    _defaults_into(schema["$defs"]["train"], TrainConfig, "$defs.train", leave_out=("seed",))
    for section, cls in SECTIONS.items():
        _defaults_into(properties[section], cls, section)
    _objectives_into(schema["$defs"]["method"]["properties"])
    properties["datasets"]["additionalProperties"]["properties"]["source"]["enum"] = ["hub", *CORPORA, "files"]
    properties["models"]["additionalProperties"]["properties"]["study"]["enum"] = list(STUDIES)
    return schema


def _defaults_into(node: dict[str, Any], cls: type, where: str, leave_out: tuple[str, ...] = ()) -> None:
    """The defaults of settings dataclass ``cls`` into the schema object ``node``, whose
    properties must be its fields (less ``leave_out``, which the workflow sets per run)."""
    defaults = {k: v for k, v in dataclass_defaults(cls).items() if k not in leave_out}
    if set(node["properties"]) != set(defaults):
        raise ConfigError(f"schema {where} and {cls.__module__}.{cls.__name__} disagree on "
                          f"{sorted(set(node['properties']) ^ set(defaults))}")
    for name, default in defaults.items():
        node["properties"][name]["default"] = list(default) if isinstance(default, tuple) else default


def _objectives_into(method: dict[str, Any]) -> None:
    """The registry into the schema of a method: the objective names and what each does, and every
    option an objective takes (a field of its settings dataclass) with its JSON type, its choices
    and what it is, read from the field's annotation and docstring. The settings check the values
    (``resolve_method``, which ``check_study`` calls); the schema file spells only what needs JSON's
    structure (a teacher per seed)."""
    problems = [problem for objective in OBJECTIVES.values() for problem in check_objective(objective)]
    if problems:
        raise ConfigError("; ".join(problems))
    takers: dict[str, list[Objective]] = {}
    for objective in OBJECTIVES.values():
        for option in objective.options:
            takers.setdefault(option, []).append(objective)
    for option, objectives in takers.items():
        method.setdefault(option, _option_schema(option, objectives))
    for option in method_options():  # every method's, whatever its objective: fields of TrainingMethod
        schema = dict(_json_type(typing.get_type_hints(TrainingMethod)[option]) or {})
        method.setdefault(option, {**schema, "description": " ".join(field_docs(TrainingMethod)[option].split())})
    method["objective"]["enum"] = list(OBJECTIVES)
    method["objective"]["description"] = "; ".join(f"{name}: {o.summary or o.kind}" for name, o in OBJECTIVES.items())


def _option_schema(option: str, objectives: list[Objective]) -> dict[str, Any]:
    """The schema of one method option from the settings fields of the objectives that take it:
    its JSON type or choices where they agree, and each field's first sentence."""
    kinds, described = [], {}
    for objective in objectives:
        kinds.append(_json_type(typing.get_type_hints(objective.settings).get(option)))
        doc = field_docs(objective.settings).get(option, "")
        first = re.split(r"(?<!\.)\.\s+(?=[A-Z])", " ".join(doc.split()))[0].rstrip(".")
        described.setdefault(first, []).append(objective.name)
    schema = dict(kinds[0]) if kinds[0] and all(kind == kinds[0] for kind in kinds) else {}
    schema["description"] = "; ".join(f"{', '.join(names)}: {doc}" if doc else ", ".join(names)
                                      for doc, names in described.items())
    return schema


_JSON_TYPES = {float: "number", int: "integer", str: "string", bool: "boolean", type(None): "null"}


def _json_type(annotation: Any) -> dict[str, Any] | None:
    """``{"type": ...}`` or ``{"enum": [...]}`` for a settings field's annotation; None when it
    has no JSON equivalent (the settings then check the value alone)."""
    if typing.get_origin(annotation) is typing.Literal:
        return {"enum": list(typing.get_args(annotation))}
    members = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    names = [_JSON_TYPES.get(member) for member in members]
    if None in names:
        return None
    return {"type": names[0] if len(names) == 1 else names}


@functools.cache
def _validator_class() -> type:
    """A Draft 2020-12 validator that also fills in each property's ``default`` (the jsonschema FAQ
    recipe). jsonschema is imported here, by the workflow's validation only: the light install
    (measuring, the losses) reads the schema's defaults with PyYAML alone."""
    import jsonschema  # noqa: PLC0415  (deferred: the [workflow] extra, see the docstring)

    validator_class = jsonschema.Draft202012Validator
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


def _where(path) -> str:
    return "config" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def validate_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return a validated copy of ``config`` with defaults filled in, or raise :class:`ConfigError`."""
    config = _copy(dict(config))
    schema = load_schema()
    _drop_overlaid_entries(config, schema, schema)
    validator = _validator_class()(schema)
    problems = [
        f"{_where(error.absolute_path)}: {error.message}"
        for error in sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    ]
    if not problems:
        problems = _resolve_sections(config) or _add_series_models(config) or _cross_check(config)
    if not problems:  # the file system, once the names all refer to something
        problems = check_datasets(config) + check_local_tasks(config)
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems) + _overlay_hint(problems))
    return config


def _drop_overlaid_entries(node: Any, node_schema: Mapping[str, Any], schema: Mapping[str, Any]) -> None:
    """Remove, in place, every entry an overlay set to null in a mapping of named entries
    (models, datasets, families, a study's methods, the tasks, ...): ``--configfile
    configs/paper.yaml mine.yaml`` with ``midtrain: {methods: {orthogonalization: null}}`` in
    mine.yaml runs paper.yaml without that method. Snakemake merges overlays key by key, so
    null is the one way an overlay takes an entry out; a list (figure rows, a family's models)
    is replaced whole and needs no such value."""
    while "$ref" in node_schema:  # "#/$defs/study"
        node_schema = schema["$defs"][node_schema["$ref"].rsplit("/", 1)[-1]]
    if not isinstance(node, dict):
        return
    entries = node_schema.get("additionalProperties")
    if isinstance(entries, dict) and entries:
        for name in [name for name, value in node.items() if value is None]:
            del node[name]
        for value in node.values():
            _drop_overlaid_entries(value, entries, schema)
    for name, property_schema in node_schema.get("properties", {}).items():
        if name in node:
            _drop_overlaid_entries(node[name], property_schema, schema)


OVERLAY_HINT = (
    "\n(an overlay goes after the config it changes, which a --configfile replaces: give it after config.yaml, "
    "`--configfile config.yaml mine.yaml`; configs/paper-miniature.yaml goes after configs/paper.yaml)"
)


def _overlay_hint(problems: list[str]) -> str:
    """The hint for a config that lacks a top-level required section: most likely an overlay
    given alone."""
    lacking = any(problem == f"config: '{key}' is a required property"
                  for problem in problems for key in ("models", "datasets"))
    return OVERLAY_HINT if lacking else ""


def _resolve_sections(config: dict[str, Any]) -> list[str]:
    """Each section of ``SECTIONS`` as its dataclass resolves it (derived defaults filled in, such
    as ``min_words``), or the dataclass' objection."""
    try:
        for section, cls in SECTIONS.items():
            config[section] = dataclasses.asdict(cls(**config[section]))
    except ValueError as error:
        return [f"config.{error}"]
    return []


def _add_series_models(config: dict[str, Any]) -> list[str]:
    """Add a model entry for every checkpoint of each hub series (``plan.series_models``)."""
    generated = series_models(config)
    clashes = sorted(set(generated) & set(config["models"]))
    if clashes:
        return [f"config.series: generated model names {clashes} are already models; rename the series or the model"]
    config["models"].update(generated)
    return []


def load_config(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file not found: {path}")
    return validate_config(yaml.safe_load(path.read_text()) or {})


def _cross_check(config: dict[str, Any]) -> list[str]:
    """Checks a schema cannot express: names that refer to other entries, and settings that must
    agree with each other."""
    problems = _check_models(config) + _check_families(config) + _check_pairs(config) + _check_pretrain(config)
    problems += [problem for study in STUDIES for problem in check_study(config, study)]
    problems += check_series(config)
    problems += _check_similarity(config)
    problems += _check_evaluation(config)
    return problems


def _unknown(kind: str, names: Mapping[str, Any], name: str, where: str) -> list[str]:
    """The problem of a reference to ``name`` that is none of ``names`` (no problem if it is)."""
    return [] if name in names else [f"{where}: unknown {kind} '{name}' (known: {', '.join(sorted(names))})"]


def _check_models(config: dict[str, Any]) -> list[str]:
    """An init model names the model whose architecture it initialises; a run model one run."""
    models, problems = config["models"], []
    for name, spec in models.items():
        if spec["source"] == "init":
            problems += _unknown("model", models, spec["of"], f"config.models.{name}.of")
            of = models.get(spec["of"], {})
            if of.get("source") == "init":
                problems.append(
                    f"config.models.{name}.of: '{spec['of']}' is itself an init model; name the model whose "
                    "architecture to initialise (a pretrain model's GPT2 shape, or a hub, local or gguf model's)"
                )
            if "tie_word_embeddings" in spec and of.get("source") == "pretrain":
                problems.append(
                    f"config.models.{name}.tie_word_embeddings: the init of a pretrain model is that model's own "
                    "initialisation; untie a hub, local or gguf model's architecture instead"
                )
        if spec["source"] == "run":
            problems += _check_run_model(config, name, spec)
    return problems


def _check_families(config: dict[str, Any]) -> list[str]:
    models, datasets, problems = config["models"], config["datasets"], []
    for family, spec in config["families"].items():
        for model in spec["models"]:
            problems += _unknown("model", models, model, f"config.families.{family}.models")
        for dataset in spec["datasets"]:
            problems += _unknown("dataset", datasets, dataset, f"config.families.{family}.datasets")
    for family, names in config["dataset_robustness"].items():
        problems += _unknown("family", config["families"], family, "config.dataset_robustness")
        for dataset in names:
            problems += _unknown("dataset", datasets, dataset, f"config.dataset_robustness.{family}")
    return problems


def _check_pairs(config: dict[str, Any]) -> list[str]:
    """A pair compares its lists one to one, with a label per row."""
    problems = []
    for pair, spec in config["pairs"].items():
        if len(spec["first"]) != len(spec["second"]):
            problems.append(
                f"config.pairs.{pair}: 'first' has {len(spec['first'])} models but 'second' has "
                f"{len(spec['second'])}; they are compared one to one"
            )
        reference = spec.get("reference", [])
        if reference and len(reference) != len(spec["first"]):
            problems.append(
                f"config.pairs.{pair}.reference: {len(reference)} models for {len(spec['first'])} pairs; "
                "give one per pair (the same model again where pairs share it)"
            )
        if len(spec["labels"]) != (3 if reference else 2):
            problems.append(
                f"config.pairs.{pair}.labels: {len(spec['labels'])} labels for {3 if reference else 2} rows; "
                "name first and second" + (" and reference" if reference else " (a third label needs a reference row)")
            )
        for model in spec["first"] + spec["second"] + reference:
            problems += _unknown("model", config["models"], model, f"config.pairs.{pair}")
        problems += _unknown("dataset", config["datasets"], spec["dataset"], f"config.pairs.{pair}.dataset")
    return problems


def _check_pretrain(config: dict[str, Any]) -> list[str]:
    """Pre-training, when a model is pre-trained here: its dataset, tokenizer and context."""
    models, section = config["models"], config["pretrain"]
    if not any(spec["source"] == "pretrain" for spec in models.values()):
        return []
    problems = _unknown("dataset", config["datasets"], section["dataset"], "config.pretrain.dataset")
    if section["tokenizer"] is not None:
        problems += _unknown("model", models, section["tokenizer"], "config.pretrain.tokenizer")
    for name, spec in models.items():
        if spec["source"] == "pretrain" and spec["arch"]["n_positions"] < section["train"]["block_size"]:
            problems.append(f"config.models.{name}.arch.n_positions is below config.pretrain.train.block_size")
    return problems + check_sharding(section, "config.pretrain")


def _check_similarity(config: dict[str, Any]) -> list[str]:
    """A comparison names a pair with a reference row, or a study that trains and reference models."""
    problems = []
    for name, spec in config["similarity"].items():
        where = f"config.similarity.{name}"
        if "pair" in spec:
            pair = config["pairs"].get(spec["pair"])
            if pair is None:
                known = ", ".join(config["pairs"]) or "none"
                problems.append(f"{where}.pair: unknown pair '{spec['pair']}' (known: {known})")
            elif not pair.get("reference"):
                problems.append(f"{where}.pair: pair '{spec['pair']}' has no reference row to compare against")
        else:
            methods = config[spec["study"]]["methods"]
            if not config[spec["study"]]["models"]:
                problems.append(f"{where}.study: the {spec['study']} study trains no model (its models list is empty)")
            problems += [f"{where}.methods: '{m}' is not a method of {spec['study']} (it has: {', '.join(methods)})"
                         for m in spec.get("methods") or [] if m not in methods]
            problems += [f"{where}.reference: unknown model '{m}'"
                         for m in spec["reference"] if m not in config["models"]]
        if spec.get("dataset") and spec["dataset"] not in config["datasets"]:
            problems.append(f"{where}.dataset: unknown dataset '{spec['dataset']}'")
    return problems


def _check_run_model(config: dict[str, Any], name: str, spec: dict[str, Any]) -> list[str]:
    """A `run` model names one run the config trains: its study, the study's model, method and seed."""
    study, where = spec["study"], f"config.models.{name}"
    run = (spec["of"], spec["method"], spec["seed"])
    if run in study_runs(config, study):
        return []
    section = config[study]
    return [
        f"{where}: config.{study} trains no run of model '{spec['of']}' with method '{spec['method']}' and seed "
        f"{spec['seed']} (its models: {', '.join(section['models']) or 'none'}; methods: "
        f"{', '.join(study_methods(config, study)) or 'none'}; seeds: {', '.join(map(str, section['seeds']))}); "
        "name one of its runs, or add it to the study"
    ]


def _check_evaluation(config: dict[str, Any]) -> list[str]:
    section, problems = config["evaluation"], []
    for name in section["local_tasks"]:
        if name not in section["tasks"]:
            problems.append(f"config.evaluation.local_tasks.{name}: built but never scored; "
                            "add it to config.evaluation.tasks")
    for key in section["fewshot"]:
        if key != "default" and key not in config["models"]:
            problems.append(f"config.evaluation.fewshot: '{key}' is neither 'default' nor a model name")
    if section["tasks"] and config["midtrain"]["models"]:
        methods = study_methods(config, "midtrain")
        if section["reference"] not in methods:
            problems.append(
                f"config.evaluation.reference: unknown method '{section['reference']}' (known: {', '.join(methods)})"
            )
    for task in section["counted_tasks"] if isinstance(section["counted_tasks"], list) else []:
        if task not in section["tasks"]:
            problems.append(f"config.evaluation.counted_tasks: '{task}' is not scored; "
                            "name tasks of config.evaluation.tasks "
                            f"({', '.join(section['tasks']) or 'none'})")
    return problems
