"""What a validated config implies: every training run, checkpoint and scored task, known before
anything runs. Torch-free: the workflow plans with it on every Snakemake invocation.

Two *studies* train models x methods x seeds on one dataset with one set of loop settings and
re-measure condensation on every checkpoint: ``midtrain`` continues trained models (the paper's
Fig. 6 and Tables 2-3) and ``scratch`` trains ``init`` models from random weights (Table 4).
A *series* is one model measured at several points of its training (Fig. 4).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from condensation.config.objectives import AuxLossConfig, for_seed, resolve_method
from condensation.config.runs import TrainConfig, checkpoint_steps, total_steps
from condensation.runtime.run_dir import step_name

STUDIES = ("midtrain", "scratch")
"""The config sections that are training studies, in the order their tables appear (2-3, 4)."""


def studies(config: Mapping[str, Any]) -> list[str]:
    """The studies that train anything."""
    return [study for study in STUDIES if config[study]["models"]]


_GRID_AXES = {"weight", "tau", "kernel"}
"""What a Table 3 point may differ in from the study's dispersion method (``kernel`` changes how
the loss is computed, not its value)."""


def _grid_base(section: Mapping[str, Any]) -> dict[str, Any]:
    """The options every grid point shares: the study's first dispersion method without its
    weight and tau (e.g. its clamp), so that the grid varies those two alone."""
    for spec in section["methods"].values():
        if spec["objective"] == "dispersion":
            return {key: value for key, value in spec.items() if key not in _GRID_AXES}
    return {"objective": "dispersion"}


def _plain_dispersion(spec: Mapping[str, Any], base: Mapping[str, Any]) -> tuple[float, float] | None:
    """(weight, tau) of a method that is the grid's dispersion loss (``base``) with only those two
    set, else None."""
    if {key: value for key, value in spec.items() if key not in _GRID_AXES} != dict(base):
        return None
    defaults = AuxLossConfig("dispersion")
    return float(spec.get("weight", defaults.weight)), float(spec.get("tau", defaults.tau))


def _ablation_methods(section: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The grid's runs (the study's dispersion method at each weight and tau), minus points a
    configured method already trains (the paper's default lambda=0.1, tau=1 sits in its own
    grid): no run is trained twice."""
    grid, base = section["ablation"], _grid_base(section)
    configured = {_plain_dispersion(spec, base) for spec in section["methods"].values()}
    return {
        f"dispersion-lam{weight:g}-tau{tau:g}": {**base, "weight": weight, "tau": tau}
        for weight in grid["weights"]
        for tau in grid["taus"]
        if (float(weight), float(tau)) not in configured
    }


def study_methods(config: Mapping[str, Any], study: str) -> dict[str, dict[str, Any]]:
    """Every method of a study: the configured ones, then the ablation grid's dispersion runs."""
    return {**config[study]["methods"], **_ablation_methods(config[study])}


def study_runs(config: Mapping[str, Any], study: str) -> list[tuple[str, str, int]]:
    """(model, method, seed) of every run of a study; ablation runs use the ablation's seeds."""
    section = config[study]
    ablation = _ablation_methods(section)
    ablation_models = section["ablation"]["models"] or section["models"]
    runs = [(model, method, seed)
            for model in section["models"] for method in section["methods"] for seed in section["seeds"]]
    runs += [(model, method, seed)
             for model in ablation_models for method in ablation for seed in section["ablation"]["seeds"]]
    return runs


def model_seed(config: Mapping[str, Any], model: str) -> int | None:
    """The seed a model is pre-trained or initialised with: its own, else its ``of`` model's, else
    pretrain.seed; plus seed_offset. None for a model whose weights are given or come from a run."""
    entry = config["models"][model]
    if entry["source"] not in ("pretrain", "init"):
        return None
    base = config["models"][entry["of"]] if entry["source"] == "init" else entry
    seed = next((s for s in (entry.get("seed"), base.get("seed")) if s is not None), config["pretrain"]["seed"])
    return seed + config["seed_offset"]


def ln_scaling_source(config: Mapping[str, Any], model: str) -> str | None:
    """The key of the config that makes a model LN-scaled (``condensation.ln_scaling``), or None:
    a pretrain model's own ``config.models.<m>.ln_scaling``; an init model's ``of`` pretrain
    model's (the init is that model's initialisation, in its architecture); a run model's study
    method's ``config.<study>.methods.<method>.ln_scaling``, or its ``of`` model's source. An
    init of a hub, local or gguf model is as that model's config says (unscaled, unless it is an
    LN-scaled checkpoint's); a scratch run's own scaling is its method's (``TrainingMethod``)."""
    entry = config["models"].get(model, {})
    source = entry.get("source")
    if source == "pretrain":
        return f"config.models.{model}.ln_scaling" if entry.get("ln_scaling") else None
    if source == "init":
        base = config["models"].get(entry["of"], {})
        return ln_scaling_source(config, entry["of"]) if base.get("source") == "pretrain" else None
    if source == "run":
        method = study_methods(config, entry["study"]).get(entry["method"], {})
        if method.get("ln_scaling"):
            return f"config.{entry['study']}.methods.{entry['method']}.ln_scaling"
        return ln_scaling_source(config, entry["of"])
    return None


def model_ln_scaling(config: Mapping[str, Any], model: str) -> bool:
    """Whether a model is LN-scaled: built with LayerNorm Scaling, or trained with it and saved
    folded (``ln_scaling_source``)."""
    return ln_scaling_source(config, model) is not None


def built_arch(config: Mapping[str, Any], model: str, arch: Mapping[str, int] | None) -> Mapping[str, Any] | None:
    """``arch``, the GPT2 shape a pretrain model (or an init model of one) is built with, as the
    rules pass it to the build: with ``ln_scaling: True`` added where the model is LN-scaled
    (``model_ln_scaling``), so that the setting reaches the run's plan and the rules' params
    (a changed setting reruns what it shapes). An unscaled model's is ``arch`` itself: no key,
    its params as they were."""
    if arch is None or config["models"][model]["source"] not in ("pretrain", "init") \
            or not model_ln_scaling(config, model):
        return arch
    return {**arch, "ln_scaling": True}


def run_seed(config: Mapping[str, Any], seed: int) -> int:
    """The seed a study run with ``seed`` (its place in the study's seeds) trains with."""
    return seed + config["seed_offset"]


def drawn_seeds(config: Mapping[str, Any]) -> dict[str, int]:
    """Every seed this config draws weights or a data order with, by what draws it: each
    pre-trained or initialised model (``models.<name>``) and each study run
    (``<study> <model> <method> seed<seed>``). Two configs share a run where they share a seed."""
    seeds = {f"models.{name}": seed for name in config["models"] if (seed := model_seed(config, name)) is not None}
    for study in studies(config):
        for model, method, seed in study_runs(config, study):
            seeds[f"{study} {model} {method} seed{seed}"] = run_seed(config, seed)
    return seeds


def ablation_grid(config: Mapping[str, Any], study: str = "midtrain") -> dict[str, tuple[float, float]]:
    """Method name -> (weight, tau) of every dispersion run of Table 3: the ablation grid plus
    each configured method that is the plain dispersion loss (the paper's default row)."""
    base = _grid_base(config[study])
    grid = {name: _plain_dispersion(spec, base) for name, spec in study_methods(config, study).items()}
    return {name: point for name, point in grid.items() if point is not None}


def study_checkpoints(config: Mapping[str, Any], study: str) -> list[str]:
    """Names (``step-0000049``) of the evaluation checkpoints every run of a study writes; known
    before training, since the step count follows from the token budget."""
    train = TrainConfig(**config[study]["train"])
    steps = total_steps(train, processes_per_run(config[study]))
    return [step_name(step) for step in checkpoint_steps(steps, train.num_checkpoints)]


def processes_per_run(section: Mapping[str, Any]) -> int:
    """Training processes of every run of a config section (a study, or ``pretrain``): one per
    GPU of each of its nodes, one per node without GPUs. The step count divides by it."""
    return section["nodes_per_run"] * max(1, section["gpus_per_run"])


SHARDING_EXCLUDES = ("noisy_embedding", "active_forgetting")
"""Objectives that read or rewrite the embedding matrix outside the model's forward, which
FSDP keeps in shards."""


def check_sharding(section: Mapping[str, Any], where: str) -> list[str]:
    """A config section's training layout: FSDP shards over several processes, and only for
    objectives that touch the weights through the model's forward."""
    if section["train"]["sharding"] != "fsdp":
        return []
    problems = []
    if processes_per_run(section) < 2:
        problems.append(
            f"{where}.train.sharding: fsdp shards over a run's processes, and this run has one "
            f"(nodes_per_run x gpus_per_run); give it two or more, or keep sharding: ddp"
        )
    methods = section.get("methods", {})
    baselines = sorted(name for name, spec in methods.items() if spec["objective"] in SHARDING_EXCLUDES)
    if baselines:
        problems.append(
            f"{where}.train.sharding: fsdp keeps the embeddings in shards, and methods {baselines} edit them "
            f"directly ({', '.join(SHARDING_EXCLUDES)}); train them with sharding: ddp"
        )
    return problems


USABLE_GPU_FRACTION = 0.85
"""Share of a GPU's memory the weights may take; the rest holds activations (the hidden states
of a batch) and the CUDA context."""


def score_tables(config: Mapping[str, Any]) -> list[str]:
    """The score tables a config produces: Table 2 of mid-training (and Table 3 when it has an
    ablation grid), Table 4 of training from scratch; none when it scores no task."""
    if not config["evaluation"]["tasks"]:
        return []
    tables = []
    if config["midtrain"]["models"]:
        grid = config["midtrain"]["ablation"]
        tables += ["table2", "table3"] if grid["weights"] and grid["taus"] else ["table2"]
    if config["scratch"]["models"]:
        tables.append("table4")
    return tables


def gpus_needed(num_parameters: int, gpu_memory_gb: float, bytes_per_parameter: int = 2) -> int:
    """GPUs whose memory holds a model's weights for inference (bf16 by default): one for every
    model that fits, several for one that does not (its layers are then spread over them).
    With 80 GB GPUs: 1 up to 34B parameters, 2 up to 68B, 3 for Qwen-72B and Qwen2.5-72B."""
    if num_parameters <= 0 or gpu_memory_gb <= 0:
        raise ValueError(f"need a positive parameter count and GPU memory, got {num_parameters} and {gpu_memory_gb}")
    return max(1, math.ceil(num_parameters * bytes_per_parameter / (gpu_memory_gb * 1e9 * USABLE_GPU_FRACTION)))


def evaluation_tasks(config: Mapping[str, Any], model: str) -> dict[str, int]:
    """lm-eval task name -> num_fewshot for ``model``: 0 for `zero` tasks, the model's few-shot
    count (or the default, else 0) for `few` tasks."""
    section = config["evaluation"]
    shots = section["fewshot"].get(model, section["fewshot"].get("default", 0))
    return {task: (0 if kind == "zero" else shots) for task, kind in section["tasks"].items()}


def check_study(config: Mapping[str, Any], study: str) -> list[str]:
    """What the schema cannot say about a study: names that must exist, options that must fit."""
    section, where, problems = config[study], f"config.{study}", []
    if not section["models"]:
        return problems
    for model in section["models"]:
        if model not in config["models"]:
            problems.append(f"{where}.models: unknown model '{model}'")
        elif study == "scratch" and config["models"][model]["source"] != "init":
            problems.append(f"{where}.models: '{model}' is not an `init` model; training from scratch starts from one")
        elif study == "midtrain" and (source := ln_scaling_source(config, model)):
            problems.append(
                f"{where}.models: '{model}' is LN-scaled ({source}): ln_scaling is an architecture trained from "
                "scratch (a pretrain model, or a method of the scratch study), not an option of mid-training a "
                "given model; train it in the scratch study, or drop ln_scaling")
    for key in ("dataset", "geometry_dataset"):
        if section.get(key) not in config["datasets"]:
            problems.append(f"{where}.{key}: unknown dataset {section.get(key)!r} "
                            f"(known: {', '.join(config['datasets'])})")
    for name, spec in section["methods"].items():
        try:
            resolve_method(for_seed(spec, 0))
        except ValueError as error:
            problems.append(f"{where}.methods.{name}: {error}")
        if study != "scratch" and spec.get("ln_scaling"):
            problems.append(
                f"{where}.methods.{name}.ln_scaling: LayerNorm Scaling changes the architecture, and mid-training "
                "continues a given model in its own; it is a method option of the scratch study only (which draws "
                "the initial weights), there beside its CE arm")
        teacher = spec.get("teacher")
        teachers = teacher if isinstance(teacher, list) else [] if teacher is None else [teacher]
        if isinstance(teacher, list) and len(teacher) != len(section["seeds"]):
            problems.append(f"{where}.methods.{name}.teacher: {len(teacher)} teachers for "
                            f"{len(section['seeds'])} seeds "
                            f"{section['seeds']}; give one per seed, in their order")
        for model in teachers:
            if model not in config["models"]:
                problems.append(f"{where}.methods.{name}.teacher: unknown model '{model}' "
                                f"(known: {', '.join(config['models'])})")
    methods = study_methods(config, study)
    for row in section["figure_rows"]:
        if row not in methods:
            problems.append(f"{where}.figure_rows: unknown method '{row}' (known: {', '.join(methods)})")
    for model in section["ablation"]["models"] or []:
        if model not in section["models"]:
            problems.append(f"{where}.ablation.models: '{model}' is not in {where}.models")
    clashes = set(section["methods"]) & set(_ablation_methods(section))
    if clashes:
        problems.append(f"{where}.methods: names {sorted(clashes)} clash with generated ablation runs")
    return problems + check_sharding(section, where)


def series_model_name(series: str, label: str) -> str:
    """The model entry of the checkpoint ``label`` of the hub series ``series``."""
    return f"{series}.{label}"


def band_name(label: str) -> str:
    """A seeds' band's file name: its runs' shared label, lowercased, other characters as ``-``."""
    return re.sub(r"[^a-z0-9.]+", "-", label.lower()).strip("-")


def series_bands(series: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str]) -> dict[str, list[str]]:
    """Fig. 4's seeds' bands: band name -> the series whose models share a label (one
    configuration's seeds, as replicates share a label), where two or more do."""
    bands: dict[str, list[str]] = {}
    titles: dict[str, str] = {}
    for name, spec in series.items():
        label = labels[spec["model"]]
        band = band_name(label)
        if titles.setdefault(band, label) != label:
            raise ValueError(f"series: the labels {titles[band]!r} and {label!r} name the same band file {band!r}; "
                              "rename one")
        bands.setdefault(band, []).append(name)
    return {band: names for band, names in bands.items() if len(names) >= 2}


def pooled_bases(config: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, dict[str, list[str]]]:
    """Each study's models that share a label (several pre-training runs of one model, such as a
    published suite's seeds), by band name: study -> band -> models, where two or more do. Their
    runs are compared once more with the base model as a replicate too."""
    pooled: dict[str, dict[str, list[str]]] = {}
    for study in studies(config):
        groups: dict[str, list[str]] = {}
        for model in config[study]["models"]:
            groups.setdefault(band_name(labels[model]), []).append(model)
        found = {band: models for band, models in groups.items() if len(models) >= 2}
        if found:
            pooled[study] = found
    return pooled


def series_models(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """One model entry per checkpoint of each hub series, named ``<series>.<label>``: the series'
    hub model at that revision. (A `pretrain` series is measured from its run's checkpoints.)"""
    models = {}
    for name, spec in config["series"].items():
        base = config["models"].get(spec["model"], {})
        if base.get("source") == "hub":
            for point in spec.get("checkpoints", []):
                models[series_model_name(name, point["label"])] = {**base, "revision": point["revision"],
                                                                    "label": point["label"]}
    return models


def check_series(config: Mapping[str, Any]) -> list[str]:
    problems = []
    for name, spec in config["series"].items():
        where, model = f"config.series.{name}", config["models"].get(spec["model"])
        if spec["dataset"] not in config["datasets"]:
            problems.append(f"{where}.dataset: unknown dataset '{spec['dataset']}'")
        if model is None:
            problems.append(f"{where}.model: unknown model '{spec['model']}'")
        elif model["source"] == "hub" and len(spec.get("checkpoints", [])) < 2:
            problems.append(f"{where}: a hub model's series lists its revisions under `checkpoints` (two or more)")
        elif model["source"] == "pretrain" and "checkpoints" in spec:
            problems.append(f"{where}.checkpoints: a pretrain model's series is every checkpoint of its run; list none")
        elif model["source"] not in ("hub", "pretrain"):
            problems.append(f"{where}.model: '{spec['model']}' is a {model['source']} model; "
                            "a series needs a hub or pretrain model")
        labels = [point["label"] for point in spec.get("checkpoints", [])]
        if len(set(labels)) != len(labels):
            problems.append(f"{where}.checkpoints: labels repeat")
    return problems


class FamilySizeError(ValueError):
    """A family that compares sizes is not listed smallest first, or holds two models of one size."""


def check_size_order(family: str, model_names: Sequence[str], labels: Mapping[str, str],
                     sizes: Sequence[int | None]) -> None:
    """For a family with ``compares_size``: its sizes (parameter counts, from the handles) must
    increase along ``config.families.<family>.models``. Models that share a label are replicates
    of one size (other seeds) and may stand together; two labels of one size are refused, as is a
    replicate of another size. Raises :class:`FamilySizeError` naming the key and the fix."""
    where = f"config.families.{family}.models"
    sized: dict[str, int] = {}  # label -> its size, in list order
    for name, size in zip(model_names, sizes, strict=True):
        label = labels.get(name, name)
        if size is None:
            raise FamilySizeError(f"{where}: the size of '{name}' is unknown, so the order cannot be checked; "
                                  "set compares_size: false")
        if label in sized and sized[label] != size:
            raise FamilySizeError(
                f"{where}: '{name}' shares the label '{label}' (replicates) with a model of another size "
                f"({size:,} vs {sized[label]:,} parameters); give it a label of its own"
            )
        sized.setdefault(label, size)
    by_size: dict[int, list[str]] = {}
    for label, size in sized.items():
        by_size.setdefault(size, []).append(label)
    same = [labels_of_one for labels_of_one in by_size.values() if len(labels_of_one) > 1]
    if same:
        raise FamilySizeError(
            f"{where}: {same[0]} have one size ({sized[same[0][0]]:,} parameters), and compares_size asks for sizes "
            "that differ; give replicates one label, or set compares_size: false"
        )
    order = list(sized)
    smallest_first = sorted(order, key=sized.__getitem__)
    if order != smallest_first:
        listed = ", ".join(f"{label} ({sized[label]:,})" for label in order)
        raise FamilySizeError(
            f"{where}: listed as {listed}; a family that compares sizes is listed smallest first: {smallest_first}"
        )


def similarity_rows(config: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    """The rows of one ``similarity`` comparison: each a group label, the compared model (a model
    name, or a study run as ``run: [study, model, method, seed]``) and its reference model.

    ``pair``: the pair's first models (group: its first label) and second models (its second
    label), each against the pair's reference at the same place. ``study``: every run of the
    study's models, with the listed methods (default: the configured ones) and seeds, each against
    each reference."""
    spec = config["similarity"][name]
    if "pair" in spec:
        pair = config["pairs"][spec["pair"]]
        labels = pair["labels"]
        return [
            {"group": labels[column], "model": model, "run": None, "reference": reference}
            for column, side in enumerate(("first", "second"))
            for model, reference in zip(pair[side], pair["reference"], strict=True)
        ]
    study = config[spec["study"]]
    methods = spec.get("methods") or list(study["methods"])
    return [
        {"group": method, "model": f"{model}/{method}/seed{seed}", "run": [spec["study"], model, method, seed],
         "reference": reference}
        for method in methods for model in study["models"] for seed in study["seeds"] for reference in spec["reference"]
    ]


def similarity_dataset(config: Mapping[str, Any], name: str) -> str:
    """The dataset whose samples a comparison reads: its own, else its pair's, else its study's
    geometry dataset."""
    spec = config["similarity"][name]
    if spec.get("dataset"):
        return spec["dataset"]
    return config["pairs"][spec["pair"]]["dataset"] if "pair" in spec else config[spec["study"]]["geometry_dataset"]
