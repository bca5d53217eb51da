"""What the stand-in hub holds: model repositories, dataset repositories, and their shapes.

The hub models and hub datasets come from a pipeline config (``configs/paper.yaml`` by default),
so a model or dataset added there is either built here or refused with a message naming it;
the Olmo-3 revision series of the paper's Fig. 4 and the datasets of lm-eval's tasks are added
on top.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PAPER_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "paper.yaml"
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")

OLMO3_REPO = "allenai/Olmo-3-1025-7B"

# Hub id prefix -> family. A hub id that matches none is refused by `model_repos`.
FAMILY_PREFIXES = (
    ("openai-community/gpt2", "gpt2"),
    ("Qwen/Qwen-", "qwen1"),
    ("Qwen/Qwen2.5-", "qwen2.5"),
    ("Qwen/Qwen3-", "qwen3"),
    ("bigscience/bloom-", "bloom"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-", "r1-distill"),
    ("allenai/Olmo-3-", "olmo3"),
    ("EleutherAI/pythia-", "pythia"),
)

# GPT-2's sizes are words, not numbers (billions of parameters of the real checkpoints).
GPT2_SIZES = {"gpt2": 0.124, "gpt2-medium": 0.355, "gpt2-large": 0.774, "gpt2-xl": 1.5}

# The PolyPythia sizes' real depths (van der Wal et al. 2025): the stand-ins keep half, so that a
# deeper size stays deeper and a layer trend has points to rank.
PYTHIA_LAYERS = {0.014: 6, 0.031: 6, 0.07: 6, 0.16: 12, 0.41: 24}

# The hub datasets beyond a pipeline config's own: C4 (issue 11), and the datasets lm-eval reads
# for the paper's 10 tasks (task -> (dataset_path, dataset_name) as in lm-eval's task YAMLs).
EXTRA_TEXT_DATASETS = (("allenai/c4", "en"),)
TASK_DATASETS: dict[str, tuple[str, str | None]] = {
    "anli_r2": ("facebook/anli", None),
    "lambada_openai": ("EleutherAI/lambada_openai", "default"),
    "openbookqa": ("allenai/openbookqa", "main"),
    "piqa": ("baber/piqa", None),
    "truthfulqa_mc2": ("truthfulqa/truthful_qa", "multiple_choice"),
    "winogrande": ("allenai/winogrande", "winogrande_xl"),
    "arc_easy": ("allenai/ai2_arc", "ARC-Easy"),
    "arc_challenge": ("allenai/ai2_arc", "ARC-Challenge"),
    "mmlu": ("cais/mmlu", None),  # one config per subject, see MMLU_SUBJECTS
    "medmcqa": ("openlifescienceai/medmcqa", None),
}

MMLU_SUBJECTS = tuple(
    """abstract_algebra anatomy astronomy business_ethics clinical_knowledge college_biology
    college_chemistry college_computer_science college_mathematics college_medicine college_physics
    computer_security conceptual_physics econometrics electrical_engineering elementary_mathematics
    formal_logic global_facts high_school_biology high_school_chemistry high_school_computer_science
    high_school_european_history high_school_geography high_school_government_and_politics
    high_school_macroeconomics high_school_mathematics high_school_microeconomics high_school_physics
    high_school_psychology high_school_statistics high_school_us_history high_school_world_history
    human_aging human_sexuality international_law jurisprudence logical_fallacies machine_learning
    management marketing medical_genetics miscellaneous moral_disputes moral_scenarios nutrition
    philosophy prehistory professional_accounting professional_law professional_medicine
    professional_psychology public_relations security_studies sociology us_foreign_policy virology
    world_religions""".split()
)


class CatalogError(ValueError):
    """The config names something the stand-in hub cannot build."""


@dataclass(frozen=True)
class Shape:
    """A tiny model's dimensions."""

    layers: int
    hidden: int
    heads: int
    intermediate: int


@dataclass(frozen=True)
class ModelRepo:
    repo_id: str
    family: str
    size: float
    """Nominal size in billions of parameters, read from the real name."""
    revisions: tuple[str, ...] = ("main",)

    @property
    def shape(self) -> Shape:
        return shape_for(self.size, self.family)


def family_of(repo_id: str) -> str:
    for prefix, family in FAMILY_PREFIXES:
        if repo_id.startswith(prefix):
            return family
    raise CatalogError(f"the stand-in hub has no model family for hub id '{repo_id}' (known prefixes: "
                       f"{[prefix for prefix, _ in FAMILY_PREFIXES]})")


def nominal_size(repo_id: str) -> float:
    """Billions of parameters named in a hub id: ``Qwen-1_8B`` 1.8, ``bloom-7b1`` 7.1, ``bloom-560m``
    0.56, ``Qwen2.5-0.5B`` 0.5; GPT-2's word sizes from :data:`GPT2_SIZES`."""
    name = repo_id.split("/", 1)[1]
    if name in GPT2_SIZES:
        return GPT2_SIZES[name]
    matches = re.findall(r"(?<![A-Za-z])(\d+)(?:[._](\d+))?([bBmM])(\d+)?(?![A-Za-z])", name)
    if not matches:
        raise CatalogError(f"cannot read a model size from hub id '{repo_id}'")
    whole, fraction, unit, suffix = matches[-1]
    value = float(f"{whole}.{fraction or suffix or 0}")
    return value / 1000 if unit in "mM" else value


def shape_for(size: float, family: str) -> Shape:
    """Dimensions that grow with the nominal size, so a family's parameter counts order as the
    real ones: depth steps up at 1B and 10B, width at 10B, the MLP widens with the fourth root
    of the size (in millions of parameters)."""
    layers = 2 if size < 1 else 3 if size < 10 else 4
    hidden = 32 if size < 10 else 40
    intermediate = 8 * math.ceil((size * 1000) ** 0.25)
    if family == "olmo3":
        layers = 4  # Olmo 3 interleaves three sliding-window layers and one full-attention layer
    if family == "bloom":
        hidden = 16 + intermediate // 2  # Bloom's MLP is always 4 x hidden: the width grows instead
    if family == "pythia":
        # GPTNeoX: the MLP is 4 x hidden, and a quarter of each head's dimensions rotate, so heads
        # of 8 or more dimensions (hidden a multiple of 32) keep that quarter even
        layers = PYTHIA_LAYERS.get(size, 6) // 2
        hidden = 32 * math.ceil((size * 1000) ** 0.25 / 2)
        intermediate = 4 * hidden
    return Shape(layers=layers, hidden=hidden, heads=4, intermediate=intermediate)


@dataclass(frozen=True)
class Catalog:
    models: tuple[ModelRepo, ...]
    text_datasets: tuple[tuple[str, str | None], ...]
    """(path, config name) of every plain-text dataset."""
    tasks: tuple[str, ...]
    """lm-eval task names whose datasets are built (see :data:`TASK_DATASETS`)."""

    def model(self, repo_id: str) -> ModelRepo:
        for model in self.models:
            if model.repo_id == repo_id:
                return model
        raise KeyError(repo_id)


def hub_models(config: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """The ``source: hub`` model ids of a pipeline config, each with its revisions: ``main``, the
    ones models pin (``revision: step0``, a checkpoint as a model of its own) and, for a model
    measured over training (the config's ``series``, Fig. 4), every listed one."""
    models = config.get("models", {})
    revisions: dict[str, list[str]] = {spec["id"]: [] for spec in models.values() if spec.get("source") == "hub"}
    for spec in models.values():
        if spec.get("source") == "hub" and spec.get("revision"):
            revisions[spec["id"]].append(spec["revision"])
    for series in config.get("series", {}).values():
        model = models.get(series["model"], {})
        if model.get("source") == "hub":
            revisions[model["id"]] += [point["revision"] for point in series.get("checkpoints", [])]
    return {repo: tuple(dict.fromkeys([*listed, "main"])) for repo, listed in revisions.items()}


def hub_datasets(config: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    pairs = [(spec["path"], spec.get("name"))
             for spec in config.get("datasets", {}).values() if spec.get("source") == "hub"]
    return list(dict.fromkeys(pairs))


def load_catalog(config_path: str | Path = PAPER_CONFIG) -> Catalog:
    """The catalog for a pipeline config: its hub models (at the revisions its series measure),
    its hub datasets, C4 and the datasets of its ``evaluation.tasks``."""
    config = yaml.safe_load(Path(config_path).read_text())
    models = [
        ModelRepo(repo_id, family_of(repo_id), nominal_size(repo_id), revisions)
        for repo_id, revisions in hub_models(config).items()
    ]
    tasks = list(config.get("evaluation", {}).get("tasks", {}))
    unknown = [task for task in tasks if task not in TASK_DATASETS]
    if unknown:
        raise CatalogError(f"the stand-in hub has no dataset for lm-eval task(s) {unknown} "
                           f"(known: {sorted(TASK_DATASETS)})")
    text = list(dict.fromkeys(hub_datasets(config) + list(EXTRA_TEXT_DATASETS)))
    return Catalog(models=tuple(models), text_datasets=tuple(text), tasks=tuple(tasks))
