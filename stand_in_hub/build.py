"""Build the stand-in hub's repository tree from a pipeline config (see the package docstring)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from condensation.runtime.io import atomic_path
from stand_in_hub.catalog import (
    PAPER_CONFIG,
    TASK_DATASETS,
    Catalog,
    CatalogError,
    load_catalog,
)
from stand_in_hub.model_repos import train_core_tokenizer, write_model_repo
from stand_in_hub.prose import load_prose
from stand_in_hub.repository import scan
from stand_in_hub.task_datasets import TASK_WRITERS
from stand_in_hub.text_datasets import TEXT_DATASETS


@dataclass(frozen=True)
class BuildSummary:
    root: Path
    models: int
    datasets: int
    revisions: int
    files: int
    bytes: int
    seconds: float

    def __str__(self) -> str:
        return (f"{self.root}: {self.models} model and {self.datasets} dataset repositories, {self.revisions} "
                f"revisions, {self.files} files, {self.bytes / 1e6:.1f} MB in {self.seconds:.1f} s")


def dataset_paths(catalog: Catalog) -> list[str]:
    """Every dataset repository the catalog needs, after checking each requested config exists."""
    for path, name in catalog.text_datasets:
        if path not in TEXT_DATASETS:
            raise CatalogError(f"the stand-in hub has no dataset '{path}' (known: {sorted(TEXT_DATASETS)})")
        if name not in TEXT_DATASETS[path].configs:
            raise CatalogError(f"the stand-in dataset '{path}' has no config '{name}' "
                               f"(known: {TEXT_DATASETS[path].configs})")
    task_paths = [TASK_DATASETS[task][0] for task in catalog.tasks]
    return list(dict.fromkeys([path for path, _ in catalog.text_datasets] + task_paths))


def build(
    out_dir: str | Path,
    config_path: str | Path = PAPER_CONFIG,
    debs_dir: str | Path | None = None,
    only: Iterable[str] | None = None,
) -> BuildSummary:
    """Write every repository of the catalog of ``config_path`` under ``out_dir``, replacing it whole.

    ``only`` keeps the named repository ids (models or datasets), for quick partial trees.
    ``debs_dir`` is where ``r-cran-janeaustenr_*.deb`` lies (default: ``resources/debs``).
    """
    import torch
    from transformers.utils import logging as transformers_logging

    started = time.perf_counter()
    bars_were_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # put back below: a caller's process keeps its bars
    catalog = load_catalog(config_path)
    keep = set(only) if only is not None else None
    models = [m for m in catalog.models if keep is None or m.repo_id in keep]
    datasets = [path for path in dataset_paths(catalog) if keep is None or path in keep]
    prose = load_prose(debs_dir)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only add overhead on a shared machine
    try:
        with atomic_path(out_dir) as staging:
            staging.mkdir()
            core = train_core_tokenizer(prose) if models else None
            for model in models:
                write_model_repo(staging, model, core)
            for path in datasets:
                (TEXT_DATASETS[path].write if path in TEXT_DATASETS else TASK_WRITERS[path])(prose, staging)
    finally:
        torch.set_num_threads(threads)
        if bars_were_on:
            transformers_logging.enable_progress_bar()
    repos = scan(out_dir)
    snapshots = [s for revisions in repos.values() for s in revisions.values()]
    return BuildSummary(
        root=Path(out_dir), models=len(models), datasets=len(datasets), revisions=len(snapshots),
        files=sum(len(s.files) for s in snapshots), bytes=sum(f.size for s in snapshots for f in s.files.values()),
        seconds=time.perf_counter() - started,
    )
