"""The paper's Table 2 with the score metrics (rule table2), Table 3 (rule table3) or Table 4 (rule table4)."""

from pathlib import Path

from condensation.stages import logged
from condensation.stages.evaluation import table2, table3, table4

params, output = snakemake.params, snakemake.output
stem = Path(output.csv).with_suffix("")  # the .csv, .md, .tex and .html share it
with logged(snakemake.log[0]):
    if snakemake.rule == "table2":
        table2(
            score_paths=snakemake.input.scores, tasks=params.tasks, methods=params.methods, reference=params.reference,
            metric=params.metric, labels={}, stem=stem, metrics_path=output.metrics, plot_path=output.plot,
            counted_tasks=params.counted_tasks, loss_paths=snakemake.input.losses,
        )
    elif snakemake.rule == "table4":
        table4(
            score_paths=snakemake.input.scores, models=params.models, trajectory_paths=snakemake.input.trajectories,
            tasks=params.tasks, methods=params.methods, metric=params.metric, labels={}, stem=stem,
            counted_tasks=params.counted_tasks, loss_paths=snakemake.input.losses,
        )
    else:
        table3(
            score_paths=snakemake.input.scores, tasks=params.tasks, metric=params.metric, grid=params.grid,
            models=params.models, stem=stem,
        )
