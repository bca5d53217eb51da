"""Condensation per checkpoint and loss logs of every run of one model (rule midtrain_tables)."""

from condensation.stages import logged, midtrain_tables

with logged(snakemake.log[0]):
    midtrain_tables(
        snakemake.params.methods,
        snakemake.params.seeds,
        snakemake.input.runs,
        snakemake.input.geometry,
        snakemake.output.trajectory,
        snakemake.output.losses,
    )
