"""Trend of rho/tau across a family beside per-model heatmaps (rule family_figure)."""

from condensation.stages import logged
from condensation.stages.figures import family_figure

with logged(snakemake.log[0]):
    family_figure(
        family=snakemake.wildcards.family,
        dataset=snakemake.wildcards.dataset,
        model_names=snakemake.params.models,
        geometry_paths=snakemake.input.geometry,
        handle_paths=snakemake.input.handles,
        labels=snakemake.params.labels,
        trend=snakemake.params.trend,
        out_path=snakemake.output[0],
        compares_size=snakemake.params.compares_size,
    )
