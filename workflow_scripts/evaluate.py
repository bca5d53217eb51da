"""lm-eval scores of a model before mid-training (rule evaluate_pretrained) or of one checkpoint
of a mid-training run (rule evaluate_checkpoint)."""

from condensation.stages import evaluate_checkpoint, evaluate_pretrained, logged

tasks_index = snakemake.input.get("tasks")
with logged(snakemake.log[0]):
    if snakemake.rule == "evaluate_pretrained":
        evaluate_pretrained(
            snakemake.input.handle, tasks_index, snakemake.params.tasks, snakemake.params.settings,
            snakemake.output[0], threads=snakemake.threads,
        )
    else:
        evaluate_checkpoint(
            snakemake.params.run_dir, snakemake.wildcards.checkpoint, tasks_index, snakemake.params.tasks,
            snakemake.params.settings, snakemake.output[0], snakemake.wildcards.model, snakemake.wildcards.method,
            int(snakemake.wildcards.seed), threads=snakemake.threads,
        )
