"""DVC metrics and plot data from every trend table (rule trend_metrics)."""

from condensation.stages import logged, trend_metrics

with logged(snakemake.log[0]):
    trend_metrics(snakemake.input.tables, snakemake.output.metrics, snakemake.output.layer_means, snakemake.input.geometry)
