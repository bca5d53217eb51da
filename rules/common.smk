# What several files of rules share: the validated config and its sections, the path templates,
# wildcard constraints, job priorities and the input functions of more than one rule file. The
# targets of the default job are in targets.smk.
# Jobs ask for one CPU thread: their work is on a GPU, or (the embedded default) so small that
# two one-thread jobs on two cores finish sooner than one two-thread job. Rules that carry
# `localrule: True` run on the submitting node of a cluster: the downloads (compute nodes often
# have no network; every other job runs with the Hugging Face libraries offline) and quick jobs
# that only read results. Functions stay out of the files with rules (Snakemake's lint), and what
# one of those alone uses is in rules/functions/<stage>.smk, which that file includes.

import re
import sys
from types import SimpleNamespace

from condensation.config.corpora import CORPORA
from condensation.config.datasets import local_files
from condensation.config.launch import LocalText, launch_command, spread, training_resources
from condensation.config.paths import path
from condensation.config.plan import STUDIES, gpus_needed, pooled_bases, studies, study_methods, study_runs
from condensation.config.specs import DatasetSpec, ModelSpec
from condensation.config.validate import validate_config
from condensation.runtime.io import read_json
from condensation.runtime.run_dir import STEP_PATTERN

# Fail before planning anything if the config is wrong; fills in every default.
config = validate_config(config)

# Sections passed to jobs as plain data: Snakemake's params trigger compares only built-in types,
# so a changed setting reruns the jobs it shapes (the stages build the typed objects).
SAMPLING = config["sampling"]
EXTRACTION = config["extraction"]
TREND = config["trend"]
MEASURING = {"sampling": SAMPLING, "extraction": EXTRACTION, "trend": TREND}  # a run's checkpoints
STUDY_METHODS = {study: study_methods(config, study) for study in STUDIES}  # configured, then ablation runs
STUDY_RUNS = {study: study_runs(config, study) for study in STUDIES}  # (model, method, seed) of every run
MODELS = {name: ModelSpec.from_config(name, entry) for name, entry in config["models"].items()}
DATASETS = {name: DatasetSpec.from_config(name, entry) for name, entry in config["datasets"].items()}
LABELS = {name: spec.label for name, spec in MODELS.items()}
# study -> band -> the study's models that share a label (a suite's seeds): compared pooled too
POOLED_BASES = pooled_bases(config, LABELS)
GPU_MODEL = config["gpu_model"]  # the site's GPU type for SLURM (None: any GPU)


def path_with(template, **values):
    """``template`` with the named placeholders filled; the others stay wildcards."""
    return expand(template, **values, allow_missing=True)[0]


def _alternatives(names):
    return "|".join(re.escape(name) for name in sorted(names)) or "^$"


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
    bases=_alternatives({band for bands in POOLED_BASES.values() for band in bands}),
    checkpoint=f"selected|{STEP_PATTERN}",


# Which ready job Snakemake starts first (`priority:`, higher first; every other rule 0). A run
# on a few cores takes about its total job time divided by the cores only if both cores stay busy
# to the end: so the training runs start first (the longest jobs, and all scoring and checkpoint
# measurement waits on them), the models other runs start from or distil from before the other
# pre-training runs (models.smk), and the small jobs that make the runs' inputs before any of
# them; scoring and measuring what was trained come next, and the many short jobs (extraction,
# tables, figures) fill the cores between and after. No output depends on the order.
PRIORITY = SimpleNamespace(training_input=40, run_input_pretraining=30, training=20, after_training=10)


def in_report(file, caption, category, subcategory=None, **labels):
    """``file`` shown in the report under ``category``, with the caption report/{caption}.rst."""
    return report(file, caption=f"../report/{caption}.rst", category=category, subcategory=subcategory, labels=labels)


def model_gpus(wildcards, input):
    """GPUs for a job that holds one model: as many as its weights need (plan.gpus_needed)."""
    parameters = read_json(input.handle).get("num_parameters")
    return gpus_needed(parameters, config["gpu_memory_gb"]) if parameters else 1


def gpu_job(runtime, gpu=model_gpus):
    """The resources of a job that holds one model: measuring (60 min) or scoring it (120); no GPU
    where the site uses none (use_gpus)."""
    if not config["use_gpus"]:
        return {"gpu": 0, "mem_mb": 16000, "runtime": runtime}
    return {"gpu": gpu, "gpu_model": GPU_MODEL, "mem_mb": 16000, "runtime": runtime}


def text_inputs(spec):
    """What reading the text of a dataset spec needs (a dataset's, or a local task's corpus): its
    built corpus, the user's files, or its fetched text (hub)."""
    if spec.source in CORPORA:
        return {"corpus": path_with(path.corpus, corpus=spec.source)}
    if spec.source == "files":
        return {"files": local_files(spec.files)}
    return {"corpus": path_with(path.hub_dataset, dataset=spec.dataset)}


def dataset_inputs(name):
    """What reading a dataset needs (text_inputs)."""
    return text_inputs(DATASETS[name])


# A family's members on one dataset: the trend table and the figure of rules trend_table and
# family_figure (geometry.smk, figures.smk) read the same.
FAMILY_PARAMS = {
    "models": lookup(dpath="families/{family}/models", within=config),
    "compares_size": lookup(dpath="families/{family}/compares_size", within=config),
    "labels": LABELS,
    "trend": TREND,
}


def family_geometry(wildcards):
    models = config["families"][wildcards.family]["models"]
    return {
        "geometry": expand(path.geometry, model=models, dataset=wildcards.dataset),
        "handles": expand(path.handle, model=models),
    }


def trend_tables(compares_size=None):
    """Every family's trend tables, or only those whose ``compares_size`` is the one given."""
    return [
        f"{stem}.csv"
        for family, spec in config["families"].items()
        if compares_size is None or spec["compares_size"] == compares_size
        for stem in expand(path.trend_table, family=family, dataset=spec["datasets"])
    ]


PYTHON = LocalText(sys.executable)  # the jobs' Python: shown in commands, not compared (launch.LocalText)


def launcher(section):
    """How every training run starts (``section``: pretrain or a study; launch.launch_command);
    its paths are this machine's, so it is not compared: ``spread`` is."""
    script = f"{workflow.basedir}/workflow_scripts/train_run.py"
    return LocalText(launch_command(config[section], sys.executable, script))


def model_runs(wildcards):
    """(method, seed) of every run of one model in one study."""
    return [(method, seed) for model, method, seed in STUDY_RUNS[wildcards.study] if model == wildcards.model]


def expand_runs(template, study, model, runs):
    """``template`` filled for each (method, seed) of ``runs`` of one model in one study."""
    methods, seeds = zip(*runs) if runs else ((), ())
    count = len(runs)
    return expand(template, zip, study=[study] * count, model=[model] * count, method=methods, seed=seeds)
