"""Every setting of training, in one torch-free place: the training loop's ``TrainConfig``, the
auxiliary losses' ``AuxLossConfig``, the baselines' settings, the registry of mid-training
objectives, the step arithmetic, and the resolved plan of one run (``run.json``).

Kept free of torch so that the workflow can plan with it (how many steps a run takes, which
checkpoints it writes, which options a method takes) without a torch import on every Snakemake
invocation. The defaults written here are the only ones: the config schema takes its ``train``
defaults, its objective names and its per-method options from this module.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from condensation.runtime.io import read_json, write_json

PLACEMENTS = ("all", "last", "early_half", "late_half")
TIED_HEAD_OPTIONS = ("untie", "reset")
KERNELS = ("auto", "eager", "compiled")


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides the trajectory of a run. Resuming requires the same config
    (``compile`` aside, which changes how a step runs, not what it computes)."""

    train_tokens: int = 200_000_000
    """Token budget (the paper mid-trains on 200M tokens). Steps = ceil(train_tokens / tokens per step), tokens per step =
    micro_batch_size * block_size * grad_accum_steps * world_size; the last step may overshoot."""

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
    """``torch.compile`` the model for the training forward (the auxiliary loss stays eager).
    Meant for long GPU runs, where fused elementwise kernels can shorten a bf16 step (not yet
    measured: see benchmarks/README.md). Off by default: on CPU the compiled loop ran at 0.92x the
    eager one, and the compile (about 40 s) outweighs any gain in the default pipeline's short
    runs. Validation and checkpoints use the uncompiled model (same weights)."""

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

    aux_weight: float = 0.0
    """Weight of the auxiliary loss: total = ce + aux_weight * aux. 0 trains on CE alone (the
    auxiliary callable is then not even called, and hidden states are not requested)."""

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
            raise ValueError(f"TrainConfig.mixed_precision must be 'auto', 'bf16' or 'no', got {self.mixed_precision!r}")
        if self.tracker not in ("dvclive", "none"):
            raise ValueError(f"TrainConfig.tracker must be 'dvclive' or 'none', got {self.tracker!r}")
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


@dataclass(frozen=True)
class AuxLossConfig:
    """Which auxiliary loss, where, and with which constants. Validated on construction."""

    name: str
    """One of ``loss_names()``; no default, the choice of loss is the experiment."""

    weight: float = 0.1
    """lambda in ``L_LM + lambda * L_aux``; 0.1 is the paper's default. Not applied by
    ``auxiliary_loss``: the caller multiplies, so the loss can be logged unweighted."""

    tau: float = 1.0
    """Temperature of the log-mean-exp (dispersion, l2_repel); 1.0 is the paper's default.
    Smaller tau concentrates the gradient on the closest pairs."""

    placement: str = "all"
    """Which hidden states get the loss (see ``select_layers``): every block output by default,
    since condensation grows with depth and no single layer is where it happens."""

    max_tokens: int | None = None
    """If set and ``T > max_tokens``, use a random subset of ``max_tokens`` positions (the same
    for the whole batch) to bound the ``B * T^2`` cost. None: all pairs, exact, as in the paper."""

    clamp: float = 1e-3
    """Cosines are clamped to ``[-1 + clamp, 1 - clamp]`` before arccos, with a straight-through
    gradient. 1e-3 bounds the arccos slope at 1 / sqrt(clamp * (2 - clamp)) ~ 22 (7.1 after
    dividing by pi) and sits well above the rounding noise of a float32 cosine (~1e-6 even for
    F ~ 10^4) and near that of TF32 matmuls, so the slope is never taken at a noisy value; only
    pairs closer than ~2.6 degrees see a flat forward value (their gradient still flows)."""

    norm_weight: float = 0.1
    """l2_repel only: weight of ``mean(z^2)``, without which the repulsion is won by inflating
    norms; 0.1, the value this project specifies, as for the loss weight. Note that it is in
    the units of mean(z^2), so it is relatively stronger on large-norm hidden states."""

    margin: float = 0.5
    """orthogonalization only: pairs closer than this angular distance are penalised; 1/2 is
    90 degrees, i.e. the loss asks for orthogonal tokens and ignores already-spread pairs."""

    kernel: str = "auto"
    """dispersion only: how its tile body runs (``kernels.tile_step``). ``eager``: plain PyTorch,
    the reference, ~34 small ops per tile (each a kernel launch on a GPU); ``compiled``: the same
    body through ``torch.compile``, its elementwise work fused (C++ on CPU, Triton on CUDA; graphs
    compiled on first use, ~20 s); ``auto``: the one measured fastest on the device at hand:
    eager on CPU, where the compiled body ran at x0.95-1.04 of it (the matmuls dominate), and
    compiled on CUDA, where the launches it saves should count (not measured yet). Both give the
    same value and gradient up to float rounding; see benchmarks/README.md."""

    def __post_init__(self) -> None:
        if self.name not in loss_names():
            raise ValueError(f"unknown auxiliary loss name {self.name!r}; allowed: {', '.join(loss_names())}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {self.placement!r}; allowed: {', '.join(PLACEMENTS)}")
        if self.kernel not in KERNELS:
            raise ValueError(f"unknown kernel {self.kernel!r}; allowed: {', '.join(KERNELS)}")
        _check_number("weight", self.weight, low=0.0, low_open=False)
        _check_number("tau", self.tau, low=0.0, low_open=True)
        _check_number("clamp", self.clamp, low=0.0, low_open=True, high=1.0)
        _check_number("norm_weight", self.norm_weight, low=0.0, low_open=False)
        _check_number("margin", self.margin, low=0.0, low_open=True, high=1.0, high_open=False)
        if self.max_tokens is not None:
            # bool is an int subclass; True as a token count is a bug, not 1.
            if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 2:
                raise ValueError(f"max_tokens must be None or an int >= 2 (pairs need two tokens), got {self.max_tokens!r}")


def _check_number(field: str, value: float, low: float, low_open: bool,
                  high: float | None = None, high_open: bool = True) -> None:
    """ValueError naming ``field`` and ``value`` unless value is a finite number in the range."""
    interval = ("(" if low_open else "[") + f"{low}, " + ("inf)" if high is None else f"{high}" + (")" if high_open else "]"))
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low) if low_open else (value >= low)
        if ok and high is not None:
            ok = (value < high) if high_open else (value <= high)
    if not ok:
        raise ValueError(f"{field} must be a finite number in {interval}, got {value!r}")


@dataclass(frozen=True)
class NoisyEmbeddingConfig:
    alpha: float = 1.0
    """Noise scale: each embedding element gets Uniform(-m, m) noise, m = alpha / sqrt(T * H) for
    T tokens of width H. 1.0 is the paper/reference value for GPT2; it uses 5.0 for Qwen3."""

    def __post_init__(self) -> None:
        if not 0 <= self.alpha < math.inf:  # also refuses NaN
            raise ValueError(f"NoisyEmbeddingConfig.alpha must be a finite number >= 0, got {self.alpha}")


@dataclass(frozen=True)
class ActiveForgettingConfig:
    every: int = 1000
    """Reset period in optimizer steps (global, counted from the start of the run): the embeddings
    are re-initialised after steps every, 2 * every, ... Chen et al. reset every 1000 updates."""

    tied_head: str = "untie"
    """What to do when the output head shares its weight with the input embeddings (GPT2, Qwen3):
    ``"untie"`` gives the head its own copy before training, so only the input embeddings are
    forgotten (the method's intent, hence the default); ``"reset"`` keeps them tied and resets
    both, which also discards the trained output layer (what the reference code did by accident).
    Untied models behave the same under both."""

    std: float | None = None
    """Standard deviation of the re-initialisation; None uses the model config's
    ``initializer_range`` (how the embeddings were first initialised), or 0.02 without one."""

    def __post_init__(self) -> None:
        if not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"ActiveForgettingConfig.every must be an integer >= 1, got {self.every!r}")
        if self.tied_head not in TIED_HEAD_OPTIONS:
            raise ValueError(f"ActiveForgettingConfig.tied_head must be 'untie' or 'reset', got {self.tied_head!r}")
        if self.std is not None and not 0 < self.std < math.inf:
            raise ValueError(f"ActiveForgettingConfig.std must be a finite number > 0, or None, got {self.std}")


# ---------------------------------------------------------------------------------------------
# The registry of mid-training objectives
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Objective:
    """One value of a method's ``objective``: what it adds to cross-entropy and how to set it."""

    name: str
    kind: str
    """``ce`` (cross-entropy alone), ``auxiliary`` (CE + weight x a loss on the hidden states)
    or ``baseline`` (CE with a hook into the training loop)."""
    settings: type | None
    """The dataclass that holds its options (``AuxLossConfig`` for every auxiliary loss)."""
    options: tuple[str, ...]
    """The option names a method with this objective may set, each a field of ``settings``."""
    implementation: str = ""
    """``module:attribute`` of the torch code: a layer loss ``(z, AuxLossConfig) -> scalar`` or a
    ``TrainingBaseline`` class; imported only when a run trains."""

    def load(self) -> Any:
        module, _, attribute = self.implementation.partition(":")
        return getattr(importlib.import_module(module), attribute)


_AUX = ("weight", "placement", "max_tokens")
OBJECTIVES: dict[str, Objective] = {
    objective.name: objective
    for objective in (
        Objective("ce", "ce", None, ()),
        Objective(
            "dispersion", "auxiliary", AuxLossConfig, (*_AUX, "tau", "clamp", "kernel"), "condensation.training.losses:dispersion"
        ),
        Objective("decorrelation", "auxiliary", AuxLossConfig, _AUX, "condensation.training.losses:decorrelation"),
        Objective("l2_repel", "auxiliary", AuxLossConfig, (*_AUX, "tau", "norm_weight"), "condensation.training.losses:l2_repel"),
        Objective(
            "orthogonalization", "auxiliary", AuxLossConfig, (*_AUX, "clamp", "margin"), "condensation.training.losses:orthogonalization"
        ),
        Objective(
            "noisy_embedding", "baseline", NoisyEmbeddingConfig, ("alpha",), "condensation.training.baselines:NoisyEmbedding"
        ),
        Objective(
            "active_forgetting", "baseline", ActiveForgettingConfig, ("every", "tied_head", "std"),
            "condensation.training.baselines:ActiveForgetting",
        ),
    )
}


def loss_names() -> tuple[str, ...]:
    """The auxiliary losses, in registry order."""
    return tuple(name for name, objective in OBJECTIVES.items() if objective.kind == "auxiliary")


LOSS_NAMES = loss_names()


@dataclass(frozen=True)
class MethodSettings:
    """A method of the config, resolved: its objective and the full settings of its loss or baseline."""

    objective: str
    loss: AuxLossConfig | None = None
    baseline: NoisyEmbeddingConfig | ActiveForgettingConfig | None = None

    @property
    def aux_weight(self) -> float:
        return self.loss.weight if self.loss is not None else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Every option with its value, defaults included (what ``run.json`` records)."""
        chosen = self.loss or self.baseline
        options = OBJECTIVES[self.objective].options
        return {"objective": self.objective, **{name: getattr(chosen, name) for name in options}}


def resolve_method(spec: Mapping[str, Any]) -> MethodSettings:
    """``{"objective": "dispersion", "weight": 0.1}`` -> ``MethodSettings``; ValueError names an
    unknown objective or an option that does not apply to it."""
    name = spec.get("objective")
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r} (known: {', '.join(OBJECTIVES)})")
    objective = OBJECTIVES[name]
    options = {key: value for key, value in spec.items() if key != "objective"}
    extra = sorted(set(options) - set(objective.options))
    if extra:
        raise ValueError(f"option(s) {extra} do not apply to objective {name!r} (it takes: {list(objective.options)})")
    if objective.kind == "auxiliary":
        return MethodSettings(name, loss=AuxLossConfig(name=name, **options))
    if objective.kind == "baseline":
        return MethodSettings(name, baseline=objective.settings(**options))
    return MethodSettings(name)


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
    method: MethodSettings = MethodSettings("ce")
    arch: Mapping[str, int] | None = None
    """The GPT2 shape of a model pre-trained from scratch."""
    provenance: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Package versions and the git commit the plan was made with."""

    def save(self, path: str | os.PathLike) -> None:
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> RunPlan:
        return cls.from_json(read_json(path))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "model": self.model, "train": dataclasses.asdict(self.train),
            "method": self.method.as_dict(), "arch": dict(self.arch) if self.arch else None,
            "provenance": dict(self.provenance),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunPlan:
        train = dict(data["train"], betas=tuple(data["train"]["betas"]))
        return cls(
            kind=data["kind"], model=data["model"], train=TrainConfig(**train),
            method=resolve_method(data["method"]), arch=data.get("arch"), provenance=data.get("provenance", {}),
        )


def plan_run(kind: str, model: str, train: Mapping[str, Any], seed: int, method: Mapping[str, Any] | None = None,
             arch: Mapping[str, int] | None = None) -> RunPlan:
    """A run's plan from the config's ``train`` section, its seed and its method spec."""
    settings = resolve_method(method or {"objective": "ce"})
    config = TrainConfig(**train, seed=seed, aux_weight=settings.aux_weight)
    return RunPlan(kind=kind, model=model, train=config, method=settings, arch=arch, provenance=provenance())


def provenance() -> dict[str, Any]:
    """Versions of the packages that decide a run's numbers, and the git commit when there is one."""
    import subprocess
    from importlib import metadata
    from pathlib import Path

    versions = {}
    for package in ("condensation", "torch", "transformers", "accelerate"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"versions": versions, "git_commit": commit}
