"""Per-layer cosine statistics of one model on one dataset (rule extract)."""

from condensation.stages import logged
from condensation.stages.geometry import extract

with logged(snakemake.log[0], gpus=snakemake.resources.gpu):
    extract(
        handle_path=snakemake.input.handle, samples_path=snakemake.input.samples, out_path=snakemake.output[0],
        sampling=snakemake.params.sampling, extraction=snakemake.params.extraction, threads=snakemake.threads,
    )
