"""Condensation of every checkpoint of one training run (rule measure_checkpoints)."""

from condensation.stages import logged, measure_checkpoints

with logged(snakemake.log[0]):
    measure_checkpoints(
        snakemake.params.run_dir,
        snakemake.input.samples,
        snakemake.output[0],
        snakemake.params.sampling,
        snakemake.params.extraction,
        snakemake.params.trend,
        threads=snakemake.threads,
    )
