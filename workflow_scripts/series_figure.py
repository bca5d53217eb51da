"""Fig. 4: condensation over training of one model (rule series_figure)."""

from condensation.stages import logged
from condensation.stages.figures import run_series_points, series_figure

spec, model = snakemake.params.spec, snakemake.params.model
if "index" in snakemake.input.keys():  # every checkpoint of a pre-training run here
    points, geometry_paths = run_series_points(snakemake.input.index, snakemake.input.run_geometry)
else:  # the listed revisions of a hub model
    points = [(point["label"], point.get("tokens")) for point in spec["checkpoints"]]
    geometry_paths = snakemake.input.geometry
with logged(snakemake.log[0]):
    series_figure(
        series=snakemake.wildcards.series, title=snakemake.params.label, dataset=spec["dataset"], points=points,
        geometry_paths=geometry_paths, trend=snakemake.params.trend, out_path=snakemake.output.figure,
        csv_path=snakemake.output.csv, markdown_path=snakemake.output.markdown,
    )
