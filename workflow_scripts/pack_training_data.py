"""Tokenise and pack a training dataset into blocks (rules pack_pretraining_data, pack_study_data)."""

from condensation.stages import logged
from condensation.stages.data import pack_training_data

with logged(snakemake.log[0]):
    pack_training_data(
        dataset=snakemake.params.dataset, spec=snakemake.params.spec, corpus_dir=snakemake.input.get("corpus"),
        tokenizer_source=snakemake.input.get("tokenizer") or snakemake.input.get("handle"),
        block_size=snakemake.params.block_size, validation_fraction=snakemake.params.validation_fraction,
        out_path=snakemake.output[0],
    )
