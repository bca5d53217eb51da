# Configuration, wildcard constraints and input functions shared by every rule.

import glob
import json
import re
import sys

from condensation.corpus import find_deb
from condensation.config import (
    ablation_grid,
    evaluation_tasks,
    extraction_config,
    midtrain_checkpoints,
    midtrain_methods,
    midtrain_runs,
    sampling_config,
    trend_config,
    validate_config,
)

# Fail before planning anything if the config is wrong; fills in every default.
config = validate_config(config)

DATASETS = config["datasets"]
MODELS = config["models"]
FAMILIES = config["families"]
PAIRS = config["pairs"]
PRETRAIN = config["pretrain"]
MIDTRAIN = config["midtrain"]
METHODS = midtrain_methods(config)
RUNS = midtrain_runs(config)  # (model, method, seed) of every mid-training run
SAMPLING = sampling_config(config)
EXTRACTION = extraction_config(config)
TREND = trend_config(config)
EVALUATION = config["evaluation"]
# Scores are taken of mid-trained models only (Tables 2 and 3); no tasks, no scoring.
SCORING = bool(EVALUATION["tasks"]) and bool(MIDTRAIN["models"])
ABLATION_GRID = ablation_grid(config)  # method -> (weight, tau) of Table 3's dispersion runs
ABLATION_MODELS = MIDTRAIN["ablation"]["models"] or MIDTRAIN["models"]

# Offline text comes from Debian packages that tools/fetch_debs.sh downloads.
DEB_DIR = "resources/debs"
CORPUS_PACKAGES = {"austen": "r-cran-janeaustenr", "python_docs": "python3.11-doc"}


def _alternatives(names):
    return "|".join(re.escape(name) for name in sorted(names)) or "^$"


wildcard_constraints:
    dataset=_alternatives(DATASETS),
    corpus=_alternatives(CORPUS_PACKAGES),
    model=_alternatives(MODELS),
    family=_alternatives(FAMILIES),
    pair=_alternatives(PAIRS),
    method=_alternatives(METHODS),
    seed=r"\d+",
    checkpoint=r"selected|step-\d{7}",


def model_label(name):
    return MODELS[name].get("label", name)


def model_labels():
    return {name: model_label(name) for name in MODELS}


def corpus_dir(name):
    """Built corpus of a packaged dataset (shared by datasets of one source), else None."""
    source = DATASETS[name]["source"]
    return f"data/corpus/{source}" if source in CORPUS_PACKAGES else None


def corpus_inputs(name):
    """What reading a dataset needs: its built corpus, the user's files, or nothing (hub)."""
    spec = DATASETS[name]
    if spec["source"] in CORPUS_PACKAGES:
        return {"corpus": corpus_dir(name)}
    if spec["source"] == "files":
        return {"files": sorted({p for pattern in spec["files"] for p in glob.glob(pattern, recursive=True)})}
    return {}


def get_corpus_input(wildcards):
    return corpus_inputs(wildcards.dataset)


def get_pretrain_corpus_input(wildcards):
    return corpus_inputs(PRETRAIN["dataset"]) if PRETRAIN["dataset"] in DATASETS else {}


def get_dataset_spec(wildcards):
    return DATASETS[wildcards.dataset]


def get_deb(wildcards):
    return str(find_deb(CORPUS_PACKAGES[wildcards.corpus], DEB_DIR))


# More than one GPU per run: the same script under `accelerate launch` (DDP, one process per GPU).
TRAINING_LAUNCHER = (
    f"{sys.executable} -m accelerate.commands.launch --multi_gpu --num_processes {MIDTRAIN['gpus_per_run']}"
    if MIDTRAIN["gpus_per_run"] > 1
    else sys.executable
) + f" {workflow.basedir}/workflow_scripts/midtrain.py"


def get_midtrain_corpus_input(wildcards):
    return corpus_inputs(MIDTRAIN["dataset"])


def get_midtrain_run_dir(wildcards):
    return f"runs/midtrain/{wildcards.model}/{wildcards.method}/seed{wildcards.seed}"


def get_method_json(wildcards):
    return json.dumps(METHODS[wildcards.method], sort_keys=True)


def runs_of(model):
    return [(method, seed) for m, method, seed in RUNS if m == model]


def get_model_run_methods(wildcards):
    return [method for method, _ in runs_of(wildcards.model)]


def get_model_run_seeds(wildcards):
    return [seed for _, seed in runs_of(wildcards.model)]


def get_model_run_finals(wildcards):
    return [f"runs/midtrain/{wildcards.model}/{m}/seed{s}/final" for m, s in runs_of(wildcards.model)]


def get_model_run_geometry(wildcards):
    return [f"results/midtrain/geometry/{wildcards.model}/{m}/seed{s}" for m, s in runs_of(wildcards.model)]


def get_figure_row_geometry(wildcards):
    """Fig. 6 rows: each row's method in the first seed it was run with."""
    seeds = {}
    for method, seed in runs_of(wildcards.model):
        seeds.setdefault(method, seed)
    return [f"results/midtrain/geometry/{wildcards.model}/{m}/seed{seeds[m]}" for m in MIDTRAIN["figure_rows"]]


def get_model_label(wildcards):
    return model_label(wildcards.model)


def get_model_spec(wildcards):
    return MODELS[wildcards.model]


def get_model_inputs(wildcards):
    """Artifacts a model's handle is made from (pre-training run, tokenizer), by source."""
    spec = MODELS[wildcards.model]
    if spec["source"] == "pretrain":
        return {"pretrained": f"runs/pretrain/{wildcards.model}/final"}
    if spec["source"] == "init":
        return {"tokenizer": "runs/pretrain/tokenizer"}
    return {}


def get_model_arch(wildcards):
    """Architecture of a pretrain model, or of the model an init model is the start of."""
    spec = MODELS[wildcards.model]
    return MODELS[spec["of"]]["arch"] if spec["source"] == "init" else spec.get("arch")


def get_run_dir(wildcards):
    return f"runs/pretrain/{wildcards.model}"


def get_weights_dir(wildcards):
    """Where GGUF and init models keep their converted or initialised weights."""
    return f"models/{wildcards.model}/hf"


def geometry_path(model, dataset):
    return f"results/geometry/{model}/{dataset}.npz"


def get_family_models(wildcards):
    return FAMILIES[wildcards.family]["models"]


def get_family_geometry(wildcards):
    return [geometry_path(m, wildcards.dataset) for m in get_family_models(wildcards)]


def get_family_handles(wildcards):
    return [f"models/{m}/handle.json" for m in get_family_models(wildcards)]


def get_pair_spec(wildcards):
    return PAIRS[wildcards.pair]


def get_pair_geometry(wildcards):
    spec = PAIRS[wildcards.pair]
    return [geometry_path(m, spec["dataset"]) for m in spec["first"] + spec["second"]]


def get_pair_handles(wildcards):
    spec = PAIRS[wildcards.pair]
    return [f"models/{m}/handle.json" for m in spec["first"] + spec["second"]]


def get_robustness_datasets(wildcards):
    return config["dataset_robustness"][wildcards.family]


def get_robustness_geometry(wildcards):
    """Dataset-major: every model of the first dataset, then of the next."""
    models = get_family_models(wildcards)
    return [geometry_path(m, d) for d in get_robustness_datasets(wildcards) for m in models]


def family_figures():
    return [
        f"results/figures/family/{family}_{dataset}.png"
        for family, spec in FAMILIES.items()
        for dataset in spec["datasets"]
    ]


def family_tables():
    return [
        f"results/tables/trend/{family}_{dataset}.csv"
        for family, spec in FAMILIES.items()
        for dataset in spec["datasets"]
    ]


def all_geometry():
    pairs = {(m, d) for spec in FAMILIES.values() for m in spec["models"] for d in spec["datasets"]}
    pairs |= {(m, spec["dataset"]) for spec in PAIRS.values() for m in spec["first"] + spec["second"]}
    pairs |= {
        (m, d)
        for family, datasets in config["dataset_robustness"].items()
        for m in FAMILIES[family]["models"]
        for d in datasets
    }
    return sorted(geometry_path(m, d) for m, d in pairs)


def get_eval_corpora(wildcards):
    """Built corpora the offline tasks are drawn from, by corpus name."""
    return {spec["corpus"]: f"data/corpus/{spec['corpus']}" for spec in EVALUATION["local_tasks"].values()}


def eval_task_inputs():
    """The built offline tasks, when the config has any."""
    return {"tasks": "data/eval_tasks/tasks.json"} if EVALUATION["local_tasks"] else {}


def get_eval_tasks(wildcards):
    return evaluation_tasks(config, wildcards.model)


EVAL_SETTINGS = {key: EVALUATION[key] for key in ("batch_size", "limit", "seed", "metric")}


def score_files():
    """What Table 2 and 3 read: each model before mid-training, and each run's checkpoint with
    the lowest validation loss."""
    files = [f"results/scores/{model}/pretrained.json" for model in MIDTRAIN["models"]]
    return files + [f"results/scores/{m}/{method}/seed{s}/selected.json" for m, method, s in RUNS]


def step_score_files():
    """Every checkpoint after step 0 of every run (evaluation.checkpoints: all); step 0 is the
    model before mid-training, scored once per model."""
    checkpoints = midtrain_checkpoints(config)[1:]
    files = [f"results/scores/{model}/pretrained.json" for model in MIDTRAIN["models"]]
    return files + [f"results/scores/{m}/{method}/seed{s}/{c}.json" for m, method, s in RUNS for c in checkpoints]


def score_targets():
    if not SCORING:
        return []
    tables = ["table2", "table3"] if ABLATION_GRID else ["table2"]
    targets = [f"results/tables/{table}.{ext}" for table in tables for ext in ("csv", "md", "tex", "html")]
    targets += ["results/metrics/scores.json", "results/metrics/scores.csv"]
    if EVALUATION["checkpoints"] == "all":
        targets.append("results/tables/scores_by_step.csv")
    return targets


def all_targets():
    targets = family_figures() + family_tables()
    targets += [f"results/figures/paired/{pair}.png" for pair in PAIRS]
    targets += [f"results/figures/datasets/{family}.png" for family in config["dataset_robustness"]]
    if FAMILIES:
        targets += ["results/metrics/trend.json", "results/metrics/layer_means.csv"]
    for model in MIDTRAIN["models"]:
        targets += [f"results/figures/midtrain/{model}_{kind}.png" for kind in ("condensation", "trajectory", "losses")]
    if MIDTRAIN["models"]:
        targets.append("results/metrics/midtrain.json")
    return targets + score_targets()
