"""The pre-training tokenizer (rule prepare_tokenizer)."""

from condensation.stages import logged
from condensation.stages.models import prepare_tokenizer

with logged(snakemake.log[0]):
    prepare_tokenizer(
        dataset=snakemake.params.dataset, spec=snakemake.params.spec, corpus_dir=snakemake.input.get("corpus"),
        handle_path=snakemake.input.get("handle"), vocab_size=snakemake.params.vocab_size, out_dir=snakemake.output[0],
    )
