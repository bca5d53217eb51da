"""What a training method adds to cross-entropy, as the loop sees it: one ``TrainingTerm``.

``config.objectives.TrainingMethod.build()`` makes the term of a config's method; ``train(...,
method=term)`` trains with it, and ``method=None`` trains on cross-entropy alone. A term may

    add a loss        ``weight`` x ``added_loss(...)``, from the hidden states (an auxiliary loss:
                      ``training.losses.AuxiliaryLoss``, or any ``HiddenStateLoss``), from them and
                      the input ids (``training.losses.RepresentationLoss``) or from the
                      logits (``training.distillation.Teacher``); weight 0 adds nothing, and the
                      loop then computes neither the term nor the hidden states
    hook the loop     ``prepare(model)`` once before the optimizer is built, ``inputs_embeds``
                      every training micro-batch, ``after_step`` after every update
                      (``training.baselines``)

and says what a resumed run must share with the one that saved its state (``identity``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

AutocastFactory = Callable[[], contextlib.AbstractContextManager]


class TrainingTerm:
    """Cross-entropy alone: a term that adds nothing and hooks nothing. Subclasses override what
    they change."""

    weight: float = 0.0
    """What ``added_loss`` is multiplied by in ``loss = ce + weight * added``."""
    needs_hidden_states = False
    """Whether ``added_loss`` reads the hidden states (the forward then returns them)."""
    hooks_the_model = False
    """Whether its hooks change the model or what it is fed (a baseline): such a term cannot run
    on FSDP shards, and every step ends on the host, so its hook sees the step's numbers."""

    def added_loss(self, *, logits: Tensor, hidden_states: tuple[Tensor, ...] | None, input_ids: Tensor,
                   autocast: AutocastFactory) -> Tensor:
        """The unweighted term of one training micro-batch (called only when ``weight > 0``)."""
        raise NotImplementedError(f"{type(self).__name__} adds no loss")

    def prepare(self, model: nn.Module) -> None:
        """Called once before the optimizer is built: parameters may be replaced here."""

    def inputs_embeds(self, model: nn.Module, input_ids: Tensor) -> Tensor | None:
        """Embeddings for a training forward, or None to feed ``input_ids`` as usual."""
        return None

    def after_step(self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, *, seed: int = 0,
                   final: bool = False) -> None:
        """Called after every optimizer update; ``step`` is the new global step (1 after the first
        update), ``seed`` the run's seed, ``final`` True after the last update of the run."""

    def to(self, device: torch.device) -> TrainingTerm:
        """Move what the term holds (a teacher's weights) to the run's device."""
        return self

    def identity(self) -> dict[str, Any]:
        """What a resumed run must share with the run that saved its state: the weight of the added
        term, and a baseline's, a teacher's or a representation loss' description. A term without
        a representation loss says None, so that it resumes no state a JREG or SimReg run saved
        (``training.losses.RepresentationLoss``), while the states saved before the key existed,
        which lack it, still read as None."""
        return {"aux_weight": self.weight, "baseline": None, "representation_loss": None}


class HiddenStateLoss(TrainingTerm):
    """``weight`` x ``loss(hidden_states)``: any loss of a model's ``output.hidden_states`` (the
    embedding output first, then one tensor per block) that returns a scalar tensor."""

    needs_hidden_states = True

    def __init__(self, loss: Callable[[tuple[Tensor, ...]], Tensor], weight: float) -> None:
        self.loss, self.weight = loss, weight

    def added_loss(self, *, logits: Tensor, hidden_states: tuple[Tensor, ...] | None, input_ids: Tensor,
                   autocast: AutocastFactory) -> Tensor:
        return self.loss(hidden_states)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.loss!r}, weight={self.weight!r})"
