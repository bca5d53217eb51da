"""Resolve one configured model to a handle: download a hub model where the network is (rule
fetch_model), or make any other (rule prepare_model)."""

from condensation.stages import logged
from condensation.stages.models import prepare_model

params, inputs = snakemake.params, snakemake.input
with logged(snakemake.log[0], offline=snakemake.rule != "fetch_model"):
    prepare_model(
        name=snakemake.wildcards.model, spec=params.spec, handle_path=snakemake.output.handle,
        weights_dir=params.get("weights_dir"), pretrained_dir=inputs.get("pretrained"),
        tokenizer_dir=inputs.get("tokenizer"), base_handle_path=inputs.get("base"), arch=params.get("arch"),
        seed=params.get("seed", 0),
    )
