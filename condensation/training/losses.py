"""Auxiliary losses that push token hidden states apart, against embedding condensation.

From "Dispersion loss counteracts embedding condensation" (arXiv 2602.00217). Each loss takes
one layer's hidden states ``z`` of shape ``[B, T, F]`` and compares the ``T`` tokens of each
sequence with each other (never across sequences); the training objective is
``L_LM + weight * auxiliary_loss(output.hidden_states, config)`` for any Hugging Face causal LM
run with ``output_hidden_states=True``.

Losses (``D_ij`` is a distance between tokens ``i != j`` of one sequence):

* ``dispersion`` (the paper's): ``D_ij = arccos(cos(z_i, z_j)) / pi`` in [0, 1], loss =
  log-mean-exp over ``i != j`` of ``-D_ij / tau``, averaged over the batch. The paper writes
  log-SUM-exp; the two differ by the constant ``log(T(T-1))`` only (same gradient), and the
  mean makes values comparable across sequence lengths;
* ``decorrelation``: mean squared off-diagonal token-token correlation (tokens standardised
  over features). The paper's text says it decorrelates feature dimensions (the covariance of
  the features); the authors' code, whose numbers the paper reports, penalises the correlation
  between tokens, and so does this one: it acts on the same token pairs as the other losses
  (the thing that condenses), and a feature-feature version would need more tokens than a
  sequence has to estimate an F x F covariance;
* ``l2_repel``: as dispersion with ``D_ij = ||z_i - z_j||^2 / F``, plus ``norm_weight * mean(z^2)``
  so that the loss cannot be lowered just by scaling every state up;
* ``orthogonalization``: mean over ``i != j`` of ``relu(margin - D_ij)^2`` with the angular ``D``.

Two representation losses read the whole ``output.hidden_states`` tuple and the input ids,
``(hidden_states, input_ids, settings)``, through ``representation_loss``:

* ``jreg`` (arXiv 2601.18302): the mean over tokens of ``1 - cos(h_{l-1}, h_l)`` at the last block;
* ``simreg`` (arXiv 2605.08809): a supervised-contrastive loss over the positions of each sequence,
  labelled with their next token.

Every loss computes in float32 at least (bf16/fp16 inputs are upcast, autocast is switched off
inside) and returns a 0-dim tensor: float32, or float64 for float64 input (so ``gradcheck``
works). ``reference_layer_loss`` and ``reference_representation_loss`` run an objective's slow
loop-based float64 transcription of its definition (``reference_dispersion`` and the others here,
named by the registry entry), so that tests can compare the two.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from condensation.config.objectives import OBJECTIVES, PLACEMENTS, AuxLossConfig, RepresentationLossConfig
from condensation.cosine import NORM_EPS, unit_rows
from condensation.training.kernels import _no_autocast, dispersion_tiled, dispersion_tiled_layers
from condensation.training.terms import AutocastFactory, HiddenStateLoss, TrainingTerm

# ----------------------------------------------------------------------------------------------
# layer placement and token subsampling


def select_layers(hidden_states: Sequence[Tensor], placement: str) -> list[Tensor]:
    """The hidden states that get the loss, from ``output.hidden_states`` (``L + 1`` tensors).

    Index 0, the embedding output, is never used: it has no block before it to shape it.
    With ``L`` blocks: ``all`` = 1..L, ``last`` = L, ``early_half`` = 1..L//2,
    ``late_half`` = L//2+1..L (so for odd L the middle block belongs to the late half).
    Index L is what the model returns last; for most HF models it already has the final norm.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; allowed: {', '.join(PLACEMENTS)}")
    num_blocks = len(hidden_states) - 1
    if num_blocks < 1:
        raise ValueError(f"need the embedding output plus at least one block's hidden states, "
                         f"got {len(hidden_states)} tensors")
    half = num_blocks // 2
    indices = {
        "all": range(1, num_blocks + 1),
        "last": range(num_blocks, num_blocks + 1),
        "early_half": range(1, half + 1),
        "late_half": range(half + 1, num_blocks + 1),
    }[placement]
    if len(indices) == 0:
        raise ValueError(f"placement {placement!r} selects no layer for a model with {num_blocks} block(s)")
    return [hidden_states[i] for i in indices]


def subsample_tokens(z: Tensor, max_tokens: int | None, generator: torch.Generator | None = None) -> Tensor:
    """``z[:, idx]`` for ``max_tokens`` random positions if ``T > max_tokens``, else ``z`` itself.

    The positions are shared by the whole batch (one gather) and drawn from ``generator``, or
    the global CPU RNG if None; nothing is drawn when no subsampling is needed.
    """
    num_tokens = z.shape[1]
    if max_tokens is None or num_tokens <= max_tokens:
        return z
    device = generator.device if generator is not None else torch.device("cpu")
    idx = torch.randperm(num_tokens, generator=generator, device=device)[:max_tokens]
    return z[:, idx.sort().values.to(z.device)]  # sorted: keeps token order, easier to debug


# ----------------------------------------------------------------------------------------------
# shared pieces


def cosine_matrix(z: Tensor) -> Tensor:
    """``[B, T, F] -> [B, T, T]`` token-token cosines; zero vectors give 0, with finite gradients."""
    zn = unit_rows(z)[0]  # the measurements' normalisation, with a finite gradient at 0
    return zn @ zn.mT


def angular_distance(cos: Tensor, clamp: float) -> Tensor:
    """``arccos(cos) / pi`` in [0, 1], with a straight-through clamp to ``[-1 + clamp, 1 - clamp]``.

    The forward value uses the clamped cosine; the gradient is arccos' slope at the clamped
    value, passed to ``cos`` unchanged (a plain clamp would zero it, and no clamp gives an
    infinite slope at +-1, e.g. on the diagonal, which turns into NaN via 0 * inf).
    """
    clamped = cos + (cos.clamp(-1.0 + clamp, 1.0 - clamp) - cos).detach()
    return torch.acos(clamped) / math.pi


def _offdiag_mask(num_tokens: int, device: torch.device) -> Tensor:
    return ~torch.eye(num_tokens, dtype=torch.bool, device=device)


def _log_mean_exp_offdiag(x: Tensor) -> Tensor:
    """``[B, T, T] -> [B]``: log of the mean of ``exp(x_ij)`` over ``i != j``."""
    num_tokens = x.shape[-1]
    x = x.masked_fill(~_offdiag_mask(num_tokens, x.device), float("-inf"))  # exp(-inf) = 0: pair dropped
    return torch.logsumexp(x.flatten(1), dim=1) - math.log(num_tokens * (num_tokens - 1))


def _mean_offdiag(x: Tensor) -> Tensor:
    """Mean of ``x_bij`` over the batch and ``i != j``."""
    return x[:, _offdiag_mask(x.shape[-1], x.device)].mean()


# ----------------------------------------------------------------------------------------------
# the four losses, one layer each, on float32-or-wider z


def dispersion(z: Tensor, config: AuxLossConfig) -> Tensor:
    """``_dispersion_dense``'s value and gradient, computed tile by tile (``kernels``): autograd
    keeps no ``[B, T, T]`` tensor, so the loss on every layer no longer costs ``O(L B T^2)`` memory."""
    return dispersion_tiled(z, config.tau, config.clamp, norm_eps=NORM_EPS, kernel=config.kernel,
                            products=config.products)


def dispersion_layers(layers: Sequence[Tensor], config: AuxLossConfig) -> Tensor:
    """The mean of ``dispersion`` over layers of one shape, in one tiled call over all of them
    (the registry's ``stacked`` entry for dispersion; ``kernels.TiledDispersion`` says why)."""
    return dispersion_tiled_layers(layers, config.tau, config.clamp, norm_eps=NORM_EPS, kernel=config.kernel,
                                   products=config.products)


def _dispersion_dense(z: Tensor, config: AuxLossConfig) -> Tensor:
    """The paper's loss, as log-MEAN-exp: it differs from the paper's log-sum-exp only by the
    constant ``log(T(T-1))``, so the gradient is identical, but values compare across T."""
    dist = angular_distance(cosine_matrix(z), config.clamp)
    return _log_mean_exp_offdiag(-dist / config.tau).mean()


def decorrelation(z: Tensor, config: AuxLossConfig) -> Tensor:
    """Mean squared Pearson correlation between distinct tokens (across features)."""
    centred = z - z.mean(-1, keepdim=True)
    std = centred.pow(2).mean(-1, keepdim=True).clamp_min(NORM_EPS**2).sqrt()  # biased: C_ii = 1
    standard = centred / std
    corr = standard @ standard.mT / z.shape[-1]
    return _mean_offdiag(corr.pow(2))


def l2_repel(z: Tensor, config: AuxLossConfig) -> Tensor:
    """Dispersion with squared Euclidean distance per feature, plus a norm penalty."""
    sq_norm = z.pow(2).sum(-1)
    # Expanded form, floored at 0 against cancellation; cdist's gradient is NaN at distance 0.
    sq_dist = (sq_norm[:, :, None] + sq_norm[:, None, :] - 2.0 * (z @ z.mT)).clamp_min(0.0)
    # Divided by F: raw squared distances of large-norm states make exp(-D/tau) underflow to 0
    # for every pair, and the loss goes flat (the reference code's bug).
    dist = sq_dist / z.shape[-1]
    repel = _log_mean_exp_offdiag(-dist / config.tau).mean()
    return repel + config.norm_weight * z.pow(2).mean()


def orthogonalization(z: Tensor, config: AuxLossConfig) -> Tensor:
    """Hinge on angular distance: only pairs closer than ``margin`` are pushed apart."""
    dist = angular_distance(cosine_matrix(z), config.clamp)
    return _mean_offdiag(torch.relu(config.margin - dist).pow(2))


# ----------------------------------------------------------------------------------------------
# public entry points


def _check_hidden(z: Tensor) -> None:
    if z.dim() != 3:
        raise ValueError(f"hidden states must be [B, T, F], got shape {tuple(z.shape)}")
    if not z.is_floating_point():
        raise ValueError(f"hidden states must be floating point, got {z.dtype}")
    if z.shape[1] < 2:
        raise ValueError(f"auxiliary losses compare tokens pairwise and need T >= 2, got T={z.shape[1]}")


@functools.cache
def _layer_loss_function(name: str) -> Callable[[Tensor, AuxLossConfig], Tensor]:
    """The per-layer loss of an auxiliary objective, as the registry ``config.objectives.OBJECTIVES`` names it."""
    return OBJECTIVES[name].load()


@functools.cache
def _stacked_loss_function(name: str) -> Callable[[Sequence[Tensor], AuxLossConfig], Tensor] | None:
    """The objective's loss over several layers at once (its registry entry's ``stacked``), or None."""
    return OBJECTIVES[name].load_stacked()


def _sampled(z: Tensor, config: AuxLossConfig, generator: torch.Generator | None) -> Tensor:
    """``z`` checked and subsampled to ``config.max_tokens`` positions: what a layer's loss sees."""
    _check_hidden(z)
    return subsample_tokens(z, config.max_tokens, generator)


def _loss_of_sampled(z: Tensor, config: AuxLossConfig) -> Tensor:
    with _no_autocast(z.device):
        # float64 stays float64 (gradcheck); everything narrower computes in float32.
        z = z.to(torch.promote_types(z.dtype, torch.float32))
        return _layer_loss_function(config.name)(z, config)


def layer_loss(z: Tensor, config: AuxLossConfig, generator: torch.Generator | None = None) -> Tensor:
    """One layer's auxiliary loss: ``[B, T, F]`` hidden states -> 0-dim tensor, mean over batch."""
    return _loss_of_sampled(_sampled(z, config, generator), config)


def auxiliary_loss(hidden_states: Sequence[Tensor], config: AuxLossConfig,
                   generator: torch.Generator | None = None) -> Tensor:
    """Mean of ``layer_loss`` over the layers ``config.placement`` selects, unweighted.

    ``hidden_states`` is a HF ``output.hidden_states`` tuple; multiply by ``config.weight``.
    An objective with a ``stacked`` loss (dispersion) gets all selected layers in one call when
    they share one shape, dtype and device, as a HF model's do: the same value up to float
    rounding (a mean of equal-size means), on CUDA in one tile loop instead of one per layer
    (``kernels.stacks_layers``). Each layer is subsampled first, with the same draws as
    ``layer_loss`` would make (``max_tokens`` keeps as many positions in every layer, so the
    shapes still agree); layers of different shapes get one call each.
    """
    layers = [_sampled(z, config, generator) for z in select_layers(hidden_states, config.placement)]
    stacked = _stacked_loss_function(config.name)
    if stacked is not None and len({(z.shape, z.dtype, z.device) for z in layers}) == 1:
        return stacked(layers, config)
    return torch.stack([_loss_of_sampled(z, config) for z in layers]).mean()


class AuxiliaryLoss(HiddenStateLoss):
    """An auxiliary objective's term for the training loop: ``settings.weight`` x
    ``auxiliary_loss(hidden_states, settings)`` (what ``TrainingMethod.build()`` gives for every
    auxiliary loss of the registry)."""

    def __init__(self, settings: AuxLossConfig) -> None:
        super().__init__(functools.partial(auxiliary_loss, config=settings), settings.weight)
        self.settings = settings

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings!r})"


# ----------------------------------------------------------------------------------------------
# representation losses: of the whole hidden-state tuple and the input ids


def _wide(z: Tensor) -> Tensor:
    """float64 stays float64 (gradcheck); everything narrower computes in float32."""
    return z.to(torch.promote_types(z.dtype, torch.float32))


def jump_pair(hidden_states: Sequence[Tensor], layer: int) -> tuple[Tensor, Tensor]:
    """``(hidden_states[layer - 1], hidden_states[layer])``, ``layer`` counted from the end when
    negative: the input and the output of one block (``JregConfig`` says why -1 is the last
    block's jump). ValueError for the embedding output (index 0) or an index past the tuple."""
    index = layer + len(hidden_states) if layer < 0 else layer
    if not 1 <= index < len(hidden_states):
        raise ValueError(f"layer {layer} has no layer before it in {len(hidden_states)} hidden states "
                         f"(the embedding output and {len(hidden_states) - 1} block(s))")
    return hidden_states[index - 1], hidden_states[index]


def jreg(hidden_states: Sequence[Tensor], input_ids: Tensor, config: RepresentationLossConfig) -> Tensor:
    """JREG: the mean over every token of ``1 - cos(h_{l-1}, h_l)``, the jump of block ``config.layer``
    (the input ids are not read)."""
    before, after = (_wide(z) for z in jump_pair(hidden_states, config.layer))
    return (1.0 - (unit_rows(before)[0] * unit_rows(after)[0]).sum(-1)).mean()


def next_token_labels(input_ids: Tensor) -> Tensor:
    """``[B, T] -> [B, T - 1]``: position t's label is ``input_ids[:, t + 1]``; the last position has none."""
    return input_ids[:, 1:]


def _labelled_positions(num_positions: int, max_tokens: int | None, device: torch.device) -> Tensor | None:
    """Sorted random positions, ``max_tokens`` of ``num_positions`` (the global CPU RNG, as
    ``subsample_tokens``), or None when all are kept."""
    if max_tokens is None or num_positions <= max_tokens:
        return None
    return torch.randperm(num_positions)[:max_tokens].sort().values.to(device)


def supervised_contrastive(z: Tensor, labels: Tensor, tau: float) -> Tensor:
    """SupCon over the positions of each sequence of ``z`` ``[B, N, F]`` with ``labels`` ``[B, N]``:
    the mean, over anchors with a positive (another position of their label in their sequence),
    of ``-mean_pos log softmax_{k != i}(cos(z_i, z_k) / tau)``; 0, with a zero gradient, when no
    anchor has one. Every quantity is finite: the anchor itself is left out of the softmax'
    normaliser only, not as a -inf logit that 0 x inf would turn into NaN."""
    if z.shape[1] < 2:  # one position: nothing to contrast
        return (z * 0.0).sum()
    unit = unit_rows(z)[0]
    logits = unit @ unit.mT / tau
    own = torch.eye(z.shape[1], dtype=torch.bool, device=z.device)
    log_prob = logits - torch.logsumexp(logits.masked_fill(own, float("-inf")), dim=-1, keepdim=True)
    positive = (labels[:, :, None] == labels[:, None, :]) & ~own
    count = positive.sum(-1)
    per_anchor = -(log_prob * positive).sum(-1) / count.clamp_min(1)
    anchors = count > 0
    return (per_anchor * anchors).sum() / anchors.sum().clamp_min(1)


def simreg(hidden_states: Sequence[Tensor], input_ids: Tensor, config: RepresentationLossConfig) -> Tensor:
    """SimReg: ``supervised_contrastive`` on the positions that have a next token, labelled with it,
    in each layer ``config.placement`` selects (the mean over them), on ``config.max_tokens``
    random positions (the same for every layer) when there are more."""
    labels = next_token_labels(input_ids)
    keep = _labelled_positions(labels.shape[1], config.max_tokens, labels.device)
    if keep is not None:
        labels = labels[:, keep]
    layers = []
    for z in select_layers(hidden_states, config.placement):
        z = _wide(z)[:, :-1]
        layers.append(supervised_contrastive(z if keep is None else z[:, keep], labels, config.tau))
    return torch.stack(layers).mean()


@functools.cache
def _representation_function(name: str) -> Callable[..., Tensor]:
    """The loss of a representation objective, as the registry names it."""
    return OBJECTIVES[name].load()


def _check_representation_inputs(hidden_states: Sequence[Tensor], input_ids: Tensor) -> None:
    if len(hidden_states) < 2:
        raise ValueError(f"need the embedding output plus at least one block's hidden states, "
                         f"got {len(hidden_states)} tensors")
    for z in hidden_states:
        if z.dim() != 3 or not z.is_floating_point():
            raise ValueError(f"hidden states must be floating-point [B, T, F], got {z.dtype} of shape {tuple(z.shape)}")
    if input_ids.dim() != 2 or tuple(input_ids.shape) != tuple(hidden_states[-1].shape[:2]):
        raise ValueError(f"input_ids must be [B, T] = {tuple(hidden_states[-1].shape[:2])}, "
                         f"got shape {tuple(input_ids.shape)}")


def representation_loss(hidden_states: Sequence[Tensor], input_ids: Tensor,
                        config: RepresentationLossConfig) -> Tensor:
    """A representation loss, unweighted: ``output.hidden_states`` of a model run with
    ``output_hidden_states=True`` and its ``[B, T]`` input ids -> a 0-dim tensor (float32 at
    least; autocast off inside). Multiply by ``config.weight``."""
    _check_representation_inputs(hidden_states, input_ids)
    with _no_autocast(hidden_states[-1].device):
        return _representation_function(config.name)(hidden_states, input_ids, config)


class RepresentationLoss(TrainingTerm):
    """A representation objective's term for the training loop: ``settings.weight`` x
    ``representation_loss(hidden_states, input_ids, settings)`` (what ``TrainingMethod.build()``
    gives for every representation loss of the registry)."""

    needs_hidden_states = True

    def __init__(self, settings: RepresentationLossConfig) -> None:
        self.settings, self.weight = settings, settings.weight

    def added_loss(self, *, logits: Tensor, hidden_states: tuple[Tensor, ...] | None, input_ids: Tensor,
                   autocast: AutocastFactory) -> Tensor:
        return representation_loss(hidden_states, input_ids, self.settings)

    def identity(self) -> dict[str, Any]:
        """The weight, and the loss with every setting: a JREG run resumes no SimReg state, nor one
        of another JREG layer, nor one of any other method (whose terms say None here)."""
        return {**super().identity(), "representation_loss": dataclasses.asdict(self.settings)}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings!r})"


# ----------------------------------------------------------------------------------------------
# reference for tests


def reference_layer_loss(z: Tensor, config: AuxLossConfig) -> Tensor:
    """The objective's plain reference formula (its registry entry's ``reference``) in float64.
    Tests only. NotImplementedError, saying so, for an objective registered without one."""
    return OBJECTIVES[config.name].load_reference()(z.double(), config)


# The four definitions, transcribed with Python loops over (b, i, j) in float64. They ignore
# ``max_tokens`` (tests subsample explicitly) and use a plain clamp, which has the same value and,
# away from the clamp region, the same gradient as the straight-through one.


def _reference_cosine(u: Tensor, v: Tensor) -> Tensor:
    return torch.dot(u, v) / (torch.clamp(u.norm(), min=NORM_EPS) * torch.clamp(v.norm(), min=NORM_EPS))


def _reference_angular(u: Tensor, v: Tensor, clamp: float) -> Tensor:
    return torch.acos(torch.clamp(_reference_cosine(u, v), -1.0 + clamp, 1.0 - clamp)) / math.pi


def _pairs(num_tokens: int) -> list[tuple[int, int]]:
    return [(i, j) for i in range(num_tokens) for j in range(num_tokens) if i != j]


def _reference_log_mean_exp(z: Tensor, distance: Callable[[Tensor, Tensor], Tensor], tau: float) -> Tensor:
    """Batch mean of log(mean over pairs i != j of exp(-distance(z_i, z_j) / tau))."""
    batch, num_tokens, _ = z.shape
    total = torch.zeros((), dtype=torch.float64)
    for b in range(batch):
        acc = sum(torch.exp(-distance(z[b, i], z[b, j]) / tau) for i, j in _pairs(num_tokens))
        total = total + torch.log(acc / len(_pairs(num_tokens))) / batch
    return total


def _reference_pair_mean(z: Tensor, term: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    """Mean of term(z_i, z_j) over the batch and pairs i != j."""
    batch, num_tokens, _ = z.shape
    terms = [term(z[b, i], z[b, j]) for b in range(batch) for i, j in _pairs(num_tokens)]
    return torch.stack(terms).mean()


def reference_dispersion(z: Tensor, config: AuxLossConfig) -> Tensor:
    return _reference_log_mean_exp(z, lambda u, v: _reference_angular(u, v, config.clamp), config.tau)


def reference_l2_repel(z: Tensor, config: AuxLossConfig) -> Tensor:
    features = z.shape[-1]
    repel = _reference_log_mean_exp(z, lambda u, v: ((u - v) ** 2).sum() / features, config.tau)
    return repel + config.norm_weight * (z**2).mean()


def reference_decorrelation(z: Tensor, config: AuxLossConfig) -> Tensor:
    features = z.shape[-1]

    def standardised(u: Tensor) -> Tensor:
        centred = u - u.sum() / features
        return centred / torch.clamp(torch.sqrt((centred**2).sum() / features), min=NORM_EPS)

    return _reference_pair_mean(z, lambda u, v: ((standardised(u) * standardised(v)).sum() / features) ** 2)


def reference_orthogonalization(z: Tensor, config: AuxLossConfig) -> Tensor:
    return _reference_pair_mean(z, lambda u, v: torch.relu(config.margin - _reference_angular(u, v, config.clamp)) ** 2)


def reference_representation_loss(hidden_states: Sequence[Tensor], input_ids: Tensor,
                                  config: RepresentationLossConfig) -> Tensor:
    """A representation objective's plain reference formula (its registry entry's ``reference``) on
    float64 states. Tests only; NotImplementedError, saying so, for one registered without one."""
    return OBJECTIVES[config.name].load_reference()([z.double() for z in hidden_states], input_ids, config)


def reference_jreg(hidden_states: Sequence[Tensor], input_ids: Tensor, config: RepresentationLossConfig) -> Tensor:
    """1 - cos(h_{l-1}[b, t], h_l[b, t]), averaged over every (b, t)."""
    index = config.layer if config.layer > 0 else len(hidden_states) + config.layer
    before, after = hidden_states[index - 1], hidden_states[index]
    batch, tokens, _ = after.shape
    terms = [1.0 - _reference_cosine(before[b, t], after[b, t]) for b in range(batch) for t in range(tokens)]
    return torch.stack(terms).mean()


def reference_supervised_contrastive(z: Tensor, labels: Tensor, tau: float) -> Tensor:
    """SupCon over the positions of each sequence, anchor by anchor; ignores nothing, samples nothing."""
    batch, positions, _ = z.shape
    anchor_losses = []
    for b in range(batch):
        for i in range(positions):
            positives = [j for j in range(positions) if j != i and int(labels[b][j]) == int(labels[b][i])]
            if not positives:
                continue
            normaliser = sum(torch.exp(_reference_cosine(z[b, i], z[b, k]) / tau) for k in range(positions) if k != i)
            logs = [torch.log(torch.exp(_reference_cosine(z[b, i], z[b, j]) / tau) / normaliser) for j in positives]
            anchor_losses.append(-sum(logs) / len(positives))
    if not anchor_losses:
        return torch.zeros((), dtype=torch.float64)
    return sum(anchor_losses) / len(anchor_losses)


def reference_simreg(hidden_states: Sequence[Tensor], input_ids: Tensor, config: RepresentationLossConfig) -> Tensor:
    """The mean over the placement's layers of SupCon on positions 0..T-2, position t labelled
    ``input_ids[b, t + 1]``. Ignores ``max_tokens`` (tests subsample explicitly)."""
    tokens = input_ids.shape[1]
    labels = [[int(input_ids[b, t + 1]) for t in range(tokens - 1)] for b in range(input_ids.shape[0])]
    layers = select_layers(hidden_states, config.placement)
    return sum(reference_supervised_contrastive(z[:, : tokens - 1], labels, config.tau) for z in layers) / len(layers)
