# The input functions and helpers that rules/training.smk alone uses (Snakemake's lint keeps
# functions out of a file with rules); what several rule files share is in rules/common.smk.

from condensation.config.objectives import for_seed
from condensation.config.plan import run_seed as plan_run_seed


def run_seed(wildcards):
    """A study run's seed (its wildcard), seed_offset included (plan.run_seed)."""
    return plan_run_seed(config, int(wildcards.seed))


def run_method(wildcards):
    """A run's method spec as the run sees it: a teacher given per seed picked for its seed."""
    seeds = config[wildcards.study]["seeds"]
    position = seeds.index(int(wildcards.seed)) if int(wildcards.seed) in seeds else 0
    return for_seed(STUDY_METHODS[wildcards.study][wildcards.method], position)


def teacher_inputs(wildcards):
    """The teacher's handle, for a run whose method distils (it names the teacher)."""
    teacher = run_method(wildcards).get("teacher")
    return {"teacher": path_with(path.handle, model=teacher)} if teacher else {}


def teacher_argument(wildcards, input):
    return f"--teacher {input.teacher}" if "teacher" in input.keys() else ""


def get_model_run_files(wildcards):
    runs = model_runs(wildcards)
    return {
        "logs": expand_runs(path.study_run.log, wildcards.study, wildcards.model, runs),
        "geometry": expand_runs(path.checkpoint_geometry, wildcards.study, wildcards.model, runs),
    }
