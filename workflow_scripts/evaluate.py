"""lm-eval scores of a model before mid-training (rule evaluate_pretrained) or of one checkpoint
of a mid-training run (rule evaluate_checkpoint)."""

from condensation.stages import logged
from condensation.stages.evaluation import evaluate_checkpoint, evaluate_pretrained

common = dict(
    task_dir=snakemake.input.get("tasks"), hub_tasks_path=snakemake.input.get("hub_tasks"),
    tasks=snakemake.params.tasks, settings=snakemake.params.settings,
    out_path=snakemake.output.record, threads=snakemake.threads,
)
wildcards = snakemake.wildcards
with logged(snakemake.log[0], gpus=snakemake.resources.gpu):
    if snakemake.rule == "evaluate_pretrained":
        evaluate_pretrained(handle_path=snakemake.input.handle, **common)
    else:
        evaluate_checkpoint(
            index_path=snakemake.input.index, checkpoint=wildcards.checkpoint, model=wildcards.model,
            method=wildcards.method, seed=int(wildcards.seed), **common,
        )
