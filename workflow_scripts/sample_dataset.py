"""Seeded text sequences of one dataset (rule sample_dataset)."""

from condensation.stages import logged
from condensation.stages.data import sample_dataset

with logged(snakemake.log[0]):
    sample_dataset(
        name=snakemake.wildcards.dataset, spec=snakemake.params.spec, sampling=snakemake.params.sampling,
        corpus_dir=snakemake.input.get("corpus"), out_path=snakemake.output.samples,
    )
