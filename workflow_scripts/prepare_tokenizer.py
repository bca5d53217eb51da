"""The tokenizer of the from-scratch models: copied in, or trained (rule prepare_tokenizer)."""

from condensation.stages import logged, prepare_tokenizer

with logged(snakemake.log[0]):
    prepare_tokenizer(
        snakemake.params.dataset,
        snakemake.params.spec,
        snakemake.input.get("corpus"),
        snakemake.params.existing,
        snakemake.params.vocab_size,
        snakemake.output[0],
    )
