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

Nulls (arXiv 2602.14486: width and depth inflate similarity scores; a permutation null calibrates
them). Two unrelated token clouds have a linear CKA well above 0: over the shuffles of one model's
tokens its mean is ``tr(A) tr(B) / ((K - 1) |A|_F |B|_F)`` (``A``, ``B`` the centred Gram
matrices of ``K`` tokens), the geometric mean of the two clouds' effective ranks over ``K - 1``.
A wide or less condensed model (a higher effective rank) scores higher against anything.

``matched_cka``
    the null shuffles the token correspondence: one random permutation of the model's sampled
    tokens, the same for all layers, and the matched-depth mean recomputed (``PERMUTATIONS``
    draws, seeded). Its mean is the exact expectation above; the p-value is the add-one
    permutation p-value ``(1 + #{draws >= observed}) / (P + 1)``. It is exact when one model's
    tokens are exchangeable under "no relation". The shuffle also breaks which sequence a token
    came from, so two models that group tokens by the same sequences agree beyond it.
``profile_correlation``
    the null permutes the reference's layer order (its depth kept), then reads it at the relative
    depths again: every order when there are at most ``PERMUTATIONS + 1``, otherwise
    ``PERMUTATIONS`` random ones. Its mean is near 0, so calibration moves the correlation little.
    Its p-value treats layers as exchangeable; smooth depth profiles are not, and two unrelated
    smooth profiles beat this null far more often than 5 % (tests/unit/test_similarity.py shows
    it). The table carries that p-value; the findings page does not call from it.
``profile_distance``
    no null: a distance in units of cosine, 0 when the profiles agree, with no chance level that
    width or depth inflates.

The calibrated score is ``(raw - null mean) / (1 - null mean)``: 0 at chance, 1 at identical,
negative below chance (the chance-corrected form, as the adjusted Rand index; arXiv 2602.14486's
code reports it beside its gated score ``max(0, (raw - q95) / (1 - q95))``, which ``_null_q95``
gives). Its interval is the same jackknife with the null mean recomputed in each replicate
(exactly for CKA, from the same block sums; over the same layer orders for the profile).
"""
from __future__ import annotations

import itertools
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

STATISTICS = ("profile_correlation", "profile_distance", "matched_cka", "profile_correlation_calibrated",
              "matched_cka_calibrated")
"""The columns of a comparison table that carry an interval (``_low``, ``_high``)."""

CALIBRATED = ("profile_correlation", "matched_cka")
"""The statistics with a permutation null: each has ``_calibrated`` (with its interval),
``_null_mean``, ``_null_q95``, ``_p`` and ``_permutations`` columns."""

PERMUTATIONS = 199
"""Null draws per statistic. With the observed value counted, 200 values: a 5 % test is exact
(``0.05 x (P + 1)`` a whole number) and the smallest p-value is 0.005."""

PERMUTATION_SEED = 0

LEVEL = 0.05
"""The level at which :func:`summarise` calls a group's CKA above its null."""


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


@dataclass(frozen=True)
class Calibrated:
    """A statistic against its permutation null (the module docstring)."""

    null_mean: float
    null_q95: float
    """The 95th percentile of the draws with the observed value among them (arXiv 2602.14486's threshold)."""
    score: Estimate
    """``(raw - null mean) / (1 - null mean)`` with its jackknife interval."""
    p_value: float
    """``(1 + #{draws >= observed}) / (1 + draws)``; with every layer order drawn, the exact p-value."""
    permutations: int
    """Null draws (the observed value not counted)."""


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
    profile_correlation_null: Calibrated | None = None
    matched_cka_null: Calibrated | None = None

    @property
    def profile_correlation_calibrated(self) -> Estimate | None:
        return None if self.profile_correlation_null is None else self.profile_correlation_null.score

    @property
    def matched_cka_calibrated(self) -> Estimate | None:
        return None if self.matched_cka_null is None else self.matched_cka_null.score

    @property
    def matched_cka_by_layer(self) -> np.ndarray | None:
        return None if self.cka is None else self.cka[np.arange(self.cka.shape[0]), self.matched_layers]

    def as_row(self) -> dict[str, Any]:
        row: dict[str, Any] = {"model": self.model, "reference": self.reference, "num_sequences": self.num_sequences}
        for name in STATISTICS:
            estimate = getattr(self, name)
            values = (estimate.value, estimate.low, estimate.high) if estimate else (math.nan,) * 3
            row |= dict(zip((name, f"{name}_low", f"{name}_high"), values))
        for name in CALIBRATED:
            null = getattr(self, f"{name}_null")
            values = ((null.null_mean, null.null_q95, null.p_value, null.permutations) if null
                      else (math.nan, math.nan, math.nan, 0))
            row |= dict(zip((f"{name}_null_mean", f"{name}_null_q95", f"{name}_p", f"{name}_permutations"), values))
        diagonal = self.matched_cka_by_layer
        row["matched_cka_by_layer"] = "" if diagonal is None else " ".join(f"{v:.4f}" for v in diagonal)
        return row


def profile_at_depths(layer_means: np.ndarray, points: int = PROFILE_POINTS) -> np.ndarray:
    """Layer means ``[..., L + 1]`` read at ``points`` relative depths from 0 to 1: ``[..., points]``."""
    layer_means = np.asarray(layer_means, dtype=np.float64)
    layers = layer_means.shape[-1]
    depth, grid = np.linspace(0.0, 1.0, layers), np.linspace(0.0, 1.0, points)
    weights = np.stack([np.interp(grid, depth, unit) for unit in np.eye(layers)])  # [L + 1, points]: linear
    return layer_means @ weights


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


def calibrate(raw: float, null_mean: float) -> float:
    """``(raw - null mean) / (1 - null mean)``: 0 at chance, 1 at the statistic's maximum."""
    return (raw - null_mean) / (1.0 - null_mean) if null_mean < 1 else math.nan


def matched_cka_jackknife(grams_a: torch.Tensor, grams_b: torch.Tensor, pairs: np.ndarray,
                          token_groups: np.ndarray) -> tuple[Estimate, Estimate, float]:
    """The mean CKA over the layer ``pairs`` (``[P, 2]``) and its calibrated score against the
    token-shuffle null, each with its delete-a-group jackknife over the tokens' ``token_groups``
    (one pass over each Gram matrix, then each replicate from block sums), and the null's mean on
    all tokens. Each replicate's null mean is exact: ``tr(A) tr(B) / ((K - 1) |A| |B|)`` per pair
    over the kept tokens, averaged over the pairs as the CKA is."""
    labels = np.unique(token_groups)
    onehot = torch.from_numpy((token_groups[:, None] == labels[None, :]).astype(np.float64)).to(grams_a.device)
    sizes = onehot.sum(0)
    terms = [(_group_terms(grams_a[i], grams_b[j], onehot), _group_terms(grams_a[i], grams_a[i], onehot),
              _group_terms(grams_b[j], grams_b[j], onehot), onehot.T @ grams_a[i].diagonal(),
              onehot.T @ grams_b[j].diagonal()) for i, j in pairs]
    found: dict[bytes, tuple[float, float]] = {}

    def replicate(keep_groups: np.ndarray) -> tuple[float, float]:
        """The matched mean CKA and its null mean over the kept groups."""
        if keep_groups.tobytes() not in found:
            keep = torch.from_numpy(keep_groups.astype(np.float64)).to(grams_a.device)
            tokens = keep @ sizes
            values, nulls = [], []
            for ab, aa, bb, diagonal_a, diagonal_b in terms:
                norms = (_centred_inner_kept(aa, keep, sizes) * _centred_inner_kept(bb, keep, sizes)).sqrt()
                values.append(_centred_inner_kept(ab, keep, sizes) / norms)
                trace_a = keep @ diagonal_a - keep @ aa[2] @ keep / tokens  # tr(H A H) over the kept tokens
                trace_b = keep @ diagonal_b - keep @ bb[2] @ keep / tokens
                nulls.append(trace_a * trace_b / ((tokens - 1) * norms))
            found[keep_groups.tobytes()] = (float(torch.stack(values).mean()), float(torch.stack(nulls).mean()))
        return found[keep_groups.tobytes()]

    raw = jackknife(lambda keep: replicate(keep)[0], labels, (0.0, 1.0))
    calibrated = jackknife(lambda keep: calibrate(*replicate(keep)), labels, (-math.inf, 1.0))
    return raw, calibrated, replicate(np.ones(labels.size, bool))[1]


def matched_cka_null(sample_a: torch.Tensor, sample_b: torch.Tensor, pairs: np.ndarray,
                     permutations: int = PERMUTATIONS, seed: int = PERMUTATION_SEED) -> tuple[float, np.ndarray]:
    """The matched mean CKA of two token samples ``[L + 1, K, d]`` over the layer ``pairs`` and
    ``permutations`` draws of it with the token correspondence shuffled: one permutation of the
    first sample's tokens per draw, the same for every layer. A draw costs, per pair, either
    ``|X[pi]^T Y|_F^2`` (``X``, ``Y`` the centred tokens: ``2 K d_a d_b`` flops) or, where the
    model is wide for its tokens (``d_a d_b > K^2 / 8``), a gather of the ``K x K`` centred Gram
    matrix; the two give the same draws."""
    tokens = sample_a.shape[1]
    device = sample_a.device
    generator = torch.Generator().manual_seed(seed)
    orders = torch.stack([torch.randperm(tokens, generator=generator) for _ in range(permutations)]
                         + [torch.arange(tokens)]).to(device)  # the last: the observed correspondence
    values = torch.zeros(permutations + 1, dtype=torch.float64, device=device)
    for i, j in pairs:
        x = sample_a[i].double()
        y = sample_b[j].to(device).double()
        x, y = x - x.mean(0), y - y.mean(0)
        scale = torch.linalg.matrix_norm(x.T @ x) * torch.linalg.matrix_norm(y.T @ y)
        if x.shape[1] * y.shape[1] <= tokens**2 / 8:
            chunk = max(1, (1 << 23) // (tokens * x.shape[1]))  # 64 MiB of gathered tokens at a time
            inner = [(x[order].transpose(1, 2) @ y).square().sum((1, 2)) for order in orders.split(chunk)]
        else:
            gram_a, gram_b = x @ x.T, y @ y.T
            chunk = max(1, (1 << 23) // tokens**2)
            inner = [torch.einsum("ij,cij->c", gram_b, gram_a[order[:, :, None], order[:, None, :]])
                     for order in orders.split(chunk)]
        values += torch.cat(inner) / scale
    values = values.cpu().numpy() / len(pairs)
    return float(values[-1]), values[:-1]


def _against_null(observed: float, draws: np.ndarray, null_mean: float, score: Estimate) -> Calibrated:
    """The add-one p-value and the 95th percentile with the observed value among the draws."""
    if not math.isfinite(observed):
        return Calibrated(null_mean, math.nan, score, math.nan, draws.size)
    exceed = int((draws >= observed - 1e-12 * max(1.0, abs(observed))).sum())  # ties count against
    q95 = float(np.quantile(np.append(draws, observed), 0.95))
    return Calibrated(null_mean, q95, score, (1 + exceed) / (1 + draws.size), draws.size)


def layer_orders(layers: int, permutations: int = PERMUTATIONS,
                 seed: int = PERMUTATION_SEED) -> tuple[np.ndarray, bool]:
    """The reference's layer orders for the profile null, ``[n, layers]``, and whether they are all
    of them: every order but the identity when there are at most ``permutations + 1``, otherwise
    ``permutations`` random ones."""
    if math.factorial(layers) <= permutations + 1:
        return np.array(list(itertools.permutations(range(layers)))[1:], dtype=int).reshape(-1, layers), True
    generator = np.random.default_rng(seed)
    return np.stack([generator.permutation(layers) for _ in range(permutations)]), False


def _pearson_rows(a: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The Pearson correlation of ``a`` ``[n]`` with each row of ``rows`` ``[m, n]``."""
    a, rows = a - a.mean(), rows - rows.mean(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return rows @ a / np.sqrt((rows**2).sum(-1) * (a @ a))


def profile_correlation_null(means_a: np.ndarray, means_b: np.ndarray, groups: np.ndarray,
                             points: int = PROFILE_POINTS, permutations: int = PERMUTATIONS,
                             seed: int = PERMUTATION_SEED) -> Calibrated:
    """The profile correlation of the per-sequence layer means ``means_a`` ``[N, L_a + 1]`` and
    ``means_b`` ``[N, L_b + 1]`` against the reference's layer order permuted (:func:`layer_orders`),
    with the calibrated score's jackknife over the sequences' ``groups``."""
    orders, every = layer_orders(means_b.shape[1], permutations, seed)

    def replicate(keep: np.ndarray) -> tuple[float, np.ndarray]:
        profile = profile_at_depths(means_a[keep].mean(0), points)
        layer_means = means_b[keep].mean(0)
        return (_pearson(profile, profile_at_depths(layer_means, points)),
                _pearson_rows(profile, profile_at_depths(layer_means[orders], points)))

    def null_mean(observed: float, draws: np.ndarray) -> float:
        # every order: the identity (the observed value) is one of them
        return float(np.append(draws, observed).mean() if every else draws.mean()) if draws.size else math.nan

    def calibrated(keep: np.ndarray) -> float:
        observed, draws = replicate(keep)
        return calibrate(observed, null_mean(observed, draws))

    observed, draws = replicate(np.ones(groups.size, bool))
    score = jackknife(calibrated, groups, (-math.inf, 1.0))
    return _against_null(observed, draws, null_mean(observed, draws), score)


def compare(measured: Measurement, reference: Measurement, points: int = PROFILE_POINTS,
            permutations: int = PERMUTATIONS) -> Comparison:
    """``measured`` against ``reference``: both measured on the same texts (the same sequences in
    the same order, so that the jackknife pairs them); CKA when they also read the same tokens.
    The profile correlation and the CKA come with their permutation nulls (``permutations`` draws
    each; the module docstring)."""
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
    correlation_null = profile_correlation_null(a.sequence_layer_mean, b.sequence_layer_mean, groups, points,
                                                permutations)
    matched = matched_layers(a.num_layers - 1, b.num_layers - 1)
    cka, matched_cka, cka_null = _cka(measured, reference, matched, permutations)
    return Comparison(measured.name, reference.name, correlation, distance, matched_cka, cka, matched, a.num_sequences,
                      correlation_null, cka_null)


def _cka(measured: Measurement, reference: Measurement, matched: np.ndarray,
         permutations: int) -> tuple[np.ndarray | None, Estimate | None, Calibrated | None]:
    a, b = measured.statistics.lenses, reference.statistics.lenses
    if a is None or b is None or a.sample is None or b.sample is None:
        return None, None, None  # measured without lenses (lens_tokens=None), or loaded from a file
    if measured.token_digest is None or measured.token_digest != reference.token_digest:
        return None, None, None  # different tokens (tokenizers): no token-by-token similarity
    grams_a = _grams_of(a)
    grams_b = _grams_of(b).to(grams_a.device)
    pairs = np.stack([np.arange(matched.size), matched], axis=1)
    token_groups = a.sample_sequences % JACKKNIFE_GROUPS
    raw, calibrated, null_mean = matched_cka_jackknife(grams_a, grams_b, pairs, token_groups)
    observed, draws = matched_cka_null(a.sample, b.sample, pairs, permutations)
    return cka_of_grams(grams_a, grams_b), raw, _against_null(observed, draws, null_mean, calibrated)


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
    """Evidence lines for the findings page, one per comparison table. First the call on "recovers
    the reference's pattern" (:func:`recovery`, read from the calibrated CKA's null). Then each
    group's mean profile correlation, profile distance and matched-depth CKA against its reference,
    each calibrated score beside its raw one, with a 95 % t interval over the group's runs (seeds:
    training noise; a group of one run shows its jackknife interval over sequence groups instead),
    and each later group's difference from the first (Welch t interval over runs). Closer to the
    reference is a higher correlation and CKA and a lower distance; "closer beyond chance" reads
    the calibrated difference."""
    lines = []
    for name, frame in table.groupby("comparison", sort=False):
        groups = list(dict.fromkeys(frame["group"]))
        references = ", ".join(dict.fromkeys(frame["reference"]))
        parts = []
        for group in groups:
            rows = frame[frame["group"] == group]
            parts.append(f"{group} ({_count(rows)}): " + "; ".join(
                _statistic_text(rows, column, label) for column, label in _COLUMNS if _present(rows, column)))
        line = f"{name}: against {references} on {frame['dataset'].iloc[0]}, {recovery(frame)} | " + " | ".join(parts)
        first = frame[frame["group"] == groups[0]]
        for group in groups[1:]:
            other = frame[frame["group"] == group]
            line += f" | {group} minus {groups[0]}: " + "; ".join(
                _difference_text(first, other, column, label)
                for column, label in _COLUMNS if _present(first, column) and _present(other, column))
        lines.append(line + " (intervals: 95 %, t over runs, the training noise, each run its mean over the "
                     "references it is compared with, so a run counts once; a group of one run: "
                     "jackknife over sequence groups, the text sampling; calibrated and shuffle-corrected: "
                     "(raw - null mean) / (1 - null mean), 0 at chance; the profile correlation's layer-order "
                     "null treats smooth depth profiles as exchangeable, so it is no calibration and no call is "
                     "read from it)")
    return lines


def recovery(frame: pd.DataFrame, level: float = LEVEL) -> str:
    """Which groups of one comparison table recover the reference's pattern: the calibrated
    matched-depth CKA above its token-shuffle null in every run of the group (an
    intersection-union test: the group's p-value is its runs' largest), Holm over the groups."""
    if "matched_cka_p" not in frame or frame["matched_cka_p"].isna().all():
        return "recovers the reference's pattern: untested (no CKA null: other tokens, or a table without nulls)"
    groups = list(dict.fromkeys(frame["group"]))
    largest = {group: float(frame.loc[frame["group"] == group, "matched_cka_p"].max(skipna=False)) for group in groups}
    tested = sorted((p, group) for group, p in largest.items() if math.isfinite(p))
    called, open_ = set(), True
    for rank, (p, group) in enumerate(tested):
        open_ = open_ and p <= level / (len(tested) - rank)
        if open_:
            called.add(group)
    parts = []
    for group in groups:
        rows = frame[frame["group"] == group]
        if not math.isfinite(largest[group]):
            parts.append(f"{group} untested (a run without a CKA null)")
            continue
        below = int((rows["matched_cka_p"] < level).sum())
        counted = "runs" if rows["model"].nunique() == len(rows) else "run-reference comparisons"
        parts.append(f"{group} {'yes' if group in called else 'no'} ({below} of {len(rows)} {counted} p < {level:g}, "
                     f"largest p {largest[group]:.3f})")
    text = (f"recovers the reference's pattern (calibrated CKA above its token-shuffle null in every run, "
            f"Holm over {len(tested)} group{'s' if len(tested) != 1 else ''} at {level:.0%}): " + ", ".join(parts))
    draws = frame["matched_cka_permutations"].min() if "matched_cka_permutations" in frame else math.nan
    if tested and math.isfinite(draws) and 1 / (draws + 1) > level / len(tested):
        text += f" (cannot call: {int(draws)} draws give p >= {1 / (draws + 1):.3f})"
    return text


_COLUMNS = (("profile_correlation", "profile correlation"), ("profile_distance", "profile distance"),
            ("matched_cka", "matched-depth CKA"))
_BOUNDS = {"profile_correlation": (-1.0, 1.0), "profile_distance": (0.0, 2.0), "matched_cka": (0.0, 1.0),
           "profile_correlation_calibrated": (-math.inf, 1.0), "matched_cka_calibrated": (-math.inf, 1.0)}


def _per_run(rows: pd.DataFrame, column: str) -> np.ndarray:
    """``column``'s value for each run (a ``model``) of ``rows``, its mean over the references it
    was compared with: a run compared with two references is one draw of training, not two."""
    return rows.groupby("model", sort=False)[column].mean().to_numpy(float)


def _count(rows: pd.DataFrame) -> str:
    runs, references = rows["model"].nunique(), rows["reference"].nunique()
    text = f"{runs} run{'s' if runs > 1 else ''}"
    return text + (f", each against {references} references" if len(rows) > runs else "")


def _present(rows: pd.DataFrame, column: str) -> bool:
    return column in rows and bool(rows[column].notna().all())


_CORRECTED = {"matched_cka": "calibrated", "profile_correlation": "shuffle-corrected"}
"""What each chance-corrected score is called on the page: only CKA's token-shuffle null is
calibrated; smooth depth profiles beat the layer-order shuffle far more often than 5 %."""


def _statistic_text(rows: pd.DataFrame, column: str, label: str) -> str:
    """"matched-depth CKA 0.650 [...], calibrated 0.210 [...] (null mean 0.557)"."""
    text = f"{label} {_group_estimate(rows, column)}"
    if column == "profile_distance":
        text += " (no null: a distance in units of cosine)"
    if _present(rows, f"{column}_calibrated"):
        text += (f", {_CORRECTED[column]} {_group_estimate(rows, f'{column}_calibrated')} "
                 f"(null mean {rows[f'{column}_null_mean'].mean():.3f}"
                 + ("; not a calibrated null: smooth profiles beat it" if column == "profile_correlation" else "")
                 + ")")
    return text


def _difference_text(first: pd.DataFrame, other: pd.DataFrame, column: str, label: str) -> str:
    text = f"{label} {_difference(_per_run(first, column), _per_run(other, column)):+}"
    calibrated = f"{column}_calibrated"
    if _present(first, calibrated) and _present(other, calibrated):
        text += f", {_CORRECTED[column]} {_difference(_per_run(first, calibrated), _per_run(other, calibrated)):+}"
    return text


def _group_estimate(rows: pd.DataFrame, column: str) -> Estimate:
    """A t interval over the group's runs; one comparison of one run: its jackknife interval over
    sequence groups; one run against several references: their mean, no interval (the references'
    spread is not the run's training noise)."""
    if len(rows) == 1:
        row = rows.iloc[0]
        return Estimate(float(row[column]), float(row[f"{column}_low"]), float(row[f"{column}_high"]))
    return _over_runs(_per_run(rows, column), _BOUNDS[column])
