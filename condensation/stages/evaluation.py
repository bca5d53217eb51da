"""Stages of rules/evaluation.smk: lm-eval scores of models and checkpoints, Tables 2 and 3."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from condensation import models
from condensation.config.specs import DatasetSpec
from condensation.data import text
from condensation.evaluation import harness
from condensation.evaluation.score_files import item_rows_path, lm_eval_path
from condensation.evaluation.tasks import build_local_tasks
from condensation.runtime.io import atomic_path, read_json, write_json, write_manifest
from condensation.runtime.run_dir import RunDir, parse_step, step_name
from condensation.stages.data import naming_the_dataset

# the table modules (pandas, scipy: 2 s) are imported by the table stages only; scoring and
# picking a score are jobs of their own that need neither.

log = logging.getLogger("condensation")


TASK_TEXT_KEYS = ("corpus", "allow_overlap", "overlap_reason")
"""Keys of a local task's config entry that say where its text comes from, not how items are built."""


def build_eval_tasks(
    *, specs: Mapping[str, Mapping[str, Any]], texts: Mapping[str, Mapping[str, Any]],
    text_dirs: Mapping[str, str | Path | None], out_dir: str | Path,
) -> None:
    """The offline multiple-choice tasks, from held-out documents of their corpora: ``texts`` maps
    each task's ``corpus`` to its dataset entry (``config.datasets.task_text_datasets``) and
    ``text_dirs`` to its built corpus or fetched hub text (None for a ``files`` dataset)."""
    # each text read once, through the same (manifest-checked) reader as the datasets
    documents = {}
    for name, entry in texts.items():
        with naming_the_dataset(name):
            documents[name] = text.read_documents(DatasetSpec.from_config(name, entry), text_dirs[name])
    with atomic_path(out_dir) as tmp:
        for name, spec in specs.items():
            task_spec = {key: value for key, value in spec.items() if key not in TASK_TEXT_KEYS}
            if task_spec.get("documents") is None:  # all of the corpus' documents, in order
                task_spec["documents"] = list(documents[spec["corpus"]])
            try:
                build_local_tasks(documents[spec["corpus"]], {name: task_spec}, tmp / name)
            except ValueError as error:
                raise ValueError(f"config.evaluation.local_tasks.{name}: {error}") from error
        write_json(tmp / "tasks.json", {"tasks": list(specs)})
        write_manifest(tmp, kind="eval_tasks")


def fetch_eval_tasks(*, tasks: Sequence[str], out_path: str | Path) -> None:
    """Download the datasets of the lm-eval tasks into the cache (this stage runs where the
    network is), after checking every name."""
    harness.fetch_task_data(tasks, out_path)


def _task_paths(task_dir: str | Path | None, hub_tasks_path: str | Path | None) -> list[Path] | None:
    """Where scoring looks for task YAMLs: the offline tasks, and the built-in directories that
    fetch_eval_tasks recorded (indexing only those saves over 10 s a job); None: the full index."""
    paths = [Path(task_dir)] if task_dir is not None else []
    if hub_tasks_path is not None:
        paths += harness.builtin_task_directories(hub_tasks_path)
    return paths or None


def evaluate_pretrained(
    *, handle_path: str | Path, task_dir: str | Path | None, tasks: Mapping[str, int], settings: Mapping[str, Any],
    out_path: str | Path, threads: int = 1, hub_tasks_path: str | Path | None = None,
) -> None:
    """Scores of a model before mid-training: Table 2's `pretrained` row."""
    handle = models.ModelHandle.load(handle_path)
    record = {"model": handle.name, "method": "pretrained", "seed": None, "checkpoint": "pretrained", "step": None,
              "val_loss": None}
    harness.score_checkpoint(
        handle, tasks=tasks, settings=harness.EvalSettings(**settings),
        include_path=_task_paths(task_dir, hub_tasks_path), record=record,
        out_path=out_path, job="pretrained", threads=threads,
    )


def evaluate_checkpoint(
    *, index_path: str | Path, checkpoint: str, task_dir: str | Path | None, tasks: Mapping[str, int],
    settings: Mapping[str, Any], out_path: str | Path, model: str, method: str, seed: int, threads: int = 1,
    hub_tasks_path: str | Path | None = None,
) -> None:
    """Scores of one checkpoint of a run: ``selected`` (lowest validation loss, as the run's index
    records it) or ``step-N``."""
    run = RunDir(Path(index_path).parent)
    step = run.selected_step() if checkpoint == "selected" else parse_step(checkpoint)
    path = run.checkpoint(step)
    info = read_json(path / "checkpoint.json")
    handle = models.ModelHandle(name=f"{model}/{method}/seed{seed}/{path.name}", location=str(path.resolve()))
    record = {
        "model": model, "method": method, "seed": seed, "checkpoint": path.name, "step": info["step"],
        "val_loss": info.get("val_loss"), "selected_by": "lowest validation loss" if checkpoint == "selected" else None,
    }
    harness.score_checkpoint(
        handle, tasks=tasks, settings=harness.EvalSettings(**settings),
        include_path=_task_paths(task_dir, hub_tasks_path), record=record,
        out_path=out_path, job=checkpoint, threads=threads,
    )


def pick_selected_score(*, index_path: str | Path, record_paths: Sequence[str | Path],
                        out_paths: Mapping[str, str | Path]) -> None:
    """The selected checkpoint's scores (lowest validation loss, as the run's index records it),
    copied from those of its step among ``record_paths``, instead of scoring it a second time."""
    step_record = next(Path(p) for p in record_paths
                       if Path(p).stem == step_name(RunDir(Path(index_path).parent).selected_step()))
    for kind, out_path in out_paths.items():
        source = {"record": step_record, "item_rows": item_rows_path(step_record),
                  "lm_eval": lm_eval_path(step_record)}[kind]
        if kind == "record":
            write_json(out_path, read_json(source) | {"selected_by": "lowest validation loss"})
        else:
            with atomic_path(out_path) as tmp:
                shutil.copyfile(source, tmp)


def table2(
    *, score_paths: Sequence[str | Path], tasks: Sequence[str], methods: Sequence[str], reference: str, metric: str,
    labels: Mapping[str, str], stem: str | Path, metrics_path: str | Path, plot_path: str | Path,
    counted_tasks: Sequence[str] | None = None, loss_paths: Sequence[str | Path] = (),
) -> None:
    """Table 2 (every method on every mid-trained model, against ``reference``) as CSV, Markdown,
    LaTeX and HTML, and the same scores as DVC metrics and a DVC plot of the averages; with
    ``loss_paths`` (each model's ``losses.csv``) each row's tokens to CE's validation loss."""
    # deferred: pandas and scipy, see the imports
    from condensation.reporting.tables import table2  # noqa: PLC0415

    table2.write_table2(
        score_paths=score_paths, tasks=tasks, methods=methods, reference=reference, metric=metric, labels=labels,
        stem=stem, metrics_path=metrics_path, plot_path=plot_path, counted=counted_tasks, loss_paths=loss_paths,
    )


def table3(
    *, score_paths: Sequence[str | Path], tasks: Sequence[str], metric: str, grid: Mapping[str, Sequence[float]],
    models: Sequence[str], stem: str | Path,
) -> None:
    """Table 3: the average score of the dispersion loss over its weight x temperature grid."""
    # deferred: pandas and scipy, see the imports
    from condensation.reporting.tables import table3  # noqa: PLC0415

    table3.write_table3(score_paths=score_paths, tasks=tasks, metric=metric, grid=grid, models=models, stem=stem)


def table4(
    *, score_paths: Sequence[str | Path], models: Sequence[str], trajectory_paths: Sequence[str | Path],
    tasks: Sequence[str], methods: Sequence[str], metric: str, labels: Mapping[str, str], stem: str | Path,
    counted_tasks: Sequence[str] | None = None, loss_paths: Sequence[str | Path] = (),
) -> None:
    """Table 4: models pre-trained from scratch with each method, their scores and condensation
    (``trajectory_paths``: each model's trajectory table, in the order of ``models``); with
    ``loss_paths`` (each model's ``losses.csv``) each row's tokens to CE's validation loss."""
    # deferred: pandas and scipy, see the imports
    from condensation.reporting.tables.table4 import write_table4  # noqa: PLC0415

    write_table4(
        score_paths=score_paths, tasks=tasks, methods=methods, metric=metric, labels=labels,
        condensation=dict(zip(models, trajectory_paths, strict=True)), stem=stem, counted=counted_tasks,
        loss_paths=loss_paths,
    )


def scores_by_step(*, score_paths: Sequence[str | Path], metric: str, out_path: str | Path) -> None:
    """Every scored checkpoint: the task scores (percent) over mid-training, mean and std over seeds."""
    # deferred: pandas and scipy, see the imports
    from condensation.reporting.tables import score_tables  # noqa: PLC0415

    score_tables.write_scores_by_step(score_paths=score_paths, metric=metric, out_path=out_path)
