"""The training objectives, torch-free: the registry ``OBJECTIVES`` of the auxiliary losses and the
baselines (each with its settings dataclass, the options it takes and where its torch code lives),
their settings with the reason for every default, and a method resolved from its config entry.

The config schema takes its objective names and per-method options from here, so the two cannot
disagree."""

from __future__ import annotations

import dataclasses
import importlib
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PLACEMENTS = ("all", "last", "early_half", "late_half")


TIED_HEAD_OPTIONS = ("untie", "reset")


KERNELS = ("auto", "eager", "compiled")


PRODUCTS = ("float32", "bfloat16")


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
    pairs closer than ~2.6 degrees see a flat forward value (their gradient still flows).
    The authors' code used 1e-4 without a straight-through gradient (arXiv v1), then 0.1 (GPT2)
    and 0.25 (Qwen3) with one (configs/paper.yaml sets those per study); at 0.1 every pair above
    cosine 0.9 has one value, while 1e-3 pushes 1.4-3x harder on pairs at 0.95-0.99."""

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

    products: str = "float32"
    """dispersion only: the precision of its tiled kernel's matrix products (``kernels._product``).
    ``float32``: the loss's own precision (float64 for float64 hidden states). ``bfloat16``: bf16
    operands, float32 sums, as a GPU's tensor cores run them at several times the float32 rate (a
    CPU emulates the same numbers, slower); the cosines take three such products (the unit rows'
    bf16 rounding and its remainder), the gradient one each; arccos, exponent and logsumexp stay
    float32. Measured against the float64 formula on condensed hidden states (mean cosine 0.5-0.9,
    B = 4, T = 256, F = 768, tau 1 and 0.1; tests/unit/test_kernels.py): loss within 4e-7, gradient
    within 4e-4 relative (one bf16 product for the cosines moved the loss by up to 4e-5). float32
    by default: what every earlier run computed, exact to float32 rounding; bf16 changes the value
    within that error, for the GPU's speed, chosen per method."""

    def __post_init__(self) -> None:
        if self.name not in loss_names():
            raise ValueError(f"unknown auxiliary loss name {self.name!r}; allowed: {', '.join(loss_names())}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {self.placement!r}; allowed: {', '.join(PLACEMENTS)}")
        if self.kernel not in KERNELS:
            raise ValueError(f"unknown kernel {self.kernel!r}; allowed: {', '.join(KERNELS)}")
        if self.products not in PRODUCTS:
            raise ValueError(f"unknown products {self.products!r}; allowed: {', '.join(PRODUCTS)}")
        _check_number("weight", self.weight, low=0.0, low_open=False)
        _check_number("tau", self.tau, low=0.0, low_open=True)
        _check_number("clamp", self.clamp, low=0.0, low_open=True, high=1.0)
        _check_number("norm_weight", self.norm_weight, low=0.0, low_open=False)
        _check_number("margin", self.margin, low=0.0, low_open=True, high=1.0, high_open=False)
        if self.max_tokens is not None:
            # bool is an int subclass; True as a token count is a bug, not 1.
            if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 2:
                raise ValueError(f"max_tokens must be None or an int >= 2 (pairs need two tokens), "
                                 f"got {self.max_tokens!r}")


def _check_number(field: str, value: float, low: float, low_open: bool,
                  high: float | None = None, high_open: bool = True) -> None:
    """ValueError naming ``field`` and ``value`` unless value is a finite number in the range."""
    interval = (("(" if low_open else "[") + f"{low}, "
                + ("inf)" if high is None else f"{high}" + (")" if high_open else "]")))
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


KINDS = ("ce", "auxiliary", "baseline", "distillation")


@dataclass(frozen=True)
class DistillationConfig:
    """Knowledge distillation (Hinton et al. 2015): CE on the data plus ``weight`` x the KL divergence
    from the teacher's next-token distribution to the student's, both softened by ``temperature``."""

    teacher: str
    """A model of the config's ``models`` (any source) with the student's tokenizer; no default,
    the teacher is the experiment."""

    weight: float = 1.0
    """The mix, as for the auxiliary losses: ``CE + weight * T^2 * KL``. 1.0 counts the hard and the
    soft targets alike: the common ``(1 - alpha) * CE + alpha * T^2 * KL`` at alpha = 0.5 (e.g. the
    distillation trainers of the Hugging Face ecosystem), times 2, a factor Adam's normalisation
    takes out of the update."""

    temperature: float = 2.0
    """T of ``softmax(logits / T)`` for teacher and student; the KL is multiplied by T^2 so that
    its gradient keeps its size whatever T (Hinton et al. 2015). 2.0 is what DistilBERT and
    DistilGPT2 were trained with (Sanh et al. 2019, Hugging Face's distillation scripts): it lifts
    the teacher's second choices without flattening the distribution."""

    def __post_init__(self) -> None:
        if not isinstance(self.teacher, str) or not self.teacher:
            raise ValueError(f"DistillationConfig.teacher must name a model of the config's models, "
                             f"got {self.teacher!r}")
        _check_number("weight", self.weight, low=0.0, low_open=False)
        _check_number("temperature", self.temperature, low=0.0, low_open=True)


@dataclass(frozen=True)
class Objective:
    """One value of a method's ``objective``: everything the pipeline knows of it, in one entry.
    The config schema (its objective names and per-method options), ``python -m condensation
    objectives`` (docs/configs.md points there) and the loss tests all read the registry."""

    name: str
    kind: str
    """``ce`` (cross-entropy alone), ``auxiliary`` (CE + weight x a loss on the hidden states),
    ``baseline`` (CE with a hook into the training loop) or ``distillation`` (CE + weight x the KL
    to a teacher's next-token distribution)."""
    settings: type | None
    """The dataclass that holds its options and checks them in ``__post_init__`` (for an
    auxiliary loss, ``AuxLossConfig`` or a subclass of it that adds the loss' own options)."""
    options: tuple[str, ...]
    """The option names a method with this objective may set, each a field of ``settings``.
    An option the schema does not describe is taken as any value, checked by ``settings``."""
    implementation: str = ""
    """``module:attribute`` of the torch code: a layer loss ``(z, settings) -> scalar`` or a
    ``TrainingBaseline`` class or the distillation ``Teacher``; imported only when a run trains."""
    reference: str = ""
    """auxiliary: ``module:attribute`` of the plain formula ``(z, settings) -> scalar`` on float64
    ``[B, T, F]`` states (loops, no tricks) that the loss tests compare the implementation with;
    an auxiliary objective without one fails those tests, saying so."""
    summary: str = ""
    """One line on what it does, shown by ``python -m condensation objectives`` and in the schema."""
    stacked: str = ""
    """auxiliary, optional: ``module:attribute`` of the same loss over several layers of one shape
    at once, ``(layers, settings) -> the mean of the layer losses``, which ``auxiliary_loss`` calls
    instead of one layer loss per layer (the dispersion loss: one tiled call over all of them)."""

    def load(self) -> Any:
        return _import(self.implementation)

    def load_stacked(self) -> Any:
        return _import(self.stacked) if self.stacked else None

    def load_reference(self) -> Any:
        if not self.reference:
            raise NotImplementedError(
                f"objective {self.name!r} has no reference formula: set reference='module:function' in its "
                "OBJECTIVES entry (a plain float64 transcription of the loss, for the tests)"
            )
        return _import(self.reference)


def _import(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


_AUX = ("weight", "placement", "max_tokens")


_LOSSES = "condensation.training.losses"


OBJECTIVES: dict[str, Objective] = {
    objective.name: objective
    for objective in (
        Objective("ce", "ce", None, (), summary="cross-entropy only"),
        Objective(
            "dispersion", "auxiliary", AuxLossConfig, (*_AUX, "tau", "clamp", "kernel", "products"),
            f"{_LOSSES}:dispersion", f"{_LOSSES}:reference_dispersion",
            "the paper's loss: log-mean-exp of minus the tokens' angular distances / tau",
            stacked=f"{_LOSSES}:dispersion_layers",
        ),
        Objective(
            "decorrelation", "auxiliary", AuxLossConfig, _AUX, f"{_LOSSES}:decorrelation",
            f"{_LOSSES}:reference_decorrelation", "mean squared correlation between distinct tokens",
        ),
        Objective(
            "l2_repel", "auxiliary", AuxLossConfig, (*_AUX, "tau", "norm_weight"), f"{_LOSSES}:l2_repel",
            f"{_LOSSES}:reference_l2_repel", "dispersion with squared Euclidean distance, plus a norm penalty",
        ),
        Objective(
            "orthogonalization", "auxiliary", AuxLossConfig, (*_AUX, "clamp", "margin"), f"{_LOSSES}:orthogonalization",
            f"{_LOSSES}:reference_orthogonalization", "hinge on the angular distance of pairs closer than margin",
        ),
        Objective(
            "noisy_embedding", "baseline", NoisyEmbeddingConfig, ("alpha",),
            "condensation.training.baselines:NoisyEmbedding",
            summary="uniform noise added to the input embeddings",
        ),
        Objective(
            "active_forgetting", "baseline", ActiveForgettingConfig, ("every", "tied_head", "std"),
            "condensation.training.baselines:ActiveForgetting",
            summary="the input embeddings re-initialised every `every` steps",
        ),
        Objective(
            "distillation", "distillation", DistillationConfig, ("teacher", "weight", "temperature"),
            "condensation.training.distillation:Teacher",
            summary="CE plus weight x T^2 x the KL divergence to a teacher model's next-token distribution",
        ),
    )
}


def check_objective(objective: Objective) -> list[str]:
    """What is wrong with a registry entry, in words (empty when nothing): a known kind, settings
    that hold every option, and for an auxiliary loss settings built on ``AuxLossConfig``."""
    problems = []
    where = f"OBJECTIVES[{objective.name!r}]"
    if objective.kind not in KINDS:
        problems.append(f"{where}: kind {objective.kind!r} is not one of {KINDS}")
    if objective.kind != "ce" and (objective.settings is None or not objective.implementation):
        problems.append(f"{where}: a {objective.kind} objective needs settings and implementation")
    if objective.settings is not None:
        fields = {field.name for field in dataclasses.fields(objective.settings)}
        missing = sorted(set(objective.options) - fields)
        if missing:
            problems.append(f"{where}: options {missing} are no field of {objective.settings.__name__}")
    if (objective.kind == "auxiliary" and objective.settings is not None
            and not issubclass(objective.settings, AuxLossConfig)):
        problems.append(f"{where}: an auxiliary loss' settings must be AuxLossConfig or a subclass of it")
    return problems


def register(objective: Objective) -> Objective:
    """Add an objective to the registry (what an entry in ``OBJECTIVES`` above does, for code that
    lives elsewhere); ValueError if the entry is inconsistent or the name is taken."""
    if objective.name in OBJECTIVES:
        raise ValueError(f"objective {objective.name!r} is already registered")
    problems = check_objective(objective)
    if problems:
        raise ValueError("; ".join(problems))
    OBJECTIVES[objective.name] = objective
    return objective


def loss_names() -> tuple[str, ...]:
    """The auxiliary losses, in registry order."""
    return tuple(name for name, objective in OBJECTIVES.items() if objective.kind == "auxiliary")


LOSS_NAMES = loss_names()


@dataclass(frozen=True)
class MethodSettings:
    """A method of the config, resolved: its objective and the full settings of its loss or baseline."""

    objective: str
    loss: AuxLossConfig | None = None
    """An auxiliary objective's settings (``AuxLossConfig`` or its subclass in the registry)."""
    baseline: Any = None
    """A baseline objective's settings: the dataclass its registry entry names."""
    distillation: DistillationConfig | None = None
    """A distillation objective's settings (its teacher, weight and temperature)."""

    @property
    def aux_weight(self) -> float:
        """The weight of what the loop adds to CE: the auxiliary loss, or the distillation term."""
        chosen = self.loss or self.distillation
        return chosen.weight if chosen is not None else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Every option with its value, defaults included (what ``run.json`` records)."""
        chosen = self.loss or self.baseline or self.distillation
        options = OBJECTIVES[self.objective].options
        return {"objective": self.objective, **{name: getattr(chosen, name) for name in options}}


def for_seed(spec: Mapping[str, Any], position: int) -> dict[str, Any]:
    """A method's spec as the run at ``position`` of its study's seeds sees it: a teacher given per
    seed (a list, in the order of the seeds: a replicated teacher) becomes that run's one teacher."""
    teacher = spec.get("teacher")
    if isinstance(teacher, (list, tuple)):
        if not 0 <= position < len(teacher):
            raise ValueError(f"teacher: {len(teacher)} teachers for the seed at position {position}; give one per seed")
        return {**spec, "teacher": teacher[position]}
    return dict(spec)


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
        return MethodSettings(name, loss=objective.settings(name=name, **options))
    if objective.kind == "baseline":
        return MethodSettings(name, baseline=objective.settings(**options))
    if objective.kind == "distillation":
        if "teacher" not in options:
            raise ValueError(f"objective {name!r} needs a teacher: a model of the config's models, "
                             "e.g. teacher: toy-mlp1024")
        return MethodSettings(name, distillation=DistillationConfig(**options))
    return MethodSettings(name)


def describe() -> str:
    """The registry as a table: name, kind, options, summary."""
    rows = [(o.name, o.kind, ", ".join(o.options) or "-", o.summary) for o in OBJECTIVES.values()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(f"{n:<{widths[0]}}  {k:<{widths[1]}}  {opts:<{widths[2]}}  {summary}"
                     for n, k, opts, summary in rows)


def main(argv: list[str]) -> int:
    """``python -m condensation objectives``: every registered objective with its options."""
    if argv:
        print("usage: python -m condensation objectives", file=sys.stderr)
        return 2
    print(describe())
    return 0
