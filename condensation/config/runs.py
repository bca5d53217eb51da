"""A training run's settings, in one torch-free place: the training loop's ``TrainConfig`` with the
reason for every default, the step arithmetic (steps, LR schedule, checkpoint steps), and the
resolved plan of one run (``run.json``). The objectives a run trains with: ``config.objectives``.

Kept free of torch so that the workflow can plan with it (how many steps a run takes, which
checkpoints it writes, which options a method takes) without a torch import on every Snakemake
invocation. The defaults written here are the only ones: the config schema takes its ``train``
defaults from this module.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from condensation.config.objectives import TrainingMethod, resolve_method
from condensation.runtime.io import read_json, write_json
from condensation.runtime.provenance import code_version

SHARDINGS = ("ddp", "fsdp")
"""The values of ``TrainConfig.sharding``."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides the trajectory of a run. Resuming requires the same config
    (``compile`` aside, which changes how a step runs, not what it computes)."""

    train_tokens: int = 200_000_000
    """Token budget (the paper mid-trains on 200M tokens). Steps = ceil(train_tokens / tokens per
    step), tokens per step = micro_batch_size * block_size * grad_accum_steps * world_size; the
    last step may overshoot."""

    block_size: int = 1024
    """Tokens per training block (GPT2's context); must equal the width of the block arrays passed to ``train``."""

    micro_batch_size: int = 16
    """Blocks per forward pass per process: as large as fits in memory."""

    grad_accum_steps: int = 1
    """Micro-batches summed into one optimizer step: raises the effective batch without memory."""

    lr: float = 5e-5
    """Peak learning rate. Small by default because mid-training a pretrained model at a large LR
    destroys what it knows; pass ~1e-3 when pre-training a tiny model from scratch."""

    min_lr_ratio: float = 0.0
    """The cosine decays to ``lr * min_lr_ratio``; 0 anneals fully, as the reference does."""

    warmup_ratio: float = 0.2
    """Fraction of the steps spent in linear warmup (20 %, the paper/reference setting): Adam's
    second-moment estimates are poor at first, and a pretrained model's loss spikes without it."""

    weight_decay: float = 0.1
    """AdamW decoupled weight decay (GPT-2/3, nanoGPT). Applied to every tensor of 2 or more
    dimensions (matmul weights and embeddings, as in nanoGPT); never to 1-D tensors (biases, norm
    gains), whose decay only fights the normalisation and buys no regularisation."""

    betas: tuple[float, float] = (0.9, 0.95)
    """AdamW betas. beta2 = 0.95 (GPT-3, nanoGPT) forgets rare huge gradients faster than 0.999
    and so keeps LM training stable."""

    grad_clip: float = 1.0
    """Clip the global gradient norm to this (GPT-3 standard); <= 0 disables clipping (the norm is
    still measured and logged)."""

    num_checkpoints: int = 5
    """Evaluation checkpoints spread evenly over training, in addition to step 0 and the final step:
    enough points to see a trend in the geometry without filling the disk."""

    checkpoint_every: int = 50
    """Steps between resumable ``state/`` saves (also saved at the end): bounds the work a kill
    loses while keeping state writes (weights + two Adam moments) a small share of the time."""

    val_batches: int = 8
    """Validation loss = mean CE over the first ``val_batches * micro_batch_size`` validation blocks,
    always the same blocks, so values are comparable across checkpoints."""

    seed: int = 0
    """Seeds torch, numpy and random (dropout) and, with the epoch number, the data order."""

    mixed_precision: str = "auto"
    """``"bf16"`` or ``"no"`` is used as given. ``"auto"`` follows, in this order: what
    ``accelerate config`` chose (the ``ACCELERATE_MIXED_PRECISION`` variable that ``accelerate
    launch`` exports, else the default config file that ``accelerate config`` writes, read when
    the job runs as a plain process); then bf16 autocast on a CUDA device that supports it; then
    ``"no"``. ``accelerate launch`` exports ``no`` by itself when no config file exists, which
    is not a choice and is passed over. fp16 (from anywhere) is refused: its loss scaler skips
    overflowing steps, which the NaN guard would turn into errors, and bf16 needs no scaler."""

    compile: bool = False
    """``torch.compile`` the training forward together with its next-token CE (the loss is fused
    into the model's graph instead of running eagerly over a float32 copy of the logits; the
    auxiliary loss and a teacher's term stay eager). Meant for long GPU runs, where fused
    elementwise kernels shorten a bf16 step (see benchmarks/README.md). Off by default: on CPU the
    compiled loop ran at 0.92x the eager one, and the compile (about 40 s) outweighs any gain in
    the default pipeline's short runs. Validation and checkpoints use the uncompiled model (same
    weights)."""

    pad_vocab_to_multiple_of: int = 64
    """Train with the token embedding and the LM head padded with zero rows to a multiple of this
    many (1 = never): GPT-2's 50,257 rows become 50,304, whose aligned GEMMs nanoGPT's author
    measured at about 25 % faster on a GPU. On by default because it changes no output: the padded
    rows are zeros (drawn from no RNG, so the true rows' init and every later draw are unchanged),
    the logits are cut back to the true vocabulary (a view) before any loss, so the padded rows get
    no gradient, stay zero under AdamW and are never sampled, and every checkpoint and ``final/``
    is saved at the true vocabulary (the resumable state keeps the padded shapes). Checked: a CPU
    float32 run's log is bit-identical with and without (tests/unit/test_train_forward.py). A
    vocabulary that is already a multiple (the toys' 4,096, SmolLM2's 49,152) is left as it is, and
    so is a run with ``sharding: fsdp``, whose sharded weights the cut does not reach."""

    log_every_steps: int = 100
    """A progress line (step/total, tokens/s, ETA, losses) every this many steps, or after
    ``log_every_seconds``, whichever comes first; 0 = by time only. 100 steps is under a minute
    on the default runs, so the time limit rarely has to step in; a line per step would bury
    the log."""

    log_every_seconds: float = 60.0
    """The time limit of the progress lines: a slow run (a large model, a CPU) still says how it
    goes at least once a minute; 0 = by step count only."""

    tracker: str = "dvclive"
    """Where the per-step metrics go besides ``log.csv``: ``"dvclive"`` writes DVCLive series
    into ``<run>/dvclive/`` as the run trains (``dvc plots show`` reads them live, and ``dvc
    exp show`` compares runs); ``"none"`` writes none (and needs no dvclive package)."""

    probe_every: int = 10
    """Measure condensation (rho, tau, the deeper layers' mean cosine) every this many steps, and
    at step 0 and the last step, on a fixed probe batch, for the tracker and the progress lines;
    0 = off. Cost, measured on the default toy (8 layers, width 128, block 128, micro-batch 16;
    CPU, one thread, on a busy 2-core machine): a probe of 16 sequences took 0.40-0.47 s against
    1.5-1.7 s for a training step, about 0.27 of a step (one forward without backward, plus the
    cosines). Every 10 steps thus adds about 3 % to a run, and the condensation trajectory is seen
    every 10 steps instead of at the 5 evaluation checkpoints only."""

    probe_sequences: int = 16
    """Sequences of the probe batch: the first validation blocks (all of them when there are
    fewer), the same at every probe so that the values form one series. 16 gives each layer's
    mean cosine over 16 x T^2 pairs, stable to about 0.01, at the cost of one forward pass."""

    sharding: str = "ddp"
    """How the processes of a run hold the model. ``"ddp"``: each holds all of it, weights,
    gradients and AdamW moments (DDP when there are several; a single process runs it plain):
    the simplest and fastest while it fits. ``"fsdp"``: FSDP2 shards weights, gradients and
    optimizer state over all processes (each transformer block its own unit), gathering a
    block's weights only while it computes: for a model whose training state exceeds one GPU
    (Qwen3-8B: about 128 GB in float32 with AdamW) and for runs over many nodes. Needs two
    processes at least, and no baseline that edits the embeddings (noisy_embedding,
    active_forgetting). Checkpoints and ``final/`` are the same plain Hugging Face directories
    either way; the resumable state of an fsdp run is sharded (``training.checkpointing``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", tuple(self.betas))  # a config gives a list
        positive = ("train_tokens", "block_size", "micro_batch_size", "grad_accum_steps", "checkpoint_every")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.num_checkpoints < 0 or self.val_batches < 1:
            raise ValueError("TrainConfig: num_checkpoints must be >= 0 and val_batches >= 1")
        if not 0.0 <= self.warmup_ratio <= 1.0 or not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError("TrainConfig: warmup_ratio and min_lr_ratio must lie in [0, 1]")
        if self.mixed_precision not in ("auto", "bf16", "no"):
            raise ValueError(f"TrainConfig.mixed_precision must be 'auto', 'bf16' or 'no', "
                             f"got {self.mixed_precision!r}")
        if self.sharding not in SHARDINGS:
            raise ValueError(f"TrainConfig.sharding must be one of {SHARDINGS}, got {self.sharding!r}")
        if self.tracker not in ("dvclive", "none"):
            raise ValueError(f"TrainConfig.tracker must be 'dvclive' or 'none', got {self.tracker!r}")
        if self.pad_vocab_to_multiple_of < 1:
            raise ValueError(f"TrainConfig.pad_vocab_to_multiple_of must be >= 1 (1 = no padding), "
                             f"got {self.pad_vocab_to_multiple_of}")
        if min(self.log_every_steps, self.log_every_seconds, self.probe_every) < 0 or self.probe_sequences < 1:
            raise ValueError(
                "TrainConfig: log_every_steps, log_every_seconds and probe_every must be >= 0 and probe_sequences >= 1"
            )


def tokens_per_step(config: TrainConfig, world_size: int = 1) -> int:
    return config.micro_batch_size * config.block_size * config.grad_accum_steps * world_size


def total_steps(config: TrainConfig, world_size: int = 1) -> int:
    """Optimizer steps needed to consume the token budget (rounded up: the budget is a minimum)."""
    return math.ceil(config.train_tokens / tokens_per_step(config, world_size))


def warmup_steps(total: int, config: TrainConfig) -> int:
    return math.ceil(config.warmup_ratio * total)


def lr_at(step: int, total_steps: int, config: TrainConfig) -> float:
    """Learning rate of the update that takes the weights from ``step`` to ``step + 1``.

    Linear warmup over the first ``W = ceil(warmup_ratio * total_steps)`` updates,
    ``lr * (step + 1) / (W + 1)`` (never 0, so no update is wasted), reaching the peak at step W;
    then a cosine from ``lr`` at step W to ``lr * min_lr_ratio`` at step ``total_steps``.
    """
    warmup = warmup_steps(total_steps, config)
    if step < warmup:
        return config.lr * (step + 1) / (warmup + 1)
    min_lr = config.lr * config.min_lr_ratio
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    return min_lr + 0.5 * (config.lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def checkpoint_steps(total_steps: int, num_checkpoints: int) -> list[int]:
    """Step 0, ``num_checkpoints`` evenly spaced steps strictly inside the run, and the final step
    (fewer when the run is too short for them all to be distinct)."""
    inner = {i * total_steps // (num_checkpoints + 1) for i in range(1, num_checkpoints + 1)}
    return sorted(inner | {0, total_steps})


# ---------------------------------------------------------------------------------------------
# Settings dataclasses' defaults
# ---------------------------------------------------------------------------------------------


def dataclass_defaults(cls: type) -> dict[str, Any]:
    """Field name -> default of a settings dataclass (fields without one are left out)."""
    return {
        field.name: field.default for field in dataclasses.fields(cls) if field.default is not dataclasses.MISSING
    }


# ---------------------------------------------------------------------------------------------
# The plan of one training run (run.json)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunPlan:
    """Everything one training run needs to know, resolved: the workflow writes it to
    ``run.json`` in the run directory and the training job reads it (nothing on its command line)."""

    kind: str
    """``pretrain`` (a model of the from-scratch family, CE only) or the study it belongs to
    (``midtrain``, ``scratch``)."""
    model: str
    train: TrainConfig
    method: TrainingMethod = TrainingMethod("ce")
    arch: Mapping[str, int] | None = None
    """The GPT2 shape of a model pre-trained from scratch."""
    reinitialise: bool = False
    """Start from new random weights in the model's architecture, drawn with the run's seed (a
    study run from an ``init`` model), so that a seed varies the initialisation as well as the
    data order."""
    provenance: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Package versions and the code (version, git commit, source hash) the plan was made with."""

    def save(self, path: str | os.PathLike) -> None:
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> RunPlan:
        return cls.from_json(read_json(path))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "model": self.model, "train": dataclasses.asdict(self.train),
            "method": self.method.as_dict(), "arch": dict(self.arch) if self.arch else None,
            "reinitialise": self.reinitialise, "provenance": dict(self.provenance),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunPlan:
        train = dict(data["train"], betas=tuple(data["train"]["betas"]))
        return cls(
            kind=data["kind"], model=data["model"], train=TrainConfig(**train),
            method=resolve_method(data["method"]), arch=data.get("arch"), reinitialise=data.get("reinitialise", False),
            provenance=data.get("provenance", {}),
        )


def plan_run(kind: str, model: str, train: Mapping[str, Any], seed: int, method: Mapping[str, Any] | None = None,
             arch: Mapping[str, int] | None = None, reinitialise: bool = False) -> RunPlan:
    """A run's plan from the config's ``train`` section, its seed and its method spec."""
    settings = resolve_method(method or {"objective": "ce"})
    return RunPlan(kind=kind, model=model, train=TrainConfig(**train, seed=seed), method=settings, arch=arch,
                   reinitialise=reinitialise, provenance=provenance())


def provenance() -> dict[str, Any]:
    """Versions of the packages that decide a run's numbers, and the code that planned it."""
    versions = {}
    for package in ("condensation", "torch", "transformers", "accelerate"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {"versions": versions, "code": code_version()}
