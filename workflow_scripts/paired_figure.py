"""Paired comparison, e.g. scratch vs distilled models, with a reference row such as the teacher
(rule paired_figure)."""

from condensation.stages import logged
from condensation.stages.figures import paired_figure

spec = snakemake.params.spec
with logged(snakemake.log[0]):
    paired_figure(
        pair=snakemake.wildcards.pair,
        dataset=spec["dataset"],
        first=spec["first"],
        second=spec["second"],
        reference=spec.get("reference", []),
        geometry_paths=snakemake.input.geometry,
        handle_paths=snakemake.input.handles,
        labels=snakemake.params.labels,
        row_labels=spec["labels"],
        trend=snakemake.params.trend,
        out_path=snakemake.output.figure,
        csv_path=snakemake.output.csv,
        markdown_path=snakemake.output.markdown,
    )
