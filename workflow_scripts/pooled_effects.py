"""Mid-training effects with the base model as a replicate: a label's base models pooled (rule pooled_effects)."""

from condensation.stages import logged
from condensation.stages.training import pooled_effects

with logged(snakemake.log[0]):
    pooled_effects(
        bases=snakemake.params.bases,
        profile_paths=snakemake.input.profiles,
        csv_path=snakemake.output.csv,
        markdown_path=snakemake.output.markdown,
    )
