"""Typed views of the config's sections that cross modules: how texts are sampled, how hidden
states are extracted, the trend conventions, and one entry of ``datasets`` or ``models``.

The rules pass sections to jobs as plain data (Snakemake compares plain params to decide what to
rerun); a job turns them into these objects. A section's defaults are written once, in its
dataclass here (the schema is filled from them, see ``SECTIONS``); an entry's defaults come from
the schema, the one place they are written: :meth:`DatasetSpec.from_config` and :meth:`ModelSpec.from_config` fill
what an entry leaves out from it, so a library caller may pass a short entry.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar

import yaml


@dataclass(frozen=True)
class SamplingConfig:
    """How the sequences a model is measured on are drawn from a dataset. The defaults are the
    paper's; the workflow's schema, ``condensation measure`` and :func:`condensation.measure` all
    take them from here."""

    num_sequences: int = 100
    """N sequences per dataset: the paper's population average is over 100."""
    seq_len: int = 512
    """T tokens per sequence after tokenisation: the paper's 512."""
    min_words: int | None = None
    """Whitespace words gathered per sequence before tokenising. A subword tokenizer gives at
    least one token per word, so ``min_words >= seq_len`` guarantees T tokens; None: twice
    ``seq_len`` (the paper's 1024 words for T = 512)."""
    seed: int = 0
    """Base seed: sequence ``r`` is drawn with ``numpy.random.default_rng([seed, r])``."""

    def __post_init__(self) -> None:
        if self.num_sequences < 1 or self.seq_len < 2:
            raise ValueError(f"sampling: num_sequences must be >= 1 and seq_len >= 2, "
                             f"got {self.num_sequences} and {self.seq_len}")
        if self.min_words is None:
            object.__setattr__(self, "min_words", 2 * self.seq_len)
        elif self.min_words < self.seq_len:
            raise ValueError(f"sampling: min_words ({self.min_words}) is below seq_len ({self.seq_len}): "
                             "sequences could come out shorter than seq_len tokens")


@dataclass(frozen=True)
class ExtractionConfig:
    """How hidden states are extracted and reduced; the same defaults for the workflow and
    :func:`condensation.measure`."""

    batch_size: int = 8
    """Sequences per forward pass; all have T tokens, so batches need no padding. 8 x 512 tokens
    fits a 7B model's activations on one GPU beside its weights."""
    dtype: str = "auto"
    """Model weights' dtype: ``auto`` = bfloat16 on a CUDA device that supports it, else float32."""
    device: str = "auto"
    """``auto`` = CUDA when available, else the CPU."""
    lens_tokens: int | None = 1024
    """Tokens per layer the spectral lenses (IsoScore*, effective rank, PC1 share) sample, the same
    positions for every model: 1024 is enough that a 576-wide model's spectrum is sampled by more
    tokens than dimensions, few enough that 31 layers' eigendecompositions stay near a second on a
    CPU; None: the cosines alone."""
    heatmap_size: int | None = 512
    """The position-wise mean cosine matrix is kept whole up to this T (the paper's 512 x 512) and
    averaged over blocks of positions to this size above it, so that a long context costs memory
    linear in T; None: whole at any T (memory T^2). Every other statistic is exact at any T."""


@dataclass(frozen=True)
class TrendConfig:
    """Which layers and pairs the depth trend reads; the defaults are the paper's conventions."""

    include_embedding_layer: bool = True
    """Correlate layer 0 (the embedding output) too, as the published figures do; False: the
    transformer layers 1..L only."""
    include_diagonal: bool = True
    """The per-layer mean over all N^2 pairs (the paper's mu) rather than over i != j only."""


SECTIONS = {"sampling": SamplingConfig, "extraction": ExtractionConfig, "trend": TrendConfig}
"""The config's sections that are these dataclasses: the schema takes their defaults from here."""


Section = TypeVar("Section", SamplingConfig, ExtractionConfig, TrendConfig)


def as_settings(cls: type[Section], value: Section | Mapping[str, Any]) -> Section:
    """``value`` as ``cls``. The rules pass a section as a plain mapping, the form Snakemake's
    params trigger compares (it skips other objects, so a changed setting would not rerun the
    jobs it shapes); a library caller may pass the object itself."""
    return value if isinstance(value, cls) else cls(**value)


def read_schema() -> dict[str, Any]:
    """``config.schema.yaml`` as written (``validate.load_schema`` completes it from the code), a
    copy of its own: callers fill it in."""
    return copy.deepcopy(_parsed_schema())


@functools.cache
def _parsed_schema() -> dict[str, Any]:
    # parsed once per process, with libyaml where PyYAML has it: a Snakemake plan reads the schema
    # several times, and the pure-Python parser took about half a second each time
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(resources.files("condensation").joinpath("config/config.schema.yaml").read_text(), Loader=loader)


@functools.cache
def schema_defaults(*keys: str) -> dict[str, Any]:
    """The defaults the schema file gives the properties of the object at ``keys`` (an entry of
    ``datasets`` or ``models``, an ``arch``: defaults written in the file itself)."""
    node = read_schema()
    for key in keys:
        node = node[key]
    return {key: value["default"] for key, value in node["properties"].items() if "default" in value}


@dataclass(frozen=True, kw_only=True)
class DatasetSpec:
    """One entry of ``datasets``: where a dataset's text comes from."""

    dataset: str
    """Its name under ``datasets`` (used in file paths and messages)."""
    source: str
    """``hub``, a built-in corpus (``config.corpora.CORPORA``) or ``files``."""
    path: str | None = None
    """hub: the dataset id."""
    name: str | None
    """hub: the dataset's config name."""
    split: str
    """hub: the split sampled from."""
    field: str
    """hub: the column holding the text."""
    data_files: str | list[str] | None
    """hub: which files of the repository to load (None: the config's own)."""
    files: list[str] | None = None
    """files: paths or glob patterns."""
    exclude: list[str]
    """Built-in corpus or files: documents left out (held-out text)."""
    documents: list[str] | None = None
    """Built-in corpus or files: only these documents (None: all), e.g. a held-out novel to measure on."""

    @classmethod
    def from_config(cls, dataset: str, entry: Mapping[str, Any]) -> DatasetSpec:
        return cls(dataset=dataset, **{**schema_defaults("properties", "datasets", "additionalProperties"), **entry})


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """One entry of ``models``: where a model comes from and how it is shown."""

    model: str
    """Its name under ``models`` (used in file paths)."""
    source: str
    """``hub``, ``local``, ``gguf``, ``pretrain`` (pre-trained here), ``init`` (an initialisation)
    or ``run`` (the final weights of a training study's run)."""
    id: str | None = None
    """hub: the model id."""
    revision: str | None
    """hub: branch, tag or commit (None: the default branch)."""
    path: str | None = None
    """local / gguf: a path, or ``pkg://<package>/<file>``."""
    of: str | None = None
    """init: the model whose initialisation this is; run: the model the study trained."""
    study: str | None = None
    """run: the training study (``midtrain`` or ``scratch``)."""
    method: str | None = None
    """run: the study's method."""
    arch: dict[str, int] | None = None
    """pretrain: the GPT2 shape."""
    label: str
    """Name shown in figures and tables; the same label on several models marks replicates."""
    seed: int | None = None
    """pretrain / init: the seed of the initial weights (None: the ``of`` model's, else pretrain.seed);
    run: the run's seed; hub: the seed of a published run of a suite of seeds (one draw of its
    training procedure)."""
    trust_remote_code: bool
    tie_word_embeddings: bool | None = None
    """init of a hub, local or gguf model: tie or untie the input and output embeddings of its
    architecture (None: as the architecture has them)."""
    ln_scaling: bool | None = None
    """pretrain: LayerNorm Scaling, each block's norm outputs times 1/sqrt(l)
    (``condensation.ln_scaling``); its init model is scaled too (``config.plan.model_ln_scaling``);
    None: off. In the scratch study it is a method's option (``TrainingMethod.ln_scaling``)."""

    @classmethod
    def from_config(cls, model: str, entry: Mapping[str, Any]) -> ModelSpec:
        values = {**schema_defaults("properties", "models", "additionalProperties"), "label": model, **entry}
        if values.get("arch") is not None:  # filled as the validator fills it: the entry's keys first
            arch_defaults = schema_defaults("$defs", "arch")
            values["arch"] = dict(values["arch"]) | {k: v for k, v in arch_defaults.items() if k not in values["arch"]}
        return cls(model=model, **values)
