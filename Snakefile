# Embedding condensation: measure it, and train against it with a dispersion loss.
# Data flow and outputs: see README.md. Snakemake owns the DAG; DVC (dvc.yaml) versions results.

from snakemake.utils import min_version

min_version("9.19")


configfile: "config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/models.smk"
include: "rules/geometry.smk"
include: "rules/figures.smk"
include: "rules/midtrain.smk"
include: "rules/evaluation.smk"


# Quick jobs that only read results: on a cluster they run on the submitting node.
localrules:
    all,
    trend_table,
    trend_metrics,
    family_figure,
    paired_figure,
    dataset_figure,
    midtrain_tables,
    midtrain_figures,
    midtrain_metrics,
    table2,
    table3,
    scores_by_step,


rule all:
    default_target: True
    input:
        all_targets(),
