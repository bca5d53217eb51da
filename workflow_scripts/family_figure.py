"""Trend of rho/tau across a family beside per-model heatmaps (rule family_figure)."""

from condensation.stages import family_figure, logged

with logged(snakemake.log[0]):
    family_figure(
        snakemake.wildcards.family,
        snakemake.wildcards.dataset,
        snakemake.params.models,
        snakemake.input.geometry,
        snakemake.input.handles,
        snakemake.params.labels,
        snakemake.output[0],
    )
