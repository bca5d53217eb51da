"""The training methods, torch-free: the registry ``OBJECTIVES`` of the objectives a method may
name (cross-entropy, the auxiliary and the representation losses, the baselines, distillation),
each with the settings dataclass that holds exactly its options, with the reason for every
default; and ``resolve_method``, which turns a method's config entry into one ``TrainingMethod``.

A setting is spelled once, as a field of its settings dataclass: the options an objective takes
are that dataclass's fields, and the config schema's method options (their names, JSON types,
choices and descriptions) are generated from them (``config.validate``), so the three cannot
disagree. ``TrainingMethod.build()`` gives the one term the training loop adds to cross-entropy
(``training.terms``: a loss on the hidden states, a baseline's hooks, a teacher); its torch code
is imported then, by name, so that planning a run never imports torch."""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import math
import sys
import textwrap
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Placement = Literal["all", "last", "early_half", "late_half"]
PLACEMENTS: tuple[str, ...] = typing.get_args(Placement)

TiedHead = Literal["untie", "reset"]

Kernel = Literal["auto", "eager", "compiled", "triton"]
KERNELS: tuple[str, ...] = typing.get_args(Kernel)

Products = Literal["float32", "bfloat16"]
PRODUCTS: tuple[str, ...] = typing.get_args(Products)


def check_choices(settings: Any) -> None:
    """ValueError naming the field, the value and the choices, for any field of the dataclass
    ``settings`` annotated with a ``Literal`` whose value is not one of its choices."""
    for name, choices in literal_fields(type(settings)).items():
        value = getattr(settings, name)
        if value not in choices:
            raise ValueError(f"unknown {name} {value!r}; allowed: {', '.join(map(str, choices))}")


@functools.cache
def literal_fields(cls: type) -> dict[str, tuple[Any, ...]]:
    """The fields of dataclass ``cls`` annotated with a ``Literal``, with their choices."""
    try:
        hints = typing.get_type_hints(cls)
    except NameError:  # an annotation that does not resolve: no choices known
        return {}
    return {field.name: typing.get_args(hints[field.name]) for field in dataclasses.fields(cls)
            if typing.get_origin(hints[field.name]) is Literal}


class _ByName(type):
    """``AuxLossConfig(name="dispersion", ...)`` builds the settings class the registry names for
    that loss (``DispersionConfig``), so that code written against the one flat config of earlier
    versions (and docs/loss.md's examples) keeps working; a subclass is built as itself."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is AuxLossConfig:
            name = args[0] if args else kwargs.get("name")
            objective = OBJECTIVES.get(name) if isinstance(name, str) else None
            if objective is None or objective.kind != "auxiliary":
                raise ValueError(f"unknown auxiliary loss name {name!r}; allowed: {', '.join(loss_names())}")
            extra = sorted(set(kwargs) - {"name"} - set(objective.options))
            if extra:
                raise ValueError(f"option(s) {extra} do not apply to loss {name!r} "
                                 f"(it takes: {list(objective.options)})")
            return objective.settings(*args, **kwargs)
        return super().__call__(*args, **kwargs)


@dataclass(frozen=True)
class AuxLossConfig(metaclass=_ByName):
    """What every auxiliary loss takes: which loss, its weight, which layers and how many tokens.
    Each loss has a subclass with its own constants (``DispersionConfig``, ...); building this
    class by name builds that subclass. Validated on construction."""

    name: str
    """One of ``loss_names()``; each subclass defaults it to its own loss."""

    weight: float = 0.1
    """lambda in ``L_LM + lambda * L_aux``; 0.1 is the paper's default. Not applied by
    ``auxiliary_loss``: the caller multiplies, so the loss can be logged unweighted."""

    placement: Placement = "all"
    """Which hidden states get the loss (see ``select_layers``): every block output by default,
    since condensation grows with depth and no single layer is where it happens."""

    max_tokens: int | None = None
    """If set and ``T > max_tokens``, use a random subset of ``max_tokens`` positions (the same
    for the whole batch) to bound the ``B * T^2`` cost. None: all pairs, exact, as in the paper."""

    def __post_init__(self) -> None:
        objective = OBJECTIVES.get(self.name)
        if objective is None or objective.kind != "auxiliary":
            raise ValueError(f"unknown auxiliary loss name {self.name!r}; allowed: {', '.join(loss_names())}")
        if objective.settings is not type(self):
            raise ValueError(f"loss {self.name!r} takes {objective.settings.__name__}, not {type(self).__name__}")
        check_choices(self)
        _check_number("weight", self.weight, low=0.0, low_open=False)
        _check_max_tokens(self.max_tokens)


def _check_max_tokens(max_tokens: int | None) -> None:
    """ValueError unless ``max_tokens`` is None or an int >= 2."""
    if max_tokens is not None:
        # bool is an int subclass; True as a token count is a bug, not 1.
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 2:
            raise ValueError(f"max_tokens must be None or an int >= 2 (pairs need two tokens), got {max_tokens!r}")


@dataclass(frozen=True)
class DispersionConfig(AuxLossConfig):
    """The paper's loss: log-mean-exp of minus the tokens' angular distances over ``tau``."""

    name: str = "dispersion"

    tau: float = 1.0
    """Temperature of the log-mean-exp; 1.0 is the paper's default. Smaller tau concentrates the
    gradient on the closest pairs."""

    clamp: float = 1e-3
    """Cosines are clamped to ``[-1 + clamp, 1 - clamp]`` before arccos, with a straight-through
    gradient. 1e-3 bounds the arccos slope at 1 / sqrt(clamp * (2 - clamp)) ~ 22 (7.1 after
    dividing by pi) and sits well above the rounding noise of a float32 cosine (~1e-6 even for
    F ~ 10^4) and near that of TF32 matmuls, so the slope is never taken at a noisy value; only
    pairs closer than ~2.6 degrees see a flat forward value (their gradient still flows).
    The authors' code used 1e-4 without a straight-through gradient (arXiv v1), then 0.1 (GPT2)
    and 0.25 (Qwen3) with one (configs/paper.yaml sets those per study); at 0.1 every pair above
    cosine 0.9 has one value, while 1e-3 pushes 1.4-3x harder on pairs at 0.95-0.99."""

    kernel: Kernel = "auto"
    """How its tiled kernel runs (``kernels.tile_step``). ``eager``: plain PyTorch,
    the reference, ~34 small ops per tile (each a kernel launch on a GPU); ``compiled``: the same
    body through ``torch.compile``, its elementwise work fused (C++ on CPU, Triton on CUDA; graphs
    compiled on first use, ~20 s); ``triton``: two fused Triton kernels in the style of
    FlashAttention-2 (``triton_dispersion``; CUDA only, a CPU runs them only through Triton's
    interpreter, for tests); ``auto``: the one measured fastest on the device at hand: eager on
    CPU, where the compiled body ran at x0.95-1.04 of it (the matmuls dominate), and compiled on
    CUDA, 1.10x faster than eager on an H100 (triton not yet measured there). All give the same
    value and gradient up to float rounding; see benchmarks/README.md."""

    products: Products = "float32"
    """The precision of its tiled kernel's matrix products (``kernels._product``).
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
        super().__post_init__()
        _check_number("tau", self.tau, low=0.0, low_open=True)
        _check_number("clamp", self.clamp, low=0.0, low_open=True, high=1.0)


@dataclass(frozen=True)
class DecorrelationConfig(AuxLossConfig):
    """Mean squared correlation between distinct tokens: no constants of its own."""

    name: str = "decorrelation"


@dataclass(frozen=True)
class L2RepelConfig(AuxLossConfig):
    """Dispersion with the squared Euclidean distance, plus a norm penalty."""

    name: str = "l2_repel"

    tau: float = 1.0
    """Temperature of the log-mean-exp, as ``DispersionConfig.tau``."""

    norm_weight: float = 0.1
    """Weight of ``mean(z^2)``, without which the repulsion is won by inflating norms; 0.1, the
    value this project specifies, as for the loss weight. Note that it is in the units of
    mean(z^2), so it is relatively stronger on large-norm hidden states."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_number("tau", self.tau, low=0.0, low_open=True)
        _check_number("norm_weight", self.norm_weight, low=0.0, low_open=False)


@dataclass(frozen=True)
class OrthogonalizationConfig(AuxLossConfig):
    """A hinge on the angular distance of pairs closer than ``margin``."""

    name: str = "orthogonalization"

    clamp: float = 1e-3
    """Cosines clamped before arccos, with a straight-through gradient, as ``DispersionConfig.clamp``."""

    margin: float = 0.5
    """Pairs closer than this angular distance are penalised; 1/2 is 90 degrees, i.e. the loss
    asks for orthogonal tokens and ignores already-spread pairs."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_number("clamp", self.clamp, low=0.0, low_open=True, high=1.0)
        _check_number("margin", self.margin, low=0.0, low_open=True, high=1.0, high_open=False)


@dataclass(frozen=True)
class RepresentationLossConfig:
    """What every representation loss takes: which loss and its weight. A representation loss reads
    a model's whole ``output.hidden_states`` and the input ids, ``(hidden_states, input_ids,
    settings) -> scalar``, where an auxiliary loss reads one layer at a time: JREG compares two
    layers, SimReg labels each position with the next token. Each loss has a subclass with its own
    options (``JregConfig``, ``SimRegConfig``). Validated on construction."""

    name: str
    """The objective's name in ``OBJECTIVES``; each subclass defaults it to its own loss."""

    weight: float = 0.1
    """lambda in ``L_LM + lambda * L_rep``; each subclass gives its own reason."""

    def __post_init__(self) -> None:
        objective = OBJECTIVES.get(self.name)
        if objective is None or objective.kind != "representation":
            known = [name for name, o in OBJECTIVES.items() if o.kind == "representation"]
            raise ValueError(f"unknown representation loss name {self.name!r}; allowed: {', '.join(known)}")
        if objective.settings is not type(self):
            raise ValueError(f"loss {self.name!r} takes {objective.settings.__name__}, not {type(self).__name__}")
        check_choices(self)
        _check_number("weight", self.weight, low=0.0, low_open=False)


@dataclass(frozen=True)
class JregConfig(RepresentationLossConfig):
    """JREG, the jump-suppressing regularizer (Shibata et al., EACL 2026, arXiv 2601.18302): the mean
    over tokens of ``1 - cos(h_{l-1}, h_l)`` at the last layer, against the large angular "jump"
    of the last block that the paper finds in open-weight models and that grows during pre-training.

    Which pair is the last layer's jump: ``output.hidden_states[-2]`` (the output of block L-1,
    the last block's input) and ``output.hidden_states[-1]``, which in a Hugging Face model is the
    last block's output after the final norm (GPT2's ``ln_f``, Llama's RMSNorm), what the head
    reads. It is the only pair of that tuple that spans the last block (the last block's output
    before the norm is not in it), the project's convention for layer L (``hidden_states``: the
    states the model hands its head) and the last pair of the lens ``layer_angle``
    (``lenses.py``), so that the loss lowers the jump the lens reports. The norm's gain, bias
    and centring count in the angle, and the loss trains them too."""

    name: str = "jreg"

    weight: float = 0.1
    """lambda in ``L_LM + lambda * L_JREG``; 0.1, the weight of this project's other added losses.
    JREG is then compared with the dispersion loss at equal weight; the paper's own coefficient was
    not at hand when this was written (its abstract and the jump's definition were)."""

    layer: int = -1
    """The block whose jump is penalised, as an index of ``output.hidden_states`` (negative: from
    the end): the loss compares ``hidden_states[layer - 1]`` with ``hidden_states[layer]``. -1, the
    last block: the jump the paper suppresses is the final layer's. 0, the embedding output, has
    no layer before it and is refused."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.layer, bool) or not isinstance(self.layer, int) or self.layer == 0:
            raise ValueError(f"layer must be a non-zero int (an index of output.hidden_states; 0, the "
                             f"embeddings, has no layer before it), got {self.layer!r}")


@dataclass(frozen=True)
class SimRegConfig(RepresentationLossConfig):
    """SimReg (Sun et al., arXiv 2605.08809): a supervised-contrastive loss over the positions of each
    sequence, labelled with their next token (position t with ``input_ids[t + 1]``; the last has
    none): for an anchor i with at least one other position j of its label, ``-mean_j log(
    exp(cos(z_i, z_j) / tau) / sum_{k != i} exp(cos(z_i, z_k) / tau))``; anchors without one add
    nothing; the mean over the anchors of the batch that have one (0 when none has). Positions of
    one label are pulled together, the others pushed apart."""

    name: str = "simreg"

    weight: float = 0.1
    """lambda in ``L_LM + lambda * L_SimReg``; 0.1, the weight of this project's other added losses.
    SimReg is then compared with the dispersion loss at equal weight; the paper's own coefficient
    was not at hand when this was written (its abstract and the loss' definition were)."""

    tau: float = 0.1
    """Temperature of the softmax over cosines; 0.1, that of SupCon (Khosla et al. 2020).
    SimReg's loss is SupCon's over a sequence's positions: cosines in [-1, 1] become logits in
    [-10, 10], enough to tell a positive from the rest without saturating the softmax."""

    placement: Placement = "last"
    """Which hidden states get the loss, as an auxiliary loss' ``placement`` (the mean over them);
    the last block's output by default. It is what the head classifies, whose margins between
    next-token classes SimReg enlarges by the paper's analysis; ``all`` costs one ``T x T``
    softmax per block."""

    max_tokens: int | None = None
    """If set and more than ``max_tokens`` positions have a label, use a random subset of
    ``max_tokens`` of them (the same for the whole batch and every layer) to bound the ``B * T^2``
    cost. None: every position, exact; on the last block alone that is one dispersion layer's cost."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_number("tau", self.tau, low=0.0, low_open=True)
        _check_max_tokens(self.max_tokens)


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

    tied_head: TiedHead = "untie"
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
        check_choices(self)
        if self.std is not None and not 0 < self.std < math.inf:
            raise ValueError(f"ActiveForgettingConfig.std must be a finite number > 0, or None, got {self.std}")


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


# ---------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------


KINDS = ("ce", "auxiliary", "representation", "baseline", "distillation")

LOSS_KINDS = ("auxiliary", "representation")
"""The kinds whose entry names a ``loss`` and a ``reference`` and whose settings carry their own
``name`` (not an option: it is the objective)."""


@dataclass(frozen=True)
class Objective:
    """One value of a method's ``objective``: everything the pipeline knows of it, in one entry.
    The config schema (objective names, options), ``python -m condensation objectives``
    (docs/configs.md points there) and the loss tests all read the registry. Its kind and its
    options follow from ``settings``."""

    name: str
    settings: type | None
    """The dataclass that holds exactly its options and checks them in ``__post_init__``: a
    subclass of ``AuxLossConfig`` for an auxiliary loss, of ``RepresentationLossConfig`` for a
    representation loss, ``DistillationConfig`` for distillation, any other dataclass for a
    baseline; None for cross-entropy alone."""
    build: str = ""
    """``module:attribute`` of what makes the loop's term, ``(settings, **context) -> TrainingTerm``
    (``training.terms``): a baseline's class, distillation's teacher. A loss leaves it empty: the
    auxiliary losses share ``training.losses.AuxiliaryLoss``, the representation losses
    ``training.losses.RepresentationLoss``. Imported only when a run trains."""
    _: dataclasses.KW_ONLY  # the rest by name
    loss: str = ""
    """``module:attribute`` of the loss: an auxiliary one's layer loss ``(z, settings) -> scalar``;
    a representation one's ``(hidden_states, input_ids, settings) -> scalar``, of a model's whole
    ``output.hidden_states`` tuple and its ``[B, T]`` input ids."""
    reference: str = ""
    """``module:attribute`` of the plain formula with the loss' signature, on float64 states (loops,
    no tricks), that the loss tests compare ``loss`` with; a loss without one fails those tests,
    saying so."""
    stacked: str = ""
    """auxiliary, optional: ``module:attribute`` of the same loss over several layers of one shape
    at once, ``(layers, settings) -> the mean of the layer losses``, which ``auxiliary_loss`` calls
    instead of one layer loss per layer (the dispersion loss: one tiled call over all of them)."""
    summary: str = ""
    """One line on what it does, shown by ``python -m condensation objectives`` and in the schema."""

    @property
    def kind(self) -> str:
        """``ce`` (cross-entropy alone), ``auxiliary`` (CE + weight x a loss on the hidden states,
        layer by layer), ``representation`` (CE + weight x a loss of all the hidden states and the
        input ids), ``distillation`` (CE + weight x the KL to a teacher's next-token distribution)
        or ``baseline`` (CE with hooks into the training loop)."""
        if self.settings is None:
            return "ce"
        if issubclass(self.settings, AuxLossConfig):
            return "auxiliary"
        if issubclass(self.settings, RepresentationLossConfig):
            return "representation"
        if issubclass(self.settings, DistillationConfig):
            return "distillation"
        return "baseline"

    @property
    def options(self) -> tuple[str, ...]:
        """The option names a method with this objective may set: the fields of ``settings``
        (a loss' ``name`` is the objective itself)."""
        if self.settings is None:
            return ()
        return tuple(f.name for f in dataclasses.fields(self.settings) if not (self.kind in LOSS_KINDS
                                                                                and f.name == "name"))

    def load(self) -> Any:
        return _import(self.loss if self.kind in LOSS_KINDS else self.build)

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
    """``module:attribute`` (or ``module:Class.attribute``), imported."""
    module, _, attribute = target.partition(":")
    return functools.reduce(getattr, attribute.split("."), importlib.import_module(module))


_LOSSES = "condensation.training.losses"


OBJECTIVES: dict[str, Objective] = {
    objective.name: objective
    for objective in (
        Objective("ce", None, summary="cross-entropy only"),
        Objective(
            "dispersion", DispersionConfig, loss=f"{_LOSSES}:dispersion",
            reference=f"{_LOSSES}:reference_dispersion", stacked=f"{_LOSSES}:dispersion_layers",
            summary="the paper's loss: log-mean-exp of minus the tokens' angular distances / tau",
        ),
        Objective(
            "decorrelation", DecorrelationConfig, loss=f"{_LOSSES}:decorrelation",
            reference=f"{_LOSSES}:reference_decorrelation", summary="mean squared correlation between distinct tokens",
        ),
        Objective(
            "l2_repel", L2RepelConfig, loss=f"{_LOSSES}:l2_repel",
            reference=f"{_LOSSES}:reference_l2_repel",
            summary="dispersion with squared Euclidean distance, plus a norm penalty",
        ),
        Objective(
            "orthogonalization", OrthogonalizationConfig, loss=f"{_LOSSES}:orthogonalization",
            reference=f"{_LOSSES}:reference_orthogonalization",
            summary="hinge on the angular distance of pairs closer than margin",
        ),
        Objective(
            "jreg", JregConfig, loss=f"{_LOSSES}:jreg", reference=f"{_LOSSES}:reference_jreg",
            summary="JREG (arXiv 2601.18302): mean over tokens of 1 - cos between the last block's input and output",
        ),
        Objective(
            "simreg", SimRegConfig, loss=f"{_LOSSES}:simreg", reference=f"{_LOSSES}:reference_simreg",
            summary="SimReg (arXiv 2605.08809): supervised-contrastive loss over a sequence's positions, "
                    "labelled by their next token",
        ),
        Objective(
            "noisy_embedding", NoisyEmbeddingConfig, "condensation.training.baselines:NoisyEmbedding",
            summary="uniform noise added to the input embeddings",
        ),
        Objective(
            "active_forgetting", ActiveForgettingConfig, "condensation.training.baselines:ActiveForgetting",
            summary="the input embeddings re-initialised every `every` steps",
        ),
        Objective(
            "distillation", DistillationConfig, "condensation.training.distillation:Teacher.matched",
            summary="CE plus weight x T^2 x the KL divergence to a teacher model's next-token distribution",
        ),
    )
}


def check_objective(objective: Objective) -> list[str]:
    """What is wrong with a registry entry, in words (empty when nothing): settings that are a
    dataclass, a loss' own settings class and its loss, and a term for every other kind but ce."""
    problems = []
    where = f"OBJECTIVES[{objective.name!r}]"
    if objective.settings is not None and not dataclasses.is_dataclass(objective.settings):
        problems.append(f"{where}: settings {objective.settings!r} is not a dataclass")
        return problems
    if objective.kind == "auxiliary":
        if objective.settings is AuxLossConfig:
            problems.append(f"{where}: an auxiliary loss' settings must be its own subclass of AuxLossConfig")
        if not objective.loss:
            problems.append(f"{where}: an auxiliary loss needs loss='module:function' (its layer loss)")
    if objective.kind == "representation":
        if objective.settings is RepresentationLossConfig:
            problems.append(f"{where}: a representation loss' settings must be its own subclass of "
                            "RepresentationLossConfig")
        if not objective.loss:
            problems.append(f"{where}: a representation loss needs loss='module:function' "
                            "((hidden_states, input_ids, settings) -> scalar)")
    if objective.stacked and objective.kind != "auxiliary":
        problems.append(f"{where}: stacked applies to an auxiliary loss only")
    if objective.kind not in ("ce", *LOSS_KINDS) and not objective.build:
        problems.append(f"{where}: a {objective.kind} objective needs build='module:attribute' (its term)")
    clashes = sorted(set(objective.options) & set(method_options()))
    if clashes:
        problems.append(f"{where}: options {clashes} are options of every method (TrainingMethod); rename them")
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


# ---------------------------------------------------------------------------------------------
# A method of the config, resolved
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingMethod:
    """A method of the config, resolved: its objective and that objective's settings, every
    default filled in. ``build()`` gives what the training loop adds to cross-entropy."""

    objective: str
    settings: Any = None
    """The objective's settings dataclass (its registry entry's ``settings``); None for ce."""

    ln_scaling: bool = False
    """scratch study: LayerNorm Scaling (the Curse of Depth, arXiv 2502.05795; ``condensation.ln_scaling``):
    each block's norm outputs times 1/sqrt(l), the final norm not, with any objective. An
    architecture, not a loss: the run draws the same initial weights as the run of the same seed
    without it (the constants draw nothing) and scales them in the forward, so that the arm
    differs from its study's CE arm (``{objective: ce, ln_scaling: true}``) by the scaling alone;
    its checkpoints hold the constants folded into the norms' weights. Refused in the midtrain
    study (mid-training a given model keeps its architecture). False: the model as it is built."""

    def __post_init__(self) -> None:
        if not isinstance(self.ln_scaling, bool):
            raise ValueError(f"ln_scaling must be true or false, got {self.ln_scaling!r}")

    @property
    def kind(self) -> str:
        return OBJECTIVES[self.objective].kind

    @property
    def weight(self) -> float:
        """The weight of what the loop adds to CE (the auxiliary or representation loss or the
        distillation term); 0 for cross-entropy alone and for a baseline, which adds no term."""
        return getattr(self.settings, "weight", 0.0) if self.kind in (*LOSS_KINDS, "distillation") else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Every option with its value, defaults included (what ``run.json`` records); the options
        of every method (``method_options``) where they are set, so that the plan of a method
        without them is as it was before they existed."""
        options = OBJECTIVES[self.objective].options
        return {"objective": self.objective, **{name: getattr(self.settings, name) for name in options},
                **{name: getattr(self, name) for name in method_options() if getattr(self, name)}}

    def build(self, **context: Any) -> Any:
        """The loop's term for this method (``training.terms.TrainingTerm``; imports torch), or
        None for cross-entropy alone. ``context``: what the term needs beyond the settings (a
        teacher's model and tokenizers: ``training.distillation.Teacher``)."""
        objective = OBJECTIVES[self.objective]
        if objective.kind == "ce":
            return None
        return _import(objective.build or _LOSS_TERMS[objective.kind])(self.settings, **context)


_LOSS_TERMS = {"auxiliary": f"{_LOSSES}:AuxiliaryLoss", "representation": f"{_LOSSES}:RepresentationLoss"}
"""The term a loss of each kind trains with when its entry names no ``build``."""


def method_options() -> tuple[str, ...]:
    """The options a method takes whatever its objective (``ln_scaling``): the fields of
    ``TrainingMethod`` beside its objective and settings, spelled there once, with their reasons;
    the schema's method options take them from there as they take the objectives' options."""
    return tuple(f.name for f in dataclasses.fields(TrainingMethod) if f.name not in ("objective", "settings"))


def for_seed(spec: Mapping[str, Any], position: int) -> dict[str, Any]:
    """A method's spec as the run at ``position`` of its study's seeds sees it: a teacher given per
    seed (a list, in the order of the seeds: a replicated teacher) becomes that run's one teacher."""
    teacher = spec.get("teacher")
    if isinstance(teacher, (list, tuple)):
        if not 0 <= position < len(teacher):
            raise ValueError(f"teacher: {len(teacher)} teachers for the seed at position {position}; give one per seed")
        return {**spec, "teacher": teacher[position]}
    return dict(spec)


def resolve_method(spec: Mapping[str, Any]) -> TrainingMethod:
    """``{"objective": "dispersion", "weight": 0.1}`` -> ``TrainingMethod``; ValueError names an
    unknown objective or an option that does not apply to it."""
    name = spec.get("objective")
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r} (known: {', '.join(OBJECTIVES)})")
    objective = OBJECTIVES[name]
    common = {key: spec[key] for key in method_options() if key in spec}
    options = {key: value for key, value in spec.items() if key != "objective" and key not in common}
    extra = sorted(set(options) - set(objective.options))
    if extra:
        raise ValueError(f"option(s) {extra} do not apply to objective {name!r} (it takes: {list(objective.options)}, "
                         f"with any objective: {list(method_options())})")
    if objective.kind == "ce":
        return TrainingMethod(name, **common)
    missing = [f.name for f in dataclasses.fields(objective.settings)
               if f.name not in options and f.name != "name" and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:  # the options without a default are the experiment (a teacher): say which
        hint = ": a model of the config's models, e.g. teacher: toy-mlp1024" if missing == ["teacher"] else ""
        raise ValueError(f"objective {name!r} needs a {', a '.join(missing)}{hint}")
    if objective.kind in LOSS_KINDS:
        options["name"] = name
    return TrainingMethod(name, objective.settings(**options), **common)


# ---------------------------------------------------------------------------------------------
# The options, described for the schema and the command line
# ---------------------------------------------------------------------------------------------


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of dataclass ``cls`` and its bases (the house style for a
    setting's reason), read from their source; {} for a class without source (defined in a REPL)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for statement, following in zip(body, body[1:], strict=False):
            if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                    and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)):
                docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return docs


def describe() -> str:
    """The registry as a table: name, kind, options, summary; then, after a blank line, the options
    every method takes whatever its objective (``method_options``)."""
    rows = [(o.name, o.kind, ", ".join(o.options) or "-", o.summary) for o in OBJECTIVES.values()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    table = [f"{n:<{widths[0]}}  {k:<{widths[1]}}  {opts:<{widths[2]}}  {summary}" for n, k, opts, summary in rows]
    docs = field_docs(TrainingMethod)
    common = [f"  {name}: {' '.join(docs[name].split()).split('. ')[0]}" for name in method_options()]  # first sentence
    return "\n".join([*table, "", "Every method also takes:", *common])


def main(argv: list[str]) -> int:
    """``python -m condensation objectives``: every registered objective with its options."""
    if argv:
        print("usage: python -m condensation objectives", file=sys.stderr)
        return 2
    print(describe())
    return 0
