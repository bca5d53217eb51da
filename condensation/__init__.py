"""Embedding condensation: measure it layer by layer, and train against it with a dispersion loss.

Modules, in data-flow order:
  config     typed configuration dataclasses, built from the schema-validated config
  corpus     offline public-domain text from Debian packages (Austen novels, Python docs)
  data       seeded sampling of text sequences; packed token blocks for training
  models     one place for loading: hub id, local directory, GGUF file, tiny from-config model
  geometry   per-layer cosine statistics reduced on the fly, trend statistics
  settings   typed settings of the training loop and the losses, step arithmetic (no torch)
  losses     the dispersion loss and its three alternatives; kernels: its tiled autograd form
  baselines  noisy embedding and active forgetting, hooked into the loop
  train      the one training loop (accelerate), checkpoint and exact resume
  evaluation offline lm-eval tasks from held-out text; lm-eval scoring of an in-memory model
  tables     the paper's Tables 2 and 3 from score files
  figures    the paper's figures
  stages     one function per workflow rule
  io         atomic writes and checksummed manifests shared by every stage; verify: their checker
"""

__version__ = "0.1.0"
