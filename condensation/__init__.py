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
  train      the one training loop (accelerate); checkpointing: its run directory, checkpoints,
             exact resume and the checkpoint choice (no torch)
  evaluation offline lm-eval tasks from held-out text; lm-eval scoring of an in-memory model
  tables     the paper's Tables 2 and 3 from score files
  figures    the paper's figures
  stages     one function per workflow rule
  io         atomic writes and checksummed manifests shared by every stage; verify: their checker

Public names, for adding the auxiliary loss to one's own training loop (see the README):
``AuxLossConfig`` (which loss, its weight and constants) and ``auxiliary_loss(hidden_states,
config)`` (the unweighted loss of a Hugging Face ``output.hidden_states`` tuple). They load on
first use, so that ``import condensation`` and its torch-free modules (config, settings,
checkpointing), which the Snakemake planner imports, never import torch.
"""

import importlib

__version__ = "0.1.0"

# public name -> the module that defines it, imported on first access (PEP 562)
_LAZY_NAMES = {
    "AuxLossConfig": "config.training",
    "auxiliary_loss": "training.losses",
}

__all__ = ["AuxLossConfig", "auxiliary_loss"]


def __getattr__(name: str):
    if name not in _LAZY_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
