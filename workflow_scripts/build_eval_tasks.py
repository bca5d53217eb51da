"""Offline lm-eval tasks from held-out text (rule build_eval_tasks)."""

from pathlib import Path

from condensation.stages import build_eval_tasks, logged

with logged(snakemake.log[0]):
    # the output is the index inside the task directory, which is rebuilt as a whole
    build_eval_tasks(dict(snakemake.input.items()), snakemake.params.specs, Path(snakemake.output[0]).parent)
