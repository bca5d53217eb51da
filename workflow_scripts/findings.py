"""The findings page: the paper's claims against what this run measured (rule findings)."""

from pathlib import Path

from condensation.stages import logged
from condensation.stages.figures import findings

inputs, params = snakemake.input, snakemake.params
effects = {study: [path for path in inputs.effects if Path(path).parts[1] == study] for study in params.studies}
with logged(snakemake.log[0]):
    findings(
        trend_tables=inputs.trend_tables, pair_tables=inputs.pair_tables, pair_labels=params.pair_labels,
        series_tables=inputs.series_tables, effects=effects, score_tables=inputs.score_tables,
        scores_metrics=inputs.get("scores_metrics"), markdown_path=snakemake.output.markdown, json_path=snakemake.output.json,
        uncounted_trend_tables=params.uncounted_trend_tables, drawn_models=params.drawn_models,
        series_labels=params.series_labels, drawn_series=params.drawn_series,
    )
