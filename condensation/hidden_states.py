"""Where a measurement's hidden states come from: the model as a researcher holds it.

:func:`source_of` turns a model into a :class:`HiddenStateSource`, one call from token ids ``[B, T]``
to the ``L + 1`` per-layer states ``[B, T, d]`` that the workflow measures: the input to the first
block (layer 0, the embedding output), then the residual stream after each block, the last one as
the model passes it on to its head (after the final norm, where the model has one). These are a
Hugging Face model's ``output.hidden_states``, and each wrapper below is read so that it gives the
same tensors for the same weights:

* a Hugging Face ``PreTrainedModel``: ``model(input_ids, output_hidden_states=True).hidden_states``;
* a TransformerLens ``HookedTransformer`` (TransformerLens 2 and 3) or ``TransformerBridge``
  (3 and 4): the hooks ``blocks.0.hook_resid_pre`` and ``blocks.{i}.hook_resid_post``, the last
  through ``ln_final``. A ``HookedTransformer`` loaded with ``from_pretrained`` has its weights
  processed (LayerNorm folded, writing weights centred), which changes the residual stream itself:
  it measures as loaded, and equals the Hugging Face model when loaded with
  ``from_pretrained_no_processing``; a bridge equals it unless ``enable_compatibility_mode()``
  processed its weights;
* an nnsight ``LanguageModel`` (or ``TransformersModel``): the wrapped model's
  ``output.hidden_states``, saved inside a trace;
* any callable ``fn(input_ids) -> hidden states``: a sequence of ``[B, T, d]`` tensors, or one
  ``[L + 1, B, T, d]`` tensor, one entry per layer (embedding output first, if it should count).

The wrapper libraries are never imported here: a model is recognised by the module its class comes
from, so the light install measures them when the user has them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from condensation.models import max_positions

log = logging.getLogger("condensation")


class UnsupportedModelError(TypeError):
    """A model of a kind that no adapter reads; the message names the kinds that are read."""


SUPPORTED = ("a Hugging Face PreTrainedModel, a TransformerLens HookedTransformer or TransformerBridge, an nnsight "
             "LanguageModel, or a callable from token ids [B, T] to the per-layer hidden states")


@dataclass
class HiddenStateSource:
    """One way to get a model's per-layer hidden states, and what a measurement records of it."""

    forward: Callable[[torch.Tensor], Sequence[torch.Tensor]]
    """Token ids ``[B, T]`` (on ``device``) to ``L + 1`` tensors ``[B, T, d]``."""
    device: torch.device
    """Where the token ids go (the first layer's device)."""
    kind: str
    """What the model was: ``transformers``, ``transformer_lens``, ``transformer_bridge``, ``nnsight``, ``callable``."""
    name: str = ""
    num_parameters: int | None = None
    max_positions: int | None = None
    """The longest sequence the model takes (None: unknown)."""
    tokenizer: Any = None
    """The wrapper's own tokenizer, when it carries one."""
    dtype: str = ""

    def __call__(self, input_ids: torch.Tensor) -> Sequence[torch.Tensor]:
        hidden = self.forward(input_ids)
        if not isinstance(hidden, (list, tuple)):
            if not (isinstance(hidden, torch.Tensor) and hidden.ndim == 4):
                raise UnsupportedModelError(f"the {self.kind} model returned {type(hidden).__name__}, not per-layer "
                                            "hidden states (a sequence of [B, T, d] tensors or one [L+1, B, T, d])")
            hidden = tuple(hidden.unbind(0))
        shape = tuple(input_ids.shape)
        for layer, states in enumerate(hidden):
            if states.ndim != 3 or tuple(states.shape[:2]) != shape:
                raise UnsupportedModelError(f"the {self.kind} model's hidden states of layer {layer} have shape "
                                            f"{tuple(states.shape)}; expected [{shape[0]}, {shape[1]}, d]")
        if len(hidden) < 2:
            raise UnsupportedModelError(f"the {self.kind} model returned {len(hidden)} layer(s) of hidden states; "
                                        "a depth trend needs at least two")
        return hidden


def _library(model: Any) -> str:
    return type(model).__module__.split(".")[0]


def source_of(model: Any) -> HiddenStateSource:
    """The :class:`HiddenStateSource` of ``model`` (see the module docstring for the kinds)."""
    if isinstance(model, HiddenStateSource):
        return model
    library = _library(model)
    if library == "transformer_lens":
        if callable(getattr(model, "run_with_cache", None)) and hasattr(model, "blocks"):
            return _transformer_lens(model)
        raise UnsupportedModelError(f"a TransformerLens {type(model).__name__} is not read (it has no residual "
                                    f"stream hooks); measure takes {SUPPORTED}")
    if library == "nnsight":
        if callable(getattr(model, "trace", None)):
            return _nnsight(model)
        raise UnsupportedModelError(f"an nnsight {type(model).__name__} without .trace is not read; "
                                    f"measure takes {SUPPORTED}")
    if callable(getattr(model, "get_input_embeddings", None)):  # a Hugging Face model, or one shaped like it
        return _transformers(model)
    if callable(model):
        return HiddenStateSource(forward=model, device=_parameter_device(model), kind="callable",
                                 name=getattr(model, "__name__", type(model).__name__),
                                 num_parameters=_count(model), dtype=_parameter_dtype(model))
    raise UnsupportedModelError(f"cannot measure a {type(model).__name__}: measure takes {SUPPORTED}")


def _parameter_device(model: Any) -> torch.device:
    parameters = getattr(model, "parameters", None)
    first = next(iter(parameters()), None) if callable(parameters) else None
    return first.device if first is not None else torch.device("cpu")


def _parameter_dtype(model: Any) -> str:
    parameters = getattr(model, "parameters", None)
    first = next(iter(parameters()), None) if callable(parameters) else None
    return str(first.dtype) if first is not None else ""


def _count(model: Any) -> int | None:
    parameters = getattr(model, "parameters", None)
    return sum(p.numel() for p in parameters()) if callable(parameters) else None


def _transformers(model: Any) -> HiddenStateSource:
    def forward(input_ids):
        return model(input_ids=input_ids, output_hidden_states=True, use_cache=False).hidden_states

    config = getattr(model, "config", None)
    return HiddenStateSource(
        forward=forward, device=model.get_input_embeddings().weight.device, kind="transformers",
        name=getattr(config, "_name_or_path", "") or type(model).__name__, num_parameters=_count(model),
        max_positions=max_positions(config), dtype=_parameter_dtype(model),
    )


def _transformer_lens(model: Any) -> HiddenStateSource:
    """A ``HookedTransformer`` or ``TransformerBridge``: the residual stream from its hooks."""
    bridge = type(model).__name__ == "TransformerBridge" or hasattr(model, "original_model")
    layers = int(model.cfg.n_layers)
    names = ["blocks.0.hook_resid_pre", *(f"blocks.{i}.hook_resid_post" for i in range(layers))]
    final_norm = getattr(model, "ln_final", None)
    final_hook = "ln_final.hook_out" if bridge and final_norm is not None else None
    if not bridge and str(getattr(model.cfg, "normalization_type", "")).endswith("Pre"):
        log.warning("%s: its LayerNorm weights are folded (from_pretrained's default), so the last layer is the "
                    "normalised stream without them and every layer is centred; load it with "
                    "from_pretrained_no_processing to measure what the Hugging Face model computes",
                    type(model).__name__)

    def forward(input_ids):
        wanted = set(names) | ({final_hook} if final_hook else set())
        _, cache = model.run_with_cache(input_ids, names_filter=lambda name: name in wanted, return_type=None)
        hidden = [cache[name] for name in names]
        if final_hook is not None and final_hook in cache:
            hidden[-1] = cache[final_hook]
        elif not bridge and getattr(model.cfg, "normalization_type", None) is not None and final_norm is not None:
            hidden[-1] = final_norm(hidden[-1])  # what HookedTransformer.forward does before the unembedding
        return hidden

    return HiddenStateSource(
        forward=forward, device=_parameter_device(model), kind="transformer_bridge" if bridge else "transformer_lens",
        name=str(getattr(model.cfg, "model_name", "") or type(model).__name__), num_parameters=_count(model),
        max_positions=max_positions(model.cfg), tokenizer=getattr(model, "tokenizer", None),
        dtype=_parameter_dtype(model),
    )


def _nnsight(model: Any) -> HiddenStateSource:
    """An nnsight ``LanguageModel``: the wrapped model's hidden states, saved inside a trace."""

    def forward(input_ids):
        with model.trace(input_ids, output_hidden_states=True, use_cache=False):
            hidden = model.output.hidden_states.save()
        return tuple(hidden)

    config = getattr(model, "config", None)
    return HiddenStateSource(
        forward=forward, device=_parameter_device(model), kind="nnsight",
        name=str(getattr(config, "_name_or_path", "") or type(model).__name__), num_parameters=_count(model),
        max_positions=max_positions(config), tokenizer=getattr(model, "tokenizer", None),
        dtype=_parameter_dtype(model),
    )
