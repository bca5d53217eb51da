# Embedding condensation: measure it, and train against it with a dispersion loss.
# Data flow and outputs: see docs/workflow.md. Snakemake owns the DAG; DVC (dvc.yaml) versions results.

from snakemake.utils import min_version

from condensation.runtime.memory import use_job_malloc_settings
from condensation.runtime.mkl_on_amd import use_job_mkl_settings
from condensation.runtime.slurm_fit import check_before_submitting

min_version("9.19")


# Every job's process keeps the memory it frees for its next training step or scoring batch
# instead of faulting it in afresh: less CPU time, no number changed (runtime/memory.py).
use_job_malloc_settings()
# On an AMD CPU every job's torch runs MKL's kernels for the CPU's features (AVX-512 on Zen 4 and
# 5), not its path for other vendors: products equal to rounding (runtime/mkl_on_amd.py).
use_job_mkl_settings()


# A --configfile on the command line replaces config.yaml (several are merged in the order
# given); --config key=value applies last. Merging a user's file into the default would keep the
# default's models and datasets in every run.
if not workflow.overwrite_configfiles:

    configfile: "config.yaml"


report: "report/workflow.rst"


# Under the SLURM executor: a job no node of its partition can hold is named before anything is
# submitted, not after three failed attempts (runtime/slurm_fit.py).
onstart:
    check_before_submitting(workflow)


include: "rules/common.smk"
include: "rules/targets.smk"
include: "rules/data.smk"
include: "rules/models.smk"
include: "rules/geometry.smk"
include: "rules/figures.smk"
include: "rules/training.smk"
include: "rules/evaluation.smk"


rule all:
    default_target: True
    localrule: True
    input:
        all_targets(),
