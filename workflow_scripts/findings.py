"""The findings page: the paper's claims against what this run measured (rule findings)."""

from condensation.stages import logged
from condensation.stages.figures import findings

inputs, output = snakemake.input, snakemake.output
with logged(snakemake.log[0]):
    findings(
        trend_profiles=inputs.trend_profiles, pair_profiles=inputs.pair_profiles,
        series_profiles=inputs.series_profiles, effects=inputs.effects, pooled_effects=inputs.pooled_effects,
        trajectories=inputs.trajectories, score_tables=inputs.score_tables, run_scores=inputs.run_scores,
        similarity=inputs.similarity, losses=inputs.losses,
        design=snakemake.params.design, markdown_path=output.markdown, json_path=output.json,
        summary_path=output.summary,
    )
