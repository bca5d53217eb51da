"""Layer-wise cosine geometry of token hidden states, and its trend with depth.

For every layer ``l`` (0 = embedding output, ``L`` = last hidden state as the model returns it)
and every sequence of ``T`` tokens we take the ``T x T`` matrix of pairwise cosine similarities.
Across sequences we keep only running sums, never the per-sequence matrices:

* ``mean_cosine[l]``: the position-wise mean over sequences of the cosine matrices (the paper
  averages matrices before taking the histogram);
* ``hist_of_mean[l]``: density histogram (128 bins over [-1, 1]) of that averaged matrix,
  what the paper's heatmaps show;
* ``hist_pooled[l]``: density histogram of every per-sequence cosine value, pooled; wider,
  since averaging narrows the distribution;
* ``layer_mean[l]``: mean over all ``T^2`` pairs, diagonal included (the paper's mu^(l));
  ``layer_mean_offdiag[l]`` excludes the ``T`` self-pairs.

Trend statistics (Spearman rho, Kendall tau of ``layer_mean`` against the layer index) are
positive when similarity grows with depth: condensation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from scipy import stats

from .io import atomic_path, verify_manifest, write_manifest

NUM_BINS = 128
"""Histogram bins over [-1, 1], as in the paper's heatmaps."""

NORM_EPS = 1e-6
"""Floor on a hidden state's norm: a zero vector gets cosine 0 with everything, not NaN."""


def cosine_matrices(hidden: torch.Tensor) -> torch.Tensor:
    """Pairwise cosine similarity of tokens: ``[B, T, d] -> [B, T, T]`` in float32, clipped to [-1, 1]."""
    z = hidden.float()
    z = z / z.norm(dim=-1, keepdim=True).clamp_min(NORM_EPS)
    return torch.bmm(z, z.transpose(1, 2)).clamp_(-1.0, 1.0)


def density_histogram(values: torch.Tensor | np.ndarray, bins: int = NUM_BINS) -> np.ndarray:
    """Density histogram over [-1, 1] (integrates to 1), matching ``np.histogram(density=True)``."""
    counts = histogram_counts(torch.as_tensor(values), bins)
    return counts_to_density(counts)


def histogram_counts(values: torch.Tensor, bins: int = NUM_BINS) -> torch.Tensor:
    """Counts in ``bins`` equal bins over [-1, 1]; the right edge 1.0 falls in the last bin."""
    flat = values.reshape(-1).double()
    index = ((flat + 1.0) * (bins / 2.0)).floor().clamp_(0, bins - 1).long()
    # index_add_, not bincount: on CUDA bincount reads max() back to size its output (a host sync
    # per layer per batch); this stays on the device. Counts are exact in float64 up to 2^53.
    counts = torch.zeros(bins, dtype=torch.float64, device=values.device)
    return counts.index_add_(0, index, torch.ones_like(flat))


def counts_to_density(counts: torch.Tensor | np.ndarray) -> np.ndarray:
    counts = np.asarray(counts.cpu() if isinstance(counts, torch.Tensor) else counts, dtype=np.float64)
    width = 2.0 / counts.shape[-1]
    total = counts.sum(axis=-1, keepdims=True)
    return counts / np.maximum(total, 1.0) / width


@dataclass
class CosineStatistics:
    """What one extraction (one model on one dataset) produces; saved as one ``.npz``."""

    mean_cosine: np.ndarray  # [L+1, T, T] float32
    hist_of_mean: np.ndarray  # [L+1, bins] density
    hist_pooled: np.ndarray  # [L+1, bins] density
    layer_mean: np.ndarray  # [L+1], all T^2 pairs (paper)
    layer_mean_offdiag: np.ndarray  # [L+1], i != j only
    num_sequences: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        """Number of hidden-state entries, embedding output included (``L + 1``)."""
        return int(self.layer_mean.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.mean_cosine.shape[-1])

    @property
    def bin_edges(self) -> np.ndarray:
        return np.linspace(-1.0, 1.0, self.hist_of_mean.shape[-1] + 1)

    def save(self, path: str | Path) -> None:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as handle:  # a file object keeps numpy from appending ".npz"
                np.savez_compressed(
                    handle,
                    mean_cosine=self.mean_cosine.astype(np.float32),
                    hist_of_mean=self.hist_of_mean.astype(np.float32),
                    hist_pooled=self.hist_pooled.astype(np.float32),
                    layer_mean=self.layer_mean.astype(np.float64),
                    layer_mean_offdiag=self.layer_mean_offdiag.astype(np.float64),
                    num_sequences=np.int64(self.num_sequences),
                    meta=np.array(json.dumps(self.meta, sort_keys=True)),
                )
        write_manifest(path, kind="cosine_statistics")

    @classmethod
    def load(cls, path: str | Path) -> "CosineStatistics":
        """Load after checking the file against its manifest (``io.CorruptArtifactError`` if not)."""
        verify_manifest(path)
        with np.load(path, allow_pickle=False) as data:
            return cls(
                mean_cosine=data["mean_cosine"],
                hist_of_mean=data["hist_of_mean"],
                hist_pooled=data["hist_pooled"],
                layer_mean=data["layer_mean"],
                layer_mean_offdiag=data["layer_mean_offdiag"],
                num_sequences=int(data["num_sequences"]),
                meta=json.loads(str(data["meta"])),
            )


class CosineAccumulator:
    """Running sums of per-layer cosine statistics; memory independent of the number of sequences."""

    def __init__(self, bins: int = NUM_BINS) -> None:
        self.bins = bins
        self.count = 0
        self._sum: torch.Tensor | None = None  # [L+1, T, T] float64
        self._pooled: torch.Tensor | None = None  # [L+1, bins] counts

    def update(self, hidden_states: Sequence[torch.Tensor]) -> None:
        """Add one batch: ``hidden_states[l]`` is ``[B, T, d]`` for every layer ``l``."""
        per_layer_sum, per_layer_counts = [], []
        for hidden in hidden_states:
            cos = cosine_matrices(hidden)
            per_layer_sum.append(cos.sum(dim=0, dtype=torch.float64))
            per_layer_counts.append(histogram_counts(cos, self.bins))
        batch_sum = torch.stack(per_layer_sum)
        batch_counts = torch.stack(per_layer_counts)
        if self._sum is None:
            self._sum, self._pooled = batch_sum, batch_counts
        else:
            if batch_sum.shape != self._sum.shape:
                raise ValueError(
                    f"batch has shape {tuple(batch_sum.shape)} (layers, T, T) but earlier batches "
                    f"had {tuple(self._sum.shape)}: every sequence must have the same length"
                )
            self._sum += batch_sum
            self._pooled += batch_counts
        self.count += int(hidden_states[0].shape[0])

    def finalize(self, meta: dict[str, Any] | None = None) -> CosineStatistics:
        if self._sum is None or self.count == 0:
            raise ValueError("no sequences were accumulated")
        mean = (self._sum / self.count).cpu()
        seq_len = mean.shape[-1]
        diag = torch.diagonal(mean, dim1=-2, dim2=-1).sum(-1)
        total = mean.sum(dim=(-2, -1))
        offdiag = (total - diag) / max(seq_len * (seq_len - 1), 1)
        return CosineStatistics(
            mean_cosine=mean.float().numpy(),
            hist_of_mean=np.stack([density_histogram(m, self.bins) for m in mean]),
            hist_pooled=counts_to_density(self._pooled),
            layer_mean=(total / seq_len**2).numpy(),
            layer_mean_offdiag=offdiag.numpy(),
            num_sequences=self.count,
            meta=dict(meta or {}),
        )


@torch.inference_mode()
def extract_cosine_statistics(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    batch_size: int = 8,
    meta: dict[str, Any] | None = None,
) -> CosineStatistics:
    """Run ``model`` on ``input_ids`` ``[N, T]`` in batches and reduce all hidden states on the fly.

    All sequences have exactly ``T`` tokens, so batches need no padding and no attention mask.
    The cosine reductions run on the model's device.
    """
    if input_ids.ndim != 2 or input_ids.shape[0] == 0:
        raise ValueError(f"input_ids must be [N, T] with N >= 1, got shape {tuple(input_ids.shape)}")
    device = next(model.parameters()).device
    accumulator = CosineAccumulator()
    for start in range(0, input_ids.shape[0], batch_size):
        batch = input_ids[start : start + batch_size].to(device)
        output = model(input_ids=batch, output_hidden_states=True, use_cache=False)
        accumulator.update(output.hidden_states)
    return accumulator.finalize(meta)


# ---------------------------------------------------------------------------------------------
# Trend statistics
# ---------------------------------------------------------------------------------------------

LAST_N = (1, 2, 3, 4, 5)
"""Depth windows for the last-n metrics (the paper's supplementary tables use 1..5 and half)."""


@dataclass(frozen=True)
class TrendStatistics:
    spearman_rho: float
    kendall_tau: float
    last_n: dict[str, float]  # "last_1".."last_5", "last_half": mean of the last layers' means

    def as_row(self) -> dict[str, float]:
        return {"spearman_rho": self.spearman_rho, "kendall_tau": self.kendall_tau, **self.last_n}


def trend_statistics(layer_means: Iterable[float]) -> TrendStatistics:
    """Spearman rho and Kendall tau (tau-b) of per-layer means against depth, and last-n means.

    ``last_half`` averages the deepest ``ceil(n / 2)`` entries of the ``n`` given layer means.
    A constant sequence has no defined rank correlation; it yields NaN, not an error.
    """
    means = np.asarray(list(layer_means), dtype=np.float64)
    if means.ndim != 1 or means.size < 2:
        raise ValueError(f"need at least two layer means, got {means.size}")
    depth = np.arange(means.size)
    if np.allclose(means, means[0]):
        rho = tau = float("nan")
    else:
        rho = float(stats.spearmanr(means, depth).statistic)
        tau = float(stats.kendalltau(means, depth).statistic)
    last = {f"last_{n}": float(means[-n:].mean()) for n in LAST_N if n <= means.size}
    last["last_half"] = float(means[-((means.size + 1) // 2) :].mean())
    return TrendStatistics(spearman_rho=rho, kendall_tau=tau, last_n=last)
