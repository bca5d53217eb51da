"""The per-sequence data behind a condensation table, and the statistics the claims read from it.

A trend, pair, series or trajectory table shows one row per measured model with its numbers; the
findings test claims *across* rows, with intervals that cover both the training runs and the text
sequences every row was measured on. For that they need each row's per-sequence layer means (and
the lenses' jackknife replicates), which a table's stage writes beside it as
``<table>.profiles.npz`` (:func:`write_profiles`) and the findings read back
(:func:`read_profiles`).

A condensation statistic is a function of a row's mean layer profile (:data:`STATISTICS`): the
deeper layers' mean cosine (linear in the sequences, so its sampling error is exact), and the
paper's Spearman rho and Kendall tau of the layer means against depth (rank statistics, resampled).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from condensation import geometry
from condensation.lenses import LENS_NAMES
from condensation.reporting.statistics.panel import (
    Panel,
    Run,
    panel_from_profiles,
    panel_from_replicates,
    panel_from_units,
)
from condensation.runtime.io import atomic_path
from condensation.trend import deep_lens_replicates, sequence_profiles

SUFFIX = ".profiles.npz"


def deep_half(profiles: np.ndarray) -> np.ndarray:
    """The mean of the deepest ceil(n / 2) of ``n`` layers, per row of ``[..., n]``: ``last_half``."""
    half = (profiles.shape[-1] + 1) // 2
    return profiles[..., -half:].mean(axis=-1)


def spearman_with_depth(profiles: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row of ``[m, n]`` layer means against the layer index (average
    ranks for ties; NaN for a constant row), as :func:`scipy.stats.spearmanr` gives it."""
    ranks = rankdata(profiles, axis=-1)
    depth = np.arange(profiles.shape[-1], dtype=float)
    centred = ranks - ranks.mean(axis=-1, keepdims=True)
    depth = depth - depth.mean()
    with np.errstate(invalid="ignore", divide="ignore"):
        return (centred @ depth) / np.sqrt((centred**2).sum(axis=-1) * (depth @ depth))


def kendall_with_depth(profiles: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row of ``[m, n]`` layer means against the layer index (the index
    has no ties), as :func:`scipy.stats.kendalltau` gives it."""
    upper = np.triu_indices(profiles.shape[-1], k=1)
    signs = np.sign(profiles[..., upper[1]] - profiles[..., upper[0]])
    pairs = signs.shape[-1]
    untied = np.count_nonzero(signs, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return signs.sum(axis=-1) / np.sqrt(untied * pairs)


@dataclass(frozen=True)
class Statistic:
    """A condensation statistic: its column in the tables, its name for a reader, and how it is
    computed from mean layer profiles ``[m, n] -> [m]``; ``linear``: a mean over sequences."""

    column: str
    title: str
    compute: Callable[[np.ndarray], np.ndarray]
    linear: bool


STATISTICS = {
    "last_half": Statistic("last_half", "deeper-layer cosine", deep_half, True),
    "spearman_rho": Statistic("spearman_rho", "Spearman rho", spearman_with_depth, False),
    "kendall_tau": Statistic("kendall_tau", "Kendall tau", kendall_with_depth, False),
}


@dataclass(frozen=True)
class Profiles:
    """A table's rows (its key columns) and each row's per-sequence layer means ``[N, n]``, with
    the lenses over the deeper half of the layers (values ``[lenses]``, jackknife ``[lenses, G]``;
    None where not measured)."""

    rows: pd.DataFrame
    layers: list[np.ndarray]
    lens_values: list[np.ndarray | None]
    lens_jackknife: list[np.ndarray | None]

    def subset(self, mask: Sequence[bool] | np.ndarray) -> Profiles:
        keep = np.flatnonzero(np.asarray(mask, bool))
        return Profiles(self.rows.iloc[keep].reset_index(drop=True), [self.layers[i] for i in keep],
                        [self.lens_values[i] for i in keep], [self.lens_jackknife[i] for i in keep])

    @staticmethod
    def concat(parts: Sequence[Profiles]) -> Profiles:
        """The rows of ``parts`` one after another, as one table."""
        return Profiles(pd.concat([part.rows for part in parts], ignore_index=True),
                        [layers for part in parts for layers in part.layers],
                        [values for part in parts for values in part.lens_values],
                        [jackknife for part in parts for jackknife in part.lens_jackknife])

    def panel(self, statistic: str, arms: Sequence[str], seeds: Sequence, fixed: Sequence[str] = (),
              units: str = "sequences") -> Panel:
        """The rows as runs of a :class:`~condensation.reporting.statistics.panel.Panel`: row i in
        arm ``arms[i]`` with seed ``seeds[i]``; ``statistic`` a key of :data:`STATISTICS` or a lens
        name (its jackknife replicates)."""
        runs = [Run(arm, seed, 0.0) for arm, seed in zip(arms, seeds, strict=True)]
        if statistic in LENS_NAMES:
            index = LENS_NAMES.index(statistic)
            if any(v is None for v in self.lens_values):
                raise ValueError(f"{statistic}: a row has no lenses")
            runs = [Run(run.arm, run.seed, float(values[index])) for run, values in zip(runs, self.lens_values)]
            return panel_from_replicates(runs, [jack[index] for jack in self.lens_jackknife], kind="jackknife",
                                         units=f"groups of {units}", fixed=fixed, statistic=statistic)
        found = STATISTICS[statistic]
        if found.linear:
            return panel_from_units(runs, [found.compute(layers) for layers in self.layers], units=units, fixed=fixed,
                                    statistic=found.title)
        return panel_from_profiles(runs, self.layers, found.compute, units=units, fixed=fixed, name=found.title)


def write_profiles(path: str | os.PathLike, rows: pd.DataFrame, layers: Sequence[np.ndarray | None],
                   lenses: Sequence[tuple[np.ndarray, np.ndarray] | None]) -> None:
    """``rows`` (key columns, JSON-able) with each row's per-sequence layer means and deep-half
    lenses (:func:`condensation.trend.sequence_profiles`, ``deep_lens_replicates``), atomically."""
    if any(profile is None for profile in layers):
        raise ValueError(f"{path}: a row has no per-sequence layer means (a geometry file from before they were "
                         "stored): re-run its extraction")
    arrays: dict[str, np.ndarray] = {"rows": np.array(rows.to_json(orient="records"))}
    for index, (profile, lens) in enumerate(zip(layers, lenses, strict=True)):
        arrays[f"layers_{index}"] = np.asarray(profile, np.float64)
        if lens is not None:
            arrays[f"lens_values_{index}"], arrays[f"lens_jackknife_{index}"] = lens
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        np.savez_compressed(handle, lens_names=np.array(LENS_NAMES), **arrays)


def read_profiles(path: str | os.PathLike) -> Profiles:
    with np.load(path, allow_pickle=False) as data:
        rows = pd.DataFrame(json.loads(str(data["rows"])))
        same_lenses = tuple(data["lens_names"]) == LENS_NAMES
        count = len(rows)
        layers = [data[f"layers_{i}"] for i in range(count)]
        values = [data[f"lens_values_{i}"] if same_lenses and f"lens_values_{i}" in data.files else None
                  for i in range(count)]
        jackknife = [data[f"lens_jackknife_{i}"] if values[i] is not None else None for i in range(count)]
    return Profiles(rows, layers, values, jackknife)


def read_all(paths: Sequence[str | os.PathLike]) -> dict[str, Profiles]:
    """Profiles keyed by their table's stem (the file name without ``.profiles.npz``)."""
    return {os.path.basename(str(path))[: -len(SUFFIX)]: read_profiles(path) for path in paths}


def profile_path(table_path: str | os.PathLike) -> str:
    """Where a table's profiles go: ``x.csv`` -> ``x.profiles.npz``."""
    stem = str(table_path)
    return (stem[:-4] if stem.endswith(".csv") else stem) + SUFFIX


def write_profiles_of(path: str | os.PathLike, rows: Sequence[Mapping], geometry_paths: Sequence[str | os.PathLike],
                      trend) -> None:
    """:func:`write_profiles` of the geometry files (one per row, :class:`~condensation.geometry.CosineStatistics`)
    under the trend conventions ``trend`` (:class:`~condensation.config.specs.TrendConfig`)."""
    layers, lenses = [], []
    for geometry_path in geometry_paths:
        stats = geometry.CosineStatistics.load(geometry_path)
        layers.append(sequence_profiles(stats, trend))
        lenses.append(deep_lens_replicates(stats, trend))
    write_profiles(path, pd.DataFrame(list(rows)), layers, lenses)
