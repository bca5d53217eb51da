"""Tokenise and pack the pre-training corpus into blocks (rule pack_pretraining_data)."""

from condensation.stages import logged, pack_pretraining_data

with logged(snakemake.log[0]):
    pack_pretraining_data(
        snakemake.params.dataset,
        snakemake.params.spec,
        snakemake.input.get("corpus"),
        snakemake.input.tokenizer,
        snakemake.params.block_size,
        snakemake.params.validation_fraction,
        snakemake.output[0],
    )
