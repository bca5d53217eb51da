"""Tokenise and pack a training dataset into blocks (rules pack_pretraining_data, pack_midtrain_data)."""

from condensation.stages import logged, pack_training_data

with logged(snakemake.log[0]):
    pack_training_data(
        snakemake.params.dataset,
        snakemake.params.spec,
        snakemake.input.get("corpus"),
        snakemake.input.get("tokenizer") or snakemake.input.get("handle"),
        snakemake.params.block_size,
        snakemake.params.validation_fraction,
        snakemake.output[0],
    )
