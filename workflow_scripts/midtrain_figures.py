"""Fig. 6, the depth trend over training, and the loss curves of one model (rule midtrain_figures)."""

from condensation.stages import logged, midtrain_figures

with logged(snakemake.log[0]):
    midtrain_figures(
        snakemake.wildcards.model,
        snakemake.params.label,
        snakemake.input.trajectory,
        snakemake.input.losses,
        snakemake.params.methods,
        snakemake.params.grid_methods,
        snakemake.input.grid,
        snakemake.output.grid,
        snakemake.output.trajectory,
        snakemake.output.losses,
    )
