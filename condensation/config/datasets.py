"""What can be known about the config's text before anything runs, torch-free (the planner calls it):
which files a ``files`` dataset reads, whether a dataset is long enough for its samples, which
dataset a local task's text comes from, and whether that text is also training text.

Every problem is returned as a sentence that starts with the config key to change and says how,
so that ``snakemake -n`` stops with it instead of a job failing later with a traceback.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from condensation.config.corpora import CORPORA
from condensation.config.plan import STUDIES

GLOB_CHARACTERS = frozenset("*?[")


def local_files(patterns: Iterable[str]) -> list[str]:
    """The files a ``files`` dataset names: every pattern globbed (``**`` recursive), sorted, once
    each; directories a pattern matches are not files and are left out."""
    return sorted({path for pattern in patterns for path in glob.glob(pattern, recursive=True) if os.path.isfile(path)})


def document_name(path: str) -> str:
    """A file's document name, what ``exclude`` and a local task's ``documents`` refer to."""
    return Path(path).stem


def files_problems(name: str, entry: Mapping[str, Any]) -> list[str]:
    """Each ``files`` pattern of dataset ``name`` that reads nothing, with the fix."""
    problems = []
    for index, pattern in enumerate(entry["files"]):
        if local_files([pattern]):
            continue
        where = f"config.datasets.{name}.files[{index}]"
        if os.path.isdir(pattern):
            problems.append(f"{where}: '{pattern}' is a directory; name its files with a glob, "
                            f"e.g. '{Path(pattern) / '*.txt'}'")
        elif GLOB_CHARACTERS & set(pattern):
            problems.append(f"{where}: '{pattern}' matches no file (relative to {os.getcwd()}); "
                            "fix the pattern or add the files")
        else:
            problems.append(f"{where}: file '{pattern}' does not exist (relative to {os.getcwd()}); fix the path")
    return problems


def files_documents(entry: Mapping[str, Any]) -> dict[str, str]:
    """``{document name: path}`` of a ``files`` dataset: its ``documents`` (all when not given),
    its ``exclude`` left out."""
    excluded = set(entry.get("exclude", []))
    paths = {document_name(path): path for path in local_files(entry["files"])}
    chosen = set(entry.get("documents") or paths)
    return {document: path for document, path in paths.items() if document in chosen and document not in excluded}


def count_words(paths: Iterable[str], enough: int) -> int:
    """Whitespace words in the files, counted until ``enough`` (what sampling counts: paragraphs
    keep every word); stops early so a large corpus costs one file's read."""
    total = 0
    for path in paths:
        total += len(Path(path).read_text(encoding="utf-8", errors="replace").split())
        if total >= enough:
            break
    return total


def sampled_datasets(config: Mapping[str, Any]) -> set[str]:
    """The datasets whose sequences are sampled and measured (families, pairs, dataset comparisons,
    series and the studies' geometry datasets)."""
    names = {dataset for spec in config["families"].values() for dataset in spec["datasets"]}
    names |= {spec["dataset"] for spec in config["pairs"].values()}
    names |= {dataset for datasets in config["dataset_robustness"].values() for dataset in datasets}
    names |= {spec["dataset"] for spec in config["series"].values()}
    names |= {config[study]["geometry_dataset"] for study in STUDIES if config[study]["models"]}
    return names


def too_short(total_words: int, num_sequences: int, min_words: int) -> str | None:
    """Why text of ``total_words`` words cannot give ``num_sequences`` sequences of their own
    ``min_words`` words each (the sequences would share text while the intervals count them as
    independent), with the fix; None when it can."""
    needed = num_sequences * min_words
    if total_words >= needed:
        return None
    return (
        f"holds {total_words} words, fewer than config.sampling.num_sequences x min_words = "
        f"{num_sequences} x {min_words} = {needed}; add text to it, or lower config.sampling.num_sequences or min_words"
    )


def check_datasets(config: Mapping[str, Any]) -> list[str]:
    """What the file system already tells about the ``files`` datasets: patterns that read
    nothing, unknown ``exclude`` names, and sampled datasets too short for their sequences.
    Built-in corpora and hub datasets are known only once built or fetched (their jobs check)."""
    problems: list[str] = []
    sampled = sampled_datasets(config)
    for name, entry in config["datasets"].items():
        if entry["source"] != "files":
            continue
        found = files_problems(name, entry)
        problems += found
        if found:
            continue
        names = {document_name(path) for path in local_files(entry["files"])}
        unknown = {key: sorted(set(entry.get(key) or []) - names) for key in ("exclude", "documents")}
        for key, absent in unknown.items():
            if absent:
                problems.append(f"config.datasets.{name}.{key}: {absent} name no file of the dataset "
                                f"(its documents: {sorted(names)})")
        if any(unknown.values()):
            continue
        if name in sampled:
            num_sequences, min_words = config["sampling"]["num_sequences"], config["sampling"]["min_words"]
            words = count_words(files_documents(entry).values(), num_sequences * min_words)
            message = too_short(words, num_sequences, min_words)
            problems += [f"config.datasets.{name}: {message}"] if message else []
    return problems


# ------------------------------------------------------------------------------ local tasks


def task_dataset(config: Mapping[str, Any], corpus: str) -> dict[str, Any] | None:
    """The dataset entry a local task's ``corpus`` names: a dataset of the config, else a built-in
    corpus read whole (``{"source": corpus}``); None when it is neither."""
    if corpus in config["datasets"]:
        return dict(config["datasets"][corpus])
    if corpus in CORPORA:
        return {"source": corpus, "exclude": []}
    return None


def task_text_datasets(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{corpus name: dataset entry}`` of every local task's text (what build_eval_tasks reads)."""
    tasks = config["evaluation"]["local_tasks"].values()
    return {spec["corpus"]: task_dataset(config, spec["corpus"])
            for spec in tasks if task_dataset(config, spec["corpus"])}


@dataclass(frozen=True)
class TrainingText:
    """A dataset some training of the config reads."""

    dataset: str
    """Its name under ``datasets``."""
    readers: tuple[str, ...]
    """The config keys that make a run read it (``config.pretrain.dataset``, ``config.midtrain.dataset``)."""


def training_texts(config: Mapping[str, Any]) -> list[TrainingText]:
    """Every dataset a training run of the config reads: the pre-training dataset (when a model is
    pre-trained here; its tokenizer is trained on it too) and each study's dataset."""
    readers: dict[str, list[str]] = {}
    if any(spec["source"] == "pretrain" for spec in config["models"].values()):
        readers.setdefault(config["pretrain"]["dataset"], []).append("config.pretrain.dataset")
    for study in STUDIES:
        if config[study]["models"]:
            readers.setdefault(config[study]["dataset"], []).append(f"config.{study}.dataset")
    return [TrainingText(dataset, tuple(keys)) for dataset, keys in readers.items()]


def shared_text(task: Mapping[str, Any], documents: list[str] | None, training: Mapping[str, Any]) -> str | None:
    """What a task's text (dataset entry ``task``, its ``documents`` or all) shares with a training
    dataset's entry, in words, or None when they share nothing that can be seen before reading
    the text (text of different sources is taken as distinct)."""
    source = task["source"]
    if source != training["source"]:
        return None
    if source in CORPORA:
        held_out = set(training.get("exclude", []))
        read = training.get("documents")
        if documents is None:  # the corpus' documents are listed only once it is built: assume shared
            return f"whichever documents of {source} neither excludes (name the task's documents to tell)"
        common = [document for document in documents if document not in held_out and (read is None or document in read)]
        return f"documents {common}" if common else None
    if source == "files":
        task_files = files_documents(task)
        chosen = ({task_files[d] for d in documents if d in task_files} if documents is not None
                  else set(task_files.values()))
        trained = {os.path.realpath(path) for path in files_documents(training).values()}
        common = sorted(document_name(path) for path in chosen if os.path.realpath(path) in trained)
        return f"files {common}" if common else None
    # hub: the same split of the same dataset, unless both name different shards
    same = all(task.get(key) == training.get(key) for key in ("path", "name", "split"))
    shards = task.get("data_files"), training.get("data_files")
    if same and (None in shards or shards[0] == shards[1]):
        return f"the {task.get('split')} split of {task.get('path')}"
    return None


def check_local_tasks(config: Mapping[str, Any]) -> list[str]:
    """Each local task's text: a dataset that exists, documents it has (where known now), and no
    overlap with any training text unless ``allow_overlap`` says why."""
    problems: list[str] = []
    trained = training_texts(config)
    for name, spec in config["evaluation"]["local_tasks"].items():
        where = f"config.evaluation.local_tasks.{name}"
        dataset = task_dataset(config, spec["corpus"])
        if dataset is None:
            problems.append(
                f"{where}.corpus: '{spec['corpus']}' is neither a dataset of config.datasets "
                f"({', '.join(config['datasets'])}) nor a built-in corpus ({', '.join(CORPORA)}); add it under datasets"
            )
            continue
        if (dataset["source"] == "files" and spec["documents"] is not None
                and not files_problems(spec["corpus"], dataset)):
            have = files_documents(dataset)
            absent = [document for document in spec["documents"] if document not in have]
            if absent:
                problems.append(f"{where}.documents: {absent} are no document of dataset '{spec['corpus']}' "
                                f"(its documents: {sorted(have)})")
                continue
        if spec["allow_overlap"]:
            continue
        for text in trained:
            shared = shared_text(dataset, spec["documents"], config["datasets"][text.dataset])
            if shared:
                problems.append(
                    f"{where}: its text (corpus '{spec['corpus']}') shares {shared} with dataset '{text.dataset}', "
                    f"which training reads ({', '.join(text.readers)}): its scores would be contaminated. "
                    "Name documents "
                    f"that config.datasets.{text.dataset}.exclude leaves out, or set allow_overlap: true with an "
                    "overlap_reason"
                )
    return problems
