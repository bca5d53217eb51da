"""Download the data of the lm-eval tasks into the cache, where the network is (rule fetch_eval_tasks)."""

from condensation.stages import logged
from condensation.stages.evaluation import fetch_eval_tasks

with logged(snakemake.log[0], offline=False):
    fetch_eval_tasks(tasks=snakemake.params.tasks, out_path=snakemake.output[0])
