"""Scores of every checkpoint over mid-training (rule scores_by_step)."""

from condensation.stages import logged, scores_by_step

with logged(snakemake.log[0]):
    scores_by_step(snakemake.input.scores, snakemake.params.metric, snakemake.output[0])
