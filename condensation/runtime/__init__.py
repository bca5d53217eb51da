"""What every stage relies on while it runs, torch-free.

  io          atomic writes and checksummed manifests; verify: their checker (python -m condensation verify)
  provenance  which code made an output (version, commit, source hash), recorded in every manifest
  run_dir     a training run's directory layout and checkpoint names
  progress    progress lines in job logs and the metric tracker
  gpus        which of a machine's GPUs a job uses
  memory      the malloc settings every job's process starts with
"""
