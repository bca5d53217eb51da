"""Resolve one model (hub, local, GGUF, pre-trained or init) to a handle (rule prepare_model)."""

from condensation.stages import logged, prepare_model

with logged(snakemake.log[0]):
    prepare_model(
        snakemake.wildcards.model,
        snakemake.params.spec,
        snakemake.output.handle,
        snakemake.params.weights_dir,
        pretrained_dir=snakemake.input.get("pretrained"),
        tokenizer_dir=snakemake.input.get("tokenizer"),
        arch=snakemake.params.arch,
        seed=snakemake.params.seed,
    )
