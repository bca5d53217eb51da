"""Offline multiple-choice tasks for lm-eval, built from held-out text.

The paper scores its mid-trained checkpoints on standard benchmarks through lm-evaluation-harness.
Those benchmarks live on the Hugging Face Hub, which this pipeline never reaches, so small
multiple-choice tasks are built from held-out text instead (Persuasion is excluded from all
training). Four kinds (items built in :mod:`condensation.evaluation.task_items`):

* ``cloze`` (LAMBADA-like): given the ``context_words`` words before a sentence-final word, pick
  that word among distractors of similar corpus frequency.
* ``next_sentence``: given ``context_sentences`` consecutive sentences, pick the sentence that
  follows among sentences of similar length from far-away places in the same text.
* ``word_order`` (BLiMP-like): given the words before a sentence, pick the sentence as written
  among copies in which a run of adjacent lower-case words comes in another order (two words
  for two choices, three for up to six).
* ``word_choice``: the same, with copies in which one word is replaced by a word of the same
  length and neighbouring frequency rank: which word fits there, given the words on both sides.

The two sentence kinds exist because the first two ask too much of the default's toy models:
measured on Persuasion (400 items, 4 choices, seed 0, the kinds' default options), ``acc`` in %
at 0-shot / 1-shot, chance 25, standard error about 2.2 (2.5 near 50):

==========================================  ===========  =============  ===========  ===========
model                                       cloze        next_sentence  word_order   word_choice
==========================================  ===========  =============  ===========  ===========
toy GPT2 at init (8 layers, width 128)      23.3 / 20.8  27.0 / 26.0    22.5 / 22.0  24.8 / 28.5
toy pre-trained (4 layers, 293 steps)       37.0 / 36.8  26.8 / 26.5    68.0 / 67.8  52.0 / 51.5
toy pre-trained (8 layers, 293 steps)       38.3 / 37.5  26.5 / 25.8    76.3 / 75.3  57.5 / 57.3
SmolLM2-135M                                88.5 / --    -- / 44.5      97.3 / --    94.8 / --
==========================================  ===========  =============  ===========  ===========

(Toys as the default builds them: a 4096-token byte-level BPE and 600k tokens of the five other
novels, lr 2e-3. SmolLM2's cloze and next_sentence figures come from a default run.) The
pre-trained toys beat chance by far on both sentence kinds, the model at init does not, and
SmolLM2, trained on far more text, does better still: the kinds measure language modelling
that a small model acquires, with no knowledge of the world needed.

Conventions shared by every kind (one convention, so few-shot prompts read naturally):

* A query never ends in whitespace and a choice never starts with it; the YAML sets
  ``target_delimiter: " "``, so lm-eval scores ``query + " " + choice``. With GPT2-style BPE
  this is the ordinary tokenisation of running text (the word carries its leading space).
* The cloze target is the bare word: its sentence-final punctuation is not part of any choice,
  as in LAMBADA. The choices of a ``word_order`` or ``word_choice`` item are whole sentences of
  one length in characters, so ``acc`` (summed log-likelihood) and ``acc_norm`` agree, and the
  sentence as written is exchangeable with its copies for a model that knows nothing
  (``word_order``) or only word frequencies (``word_choice``): chance is ``1 / num_choices``.
* Few-shot examples are drawn by lm-eval from the same (test) split, never the item itself, and
  are separated by lm-eval's default ``fewshot_delimiter`` ("\\n\\n").

Every task is a YAML file plus a JSON-lines file beside it, and the directory also holds a copy
of :mod:`condensation.evaluation.task_data`. The YAML names the data file relative to itself, through that
copy (its ``custom_dataset``), so a task directory works wherever it lies and from any working
directory: as an ``include_path`` of :func:`condensation.evaluation.harness.score_model` and of the
``lm_eval`` command line alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from condensation.evaluation import task_data
from condensation.evaluation.task_items import (
    KIND_BUILDERS,
    KINDS,
    cloze_items,
    next_sentence_items,
    sentences,
    word_choice_items,
    word_order_items,
    words,
)
from condensation.runtime.io import read_json, sha256_file, write_json, write_text

__all__ = [
    "KINDS",
    "build_local_tasks",
    "cloze_items",
    "next_sentence_items",
    "sentences",
    "word_choice_items",
    "word_order_items",
    "words",
    "write_local_task",
]

TASKS_INDEX = "tasks.json"
# The loader module as it lies beside the YAMLs, and the ``!function`` reference the YAMLs make to it.
LOADER_FILE = "task_data.py"
LOADER_FUNCTION = "task_data.load_items"

# Task names become file names and lm-eval index keys; keep them plain.
_TASK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


# --------------------------------------------------------------------------------------------
# Task files
# --------------------------------------------------------------------------------------------


def _check_task_name(name: str) -> None:
    if not isinstance(name, str) or not _TASK_NAME.match(name):
        raise ValueError(f"task name {name!r} is not usable: it must match {_TASK_NAME.pattern}")


class _FunctionReference(str):
    """A YAML ``!function`` reference (lm-eval's tag for a callable defined beside the YAML)."""


class _TaskYamlDumper(yaml.SafeDumper):
    pass


_TaskYamlDumper.add_representer(_FunctionReference, lambda dumper, ref: dumper.represent_scalar("!function", str(ref)))


def _task_yaml(name: str, kind: str) -> str:
    """The lm-eval YAML of one local task. The data file is named relative to the YAML and read
    by the loader copied beside it; column names (not Jinja templates) feed the prompt, so text
    is passed through verbatim; ``num_fewshot`` is left unset so the caller's applies."""
    metrics = ["acc", "acc_norm"]
    config = {
        "task": name,
        "custom_dataset": _FunctionReference(LOADER_FUNCTION),
        "dataset_kwargs": {"data_file": f"{name}.jsonl"},
        "output_type": "multiple_choice",
        "test_split": "test",
        "doc_to_text": "query",
        "doc_to_choice": "choices",
        "doc_to_target": "gold",
        "target_delimiter": " ",
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in metrics],
        "metadata": {"version": 1.0, "kind": kind},
    }
    return yaml.dump(config, Dumper=_TaskYamlDumper, sort_keys=False, allow_unicode=True)


def _check_items(name: str, items: Sequence[Mapping]) -> None:
    if not items:
        raise ValueError(f"task {name!r}: no items to write")
    for n, item in enumerate(items):
        choices, gold = item.get("choices"), item.get("gold")
        if not isinstance(item.get("query"), str) or not isinstance(choices, list) or len(choices) < 2:
            raise ValueError(f"task {name!r}, item {n}: needs a str 'query' and a list of >= 2 'choices'")
        if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(choices):
            raise ValueError(f"task {name!r}, item {n}: gold {gold!r} is not an index into its {len(choices)} choices")


def write_local_task(name: str, kind: str, items: list[dict], out_dir: str | Path) -> Path:
    """Write ``out_dir/<name>.jsonl`` (the items), ``out_dir/task_data.py`` (the loader) and
    ``out_dir/<name>.yaml`` (the lm-eval task reading the items through the loader), each
    atomically; return the YAML path.

    The YAML is written last, so it never points at a missing or partial file, and it holds no
    absolute path, so the directory can be moved or checked out elsewhere. A name that equals a
    built-in lm-eval task shadows it when ``out_dir`` is an ``include_path``: pick a distinctive
    one (e.g. ``austen_cloze``).
    """
    _check_task_name(name)
    if kind not in KINDS:
        raise ValueError(f"task {name!r}: unknown kind {kind!r}; expected one of {list(KINDS)}")
    _check_items(name, items)
    out = Path(out_dir).resolve()
    write_text(out / f"{name}.jsonl", "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items))
    write_text(out / LOADER_FILE, Path(task_data.__file__).read_text(encoding="utf-8"))
    yaml_path = out / f"{name}.yaml"
    write_text(yaml_path, _task_yaml(name, kind))
    return yaml_path


_REQUIRED_KEYS = {"kind", "documents", "num_items", "num_choices", "seed"}
# Optional keys: the options of the item builders, each understood by some kinds only.
_OPTION_KEYS = {option for _, options in KIND_BUILDERS.values() for option in options}


def _spec_items(name: str, spec: Mapping[str, Any], documents: Mapping[str, str]) -> list[dict]:
    """Validate one task spec and build its items from the named documents (joined in order)."""
    missing, unknown = _REQUIRED_KEYS - set(spec), set(spec) - _REQUIRED_KEYS - _OPTION_KEYS
    if missing or unknown:
        raise ValueError(f"task {name!r}: spec lacks {sorted(missing)} / has unknown keys {sorted(unknown)}")
    kind, names = spec["kind"], spec["documents"]
    if kind not in KINDS:
        raise ValueError(f"task {name!r}: unknown kind {kind!r}; expected one of {list(KINDS)}")
    if isinstance(names, str) or not names:
        raise ValueError(f"task {name!r}: 'documents' must be a non-empty list of names, got {names!r}")
    absent = [d for d in names if d not in documents]
    if absent:
        raise ValueError(f"task {name!r}: unknown documents {absent}; available: {sorted(documents)}")
    build, options = KIND_BUILDERS[kind]
    misplaced = sorted(key for key in _OPTION_KEYS - set(options) if key in spec)
    if misplaced:
        raise ValueError(f"task {name!r}: {misplaced} do not apply to kind {kind!r}")

    text = "\n\n".join(documents[d] for d in names)
    try:
        chosen = {option: spec[option] for option in options if option in spec}
        return build(text, spec["num_items"], spec["num_choices"], spec["seed"], **chosen)
    except ValueError as err:
        raise ValueError(f"task {name!r} from {list(names)}: {err}") from err


def build_local_tasks(documents: Mapping[str, str], specs: Mapping[str, Mapping], out_dir: str | Path) -> list[Path]:
    """Build every task in ``specs`` (name -> spec) from ``documents`` (name -> text) into
    ``out_dir``; return the YAML paths in spec order.

    A spec is ``{"kind": one of KINDS, "documents": [names], "num_items": int, "num_choices": int,
    "seed": int}`` plus optionally the kind's options: ``context_words`` (cloze, default 60;
    word_order and word_choice, default 20), ``context_sentences`` (next_sentence, default 3),
    ``max_answer_words`` (next_sentence, default 50; word_order and word_choice, default 30).
    All specs are checked and all items built before anything is written. ``out_dir/tasks.json``
    is written last (it marks a complete build):
    ``{"tasks": [names], "details": {name: {spec..., "num_items", "data_sha256"}}}``.
    Task files of an earlier build that this one no longer has are removed, so a stale YAML
    cannot linger in the include path. The YAMLs are final: ``out_dir`` is an ``include_path``
    for lm-eval as it lies, wherever it is moved.
    """
    if not specs:
        raise ValueError("no task specs given")
    for name in specs:
        _check_task_name(name)
    built = {name: _spec_items(name, spec, documents) for name, spec in specs.items()}

    out = Path(out_dir).resolve()
    index_path = out / TASKS_INDEX
    previous = read_json(index_path).get("tasks", []) if index_path.exists() else []
    paths, details = [], {}
    for name, items in built.items():
        paths.append(write_local_task(name, specs[name]["kind"], items, out))
        details[name] = {**specs[name], "num_items": len(items), "data_sha256": sha256_file(out / f"{name}.jsonl")}
    for stale in set(previous) - set(built):
        for suffix in (".yaml", ".jsonl"):
            (out / f"{stale}{suffix}").unlink(missing_ok=True)
    write_json(index_path, {"tasks": list(built), "details": details})
    return paths
