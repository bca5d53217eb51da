# Shared by every rule: the validated config, every path template, wildcard constraints and the
# input functions. The targets of the default job are in targets.smk.
# Jobs ask for one CPU thread: their work is on a GPU, or (the embedded default) so small that
# two one-thread jobs on two cores finish sooner than one two-thread job.

import re
import sys
from pathlib import Path
from types import SimpleNamespace

from condensation.config.plan import (
    STUDIES,
    ablation_grid,
    evaluation_tasks,
    gpus_needed,
    model_seed as plan_model_seed,
    run_seed as plan_run_seed,
    score_tables,
    series_model_name,
    similarity_dataset,
    similarity_rows,
    studies,
    study_checkpoints,
    study_methods,
    study_runs,
)
from condensation.config.objectives import for_seed
from condensation.config.corpora import CORPORA
from condensation.config.datasets import local_files, task_text_datasets
from condensation.config.specs import DatasetSpec, ModelSpec
from condensation.config.validate import validate_config
from condensation.data.corpus import find_deb
from condensation.evaluation.score_files import SCORE_FILES
from condensation.runtime.io import read_json
from condensation.runtime.nodes import srun_command
from condensation.runtime.run_dir import STEP_PATTERN, RunDir

# Fail before planning anything if the config is wrong; fills in every default.
config = validate_config(config)

# Sections passed to jobs as plain data: Snakemake's params trigger compares only built-in types,
# so a changed setting reruns the jobs it shapes (the stages build the typed objects).
SAMPLING = config["sampling"]
EXTRACTION = config["extraction"]
TREND = config["trend"]
STUDY_METHODS = {study: study_methods(config, study) for study in STUDIES}  # configured, then ablation runs
STUDY_RUNS = {study: study_runs(config, study) for study in STUDIES}  # (model, method, seed) of every run
MODELS = {name: ModelSpec.from_config(name, entry) for name, entry in config["models"].items()}
DATASETS = {name: DatasetSpec.from_config(name, entry) for name, entry in config["datasets"].items()}
LABELS = {name: spec.label for name, spec in MODELS.items()}
# Models whose weights this workflow draws (pre-trained, initialised or trained in a study here):
# one run of them leaves the training noise unmeasured; any other model is one given checkpoint.
DRAWN_MODELS = [name for name, spec in MODELS.items() if spec.source in ("pretrain", "init", "run")]
GPU_MODEL = config["gpu_model"]  # the site's GPU type for SLURM (None: any GPU)


def series_group(spec):
    """Which runs the findings page reads together for the Fig. 4 claim: the pre-training runs of
    one family done here (every width and seed: draws of one procedure), else the series' model."""
    if spec["model"] in DRAWN_MODELS:
        for family, members in config["families"].items():
            if spec["model"] in members["models"]:
                return f"{family}, pre-trained here"
    return LABELS[spec["model"]]


SERIES_GROUPS = {name: series_group(spec) for name, spec in config["series"].items()}


def model_seed(wildcards):
    """The seed a model is pre-trained or initialised with, seed_offset included (plan.model_seed)."""
    return plan_model_seed(config, wildcards.model)


def run_seed(wildcards):
    """A study run's seed (its wildcard), seed_offset included (plan.run_seed)."""
    return plan_run_seed(config, int(wildcards.seed))


HUB_MODELS = [name for name, spec in MODELS.items() if spec.source == "hub"]
HUB_DATASETS = [name for name, spec in DATASETS.items() if spec.source == "hub"]
# lm-eval tasks whose data lives on the Hub (every task that is not built here)
HUB_TASKS = [task for task in config["evaluation"]["tasks"] if task not in config["evaluation"]["local_tasks"]]

# Offline text comes from Debian packages (CORPORA) that tools/fetch_debs.sh downloads.
DEB_DIR = "resources/debs"


def run_files(root):
    """The files of a training run directory that rules name (layout: checkpointing.RunDir)."""
    run = RunDir(root)
    return SimpleNamespace(**{part: str(getattr(run, part)) for part in ("plan", "final", "index", "log")})


# Every path the workflow writes, in one place; rules name them, input functions expand() them.
# {study} is midtrain (Fig. 6, Tables 2-3) or scratch (Table 4).
path = SimpleNamespace(
    corpus="data/corpus/{corpus}",
    hub_dataset="data/hub/{dataset}",
    hub_tasks="data/hub/lm_eval_tasks.json",
    samples="data/samples/{dataset}.jsonl",
    eval_tasks="data/eval_tasks",
    handle="models/{model}/handle.json",
    model_weights="models/{model}/hf",
    tokenizer="runs/pretrain/tokenizer",
    pretrain_blocks="runs/pretrain/blocks.npy",
    pretrain_run=run_files("runs/pretrain/{model}"),
    pretrain_geometry="results/pretrain/geometry/{model}/{dataset}",
    study_blocks="runs/{study}/{model}/blocks.npy",
    study_run=run_files("runs/{study}/{model}/{method}/seed{seed}"),
    geometry="results/geometry/{model}/{dataset}.npz",
    trend_table="results/tables/trend/{family}_{dataset}",
    series_table="results/tables/series/{series}",
    pair_table="results/tables/paired/{pair}",
    similarity_table="results/tables/similarity/{comparison}.csv",
    checkpoint_geometry="results/{study}/geometry/{model}/{method}/seed{seed}",
    trajectory="results/{study}/{model}/trajectory.csv",
    effects="results/{study}/{model}/condensation_effects",
    losses="results/{study}/{model}/losses.csv",
    # lm-eval scores: one stem, a file per role of SCORE_FILES (record, per-item rows, lm-eval's own)
    score="results/scores/{study}/{model}/{method}/seed{seed}/{checkpoint}",
    pretrained_score="results/scores/{study}/{model}/pretrained",
    family_figure="results/figures/family/{family}_{dataset}.png",
    paired_figure="results/figures/paired/{pair}.png",
    dataset_figure="results/figures/datasets/{family}.png",
    series_figure="results/figures/series/{series}.png",
    study_figure="results/figures/{study}/{model}_{kind}.png",
    table="results/tables/{table}",
    metrics="results/metrics/{name}",
    findings="results/findings.md",
)


def fill(template, **values):
    """``template`` with the named placeholders filled; the others stay wildcards."""
    return expand(template, **values, allow_missing=True)[0]


def _alternatives(names):
    return "|".join(re.escape(name) for name in sorted(names)) or "^$"


def _others(names):
    """Any model name but these (a rule that makes every other model's handle)."""
    return _alternatives(set(config["models"]) - set(names))


wildcard_constraints:
    dataset=_alternatives(config["datasets"]),
    corpus=_alternatives(CORPORA),
    model=_alternatives(config["models"]),
    family=_alternatives(config["families"]),
    pair=_alternatives(config["pairs"]),
    comparison=_alternatives(config["similarity"]),
    series=_alternatives(config["series"]),
    study=_alternatives(STUDIES),
    method=_alternatives({method for methods in STUDY_METHODS.values() for method in methods}),
    seed=r"\d+",
    checkpoint=f"selected|{STEP_PATTERN}",


# --------------------------------------------------------------------------- job order

# Which ready job Snakemake starts first (`priority:`, higher first; every other rule 0). A run
# on a few cores takes about its total job time divided by the cores only if both cores stay busy
# to the end: so the training runs start first (the longest jobs, and all scoring and checkpoint
# measurement waits on them), the models other runs start from or distil from before the other
# pre-training runs, and the small jobs that make the runs' inputs before any of them; scoring and
# measuring what was trained come next, and the many short jobs (extraction, tables, figures)
# fill the cores between and after. No output depends on the order.
PRIORITY = SimpleNamespace(training_input=40, run_input_pretraining=30, training=20, after_training=10)


def study_input_models():
    """The models a study run reads: each study's starting models and every distillation teacher."""
    # a distillation method names one teacher, or one per seed (a list)
    named = [method.get("teacher") for methods in STUDY_METHODS.values() for method in methods.values()]
    teachers = {teacher for entry in named for teacher in (entry if isinstance(entry, list) else [entry])}
    return ({model for study in studies(config) for model in config[study]["models"]} | teachers) - {None}


STUDY_INPUT_MODELS = study_input_models()


def pretrain_priority(wildcards):
    """A pre-training run that study runs start from or distil from before the others."""
    return PRIORITY.run_input_pretraining if wildcards.model in STUDY_INPUT_MODELS else PRIORITY.training


def prepare_model_priority(wildcards):
    """The handle of a study's starting model or teacher gates its runs; other models wait."""
    return PRIORITY.training_input if wildcards.model in STUDY_INPUT_MODELS else 0


# --------------------------------------------------------------------------- text


def dataset_inputs(name):
    """What reading a dataset needs: its built corpus, the user's files, or its fetched text (hub)."""
    return text_inputs(DATASETS[name])


def text_inputs(spec):
    """What reading the text of a dataset spec needs (a dataset's, or a local task's corpus)."""
    name = spec.dataset
    if spec.source in CORPORA:
        return {"corpus": fill(path.corpus, corpus=spec.source)}
    if spec.source == "files":
        return {"files": local_files(spec.files)}
    return {"corpus": fill(path.hub_dataset, dataset=name)}  # its text, fetched


# The text of each local task's corpus (a dataset, or a built-in corpus read whole): its entry as
# plain data for the job, and what reading it needs.
TASK_TEXTS = task_text_datasets(config)
# The local tasks as their build reads them: a permission to overlap training text changes no item.
LOCAL_TASK_SPECS = {
    name: {key: value for key, value in spec.items() if key not in ("allow_overlap", "overlap_reason")}
    for name, spec in config["evaluation"]["local_tasks"].items()
}
TASK_TEXT_INPUTS = {name: text_inputs(DatasetSpec.from_config(name, entry)) for name, entry in TASK_TEXTS.items()}


def get_deb(wildcards):
    return str(find_deb(CORPORA[wildcards.corpus].package, DEB_DIR))


# --------------------------------------------------------------------------- models


def get_model_inputs(wildcards):
    """What a model's handle is made from: a pre-training run or a study's run, or the tokenizer
    of an init model."""
    spec = MODELS[wildcards.model]
    if spec.source == "pretrain":
        return {"pretrained": fill(path.pretrain_run.final, model=wildcards.model)}
    if spec.source == "run":
        return {"pretrained": fill(path.study_run.final, study=spec.study, model=spec.of, method=spec.method, seed=spec.seed)}
    if spec.source == "init" and MODELS[spec.of].source == "pretrain":
        return {"tokenizer": path.tokenizer}
    if spec.source == "init":  # the architecture and tokenizer of a hub model
        return {"base": fill(path.handle, model=spec.of)}
    return {}


def model_gpus(wildcards, input):
    """GPUs for a job that holds one model: as many as its weights need (plan.gpus_needed)."""
    parameters = read_json(input.handle).get("num_parameters")
    return gpus_needed(parameters, config["gpu_memory_gb"]) if parameters else 1


def pretrain_tokenizer_inputs(wildcards):
    """A model's tokenizer (its handle), or the text a BPE is trained on."""
    existing = config["pretrain"]["tokenizer"]
    return {"handle": fill(path.handle, model=existing)} if existing else dataset_inputs(config["pretrain"]["dataset"])


def get_model_arch(wildcards):
    """Architecture of a pretrain model, or of the model an init model is the start of."""
    spec = MODELS[wildcards.model]
    return MODELS[spec.of].arch if spec.source == "init" else spec.arch


# --------------------------------------------------------------------------- geometry


def family_geometry(wildcards):
    models = config["families"][wildcards.family]["models"]
    return {
        "geometry": expand(path.geometry, model=models, dataset=wildcards.dataset),
        "handles": expand(path.handle, model=models),
    }


def pair_geometry(wildcards):
    """The first members, then the second members, then the reference row's (where it has one)."""
    spec = config["pairs"][wildcards.pair]
    models = spec["first"] + spec["second"] + spec.get("reference", [])
    return {
        "geometry": expand(path.geometry, model=models, dataset=spec["dataset"]),
        "handles": expand(path.handle, model=models),
    }


# Each similarity comparison's rows (plan.similarity_rows): a group, the compared model (a model of
# the config, or a study run) and its reference.
SIMILARITY_ROWS = {name: similarity_rows(config, name) for name in config["similarity"]}


def similarity_inputs(wildcards):
    """Per row, the compared model (its handle, or a study run's final weights) and the reference's
    handle; and the dataset's samples."""
    rows = SIMILARITY_ROWS[wildcards.comparison]
    compared = [
        fill(path.study_run.final, study=row["run"][0], model=row["run"][1], method=row["run"][2], seed=row["run"][3])
        if row["run"] else fill(path.handle, model=row["model"])
        for row in rows
    ]
    return {
        "compared": compared,
        "references": [fill(path.handle, model=row["reference"]) for row in rows],
        "samples": fill(path.samples, dataset=similarity_dataset(config, wildcards.comparison)),
    }


def robustness_geometry(wildcards):
    """Dataset-major: every model of the first dataset, then of the next."""
    models = config["families"][wildcards.family]["models"]
    datasets = config["dataset_robustness"][wildcards.family]
    return expand(path.geometry, dataset=datasets, model=models)


def series_inputs(wildcards):
    """A hub series: the geometry of each revision's model; a pretrain series: its run's
    checkpoint geometry and checkpoint index."""
    spec = config["series"][wildcards.series]
    if MODELS[spec["model"]].source == "pretrain":
        return {
            "run_geometry": fill(path.pretrain_geometry, model=spec["model"], dataset=spec["dataset"]),
            "index": fill(path.pretrain_run.index, model=spec["model"]),
        }
    models = [series_model_name(wildcards.series, point["label"]) for point in spec["checkpoints"]]
    return {"geometry": expand(path.geometry, model=models, dataset=spec["dataset"])}


def trend_tables(compares_size=None):
    """Every family's trend tables, or only those whose ``compares_size`` is the one given."""
    return [
        f"{stem}.csv"
        for family, spec in config["families"].items()
        if compares_size is None or spec["compares_size"] == compares_size
        for stem in expand(path.trend_table, family=family, dataset=spec["datasets"])
    ]


def all_geometry():
    """Every (model, dataset) measured for a family, a pair or a dataset comparison."""
    families, pairs = config["families"], config["pairs"].values()
    measured = {(m, d) for spec in families.values() for m in spec["models"] for d in spec["datasets"]}
    measured |= {(m, spec["dataset"]) for spec in pairs for m in spec["first"] + spec["second"] + spec.get("reference", [])}
    for family, datasets in config["dataset_robustness"].items():
        measured |= {(m, d) for m in families[family]["models"] for d in datasets}
    return sorted(fill(path.geometry, model=m, dataset=d) for m, d in measured)


# --------------------------------------------------------------------------- training studies


def launcher(section):
    """How every training run starts (``section``: pretrain or a study): the one training script,
    under `accelerate launch` (a process per GPU) when a run has more than one GPU, and through
    srun, a launcher per node, when it has more than one node (condensation/runtime/nodes.py)."""
    gpus, nodes = config[section]["gpus_per_run"], config[section]["nodes_per_run"]
    script = f"{workflow.basedir}/workflow_scripts/train_run.py"
    if nodes > 1:
        return srun_command(nodes, gpus, sys.executable, script)
    start = f"{sys.executable} -m accelerate.commands.launch --multi_gpu --num_processes {gpus}" if gpus > 1 else sys.executable
    return f"{start} {script}"


def training_resources(section_of):
    """The resources of a training job, for ``section_of(wildcards)`` (pretrain or a study): the
    GPUs of one machine, or, over several nodes, the executor plugin's own resources for a job
    of N nodes with G GPUs each (--nodes, --ntasks, --gres per node) whose one step the job's
    srun starts (``mpi``: the plugin runs the job's command as it is, without its own srun)."""

    def resource(name):
        def value(wildcards):
            spec = config[section_of(wildcards)]
            gpus, nodes = spec["gpus_per_run"], spec["nodes_per_run"]
            if nodes == 1:
                return {"gpu": gpus, "gpu_model": GPU_MODEL if gpus else None}.get(name)
            typed = f"gpu:{GPU_MODEL}:{gpus}" if GPU_MODEL else f"gpu:{gpus}"
            # `gpu` stays 0: the plugin would turn it into --gpus, a count for the whole job.
            # tasks_per_gpu 0: else the plugin sets --ntasks-per-gpu to `tasks` for a GPU job.
            return {"gpu": 0, "nodes": nodes, "tasks": nodes, "tasks_per_gpu": 0, "mpi": "srun",
                    "gres": typed if gpus else None}.get(name)

        return value

    names = ("gpu", "gpu_model", "nodes", "tasks", "tasks_per_gpu", "mpi", "gres")
    return {name: resource(name) for name in names}


def run_method(wildcards):
    """A run's method spec as the run sees it: a teacher given per seed picked for its seed."""
    seeds = config[wildcards.study]["seeds"]
    position = seeds.index(int(wildcards.seed)) if int(wildcards.seed) in seeds else 0
    return for_seed(STUDY_METHODS[wildcards.study][wildcards.method], position)


def teacher_inputs(wildcards):
    """The teacher's handle, for a run whose method distils (it names the teacher)."""
    teacher = run_method(wildcards).get("teacher")
    return {"teacher": fill(path.handle, model=teacher)} if teacher else {}


def teacher_argument(wildcards, input):
    return f"--teacher {input.teacher}" if "teacher" in input.keys() else ""


def model_runs(wildcards):
    """(method, seed) of every run of one model in one study."""
    return [(method, seed) for model, method, seed in STUDY_RUNS[wildcards.study] if model == wildcards.model]


def expand_runs(template, study, model, runs):
    """``template`` filled for each (method, seed) of ``runs`` of one model in one study."""
    methods, seeds = zip(*runs) if runs else ((), ())
    count = len(runs)
    return expand(template, zip, study=[study] * count, model=[model] * count, method=methods, seed=seeds)


def get_model_run_files(wildcards):
    runs = model_runs(wildcards)
    return {
        "logs": expand_runs(path.study_run.log, wildcards.study, wildcards.model, runs),
        "geometry": expand_runs(path.checkpoint_geometry, wildcards.study, wildcards.model, runs),
    }


def get_figure_row_geometry(wildcards):
    """Fig. 6 rows: each row's method in the first seed it was run with."""
    seeds = {}
    for method, seed in model_runs(wildcards):
        seeds.setdefault(method, seed)
    rows = config[wildcards.study]["figure_rows"]
    return expand_runs(path.checkpoint_geometry, wildcards.study, wildcards.model, [(m, seeds[m]) for m in rows])


# --------------------------------------------------------------------------- scores


def eval_task_inputs(wildcards):
    """The built offline tasks, and the fetched data of hub tasks, when the config has any."""
    inputs = {"tasks": path.eval_tasks} if config["evaluation"]["local_tasks"] else {}
    return inputs | ({"hub_tasks": path.hub_tasks} if HUB_TASKS else {})


# What scoring depends on, apart from the tasks: a change elsewhere in `evaluation` re-scores nothing.
EVAL_SETTINGS = {key: config["evaluation"][key] for key in ("batch_size", "limit", "seed", "metric")}


def get_eval_tasks(wildcards):
    return evaluation_tasks(config, wildcards.model)


def score_files(study, checkpoints=("selected",), suffix=SCORE_FILES["record"]):
    """The score records (or, by ``suffix``, another of a score's files) of the given checkpoints
    of every run of a study; for mid-training, also of each model before it."""
    files = []
    if study == "midtrain":
        files += expand(f"{path.pretrained_score}{suffix}", study=study, model=config[study]["models"])
    for model, method, seed in STUDY_RUNS[study]:
        files += expand(f"{path.score}{suffix}", study=study, model=model, method=method, seed=seed, checkpoint=checkpoints)
    return files


def findings_score_inputs(wildcards):
    """Tables 2 and 4, where the config scores."""
    if not config["evaluation"]["tasks"]:
        return {"score_tables": []}
    tables = [table for table in score_tables(config) if table in ("table2", "table4")]
    return {"score_tables": expand(f"{path.table}.csv", table=tables)}
