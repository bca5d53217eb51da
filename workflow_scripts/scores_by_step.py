"""Scores of every checkpoint over mid-training (rule scores_by_step)."""

from condensation.stages import logged
from condensation.stages.evaluation import scores_by_step

with logged(snakemake.log[0]):
    scores_by_step(score_paths=snakemake.input.scores, metric=snakemake.params.metric, out_path=snakemake.output[0])
