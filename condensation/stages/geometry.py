"""Stages of rules/geometry.smk: cosine statistics of a model on a dataset, trend tables and metrics."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from condensation import geometry, models
from condensation.config.plan import check_size_order
from condensation.config.specs import (
    ExtractionConfig,
    SamplingConfig,
    TrendConfig,
    as_settings,
)
from condensation.data import text
from condensation.runtime.io import atomic_path, write_json
from condensation.trend import depth_trend, lens_summary

# torch, the measuring modules, pandas and the table modules load in the stages that use them:
# extraction jobs need no tables, and the table jobs (trend tables and metrics) no torch
if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("condensation")


def extract(
    *, handle_path: str | Path, samples_path: str | Path, out_path: str | Path,
    sampling: SamplingConfig | Mapping[str, Any], extraction: ExtractionConfig | Mapping[str, Any], threads: int = 1,
) -> None:
    """Cosine statistics of one prepared model on one dataset's samples: :func:`condensation.measure`
    on the sampled texts, saved as the workflow's ``.npz``."""
    # deferred: torch and the measuring modules, see the imports
    import torch  # noqa: PLC0415

    from condensation.measurement import measure  # noqa: PLC0415

    sampling = as_settings(SamplingConfig, sampling)
    extraction = as_settings(ExtractionConfig, extraction)
    torch.set_num_threads(threads)
    texts = text.read_samples(samples_path)
    measurement = measure(models.ModelHandle.load(handle_path), texts, sampling=sampling, extraction=extraction,
                          meta={"dataset": Path(samples_path).stem})
    measurement.statistics.save(out_path)


def trend_rows(
    model_names: Sequence[str], geometry_paths: Sequence[str | Path], handle_paths: Sequence[str | Path],
    labels: Mapping[str, str], trend: TrendConfig | Mapping[str, Any],
) -> pd.DataFrame:
    """One row per model: its name, label, size, then :meth:`~condensation.trend.TrendStatistics.as_row`
    of its depth trend (rho, tau, last-n means, the last-half interval, the depth slope and its interval)."""
    # deferred: pandas and the table modules, see the imports
    import pandas as pd  # noqa: PLC0415

    trend = as_settings(TrendConfig, trend)
    rows = []
    for name, geometry_path, handle_path in zip(model_names, geometry_paths, handle_paths, strict=True):
        stats = geometry.CosineStatistics.load(geometry_path)
        handle = models.ModelHandle.load(handle_path)
        statistics = depth_trend(stats, trend)
        rows.append(
            {
                "model": name,
                "label": labels.get(name, name),
                "num_parameters": handle.num_parameters,
                "num_layers": handle.num_layers,
                **statistics.as_row(),
                **lens_summary(stats, trend),
            }
        )
    return pd.DataFrame(rows)


def check_family_sizes(family: str, model_names: Sequence[str], handle_paths: Sequence[str | Path],
                       labels: Mapping[str, str]) -> None:
    """A family that compares sizes must list them smallest first (``plan.check_size_order``)."""
    sizes = [models.ModelHandle.load(path).num_parameters for path in handle_paths]
    check_size_order(family, model_names, labels, sizes)


def trend_table(
    *, family: str, dataset: str, model_names: Sequence[str], geometry_paths: Sequence[str | Path],
    handle_paths: Sequence[str | Path], labels: Mapping[str, str], trend: TrendConfig | Mapping[str, Any],
    csv_path: str | Path, markdown_path: str | Path, compares_size: bool,
) -> None:
    """A family's trend table, and beside it the per-sequence profiles its claims are tested on."""
    # deferred: pandas and the table modules, see the imports
    from condensation.reporting.tables import profiles, trend_tables  # noqa: PLC0415

    trend = as_settings(TrendConfig, trend)
    if compares_size:  # the first job that knows the sizes (with the family figure)
        check_family_sizes(family, model_names, handle_paths, labels)
    table = trend_rows(model_names, geometry_paths, handle_paths, labels, trend)
    trend_tables.write_trend_table(table, family=family, dataset=dataset, csv_path=csv_path,
                                   markdown_path=markdown_path)
    keys = table[["model", "label", "num_parameters"]].to_dict("records")
    profiles.write_profiles_of(profiles.profile_path(csv_path), keys, geometry_paths, trend)


def trend_metrics(
    *, csv_paths: Sequence[str | Path], geometry_paths: Sequence[str | Path], metrics_path: str | Path,
    plot_path: str | Path,
) -> None:
    """DVC metrics (rho, tau per family, dataset and model) and a per-layer plot table."""
    # deferred: pandas and the table modules, see the imports
    import pandas as pd  # noqa: PLC0415

    metrics: dict[str, Any] = {}
    for csv_path in csv_paths:
        for row in pd.read_csv(csv_path).to_dict("records"):
            key = f"{row['family']}/{row['dataset']}/{row['model']}"
            metrics[key] = {"spearman_rho": row["spearman_rho"], "kendall_tau": row["kendall_tau"]}
    write_json(metrics_path, metrics)
    curves = []
    for path in geometry_paths:
        stats = geometry.CosineStatistics.load(path)
        depth = np.arange(stats.num_layers)
        curves.append(
            pd.DataFrame(
                {
                    "series": f"{stats.meta['model']} / {stats.meta['dataset']}",
                    "model": stats.meta["model"],
                    "dataset": stats.meta["dataset"],
                    "layer": depth,
                    "layer_fraction": depth / max(stats.num_layers - 1, 1),
                    "mean_cosine": stats.layer_mean,
                }
            )
        )
    with atomic_path(plot_path) as tmp:
        pd.concat(curves).to_csv(tmp, index=False, float_format="%.5f")


def similarity_table(
    *, name: str, dataset: str, rows: Sequence[Mapping[str, Any]], compared: Sequence[str | Path],
    references: Sequence[str | Path], samples_path: str | Path, sampling: SamplingConfig | Mapping[str, Any],
    extraction: ExtractionConfig | Mapping[str, Any], csv_path: str | Path, threads: int = 1,
) -> None:
    """One ``similarity`` comparison (:func:`condensation.config.plan.similarity_rows`): each row's
    model (a handle, or a study run's final weights) measured on the dataset's samples as the
    extract rule measures it, then compared with its reference (:func:`condensation.similarity.compare`)."""
    # deferred: torch and the measuring modules, see the imports
    import torch  # noqa: PLC0415

    from condensation import similarity  # noqa: PLC0415
    from condensation.measurement import measure  # noqa: PLC0415

    sampling = as_settings(SamplingConfig, sampling)
    extraction = as_settings(ExtractionConfig, extraction)
    torch.set_num_threads(threads)
    texts = text.read_samples(samples_path)
    measured: dict[str, Any] = {}

    def measurement(model_name: str, location: str | Path):
        if str(location) not in measured:
            location = Path(location)
            handle = models.ModelHandle.load(location) if location.suffix == ".json" else \
                models.ModelHandle(name=model_name, location=str(location.resolve()))
            measured[str(location)] = measure(handle, texts, sampling=sampling, extraction=extraction, progress=False,
                                              meta={"dataset": dataset})
        return measured[str(location)]

    comparisons = [
        (row["group"],
         similarity.compare(measurement(row["model"], location), measurement(row["reference"], reference)))
        for row, location, reference in zip(rows, compared, references, strict=True)
    ]
    table = similarity.comparison_table(comparisons, name, dataset)
    with atomic_path(csv_path) as tmp:
        table.to_csv(tmp, index=False, float_format="%.5f")
