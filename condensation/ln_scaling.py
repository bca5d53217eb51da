"""LayerNorm Scaling (Sun et al., "The Curse of Depth in Large Language Models", arXiv 2502.05795):
the output of each pre-norm block's layer normalisations is multiplied by 1/sqrt(l), l = 1..L
the block's 1-based index. In a pre-LN transformer the residual stream's variance grows with
depth, so a deep block's update is small beside the stream and the block is close to an
identity; the constant keeps each block's output variance in step with the depth. The final
norm (GPT2's ``ln_f``, Llama's ``norm``) is not scaled. It is no loss: it changes the
architecture, so it applies to models trained from scratch (``ln_scaling`` on a ``pretrain`` or
``init`` model of the config).

How a scaled model trains, is saved and is loaded:

* trained: :func:`enable` puts a forward hook on each scaled norm that multiplies its output by
  the block's constant, a Python float held by the hook: no parameter, no buffer, so the
  optimizer, the state dict and the resumable state (``training.checkpointing``: the raw
  parameters) are those of the plain architecture, and a resumed run continues exactly;
* saved: every ``save_pretrained`` directory that readers load (evaluation checkpoints,
  ``final/``, an ``init`` model's weights) holds :func:`folded_state_dict`, the constant folded
  into the norm's weight and bias (LN(x) c = x_hat (gamma c) + beta c, exact up to rounding), and
  ``ln_scaling: true`` in its ``config.json`` (and the manifest: ``ln_scaling: folded``);
* loaded: a plain ``from_pretrained`` (extraction, lm-eval, ``condensation measure``) is then the
  same function as the model that trained, with no hook. Nothing that loads weights installs the
  hooks: only the builders of fresh weights do (``models.build_gpt2``, and
  ``models.build_from_config`` where a config says ``ln_scaling``), so folded weights are never
  scaled twice.

Torch is not imported here: the functions only touch the modules and tensors they are given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

CONFIG_KEY = "ln_scaling"
"""The attribute of a model's config (and key of its ``config.json``) that marks the architecture as
LN-scaled; the key of an ``arch`` mapping that asks ``models.build_gpt2`` for it."""

BLOCK_NORMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gpt2": ("h", ("ln_1", "ln_2")),
    **{model_type: ("layers", ("input_layernorm", "post_attention_layernorm"))
       for model_type in ("llama", "mistral", "qwen2", "qwen3")},
}
"""Per ``config.model_type``: the base model's list of blocks and the names of the norms in each
block that take the block's input (before attention, before the MLP). Only pre-norm
architectures whose norm multiplies by its weight (and adds its bias): the fold is exact there
(not Gemma's ``1 + weight``, nor OLMo2's norms of the sublayers' outputs)."""


class ScaleOutput:
    """A forward hook that multiplies a module's output by a constant."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __call__(self, module: Any, args: Any, output: torch.Tensor) -> torch.Tensor:
        return output * self.scale

    def __repr__(self) -> str:
        return f"ScaleOutput({self.scale!r})"


def block_norms(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module, float]]:
    """``(name, norm, 1/sqrt(l))`` of each block input norm of ``model`` (a causal LM or its base
    model), blocks in order; ``name`` as in ``model.named_modules()`` and its state dict."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in BLOCK_NORMS:
        raise ValueError(f"ln_scaling: a {type(model).__name__} (model_type {model_type!r}) is not supported; "
                         f"it scales the block input norms of {', '.join(sorted(BLOCK_NORMS))} models")
    blocks_name, norm_names = BLOCK_NORMS[model_type]
    base = model.base_model
    prefix = next(name for name, module in model.named_modules() if module is base)
    found = []
    for index, block in enumerate(getattr(base, blocks_name)):
        for norm_name in norm_names:
            name = ".".join(part for part in (prefix, blocks_name, str(index), norm_name) if part)
            found.append((name, getattr(block, norm_name), 1.0 / math.sqrt(index + 1)))
    return found


def enable(model: torch.nn.Module) -> torch.nn.Module:
    """Scale ``model``'s block input norms in its forward (a hook on each, see the module
    docstring) and mark its config ``ln_scaling: true``; returns ``model``. For fresh weights only
    (a build from config): weights saved by a scaled model hold the constants already."""
    norms = block_norms(model)
    if any(hasattr(norm, "ln_scale") for _, norm, _ in norms):
        raise ValueError("ln_scaling: the model's norms are scaled already; scaling them again would square "
                         "the constant")
    for _, norm, scale in norms:
        norm.ln_scale = scale  # a plain attribute: not a parameter, not a buffer, not in the state dict
        norm.register_forward_hook(ScaleOutput(scale))
    setattr(model.config, CONFIG_KEY, True)
    return model


def scales(model: torch.nn.Module) -> dict[str, float]:
    """Name -> constant of each norm :func:`enable` scaled in ``model``'s forward; empty for a model
    without the hooks (unscaled, or loaded from folded weights)."""
    return {name: module.ln_scale for name, module in model.named_modules() if hasattr(module, "ln_scale")}


def is_scaled(model: torch.nn.Module) -> bool:
    """Whether ``model``'s forward scales its norms (its hooks, not its config, say so)."""
    return bool(scales(model))


def folded_state_dict(
    model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """``state_dict`` (None: ``model.state_dict()``) with each scaled norm's weight and bias times
    its constant: what ``save_pretrained`` writes, so that a plain load computes what ``model``
    computes. New tensors for those entries; the others are the given ones (tied weights stay
    one tensor), and ``model``'s parameters are not changed. Keys ``state_dict`` lacks (another
    rank's shards) are left out."""
    folded = dict(model.state_dict() if state_dict is None else state_dict)
    for name, scale in scales(model).items():
        for key in (f"{name}.weight", f"{name}.bias"):
            if folded.get(key) is not None:
                folded[key] = folded[key].detach() * scale
    return folded


def saved_state_dict(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor] | None = None):
    """What ``save_pretrained(state_dict=...)`` should get for ``model``: its folded state dict when
    it is scaled, else ``state_dict`` as given (None: ``save_pretrained`` reads the model)."""
    return folded_state_dict(model, state_dict) if is_scaled(model) else state_dict


def manifest_fields(model: torch.nn.Module) -> dict[str, str]:
    """What a saved directory's manifest records about the scaling: nothing for an unscaled model."""
    return {CONFIG_KEY: "folded into the saved weights of the block input norms"} if is_scaled(model) else {}
