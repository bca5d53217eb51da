"""Embedding condensation: measure it layer by layer, and train against it with a dispersion loss.

Modules, in data-flow order:
  config     typed configuration dataclasses, built from the schema-validated config
  corpus     offline public-domain text from Debian packages (Austen novels, Python docs)
  data       seeded sampling of text sequences; packed token blocks for training
  models     one place for loading: hub id, local directory, GGUF file, tiny from-config model
  geometry   per-layer cosine statistics reduced on the fly, trend statistics
  train      the one training loop (accelerate), checkpoint and exact resume
  figures    the paper's figures
  io         atomic writes and manifests shared by every stage
"""

__version__ = "0.1.0"
