"""Embedding condensation: measure it layer by layer, and train against it with a dispersion loss.

Folders by stage of the pipeline, in the order the data flows (each folder's docstring maps it):
  config/     the validated config, typed specs, training settings and the objective registry,
              what a config implies (torch-free: the Snakemake planner imports it)
  data/       offline corpora, a dataset's rows and sampled sequences, packed training blocks
  models      one place for loading: hub id, local directory, pkg:// path, GGUF, init, GPT2 shape
  geometry    the stored per-layer cosine statistics and their trend statistics (no torch);
              cosine_extraction reduces them on the fly from hidden states (and the
              condensation probe); lenses: anisotropy, IsoScore*, effective rank, PC1 share
              (no torch), lens_extraction measures them in the same pass; cosine: the one
              cosine helper (unit rows), which both extractions and the losses normalise through
  hidden_states where a measurement's hidden states come from: Hugging Face, TransformerLens,
              nnsight, or any callable
  measurement ``measure``: one model measured in one call (API and command; the extract rule's
              stage calls it)
  similarity  one model's condensation against another's: layer profiles over relative depth and
              linear CKA on the same tokens, with intervals
  training/   the one training loop (accelerate), its checkpoints, the losses and their tiled
              kernel, the baselines
  evaluation/ offline lm-eval tasks from held-out text, lm-eval scoring, score files and records
  reporting/  Tables 2-4, condensation effects, trend tables, statistics, findings, figures/
  runtime/    atomic writes and manifests (and their checker), run directories, progress, GPUs
  stages/     one function per workflow rule, grouped like rules/*.smk: what the rules call

Imports point down the pipeline and never back (stages -> reporting, evaluation, training ->
geometry, models, data -> config -> runtime; cosine_extraction -> lens_extraction, geometry ->
lenses; both extractions -> cosine), at the top of each module, with no circle; one deferred
exception: ``measurement`` draws its figures with reporting/figures/ (which reads geometry and
lenses alone) when asked to draw. A function imports only a deliberately deferred heavy or
optional library (torch, in a stage module whose other jobs never need it), under a
``# deferred:`` comment (ruff's PLC0415, pyproject.toml); tests/unit/test_code_layout.py checks
the direction, and that the reporting jobs' modules import no torch.
``python -m condensation verify`` checks every artifact.

Public names (docs/measuring.md, docs/loss.md): ``measure(model, texts)`` (a model's condensation layer by
layer, through several lenses), and, for adding the auxiliary loss to one's own training loop,
``AuxLossConfig`` (which loss, its weight and constants) and ``auxiliary_loss(hidden_states,
config)`` (the unweighted loss of a Hugging Face ``output.hidden_states`` tuple). They load on
first use, so that ``import condensation`` and its torch-free parts (config/, runtime/), which
the Snakemake planner imports, never import torch.
"""

import importlib

__version__ = "0.1.0"

# public name -> the module that defines it, imported on first access (PEP 562)
_LAZY_NAMES = {
    "AuxLossConfig": "config.objectives",
    "auxiliary_loss": "training.losses",
    "measure": "measurement",
}

__all__ = ["AuxLossConfig", "auxiliary_loss", "measure"]


def __getattr__(name: str):
    if name not in _LAZY_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
