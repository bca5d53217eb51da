"""The typed settings of the training loop and of the auxiliary losses, and the step arithmetic.

Kept free of torch so that the workflow can plan with them (how many steps a run takes, which
checkpoints it writes, what a method's defaults are) without paying for a torch import on every
Snakemake invocation. ``train`` and ``losses`` re-export everything here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

LOSS_NAMES = ("dispersion", "decorrelation", "l2_repel", "orthogonalization")
PLACEMENTS = ("all", "last", "early_half", "late_half")


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides the trajectory of a run. Resuming requires the same config
    (``compile`` aside, which changes how a step runs, not what it computes)."""

    train_tokens: int
    """Token budget. Steps = ceil(train_tokens / tokens per step), tokens per step =
    micro_batch_size * block_size * grad_accum_steps * world_size; the last step may overshoot."""

    block_size: int
    """Tokens per training block; must equal the width of the block arrays passed to ``train``."""

    micro_batch_size: int
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
    """``"auto"``: bf16 autocast on a CUDA device that supports it, else ``"no"``; or ``"bf16"``, ``"no"``.
    fp16 is refused: its loss scaler skips overflowing steps, which the NaN guard would turn into
    errors, and bf16 needs no scaler."""

    compile: bool = False
    """``torch.compile`` the model for the training forward (the auxiliary loss stays eager).
    Meant for long GPU runs, where fused elementwise kernels can shorten a bf16 step (not yet
    measured: see benchmarks/README.md). Off by default: on CPU the compiled loop ran at 0.92x the
    eager one, and the compile (about 40 s) outweighs any gain in the default pipeline's short
    runs. Validation and checkpoints use the uncompiled model (same weights)."""

    aux_weight: float = 0.0
    """Weight of the auxiliary loss: total = ce + aux_weight * aux. 0 trains on CE alone (the
    auxiliary callable is then not even called, and hidden states are not requested)."""

    def __post_init__(self) -> None:
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
    """One of ``LOSS_NAMES``; no default, the choice of loss is the experiment."""

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

    def __post_init__(self) -> None:
        if self.name not in LOSS_NAMES:
            raise ValueError(f"unknown auxiliary loss name {self.name!r}; allowed: {', '.join(LOSS_NAMES)}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {self.placement!r}; allowed: {', '.join(PLACEMENTS)}")
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
