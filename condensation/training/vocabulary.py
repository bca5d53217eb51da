"""A vocabulary padded for training (``TrainConfig.pad_vocab_to_multiple_of``): the token embedding
and the LM head get zero rows up to a multiple of 64, so that the head's GEMMs run on aligned
shapes (nanoGPT trains GPT-2 at 50,304 rows instead of 50,257), without changing what the run
computes:

    pad_vocabulary      before training: zero rows appended, drawn from no RNG, so the true rows
                        and every later random draw are what they were
    true_vocabulary     around validation and saving: the model as it was (its rows cut back to
                        the true vocabulary, as views of the padded weights), so validation sees
                        the same logits and every checkpoint is the original architecture
    cut_to_vocabulary   after training: the caller's model back at its true vocabulary

The training forward cuts the logits to the true vocabulary before the loss (``batches.
forward_and_ce``), so the padded rows get no gradient: AdamW keeps a zero row with zero moments at
zero (its weight decay scales zero), and no sampler ever sees them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn


def padded_size(vocab_size: int, multiple: int) -> int:
    """The least multiple of ``multiple`` that holds ``vocab_size`` rows."""
    return -(-vocab_size // multiple) * multiple


def vocab_rows(model: nn.Module) -> int:
    """Rows of the model's token embedding (the padded count once padded)."""
    return model.get_input_embeddings().weight.shape[0]


def pad_vocabulary(model: nn.Module, multiple: int) -> int:
    """Pad ``model``'s token embedding and LM head (in place) with zero rows to a multiple of
    ``multiple``; returns the true vocabulary size. A tied head stays tied. A model whose
    embedding or head is not a plain ``nn.Embedding`` / ``nn.Linear`` is left as it is."""
    vocab_size = vocab_rows(model)
    rows = padded_size(vocab_size, multiple)
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    if rows == vocab_size or not (isinstance(embedding, nn.Embedding) and isinstance(head, nn.Linear)):
        return vocab_size

    def with_zero_rows(weight: torch.Tensor) -> nn.Parameter:
        zeros = weight.new_zeros(rows - weight.shape[0], *weight.shape[1:])
        return nn.Parameter(torch.cat([weight.detach(), zeros]), requires_grad=weight.requires_grad)

    _replace_rows(model, rows, with_zero_rows)
    return vocab_size


def cut_to_vocabulary(model: nn.Module, vocab_size: int) -> None:
    """Undo ``pad_vocabulary`` (in place): the embedding and head keep their first ``vocab_size``
    rows, as views of the padded weights (no copy)."""
    if vocab_rows(model) == vocab_size:
        return

    def first_rows(weight: torch.Tensor) -> nn.Parameter:
        return nn.Parameter(weight.detach()[:vocab_size], requires_grad=weight.requires_grad)

    _replace_rows(model, vocab_size, first_rows)


@contextlib.contextmanager
def true_vocabulary(model: nn.Module, vocab_size: int) -> Iterator[nn.Module]:
    """Within: ``model`` at its true vocabulary (``cut_to_vocabulary``); after: its padded weights
    again, the very parameters the optimizer holds. Nothing may train inside."""
    if vocab_rows(model) == vocab_size:
        yield model
        return
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    padded = (embedding.weight, embedding.num_embeddings, head.weight, head.bias, head.out_features)
    cut_to_vocabulary(model, vocab_size)
    try:
        yield model
    finally:
        embedding.weight, embedding.num_embeddings, head.weight, head.bias, head.out_features = padded


def _replace_rows(model: nn.Module, rows: int, replace: Callable[[torch.Tensor], nn.Parameter]) -> None:
    """Give the embedding and the head ``rows`` rows, each weight (and a head bias) replaced by
    ``replace``'s; a tied head gets the embedding's new parameter, so it stays tied."""
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = head.weight is embedding.weight
    embedding.weight = replace(embedding.weight)
    embedding.num_embeddings = rows
    head.weight = embedding.weight if tied else replace(head.weight)
    if head.bias is not None:
        head.bias = replace(head.bias)
    head.out_features = rows
