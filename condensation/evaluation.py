"""Downstream evaluation with lm-eval, fully offline.

The paper scores its mid-trained checkpoints on standard benchmarks through lm-evaluation-harness.
Those benchmarks live on the Hugging Face Hub, which this pipeline never reaches, so two small
multiple-choice tasks are built from held-out text instead (Persuasion is excluded from all
training):

* ``cloze`` (LAMBADA-like): given the ``context_words`` words before a sentence-final word, pick
  that word among distractors of similar corpus frequency.
* ``next_sentence``: given ``context_sentences`` consecutive sentences, pick the sentence that
  follows among sentences of similar length from far-away places in the same text.

Conventions shared by both kinds (one convention, so few-shot prompts read naturally):

* A query never ends in whitespace and a choice never starts with it; the YAML sets
  ``target_delimiter: " "``, so lm-eval scores ``query + " " + choice``. With GPT2-style BPE
  this is the ordinary tokenisation of running text (the word carries its leading space).
* The cloze target is the bare word: its sentence-final punctuation is not part of any choice,
  as in LAMBADA.
* Few-shot examples are drawn by lm-eval from the same (test) split, never the item itself, and
  are separated by lm-eval's default ``fewshot_delimiter`` ("\\n\\n").

Every task is a YAML file plus a JSON-lines file beside it; the YAML names the data file by its
absolute path because the ``json`` dataset builder resolves relative paths against the working
directory, not the YAML. :func:`score_model` then runs any mix of these and built-in lm-eval tasks
on an in-memory model.
"""

from __future__ import annotations

import bisect
import contextlib
import difflib
import json
import math
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import yaml

from .corpus import paragraphs
from .io import read_json, sha256_file, write_json, write_text

__all__ = [
    "KINDS",
    "EvalSettings",
    "UnknownTaskError",
    "build_local_tasks",
    "cloze_items",
    "next_sentence_items",
    "score_model",
    "sentences",
    "words",
    "write_local_task",
]

KINDS = ("cloze", "next_sentence")
TASKS_INDEX = "tasks.json"
DEFAULT_CONTEXT_WORDS = 60
DEFAULT_CONTEXT_SENTENCES = 3
# Answer sentences outside this range make poor items: very short ones ("Yes, sir.") are
# guessable from anywhere, very long ones dominate the log-likelihood comparison.
MIN_SENTENCE_WORDS = 4
MAX_SENTENCE_WORDS = 50

# Task names become file names and lm-eval index keys; keep them plain.
_TASK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
# A word token ending a sentence: anything, then . ! or ?, then optional closing quotes/brackets.
_SENTENCE_FINAL = re.compile(r"^(?P<stem>.*?)(?P<stop>[.!?]+)[\"')\]_]*$")
# A token that can open a sentence: optional opening quotes/brackets, then a capital letter.
_SENTENCE_START = re.compile(r"^[\"'(\[_]*[A-Z]")
# The word inside a token: leading punctuation, letters only, trailing non-letters.
_WORD_CORE = re.compile(r"^[\"'(\[_]*(?P<core>[A-Za-z]+)[^A-Za-z]*$")
# A cloze target token: the bare word at the very start, then the sentence-final punctuation.
_CLOZE_TARGET = re.compile(r"^(?P<word>[A-Za-z]{3,})[.!?]")
# Abbreviations whose period does not end a sentence (compared lower-case, without the period).
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st esq capt col gen adm lt rev messrs jr sr vol viz etc no "
    "jan feb mar apr jun jul aug sep sept oct nov dec".split()
)


# --------------------------------------------------------------------------------------------
# Text: words and sentences
# --------------------------------------------------------------------------------------------


def words(text: str) -> list[str]:
    """Whitespace tokens of the prose paragraphs of ``text``, in order.

    Paragraphs with no sentence-ending punctuation (titles, "Chapter 3", dates) are dropped, so
    items are built from running prose only.
    """
    prose = [p for p in paragraphs(text) if re.search(r"[.!?]", p)]
    return " ".join(prose).split()


def _ends_sentence(token: str, next_token: str | None) -> bool:
    """Whether ``token`` ends a sentence: final punctuation that is not an abbreviation or an
    initial, followed by the end of the text or by a token that opens a sentence."""
    match = _SENTENCE_FINAL.match(token)
    if match is None:
        return False
    stem = match["stem"].strip("\"'([_").lower()
    if match["stop"] == "." and (stem in _ABBREVIATIONS or (len(stem) == 1 and stem.isalpha())):
        return False
    return next_token is None or _SENTENCE_START.match(next_token) is not None


def _sentence_spans(tokens: Sequence[str]) -> list[tuple[int, int]]:
    """``[start, end)`` token spans of the sentences in ``tokens`` (a trailing fragment counts)."""
    spans, start = [], 0
    for i, token in enumerate(tokens):
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        if _ends_sentence(token, following):
            spans.append((start, i + 1))
            start = i + 1
    if start < len(tokens):
        spans.append((start, len(tokens)))
    return spans


def sentences(text: str) -> list[str]:
    """The sentences of the prose in ``text``, each with single spaces between words."""
    tokens = words(text)
    return [" ".join(tokens[s:e]) for s, e in _sentence_spans(tokens)]


# --------------------------------------------------------------------------------------------
# Item construction
# --------------------------------------------------------------------------------------------


def _check_counts(num_items: int, num_choices: int, context: int, context_name: str) -> None:
    for name, value, least in (("num_items", num_items, 1), ("num_choices", num_choices, 2), (context_name, context, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")


def _spread(candidates: Sequence[int], window: int, count: int, rng: random.Random) -> list[int]:
    """Pick up to ``count`` of ``candidates`` (positions) at random such that any two are more
    than ``window`` apart, so no item's context contains another item's answer; sorted."""
    order = list(candidates)
    rng.shuffle(order)
    chosen: list[int] = []
    for position in order:
        at = bisect.bisect_left(chosen, position)
        if at > 0 and position - chosen[at - 1] <= window:
            continue
        if at < len(chosen) and chosen[at] - position <= window:
            continue
        chosen.insert(at, position)
        if len(chosen) == count:
            break
    return chosen


def _too_short(kind: str, wanted: int, available: int, hint: str) -> ValueError:
    return ValueError(f"text too short for {wanted} {kind} items: it gives only {available} ({hint})")


def _shape(word: str) -> str | None:
    """Case shape of a word; distractors share the target's, so case gives nothing away."""
    if word.islower():
        return "lower"
    if word.istitle():
        return "title"
    return None


def _frequency_pools(tokens: Iterable[str]) -> dict[str, list[str]]:
    """Words (>= 3 letters) of each case shape, most frequent first (ties alphabetical)."""
    counts = Counter(m["core"] for t in tokens if (m := _WORD_CORE.match(t)) and len(m["core"]) >= 3)
    pools: dict[str, list[str]] = defaultdict(list)
    for word in sorted(counts, key=lambda w: (-counts[w], w)):
        if (shape := _shape(word)) is not None:
            pools[shape].append(word)
    return dict(pools)


def _nearest_by_rank(pool: Sequence[str], rank: int, exclude: str, count: int) -> list[str]:
    """The ``count`` words of ``pool`` nearest to position ``rank``, skipping case variants of
    ``exclude``; ties go to the more frequent word."""
    window = range(max(0, rank - count - 1), min(len(pool), rank + count + 2))
    order = sorted(window, key=lambda r: (abs(r - rank), r))
    return [pool[r] for r in order if pool[r].lower() != exclude.lower()][:count]


def _shuffled_item(query: str, answer: str, distractors: list[str], rng: random.Random) -> dict[str, Any]:
    choices = [answer, *distractors]
    rng.shuffle(choices)
    return {"query": query, "choices": choices, "gold": choices.index(answer)}


def cloze_items(text: str, num_items: int, num_choices: int, seed: int, context_words: int = DEFAULT_CONTEXT_WORDS) -> list[dict]:
    """LAMBADA-like items: the ``context_words`` words before a sentence-final word, and that word.

    Targets are alphabetic words of at least 3 letters that end a sentence, at places whose
    contexts do not overlap. Distractors are drawn at random from the ``3 * (num_choices - 1)``
    words of the same text nearest in frequency rank among words of the same case shape
    (lower-case or Capitalised), so neither frequency nor capitalisation betrays the answer.
    Returns ``{"query", "choices", "gold"}`` dicts in text order; deterministic given ``seed``.
    """
    _check_counts(num_items, num_choices, context_words, "context_words")
    tokens = words(text)
    pools = _frequency_pools(tokens)
    ranks = {shape: {w: r for r, w in enumerate(pool)} for shape, pool in pools.items()}

    targets: dict[int, str] = {}
    for i in range(context_words, len(tokens)):
        match = _CLOZE_TARGET.match(tokens[i])
        if match is None or match["word"].lower() in _ABBREVIATIONS:
            continue
        if not _ends_sentence(tokens[i], tokens[i + 1] if i + 1 < len(tokens) else None):
            continue
        shape = _shape(match["word"])
        if shape is not None and len(pools[shape]) >= num_choices:
            targets[i] = match["word"]

    rng = random.Random(seed)
    chosen = _spread(sorted(targets), context_words, num_items, rng)
    if len(chosen) < num_items:
        raise _too_short("cloze", num_items, len(chosen), f"{len(tokens)} words, context_words={context_words}")

    items = []
    for i in chosen:
        answer = targets[i]
        shape = _shape(answer)
        near = _nearest_by_rank(pools[shape], ranks[shape][answer], answer, 3 * (num_choices - 1))
        distractors = rng.sample(near, num_choices - 1)
        items.append(_shuffled_item(" ".join(tokens[i - context_words : i]), answer, distractors, rng))
    return items


def _closest_in_length(
    by_length: Sequence[int], lengths: Sequence[int], j: int, far: int, texts: Sequence[str], count: int
) -> list[int]:
    """Up to ``count`` sentence indices at least ``far`` from ``j`` whose word counts are
    closest to sentence ``j``'s, with texts distinct from each other and from ``j``'s.

    ``by_length`` lists the candidate indices sorted by (length, index); two pointers walk out
    from ``j``'s place in it, so each call touches little more than ``count`` entries.
    """
    right = bisect.bisect_left(by_length, lengths[j], key=lambda k: lengths[k])
    left = right - 1
    seen, picked = {texts[j]}, []
    while len(picked) < count and (left >= 0 or right < len(by_length)):
        take_left = right >= len(by_length) or (
            left >= 0 and lengths[j] - lengths[by_length[left]] <= lengths[by_length[right]] - lengths[j]
        )
        if take_left:
            k, left = by_length[left], left - 1
        else:
            k, right = by_length[right], right + 1
        if abs(k - j) >= far and texts[k] not in seen:
            seen.add(texts[k])
            picked.append(k)
    return picked


def next_sentence_items(
    text: str,
    num_items: int,
    num_choices: int,
    seed: int,
    context_sentences: int = DEFAULT_CONTEXT_SENTENCES,
    *,
    max_answer_words: int = MAX_SENTENCE_WORDS,
) -> list[dict]:
    """Items whose query is ``context_sentences`` consecutive sentences and whose answer is the
    sentence that follows.

    Answers have 4 to ``max_answer_words`` words (lm-eval cannot score a choice longer than the
    model's context, so a model with a short one needs a lower bound). Distractors are sentences at least a tenth of the text away
    (and never inside the item's window), drawn at random among the ``4 * (num_choices - 1)``
    closest in word count to the answer, because a multiple-choice log-likelihood comparison
    otherwise mostly rewards the shortest choice. Returns ``{"query", "choices", "gold"}`` dicts
    in text order; deterministic given ``seed``.
    """
    _check_counts(num_items, num_choices, context_sentences, "context_sentences")
    if isinstance(max_answer_words, bool) or not isinstance(max_answer_words, int) or max_answer_words < MIN_SENTENCE_WORDS:
        raise ValueError(f"max_answer_words must be an integer >= {MIN_SENTENCE_WORDS}, got {max_answer_words!r}")
    all_sentences = sentences(text)
    lengths = [len(s.split()) for s in all_sentences]
    usable = [j for j, n in enumerate(lengths) if MIN_SENTENCE_WORDS <= n <= max_answer_words]
    far = max(context_sentences + 1, len(all_sentences) // 10)

    pool_size = 4 * (num_choices - 1)
    by_length = sorted(usable, key=lambda k: (lengths[k], k))
    distractor_pools: dict[int, list[int]] = {}
    for j in usable:
        if j < context_sentences:
            continue
        near = _closest_in_length(by_length, lengths, j, far, all_sentences, pool_size)
        if len(near) >= num_choices - 1:
            distractor_pools[j] = near

    rng = random.Random(seed)
    chosen = _spread(sorted(distractor_pools), context_sentences, num_items, rng)
    if len(chosen) < num_items:
        raise _too_short(
            "next-sentence", num_items, len(chosen), f"{len(all_sentences)} sentences, context_sentences={context_sentences}"
        )

    items = []
    for j in chosen:
        distractors = [all_sentences[k] for k in rng.sample(distractor_pools[j], num_choices - 1)]
        query = " ".join(all_sentences[j - context_sentences : j])
        items.append(_shuffled_item(query, all_sentences[j], distractors, rng))
    return items


# --------------------------------------------------------------------------------------------
# Task files
# --------------------------------------------------------------------------------------------


def _check_task_name(name: str) -> None:
    if not isinstance(name, str) or not _TASK_NAME.match(name):
        raise ValueError(f"task name {name!r} is not usable: it must match {_TASK_NAME.pattern}")


def _task_config(name: str, kind: str, data_path: Path) -> dict[str, Any]:
    """The lm-eval YAML of one local task. Column names (not Jinja templates) feed the prompt,
    so text is passed through verbatim; ``num_fewshot`` is left unset so the caller's applies."""
    metrics = ["acc", "acc_norm"]
    return {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_path)}},
        "output_type": "multiple_choice",
        "test_split": "test",
        "doc_to_text": "query",
        "doc_to_choice": "choices",
        "doc_to_target": "gold",
        "target_delimiter": " ",
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in metrics],
        "metadata": {"version": 1.0, "kind": kind},
    }


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
    """Write ``out_dir/<name>.jsonl`` (the items) and ``out_dir/<name>.yaml`` (the lm-eval task
    reading them by absolute path), each atomically; return the YAML path.

    The data is written first, so a YAML never points at a missing or partial file. A name that
    equals a built-in lm-eval task shadows it when ``out_dir`` is an ``include_path``: pick a
    distinctive one (e.g. ``austen_cloze``).
    """
    _check_task_name(name)
    if kind not in KINDS:
        raise ValueError(f"task {name!r}: unknown kind {kind!r}; expected one of {list(KINDS)}")
    _check_items(name, items)
    out = Path(out_dir).resolve()
    data_path, yaml_path = out / f"{name}.jsonl", out / f"{name}.yaml"
    write_text(data_path, "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items))
    write_text(yaml_path, yaml.safe_dump(_task_config(name, kind, data_path), sort_keys=False, allow_unicode=True))
    return yaml_path


_SPEC_KEYS = {"kind", "documents", "num_items", "num_choices", "seed", "context_words", "context_sentences", "max_answer_words"}
# Optional keys that only one kind understands.
_KIND_ONLY_KEYS = {"context_words": "cloze", "context_sentences": "next_sentence", "max_answer_words": "next_sentence"}
_REQUIRED_KEYS = {"kind", "documents", "num_items", "num_choices", "seed"}


def _spec_items(name: str, spec: Mapping[str, Any], documents: Mapping[str, str]) -> list[dict]:
    """Validate one task spec and build its items from the named documents (joined in order)."""
    missing, unknown = _REQUIRED_KEYS - set(spec), set(spec) - _SPEC_KEYS
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
    misplaced = sorted(key for key, only in _KIND_ONLY_KEYS.items() if key in spec and only != kind)
    if misplaced:
        raise ValueError(f"task {name!r}: {misplaced} do not apply to kind {kind!r}")

    text = "\n\n".join(documents[d] for d in names)
    try:
        if kind == "cloze":
            context = spec.get("context_words", DEFAULT_CONTEXT_WORDS)
            return cloze_items(text, spec["num_items"], spec["num_choices"], spec["seed"], context)
        context = spec.get("context_sentences", DEFAULT_CONTEXT_SENTENCES)
        longest = spec.get("max_answer_words", MAX_SENTENCE_WORDS)
        return next_sentence_items(text, spec["num_items"], spec["num_choices"], spec["seed"], context, max_answer_words=longest)
    except ValueError as err:
        raise ValueError(f"task {name!r} from {list(names)}: {err}") from err


def build_local_tasks(documents: Mapping[str, str], specs: Mapping[str, Mapping], out_dir: str | Path) -> list[Path]:
    """Build every task in ``specs`` (name -> spec) from ``documents`` (name -> text) into
    ``out_dir``; return the YAML paths in spec order.

    A spec is ``{"kind": "cloze" | "next_sentence", "documents": [names], "num_items": int,
    "num_choices": int, "seed": int}`` plus optionally ``context_words`` (cloze, default 60) or
    ``context_sentences`` and ``max_answer_words`` (next_sentence, defaults 3 and 50). All specs are checked and all items built
    before anything is written. ``out_dir/tasks.json`` is written last (it marks a complete
    build): ``{"tasks": [names], "details": {name: {spec..., "num_items", "data_sha256"}}}``.
    Task files of an earlier build that this one no longer has are removed, so a stale YAML
    cannot linger in the include path.
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


def write_task_yamls(task_dir: str | Path, out_dir: str | Path) -> list[str]:
    """Write the YAML of every task built in ``task_dir`` into ``out_dir``, pointing at the data
    files where ``task_dir`` is now; return the task names.

    The YAMLs that ``build_local_tasks`` leaves beside the data hold absolute paths, which break
    once the project is moved or checked out elsewhere (``dvc pull``); scoring writes fresh ones.
    """
    task_dir = Path(task_dir).resolve()
    index = read_json(task_dir / TASKS_INDEX)
    for name in index["tasks"]:
        data_path = task_dir / f"{name}.jsonl"
        if not data_path.is_file():
            raise FileNotFoundError(f"task {name!r}: data file {data_path} is missing; rebuild {task_dir}")
        config = _task_config(name, index["details"][name]["kind"], data_path)
        write_text(Path(out_dir) / f"{name}.yaml", yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return list(index["tasks"])


# --------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalSettings:
    """How :func:`score_model` runs lm-eval.

    batch_size: requests per forward pass (only speed depends on it).
    limit: items per task: an int count, a float fraction in (0, 1), or None for all. A cut
        short run is for smoke tests; reported numbers should use None.
    seed: seeds Python, NumPy and torch and the few-shot sampler, so few-shot prompts are
        identical across checkpoints and the comparison is paired.
    bootstrap_iters: bootstrap resamples for stderrs that have no closed form (acc's has one,
        so a small value suffices); 0 disables every stderr.
    metric: the lm-eval metric to report, e.g. "acc" or "acc_norm" (the latter divides each
        choice's log-likelihood by its length in bytes, fairer for next_sentence).
    """

    batch_size: int = 16
    limit: int | float | None = None
    seed: int = 1234
    bootstrap_iters: int = 100
    metric: str = "acc"


class UnknownTaskError(ValueError):
    """A task name that lm-eval does not know (neither built in nor in the include path)."""


def _task_manager(include_path: str | Path | None, names: Iterable[str]) -> Any:
    """A TaskManager that knows every name, or UnknownTaskError naming those it lacks.

    Indexing lm-eval's ~15k built-in tasks takes seconds, so when every name is a plain task
    in ``include_path`` only that directory is indexed (local tasks shadow built-ins of the same
    name anyway). Groups and tags always get the full index: their members may be built-in.
    """
    from lm_eval.tasks import TaskManager

    names = list(names)
    if include_path is not None:
        include = str(Path(include_path).resolve())
        if not Path(include).is_dir():
            raise FileNotFoundError(f"include_path {include} is not a directory")
        local = TaskManager(include_path=include, include_defaults=False)
        if all(n in local.all_subtasks for n in names):
            return local
        manager = TaskManager(include_path=include)
    else:
        manager = TaskManager()

    unknown = [n for n in names if n not in manager.all_tasks]
    if unknown:
        hints = {n: difflib.get_close_matches(n, manager.all_tasks, n=3) for n in unknown}
        where = f"built-in or under {include_path}" if include_path is not None else "built-in (no include_path given)"
        raise UnknownTaskError(f"unknown lm-eval task(s) {unknown} ({where}); close names: {hints}")
    tags = [n for n in names if n in manager.all_tags and n not in manager.all_groups and n not in manager.all_subtasks]
    if tags:
        raise UnknownTaskError(f"{tags} are lm-eval tags, which report no aggregate score; name their tasks or a group")
    return manager


def _metric_entry(task: str, metrics: Mapping[str, Any], metric: str) -> tuple[float, float | None]:
    """The value and stderr of ``metric`` for ``task``, preferring the unfiltered ("none") key."""
    keys = [k for k in metrics if k.split(",")[0] == metric]
    key = f"{metric},none" if f"{metric},none" in keys else (keys[0] if len(keys) == 1 else None)
    if key is None:
        available = sorted(k for k in metrics if "," in k and "_stderr" not in k)
        raise KeyError(f"task {task!r}: no single {metric!r} result; available metrics: {available}")
    stderr_key = key.replace(",", "_stderr,", 1)
    stderr = metrics.get(stderr_key)
    stderr = float(stderr) if isinstance(stderr, (int, float)) and math.isfinite(stderr) else None
    return float(metrics[key]), stderr


@contextlib.contextmanager
def _preserved_rng_state() -> Iterator[None]:
    """Restore Python's, NumPy's and torch's global RNGs on exit: ``simple_evaluate`` reseeds
    them, which would otherwise change a training run that evaluates along the way."""
    import numpy as np
    import torch

    python_state, numpy_state, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)


def score_model(
    model: Any,
    tokenizer: Any,
    tasks: Mapping[str, int],
    settings: EvalSettings,
    include_path: str | Path | None = None,
    cache_prefix: str | Path | None = None,
) -> dict[str, dict]:
    """Score an in-memory causal LM on lm-eval tasks; ``tasks`` maps task name -> num_fewshot.

    Tasks sharing a shot count run in one ``simple_evaluate`` call (the paper's code makes a
    zero-shot and a k-shot call). Every name is checked against lm-eval's index before any
    model work. ``cache_prefix`` makes lm-eval keep responses in ``<prefix>_rank0.db``; its
    cache key ignores the model, so give each checkpoint its own prefix.

    Returns ``{task: {<metric>: float, "<metric>_stderr": float | None, "num_fewshot": int,
    "num_items": int | None}}`` with ``<metric> = settings.metric`` (so "acc" by default). The
    shot count is the one lm-eval used, which differs from the request for tasks whose YAML
    pins ``num_fewshot: 0``. Group tasks (e.g. mmlu) are reported under their own name with
    ``num_items`` summed over their subtasks. The model runs in eval mode without gradients and
    gets its previous train/eval mode back afterwards, and the global RNGs that lm-eval reseeds
    are restored, so scoring in the middle of training does not change the training run.
    """
    from lm_eval.models.huggingface import HFLM

    if not tasks:
        raise ValueError("no tasks to score")
    for name, shots in tasks.items():
        if isinstance(shots, bool) or not isinstance(shots, int) or shots < 0:
            raise ValueError(f"task {name!r}: num_fewshot must be an integer >= 0, got {shots!r}")
    manager = _task_manager(include_path, tasks)

    by_shots: dict[int, list[str]] = defaultdict(list)
    for name, shots in tasks.items():
        by_shots[shots].append(name)

    was_training = model.training
    model.eval()
    try:
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=settings.batch_size)
        with _preserved_rng_state():
            scores = _run_groups(lm, by_shots, manager, settings, cache_prefix)
    finally:
        model.train(was_training)
    return scores


def _run_groups(
    lm: Any, by_shots: Mapping[int, list[str]], manager: Any, settings: EvalSettings, cache_prefix: str | Path | None
) -> dict[str, dict]:
    """One ``simple_evaluate`` call per shot count; the per-task entries of all of them."""
    import torch
    from lm_eval import simple_evaluate

    scores: dict[str, dict] = {}
    for shots, names in sorted(by_shots.items()):
        with torch.no_grad():
            out = simple_evaluate(
                model=lm,
                tasks=names,
                num_fewshot=shots,
                task_manager=manager,
                limit=settings.limit,
                bootstrap_iters=settings.bootstrap_iters,
                log_samples=False,
                use_cache=None if cache_prefix is None else str(cache_prefix),
                random_seed=settings.seed,
                numpy_random_seed=settings.seed,
                torch_random_seed=settings.seed,
                fewshot_random_seed=settings.seed,
            )
        for name in names:
            scores[name] = _task_scores(out, name, shots, settings.metric)
    return scores


def _task_scores(out: Mapping[str, Any], name: str, shots: int, metric: str) -> dict[str, Any]:
    """One task's entry of :func:`score_model`'s result, from a ``simple_evaluate`` output."""
    metrics = out.get("groups", {}).get(name) or out["results"].get(name)
    if metrics is None:
        raise KeyError(f"task {name!r} is missing from lm-eval's results (got {sorted(out['results'])})")
    value, stderr = _metric_entry(name, metrics, metric)
    num_items = metrics.get("sample_len")
    return {
        metric: value,
        f"{metric}_stderr": stderr,
        "num_fewshot": int(out.get("n-shot", {}).get(name, shots)),
        "num_items": int(num_items) if isinstance(num_items, int) else None,
    }
