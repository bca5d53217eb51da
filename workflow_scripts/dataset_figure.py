"""One family's condensation trend on several datasets (rule dataset_figure)."""

from condensation.stages import logged
from condensation.stages.figures import dataset_figure

with logged(snakemake.log[0]):
    dataset_figure(
        family=snakemake.wildcards.family,
        model_names=snakemake.params.models,
        datasets=snakemake.params.datasets,
        geometry_paths=snakemake.input.geometry,
        labels=snakemake.params.labels,
        trend=snakemake.params.trend,
        out_path=snakemake.output[0],
    )
