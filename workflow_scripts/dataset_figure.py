"""One family's condensation trend on several datasets (rule dataset_figure)."""

from condensation.stages import dataset_figure, logged

with logged(snakemake.log[0]):
    dataset_figure(
        snakemake.wildcards.family,
        snakemake.params.models,
        snakemake.params.datasets,
        snakemake.input.geometry,
        snakemake.params.labels,
        snakemake.output[0],
    )
