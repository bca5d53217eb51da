"""Configuration, torch-free (the Snakemake planner imports it).

  validate   the schema (config.schema.yaml beside this file) and its cross-checks; every default
  specs      typed views of the sections that cross modules: sampling, extraction, trend
             conventions, one dataset or model entry
  training   every training setting with the reason for its default, the objective registry
             (losses and baselines), a run's plan
  plan       what a config implies: runs, checkpoints, scored tasks, score tables, GPUs
"""
