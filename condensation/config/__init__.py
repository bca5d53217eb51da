"""Configuration, torch-free (the Snakemake planner imports it).

  validate   the schema (config.schema.yaml beside this file) and its cross-checks; every default
  specs      typed views of the sections that cross modules: sampling, extraction, trend
             conventions, one dataset or model entry
  corpora    the built-in corpora (CORPORA), a registry like the objectives'
  runs       a training run's settings with the reason for every default, its step arithmetic
             and its plan (run.json)
  objectives the registry of training objectives (auxiliary losses, baselines) and their settings
  datasets   what the file system tells before a run: your files' globs and length, the text of a
             local task, and whether training reads it too (the leak check)
  plan       what a config implies: runs, checkpoints, scored tasks, score tables, GPUs
  paths      every path the workflow writes, as Snakemake path templates (``path.*``)
  launch     how a training job starts (accelerate, srun over nodes) and its scheduler resources
"""
