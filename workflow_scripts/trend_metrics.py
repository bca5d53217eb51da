"""DVC metrics and plot data from every trend table (rule trend_metrics)."""

from condensation.stages import logged
from condensation.stages.geometry import trend_metrics

with logged(snakemake.log[0]):
    trend_metrics(
        csv_paths=snakemake.input.tables, geometry_paths=snakemake.input.geometry,
        metrics_path=snakemake.output.metrics, plot_path=snakemake.output.layer_means,
    )
