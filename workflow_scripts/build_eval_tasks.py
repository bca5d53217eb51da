"""Offline multiple-choice lm-eval tasks from held-out text (rule build_eval_tasks)."""

from condensation.stages import logged
from condensation.stages.evaluation import build_eval_tasks

with logged(snakemake.log[0]):
    build_eval_tasks(
        specs=snakemake.params.specs, texts=snakemake.params.texts, text_dirs=snakemake.params.text_dirs,
        out_dir=snakemake.output[0],
    )
