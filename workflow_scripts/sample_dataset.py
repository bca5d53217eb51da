"""Draw the seeded evaluation sequences of one dataset (rule sample_dataset)."""

from condensation.stages import logged, sample_dataset

with logged(snakemake.log[0]):
    sample_dataset(
        snakemake.wildcards.dataset,
        snakemake.params.spec,
        snakemake.params.sampling,
        snakemake.output.samples,
        snakemake.input.get("corpus"),
    )
