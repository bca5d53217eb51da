"""DVC metrics of every mid-training run: final validation loss and depth trend (rule midtrain_metrics)."""

from condensation.stages import logged, midtrain_metrics

with logged(snakemake.log[0]):
    midtrain_metrics(snakemake.input, snakemake.params.models, snakemake.output[0])
