"""Pre-train one GPT2-shaped model from scratch (rule pretrain)."""

from condensation.stages import logged
from condensation.stages.models import pretrain_model

with logged(snakemake.log[0], gpus=snakemake.resources.gpu):
    pretrain_model(
        plan_path=snakemake.input.plan, tokenizer_dir=snakemake.input.tokenizer, blocks_path=snakemake.input.blocks,
        threads=snakemake.threads,
    )
