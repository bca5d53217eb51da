"""Spearman rho, Kendall tau and last-n means of one family on one dataset (rule trend_table)."""

from condensation.stages import logged
from condensation.stages.geometry import trend_table

with logged(snakemake.log[0]):
    trend_table(
        family=snakemake.wildcards.family, dataset=snakemake.wildcards.dataset, model_names=snakemake.params.models,
        geometry_paths=snakemake.input.geometry, handle_paths=snakemake.input.handles, labels=snakemake.params.labels,
        trend=snakemake.params.trend, csv_path=snakemake.output.csv, markdown_path=snakemake.output.markdown,
        compares_size=snakemake.params.compares_size,
    )
