"""Fig. 4 over the seeds of one configuration: each checkpoint's condensation with its band (rule series_band)."""

from condensation.stages import logged
from condensation.stages.figures import series_band

with logged(snakemake.log[0]):
    series_band(
        label=snakemake.params.label,
        dataset=snakemake.params.dataset,
        series=snakemake.params.series,
        profile_paths=snakemake.input.profiles,
        out_path=snakemake.output.figure,
        csv_path=snakemake.output.csv,
    )
