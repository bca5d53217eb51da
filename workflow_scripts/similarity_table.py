"""One model-similarity comparison table (rule similarity_table)."""

from condensation.stages import logged
from condensation.stages.geometry import similarity_table

with logged(snakemake.log[0], gpus=snakemake.resources.gpu):
    similarity_table(
        name=snakemake.wildcards.comparison, dataset=snakemake.params.dataset, rows=snakemake.params.rows,
        compared=snakemake.input.compared, references=snakemake.input.references, samples_path=snakemake.input.samples,
        sampling=snakemake.params.sampling, extraction=snakemake.params.extraction, csv_path=snakemake.output[0],
        threads=snakemake.threads,
    )
