"""Fig. 6, the depth trend over training, and the loss curves of one model (rule study_figures)."""

from condensation.stages import logged
from condensation.stages.figures import study_figures

with logged(snakemake.log[0]):
    study_figures(
        model=snakemake.wildcards.model,
        label=snakemake.params.label,
        trajectory_path=snakemake.input.trajectory,
        loss_path=snakemake.input.losses,
        methods=snakemake.params.methods,
        grid_methods=snakemake.params.grid_methods,
        grid_dirs=snakemake.input.grid,
        trend=snakemake.params.trend,
        grid_figure=snakemake.output.grid,
        trajectory_figure=snakemake.output.trajectory,
        loss_figure=snakemake.output.losses,
    )
