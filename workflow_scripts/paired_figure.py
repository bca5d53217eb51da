"""Paired comparison, e.g. scratch vs distilled models (rule paired_figure)."""

from condensation.stages import logged, paired_figure

spec = snakemake.params.spec
with logged(snakemake.log[0]):
    paired_figure(
        snakemake.wildcards.pair,
        spec["first"],
        spec["second"],
        snakemake.input.geometry,
        snakemake.input.handles,
        snakemake.params.labels,
        spec["labels"],
        snakemake.output[0],
    )
