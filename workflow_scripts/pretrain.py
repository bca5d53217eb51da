"""Pre-train one GPT2-shaped model from scratch; resumes after a kill (rule pretrain)."""

from condensation.stages import logged, pretrain_model

with logged(snakemake.log[0]):
    pretrain_model(
        snakemake.params.arch,
        snakemake.params.settings,
        snakemake.input.tokenizer,
        snakemake.input.blocks,
        snakemake.params.run_dir,
        threads=snakemake.threads,
    )
