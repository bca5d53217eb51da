"""The findings page: the paper's claims against what this run measured (rule findings)."""

from condensation.stages import logged
from condensation.stages.figures import findings

inputs, params = snakemake.input, snakemake.params
with logged(snakemake.log[0]):
    findings(
        trend_profiles=inputs.trend_profiles, pair_profiles=inputs.pair_profiles, pair_labels=params.pair_labels,
        series_profiles=inputs.series_profiles, effects=inputs.effects, trajectories=inputs.trajectories,
        pooled_effects=inputs.pooled_effects, pooled=params.pooled,
        score_tables=inputs.score_tables, families=params.families, uncounted_families=params.uncounted_families,
        drawn_models=params.drawn_models, series_groups=params.series_groups, drawn_series=params.drawn_series,
        tasks=params.tasks, counted_tasks=params.counted_tasks, similarity=inputs.similarity,
        similarity_kinds=params.similarity_kinds,
        markdown_path=snakemake.output.markdown, json_path=snakemake.output.json,
        summary_path=snakemake.output.summary,
    )
