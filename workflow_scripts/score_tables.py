"""The paper's Table 2 with the score metrics (rule table2), or Table 3 (rule table3)."""

from pathlib import Path

from condensation.stages import logged, table2, table3

params = snakemake.params
stem = Path(snakemake.output[0]).with_suffix("")  # the .csv, .md, .tex and .html share it
with logged(snakemake.log[0]):
    if snakemake.rule == "table2":
        table2(snakemake.input.scores, params.tasks, params.methods, params.reference, params.metric,
               params.labels, stem, snakemake.output.metrics, snakemake.output.plot)
    else:
        table3(snakemake.input.scores, params.tasks, params.metric, params.grid, params.models, stem)
