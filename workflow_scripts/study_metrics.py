"""DVC metrics and plot data of one training study (rule study_metrics)."""

from condensation.stages import logged
from condensation.stages.training import study_metrics

with logged(snakemake.log[0]):
    study_metrics(
        models=snakemake.params.models, trajectory_paths=snakemake.input.trajectories,
        loss_paths=snakemake.input.losses,
        metrics_path=snakemake.output.metrics, training_plot=snakemake.output.training,
        checkpoints_plot=snakemake.output.checkpoints,
    )
