"""Condensation on every evaluation checkpoint of one training run (rules measure_checkpoints,
measure_pretraining)."""

from condensation.stages import logged
from condensation.stages.training import measure_checkpoints

with logged(snakemake.log[0], gpus=snakemake.resources.gpu):
    measure_checkpoints(
        index_path=snakemake.input.index, samples_path=snakemake.input.samples, out_dir=snakemake.output[0],
        sampling=snakemake.params.sampling, extraction=snakemake.params.extraction, trend=snakemake.params.trend,
        threads=snakemake.threads,
    )
