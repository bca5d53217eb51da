"""Offline multiple-choice lm-eval tasks from held-out text (rule build_eval_tasks)."""

from condensation.stages import logged
from condensation.stages.evaluation import build_eval_tasks

with logged(snakemake.log[0]):
    build_eval_tasks(corpus_dirs=snakemake.input.corpora, specs=snakemake.params.specs, out_dir=snakemake.output[0])
