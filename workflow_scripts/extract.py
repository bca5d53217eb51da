"""Per-layer cosine statistics of one model on one dataset (rule extract)."""

from condensation.stages import extract, logged

with logged(snakemake.log[0]):
    extract(
        snakemake.input.handle,
        snakemake.input.samples,
        snakemake.output[0],
        snakemake.params.sampling,
        snakemake.params.extraction,
        threads=snakemake.threads,
    )
