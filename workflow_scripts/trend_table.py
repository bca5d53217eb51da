"""Spearman rho, Kendall tau and last-n means of one family on one dataset (rule trend_table)."""

from condensation.stages import logged, trend_table

with logged(snakemake.log[0]):
    trend_table(
        snakemake.wildcards.family,
        snakemake.wildcards.dataset,
        snakemake.params.models,
        snakemake.input.geometry,
        snakemake.input.handles,
        snakemake.params.labels,
        snakemake.params.trend,
        snakemake.output.csv,
        snakemake.output.markdown,
    )
