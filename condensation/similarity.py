"""How close one model's condensation is to another's: the paper's "recovers the dispersion
patterns seen in larger models", measured.

Two lenses, from two :class:`~condensation.measurement.Measurement` s of the same texts:

``profile``
    each model's per-layer mean cosine (the paper's mu, all T^2 pairs, layer 0 counted) read at
    ``PROFILE_POINTS`` relative depths ``l / L`` (linear interpolation between layers, so that
    models of different depth compare), then the Pearson correlation of the two profiles (the
    shape: does condensation rise and fall at the same depths) and their root-mean-square
    distance (the level, in units of cosine).
``cka``
    linear CKA (Kornblith et al. 2019) between every layer of one model and every layer of the
    other on the same tokens: a ``(L_a + 1) x (L_b + 1)`` matrix, its matched-depth diagonal
    (layer ``i`` of ``L_a`` against the reference's layer nearest ``i / L_a``) and that diagonal's
    mean. It reads the token directions (unit rows) that the lenses sample, the same
    ``lens_tokens`` positions for every model, so it needs the two measurements to have read the
    same token ids (one tokenizer); a few tokens of large norm do not decide it.

Intervals: the sequences are dealt into ``JACKKNIFE_GROUPS`` groups (sequence ``n`` into group
``n mod G``, as the lenses deal them) and each statistic is recomputed with one group left out of
both models (a paired delete-a-group jackknife); the 95 % interval is the estimate +- t(G - 1) x
its standard error. It covers the sampling of texts, not training noise: a table of several runs
of one method (seeds) gives that spread in :func:`summarise`, as a t interval over the runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from condensation import lenses
from condensation.intervals import CONFIDENCE
from condensation.measurement import Measurement, measure

# scipy.stats (1-2 s) and pandas are imported by the functions that use them: extraction jobs
# import this module (through stages.geometry) and need neither.
if TYPE_CHECKING:
    import pandas as pd

PROFILE_POINTS = 11
"""Relative depths 0, 0.1, ..., 1 at which two layer profiles are compared."""

JACKKNIFE_GROUPS = lenses.JACKKNIFE_GROUPS

STATISTICS = ("profile_correlation", "profile_distance", "matched_cka")
"""The columns of a comparison table that carry an interval (``_low``, ``_high``)."""


class SimilarityError(ValueError):
    """Two measurements that cannot be compared; the message says why."""


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float

    def __format__(self, spec: str) -> str:
        """``f"{e}"``: 0.912 [0.900, 0.925]; ``f"{e:+}"`` signs each number (a difference)."""
        sign = "+" if spec == "+" else ""
        if math.isnan(self.low) or math.isnan(self.high):
            return f"{self.value:{sign}.3f} (no interval)"
        return f"{self.value:{sign}.3f} [{self.low:{sign}.3f}, {self.high:{sign}.3f}]"

    def __str__(self) -> str:
        return format(self, "")


@dataclass
class Comparison:
    """One model against a reference on the same texts (see the module docstring)."""

    model: str
    reference: str
    profile_correlation: Estimate
    profile_distance: Estimate
    matched_cka: Estimate | None
    """Mean over the matched-depth diagonal (None when the tokens differ)."""
    cka: np.ndarray | None
    """``[L_a + 1, L_b + 1]`` linear CKA of every pair of layers."""
    matched_layers: np.ndarray
    """``[L_a + 1]``: the reference layer matched to each of the model's layers."""
    num_sequences: int

    @property
    def matched_cka_by_layer(self) -> np.ndarray | None:
        return None if self.cka is None else self.cka[np.arange(self.cka.shape[0]), self.matched_layers]

    def as_row(self) -> dict[str, Any]:
        row: dict[str, Any] = {"model": self.model, "reference": self.reference, "num_sequences": self.num_sequences}
        for name in STATISTICS:
            estimate = getattr(self, name)
            values = (estimate.value, estimate.low, estimate.high) if estimate else (math.nan,) * 3
            row |= dict(zip((name, f"{name}_low", f"{name}_high"), values))
        diagonal = self.matched_cka_by_layer
        row["matched_cka_by_layer"] = "" if diagonal is None else " ".join(f"{v:.4f}" for v in diagonal)
        return row


def profile_at_depths(layer_means: np.ndarray, points: int = PROFILE_POINTS) -> np.ndarray:
    """Layer means ``[..., L + 1]`` read at ``points`` relative depths from 0 to 1: ``[..., points]``."""
    layer_means = np.asarray(layer_means, dtype=np.float64)
    depth = np.linspace(0.0, 1.0, layer_means.shape[-1])
    grid = np.linspace(0.0, 1.0, points)
    flat = layer_means.reshape(-1, layer_means.shape[-1])
    return np.stack([np.interp(grid, depth, row) for row in flat]).reshape(*layer_means.shape[:-1], points)


def matched_layers(layers: int, reference_layers: int) -> np.ndarray:
    """For each of ``layers + 1`` hidden states, the reference's hidden state at the nearest depth."""
    return np.rint(np.arange(layers + 1) * reference_layers / max(layers, 1)).astype(int)


def jackknife(statistic: Callable[[np.ndarray], float], groups: np.ndarray,
              bounds: tuple[float, float] = (-math.inf, math.inf), confidence: float = CONFIDENCE) -> Estimate:
    """``statistic(keep)`` over all sequences and with each group left out (``keep`` a mask over
    ``groups``, the group of each sequence): the estimate and its t interval, cut to the
    statistic's range ``bounds``."""
    # deferred: scipy, see the imports
    from scipy import stats  # noqa: PLC0415

    value = float(statistic(np.ones(groups.size, bool)))
    labels = np.unique(groups)
    if labels.size < 2:
        return Estimate(value, math.nan, math.nan)
    replicates = np.array([statistic(groups != g) for g in labels], dtype=np.float64)
    se = math.sqrt((labels.size - 1) / labels.size * ((replicates - replicates.mean()) ** 2).sum())
    half = float(stats.t.ppf(0.5 + confidence / 2, labels.size - 1)) * se
    return Estimate(value, max(value - half, bounds[0]), min(value + half, bounds[1]))


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    denominator = math.sqrt(float(a @ a) * float(b @ b))
    return float(a @ b) / denominator if denominator > 0 else math.nan


def token_grams(sample: torch.Tensor) -> torch.Tensor:
    """``[L+1, K, K]`` float64 Gram matrices of a sample's token directions, uncentred: computed
    once per model, then centred for any subset of its tokens (:func:`cka_matrix`'s ``keep``)."""
    tokens = sample.double()
    return tokens @ tokens.transpose(1, 2)


def cka_matrix(sample: torch.Tensor, reference: torch.Tensor) -> np.ndarray:
    """Linear CKA ``[L_a + 1, L_b + 1]`` of two samples ``[L + 1, K, d]`` of the same K tokens:
    ``<H K_a H, H K_b H>_F / (|H K_a H|_F |H K_b H|_F)``, ``K`` the Gram matrices and ``H`` the
    centring matrix, from the uncentred Gram matrices: ``<H A H, H B H> = <A, B> - 2 r_a . r_b / K
    + s_a s_b / K^2`` (``r`` the row sums, ``s`` the total), with no centred copy of either."""
    return cka_of_grams(token_grams(sample), token_grams(reference.to(sample.device)))


def cka_of_grams(grams_a: torch.Tensor, grams_b: torch.Tensor) -> np.ndarray:
    """:func:`cka_matrix` from the samples' :func:`token_grams`."""
    tokens = grams_a.shape[-1]

    def centred_inner(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        rows_a, rows_b = a.sum(-1), b.sum(-1)  # [L, K]
        return (a.flatten(1) @ b.flatten(1).T - 2 * rows_a @ rows_b.T / tokens
                + torch.outer(rows_a.sum(-1), rows_b.sum(-1)) / tokens**2)

    norms_a = centred_inner(grams_a, grams_a).diagonal().sqrt()
    norms_b = centred_inner(grams_b, grams_b).diagonal().sqrt()
    return (centred_inner(grams_a, grams_b) / torch.outer(norms_a, norms_b)).cpu().numpy()


def _group_terms(a: torch.Tensor, b: torch.Tensor, groups: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """What ``<H a H, H b H>`` over any union of token groups is made of (``a``, ``b``: one layer's
    ``[K, K]`` Gram matrices; ``groups``: ``[K, G]`` one-hot): block sums of ``a * b`` ``[G, G]``,
    of the row sums' products ``[G, G, G]``, and of ``a`` and of ``b`` ``[G, G]``."""
    rows_a, rows_b = a @ groups, b @ groups  # [K, G]: each token's sums over each group
    return (groups.T @ (a * b) @ groups, torch.einsum("tg,th,tk->ghk", groups, rows_a, rows_b),
            groups.T @ rows_a, groups.T @ rows_b)


def _centred_inner_kept(terms: tuple[torch.Tensor, ...], keep: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """``<H a H, H b H>`` over the kept groups (``keep``: ``[G]`` of 0 and 1) from :func:`_group_terms`."""
    products, rows, sums_a, sums_b = terms
    n = keep @ sizes
    return (keep @ products @ keep - 2 * torch.einsum("g,h,k,ghk->", keep, keep, keep, rows) / n
            + (keep @ sums_a @ keep) * (keep @ sums_b @ keep) / n**2)


def matched_cka_jackknife(grams_a: torch.Tensor, grams_b: torch.Tensor, pairs: np.ndarray,
                          token_groups: np.ndarray) -> Estimate:
    """The mean CKA over the layer ``pairs`` (``[P, 2]``) with its delete-a-group jackknife over the
    tokens' ``token_groups`` (one pass over each Gram matrix, then each replicate from block sums)."""
    labels = np.unique(token_groups)
    onehot = torch.from_numpy((token_groups[:, None] == labels[None, :]).astype(np.float64)).to(grams_a.device)
    sizes = onehot.sum(0)
    terms = [(_group_terms(grams_a[i], grams_b[j], onehot), _group_terms(grams_a[i], grams_a[i], onehot),
              _group_terms(grams_b[j], grams_b[j], onehot)) for i, j in pairs]

    def matched_mean(keep_groups: np.ndarray) -> float:
        keep = torch.from_numpy(keep_groups.astype(np.float64)).to(grams_a.device)
        values = [_centred_inner_kept(ab, keep, sizes) / (_centred_inner_kept(aa, keep, sizes)
                                                          * _centred_inner_kept(bb, keep, sizes)).sqrt()
                  for ab, aa, bb in terms]
        return float(torch.stack(values).mean())

    return jackknife(matched_mean, labels, (0.0, 1.0))


def compare(measured: Measurement, reference: Measurement, points: int = PROFILE_POINTS) -> Comparison:
    """``measured`` against ``reference``: both measured on the same texts (the same sequences in
    the same order, so that the jackknife pairs them); CKA when they also read the same tokens."""
    a, b = measured.statistics, reference.statistics
    if a.num_sequences != b.num_sequences or a.sequence_layer_mean is None or b.sequence_layer_mean is None:
        raise SimilarityError(f"{measured.name} ({a.num_sequences} sequences) and {reference.name} "
                              f"({b.num_sequences}) were not measured on the same texts with per-sequence means")
    profile_a = profile_at_depths(a.sequence_layer_mean, points)
    profile_b = profile_at_depths(b.sequence_layer_mean, points)
    groups = np.arange(a.num_sequences) % JACKKNIFE_GROUPS

    def rms_distance(keep: np.ndarray) -> float:
        return float(np.sqrt(((profile_a[keep].mean(0) - profile_b[keep].mean(0)) ** 2).mean()))

    correlation = jackknife(lambda keep: _pearson(profile_a[keep].mean(0), profile_b[keep].mean(0)), groups,
                            (-1.0, 1.0))
    distance = jackknife(rms_distance, groups, (0.0, 2.0))
    matched = matched_layers(a.num_layers - 1, b.num_layers - 1)
    cka, matched_cka = _cka(measured, reference, matched)
    return Comparison(measured.name, reference.name, correlation, distance, matched_cka, cka, matched, a.num_sequences)


def _cka(measured: Measurement, reference: Measurement,
         matched: np.ndarray) -> tuple[np.ndarray | None, Estimate | None]:
    a, b = measured.statistics.lenses, reference.statistics.lenses
    if a is None or b is None or a.sample is None or b.sample is None:
        return None, None  # measured without lenses (lens_tokens=None), or loaded from a file
    if measured.token_digest is None or measured.token_digest != reference.token_digest:
        return None, None  # different tokens (tokenizers): no token-by-token similarity
    grams_a = _grams_of(a)
    grams_b = _grams_of(b).to(grams_a.device)
    pairs = np.stack([np.arange(matched.size), matched], axis=1)
    token_groups = a.sample_sequences % JACKKNIFE_GROUPS
    return cka_of_grams(grams_a, grams_b), matched_cka_jackknife(grams_a, grams_b, pairs, token_groups)


_GRAMS: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
"""Token Gram matrices by sample, so that a reference compared with several models is multiplied
out once (the sample is kept alongside, so its id is not reused while cached)."""


def _grams_of(lens_statistics: lenses.LensStatistics) -> torch.Tensor:
    sample = lens_statistics.sample
    if id(sample) not in _GRAMS:
        if len(_GRAMS) >= 16:
            _GRAMS.clear()
        _GRAMS[id(sample)] = (sample, token_grams(sample))
    return _GRAMS[id(sample)][1]


def compare_models(model: Any, reference: Any, texts: Any = None, **options: Any) -> Comparison:
    """Measure ``model`` and ``reference`` on the same texts (``measure``'s arguments: ``texts``,
    ``dataset`` or ``token_ids``, ``seq_len``, ...) and compare them. Each model uses its own
    tokenizer (``tokenizer`` and ``reference_tokenizer`` for model objects): with one tokenizer the
    comparison includes CKA, with two the profiles alone."""
    reference_tokenizer = options.pop("reference_tokenizer", options.get("tokenizer"))
    measured = measure(model, texts, **options)
    return compare(measured, measure(reference, texts, **{**options, "tokenizer": reference_tokenizer}))


# ---------------------------------------------------------------------------------------------
# Tables and the findings page
# ---------------------------------------------------------------------------------------------


def comparison_table(rows: Sequence[tuple[str, Comparison]], name: str, dataset: str) -> pd.DataFrame:
    """One row per comparison: its group (a method, or a pair's row label), the model, the
    reference and each statistic with its interval over sequence groups."""
    # deferred: pandas, see the imports
    import pandas as pd  # noqa: PLC0415

    return pd.DataFrame([{"comparison": name, "dataset": dataset, "group": group, **c.as_row()} for group, c in rows])


def _over_runs(values: np.ndarray, bounds: tuple[float, float]) -> Estimate:
    """Mean over runs with a t interval over them, cut to ``bounds`` (NaN bounds for a single run)."""
    # deferred: scipy, see the imports
    from scipy import stats  # noqa: PLC0415

    mean = float(values.mean())
    if values.size < 2:
        return Estimate(mean, math.nan, math.nan)
    se = float(values.std(ddof=1)) / math.sqrt(values.size)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, values.size - 1)) * se
    return Estimate(mean, max(mean - half, bounds[0]), min(mean + half, bounds[1]))


def _difference(first: np.ndarray, second: np.ndarray) -> Estimate:
    """second - first, with a Welch t interval over the runs of each."""
    # deferred: scipy, see the imports
    from scipy import stats  # noqa: PLC0415

    value = float(second.mean() - first.mean())
    if first.size < 2 or second.size < 2:
        return Estimate(value, math.nan, math.nan)
    va, vb = first.var(ddof=1) / first.size, second.var(ddof=1) / second.size
    se = math.sqrt(va + vb)
    if se == 0:
        return Estimate(value, value, value)
    df = (va + vb) ** 2 / (va**2 / (first.size - 1) + vb**2 / (second.size - 1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df)) * se
    return Estimate(value, value - half, value + half)


def summarise(table: pd.DataFrame) -> list[str]:
    """Evidence lines for the findings page, one per comparison table: each group's mean profile
    correlation, profile distance and matched-depth CKA against its reference, with a 95 % t
    interval over the group's runs (seeds: training noise; a group of one run shows its jackknife
    interval over sequence groups instead), and each later group's difference from the first
    (Welch t interval over runs). Closer to the reference is a higher correlation and CKA and a
    lower distance."""
    lines = []
    for name, frame in table.groupby("comparison", sort=False):
        groups = list(dict.fromkeys(frame["group"]))
        references = ", ".join(dict.fromkeys(frame["reference"]))
        parts = []
        for group in groups:
            rows = frame[frame["group"] == group]
            parts.append(f"{group} ({len(rows)} run{'s' if len(rows) > 1 else ''}): " + "; ".join(
                f"{label} {_group_estimate(rows, column)}" for column, label in _COLUMNS if rows[column].notna().all()))
        line = f"{name}: against {references} on {frame['dataset'].iloc[0]}, " + " | ".join(parts)
        first = frame[frame["group"] == groups[0]]
        for group in groups[1:]:
            other = frame[frame["group"] == group]
            line += f" | {group} minus {groups[0]}: " + "; ".join(
                f"{label} {_difference(first[column].to_numpy(float), other[column].to_numpy(float)):+}"
                for column, label in _COLUMNS if first[column].notna().all() and other[column].notna().all())
        lines.append(line + " (intervals: 95 %, t over runs, the training noise; a group of one run: "
                     "jackknife over sequence groups, the text sampling)")
    return lines


_COLUMNS = (("profile_correlation", "profile correlation"), ("profile_distance", "profile distance"),
            ("matched_cka", "matched-depth CKA"))
_BOUNDS = {"profile_correlation": (-1.0, 1.0), "profile_distance": (0.0, 2.0), "matched_cka": (0.0, 1.0)}


def _group_estimate(rows: pd.DataFrame, column: str) -> Estimate:
    if len(rows) == 1:
        row = rows.iloc[0]
        return Estimate(float(row[column]), float(row[f"{column}_low"]), float(row[f"{column}_high"]))
    return _over_runs(rows[column].to_numpy(float), _BOUNDS[column])
