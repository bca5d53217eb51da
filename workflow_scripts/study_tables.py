"""Trajectory and loss tables of every run of one model (rule study_tables)."""

from condensation.stages import logged
from condensation.stages.training import study_tables

with logged(snakemake.log[0]):
    study_tables(
        runs=snakemake.params.runs, log_paths=snakemake.input.logs, geometry_dirs=snakemake.input.geometry,
        trajectory_path=snakemake.output.trajectory, loss_path=snakemake.output.losses,
        effects_csv=snakemake.output.effects[0], effects_markdown=snakemake.output.effects[1],
        trend=snakemake.params.trend,
    )
