"""Layer-wise cosine geometry of token hidden states as stored (its trend with depth:
:mod:`condensation.trend`).

For every layer ``l`` (0 = embedding output, ``L`` = last hidden state as the model returns it)
and every sequence of ``T`` tokens the extraction (:mod:`condensation.cosine_extraction`) takes the
``T x T`` matrix of pairwise cosine similarities and keeps only running sums across sequences,
never the per-sequence matrices. What it keeps, one :class:`CosineStatistics` per model and
dataset:

* ``mean_cosine[l]``: the position-wise mean over sequences of the cosine matrices (the paper
  averages matrices before taking the histogram);
* ``hist_of_mean[l]``: density histogram (128 bins over [-1, 1]) of that averaged matrix,
  what the paper's heatmaps show;
* ``hist_pooled[l]``: density histogram of every per-sequence cosine value, pooled; wider,
  since averaging narrows the distribution;
* ``layer_mean[l]``: mean over all ``T^2`` pairs, diagonal included (the paper's mu^(l));
  ``layer_mean_offdiag[l]`` excludes the ``T`` self-pairs;
* ``sequence_layer_mean[n, l]`` (and ``_offdiag``): the same means for each sequence alone, so
  that statistics of the layer means get confidence intervals over sequences. Their mean over
  sequences is ``layer_mean``.

NumPy only: the reporting jobs (tables, figures, findings) read stored statistics through this
module and never import torch (about a second of every such job's start).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from condensation import lenses as lens_module
from condensation.runtime.io import atomic_path, verify_manifest, write_manifest

NUM_BINS = 128
"""Histogram bins over [-1, 1], as in the paper's heatmaps."""


def counts_to_density(counts: np.ndarray) -> np.ndarray:
    """Histogram counts ``[..., bins]`` over [-1, 1] as densities (each row integrates to 1)."""
    counts = np.asarray(counts, dtype=np.float64)
    width = 2.0 / counts.shape[-1]
    total = counts.sum(axis=-1, keepdims=True)
    return counts / np.maximum(total, 1.0) / width


_SEQUENCE_ARRAYS = ("sequence_layer_mean", "sequence_layer_mean_offdiag")
"""Per-sequence arrays of :class:`CosineStatistics`, optional in a stored file."""


@dataclass
class CosineStatistics:
    """What one extraction (one model on one dataset) produces; saved as one ``.npz``."""

    mean_cosine: np.ndarray  # [L+1, T, T] float32, or [L+1, C, C] block means when T > C (``positions`` set)
    hist_of_mean: np.ndarray  # [L+1, bins] density
    hist_pooled: np.ndarray  # [L+1, bins] density
    layer_mean: np.ndarray  # [L+1], all T^2 pairs (paper)
    layer_mean_offdiag: np.ndarray  # [L+1], i != j only
    num_sequences: int
    meta: dict[str, Any] = field(default_factory=dict)
    # [N, L+1] per-sequence layer means; None in files written before they were stored
    sequence_layer_mean: np.ndarray | None = None
    sequence_layer_mean_offdiag: np.ndarray | None = None
    # the other lenses (condensation.lenses); None in files written before they were measured
    lenses: lens_module.LensStatistics | None = None
    # T when ``mean_cosine`` is block-averaged to fewer cells than T x T; None when it is whole
    positions: int | None = None

    @property
    def num_layers(self) -> int:
        """Number of hidden-state entries, embedding output included (``L + 1``)."""
        return int(self.layer_mean.shape[0])

    @property
    def seq_len(self) -> int:
        """T, the tokens of each sequence."""
        return int(self.positions if self.positions is not None else self.mean_cosine.shape[-1])

    @property
    def bin_edges(self) -> np.ndarray:
        return np.linspace(-1.0, 1.0, self.hist_of_mean.shape[-1] + 1)

    def save(self, path: str | Path) -> None:
        per_sequence = {
            name: values.astype(np.float64)
            for name in _SEQUENCE_ARRAYS
            if (values := getattr(self, name)) is not None
        }
        if self.lenses is not None:
            per_sequence |= {
                "lens_values": self.lenses.values, "lens_jackknife": self.lenses.jackknife,
                "lens_names": np.array(lens_module.LENS_NAMES),
                "lens_sample_tokens": np.int64(self.lenses.sample_tokens),
            }
        if self.positions is not None:  # only then: a file of whole matrices stays as it was
            per_sequence["positions"] = np.int64(self.positions)
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
                    **per_sequence,
                )
        write_manifest(path, kind="cosine_statistics")

    @classmethod
    def load(cls, path: str | Path) -> CosineStatistics:
        """Load after checking the file against its manifest (``io.CorruptArtifactError`` if not).

        A file written before per-sequence means were stored loads with them set to None.
        """
        verify_manifest(path)
        with np.load(path, allow_pickle=False) as data:
            lenses = None
            if "lens_values" in data.files and tuple(data["lens_names"]) == lens_module.LENS_NAMES:
                lenses = lens_module.LensStatistics(data["lens_values"], data["lens_jackknife"],
                                                    int(data["lens_sample_tokens"]))
            return cls(
                mean_cosine=data["mean_cosine"],
                hist_of_mean=data["hist_of_mean"],
                hist_pooled=data["hist_pooled"],
                layer_mean=data["layer_mean"],
                layer_mean_offdiag=data["layer_mean_offdiag"],
                num_sequences=int(data["num_sequences"]),
                meta=json.loads(str(data["meta"])),
                **{name: data[name] if name in data.files else None for name in _SEQUENCE_ARRAYS},
                lenses=lenses,
                positions=int(data["positions"]) if "positions" in data.files else None,
            )
