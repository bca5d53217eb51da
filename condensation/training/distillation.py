"""Knowledge distillation: the student learns from the data and from a teacher's next-token
distribution, the teacher run on the same tokens in the same step (no stored logits).

    loss = CE(student) + weight * T^2 * KL(softmax(teacher / T) || softmax(student / T))

(Hinton et al. 2015; options and the reasons for their defaults: ``config.objectives.DistillationConfig``).
The KL is averaged over the positions cross-entropy scores (every position but the last of a
block, whose next token is not in the block), so both terms are per-token means.

The teacher is frozen: eval mode (no dropout: its distribution is the target, not a sample of
it), ``requires_grad`` off and run under ``torch.no_grad``, so it holds no activations for the
backward pass and gets no optimizer state. Student and teacher must share a tokenizer: the KL
compares distributions over token ids, and two vocabularies would pair unrelated tokens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from condensation.config.objectives import DistillationConfig
from condensation.training.terms import AutocastFactory, TrainingTerm


def distillation_loss(student_logits: Tensor, teacher_logits: Tensor, temperature: float) -> Tensor:
    """``T^2 * KL(softmax(teacher / T) || softmax(student / T))`` per position, summed over the
    vocabulary and averaged over every position but each block's last: ``[B, T, V]`` logits ->
    0-dim float32 tensor (float64 for float64 input). The gradient reaches the student only."""
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student logits {tuple(student_logits.shape)} and teacher logits "
                         f"{tuple(teacher_logits.shape)} differ in shape")
    if student_logits.shape[1] < 2:
        raise ValueError("distillation needs blocks of at least 2 tokens (the last position is not scored)")
    dtype = torch.promote_types(student_logits.dtype, torch.float32)  # a bf16 log-softmax loses precision
    log_student = F.log_softmax(student_logits.to(dtype) / temperature, dim=-1)
    log_teacher = F.log_softmax(teacher_logits.detach().to(dtype) / temperature, dim=-1)
    per_position = (log_teacher.exp() * (log_teacher - log_student)).sum(-1)
    return temperature**2 * per_position[:, :-1].mean()


class Teacher(TrainingTerm):
    """A frozen model whose next-token distribution the student is trained towards: the
    ``distillation`` objective's term (``training.terms``), ``config.weight`` x :meth:`loss`."""

    def __init__(self, model: torch.nn.Module, config: DistillationConfig, *, vocab_size: int, name: str = "") -> None:
        self.model, self.config, self.vocab_size, self.name = model, config, vocab_size, name or config.teacher
        self.weight = config.weight
        model.eval()
        model.requires_grad_(False)

    @classmethod
    def matched(cls, config: DistillationConfig, *, model: torch.nn.Module, tokenizer: Any, student_tokenizer: Any,
                where: str = "the method's teacher") -> Teacher:
        """The teacher (what ``TrainingMethod.build`` calls for distillation), after checking that its
        tokenizer is the student's (ValueError naming ``where`` otherwise). Logits are compared over
        the tokenizer's ids only: models may pad their output layer with unused rows (Qwen2.5 does, to
        a size that varies with the model)."""
        if tokenizer.get_vocab() != student_tokenizer.get_vocab():
            sizes = (f"{len(tokenizer)} tokens against the student's {len(student_tokenizer)}"
                     if len(tokenizer) != len(student_tokenizer) else "the same number of tokens, other ids")
            raise ValueError(
                f"{where}: teacher '{config.teacher}' has another tokenizer than the student ({sizes}); "
                "distillation compares next-token distributions id by id, so name a teacher of the student's "
                "tokenizer (the same family)"
            )
        return cls(model, config, vocab_size=len(tokenizer))

    def describe(self) -> dict[str, Any]:
        """What a resumed run must share with the one that saved its state."""
        return {"teacher": self.name, "weight": self.config.weight, "temperature": self.config.temperature,
                "vocab_size": self.vocab_size}

    def identity(self) -> dict[str, Any]:
        # weight 0 trains on CE alone: no teacher runs, so none is recorded
        return {**super().identity(), **({"teacher": self.describe()} if self.weight > 0 else {})}

    def added_loss(self, *, logits: Tensor, hidden_states: tuple[Tensor, ...] | None, input_ids: Tensor,
                   autocast: AutocastFactory) -> Tensor:
        return self.loss(logits, input_ids, autocast)

    def to(self, device: torch.device) -> Teacher:
        self.model.to(device)
        return self

    def loss(self, student_logits: Tensor, input_ids: Tensor,
             autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> Tensor:
        """The distillation term (unweighted) for a student's logits on ``input_ids``: the teacher
        runs on the same ids now, without gradients."""
        with torch.no_grad(), autocast():
            teacher_logits = self.model(input_ids=input_ids, use_cache=False).logits
        vocab = self.vocab_size
        for who, logits in (("student", student_logits), ("teacher", teacher_logits)):
            if logits.shape[-1] < vocab:
                raise ValueError(f"the {who}'s output layer has {logits.shape[-1]} rows "
                                 f"for a tokenizer of {vocab} tokens")
        return distillation_loss(student_logits[..., :vocab], teacher_logits[..., :vocab], self.config.temperature)
