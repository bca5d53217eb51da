"""Scoring with lm-eval, fully offline: any mix of built-in tasks and the offline tasks of
:mod:`condensation.evaluation.tasks`, on an in-memory model.

:func:`score_model` runs lm-eval and keeps its per-item results beside the scores, so every score
can be re-analysed item by item; :func:`score_checkpoint` is one scoring job of the pipeline: load
a model, score it, and write the score record, the per-item samples (:func:`read_item_rows`) and
lm-eval's own aggregated results beside each other.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import logging
import math
import random
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from condensation import models
from condensation.config.specs import schema_defaults
from condensation.evaluation.score_files import (
    item_rows_path,
    lm_eval_path,
    write_item_rows,
)
from condensation.runtime.io import write_json

# lm-eval (with sqlitedict, its response cache), of the workflow extra, and torch are imported by
# the functions that use them: the other evaluation stages (building the offline tasks, picking a
# score, the tables) import this module through stages.evaluation and need neither.
if TYPE_CHECKING:
    from condensation.models import ModelHandle

__all__ = [
    "EVAL_CACHE_DIR",
    "EvalSettings",
    "ResponseCache",
    "ScoreRun",
    "UnknownTaskError",
    "builtin_task_directories",
    "fetch_task_data",
    "model_cache_prefix",
    "score_checkpoint",
    "score_model",
    "task_directories",
]

log = logging.getLogger("condensation")

EVAL_CACHE_DIR = Path("runs/eval_cache")
"""lm-eval response caches, one per model content (see :func:`model_cache_prefix`)."""
# The parts of a simple_evaluate output kept in <stem>.lm_eval.json: what was scored and how,
# without the run's environment, date and model settings.
LM_EVAL_PARTS = ("results", "groups", "group_subtasks", "configs", "versions", "n-shot", "higher_is_better",
                 "n-samples")


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

    batch_size: int = field(default_factory=lambda: _schema_default("batch_size"))
    limit: int | float | None = field(default_factory=lambda: _schema_default("limit"))
    seed: int = field(default_factory=lambda: _schema_default("seed"))
    bootstrap_iters: int = 100
    metric: str = field(default_factory=lambda: _schema_default("metric"))


def _schema_default(key: str) -> Any:
    """The config schema's default of ``evaluation.<key>``: the one place it is written."""
    return schema_defaults("properties", "evaluation")[key]


class UnknownTaskError(ValueError):
    """A task name that lm-eval does not know (neither built in nor in the include path)."""


@dataclass(frozen=True)
class ScoreRun:
    """What :func:`score_model` returns.

    scores: ``{task: {<metric>: float, "<metric>_stderr": float | None, "num_fewshot": int,
        "num_items": int | None}}``, one entry per requested task or group.
    samples: one row per scored item: ``task`` (the requested name), ``subtask`` (the lm-eval
        task that holds the item: the task itself, or a member of a group), ``doc_id``,
        ``filter``, ``num_fewshot``, ``target`` (the gold index for multiple choice), the value
        of each of the task's per-item metrics (``acc``, ``acc_norm``, ...; 0 or 1 for
        accuracy), and ``loglikelihoods`` (one per choice) for log-likelihood tasks.
    lm_eval: lm-eval's aggregated output (:data:`LM_EVAL_PARTS`), one entry per
        ``simple_evaluate`` call, each with the ``num_fewshot`` and ``tasks`` it was run with.
    """

    scores: dict[str, dict]
    samples: list[dict]
    lm_eval: list[dict]


def task_directories(manager: Any, names: Iterable[str]) -> tuple[list[Path], list[str]]:
    """The directories of the YAML files that define ``names`` in ``manager``'s index and, for
    groups and tags, their members (recursively); and the names the index lacks."""
    index = manager.task_index
    directories: set[Path] = set()
    missing: list[str] = []
    seen: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        entry = index.get(name)
        if entry is None:
            missing.append(name)
            continue
        if entry.yaml_path is not None:
            directories.add(Path(entry.yaml_path).parent)
        if entry.kind.name == "TAG":  # a tag's entry lists its member tasks
            pending.extend(entry.tags)
        elif entry.kind.name == "GROUP":
            members = entry.cfg.get("task", [])
            pending.extend(m for m in (members if isinstance(members, list) else [members]) if isinstance(m, str))
    return sorted(directories), sorted(missing)


def _task_manager(include_path: str | Path | Sequence[str | Path] | None, names: Iterable[str]) -> Any:
    """A TaskManager that knows every name, or UnknownTaskError naming those it lacks.

    ``include_path`` is a directory of task YAMLs, or several. Indexing lm-eval's ~15k built-in
    tasks takes over 10 s, so when the given directories define every name and every member of
    every group (e.g. the offline tasks, or the built-in directories that
    :func:`fetch_task_data` recorded) only they are indexed. Otherwise the full index is built.
    """
    # deferred: lm-eval, see the imports
    from lm_eval.tasks import TaskManager  # noqa: PLC0415

    names = list(names)
    if include_path is not None:
        paths = [include_path] if isinstance(include_path, (str, Path)) else list(include_path)
        include = [str(Path(p).resolve()) for p in paths]
        for directory in include:
            if not Path(directory).is_dir():
                raise FileNotFoundError(f"include_path {directory} is not a directory")
        local = TaskManager(include_path=include, include_defaults=False)
        if not task_directories(local, names)[1]:
            manager = local
        else:
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
    # deferred: torch, see the imports
    import torch  # noqa: PLC0415

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


@contextlib.contextmanager
def _without_environment_report() -> Iterator[None]:
    """``simple_evaluate`` without lm-eval's report of the environment (torch's ``collect_env``:
    ``pip list`` run twice and other probes in subprocesses, over a second of a scoring job's
    wall and two of its CPU, benchmarks/scoring_job.py), which the score files never kept
    (:data:`LM_EVAL_PARTS`; the record keeps lm-eval's version)."""
    # deferred: lm-eval, see the imports
    from lm_eval import evaluator  # noqa: PLC0415

    report = evaluator.add_env_info
    evaluator.add_env_info = lambda results: None
    try:
        yield
    finally:
        evaluator.add_env_info = report


@contextlib.contextmanager
def _no_bytecode_files() -> Iterator[None]:
    """Keep Python from writing ``__pycache__`` into task directories (lm-eval imports the task
    loader from there), so scoring leaves the built tasks as they were."""
    before = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = before


def fetch_task_data(names: Sequence[str], out_path: str | Path, include_path: str | Path | None = None) -> None:
    """Download the datasets of lm-eval tasks into the cache (where the network is), so that
    scoring jobs run offline; check every name first. Records each (sub)task's document count,
    and the directories that define the tasks (relative to lm-eval's task root where they lie
    under it), so that scoring jobs index only those (:func:`builtin_task_directories`)."""
    # deferred: lm-eval, see the imports
    import lm_eval.tasks  # noqa: PLC0415
    from lm_eval.tasks import get_task_dict  # noqa: PLC0415

    manager = _task_manager(include_path, names)
    counts: dict[str, int] = {}

    def visit(tasks: Mapping[Any, Any]) -> None:
        for key, task in tasks.items():
            if isinstance(task, Mapping):  # a group: its subtasks
                visit(task)
            else:
                docs = task.test_docs() if task.has_test_docs() else task.validation_docs()
                counts[getattr(key, "group_name", None) or str(key)] = len(docs) if docs is not None else 0

    visit(get_task_dict(list(names), manager))
    root = Path(lm_eval.tasks.__file__).parent.resolve()
    directories = [
        str(d.resolve().relative_to(root)) if d.resolve().is_relative_to(root) else str(d.resolve())
        for d in task_directories(manager, names)[0]
    ]
    write_json(out_path, {"tasks": list(names), "documents": counts, "task_directories": directories})


def builtin_task_directories(fetched_path: str | Path) -> list[Path]:
    """The task directories a :func:`fetch_task_data` record lists, as paths on this machine."""
    # deferred: lm-eval, see the imports
    import lm_eval.tasks  # noqa: PLC0415

    root = Path(lm_eval.tasks.__file__).parent
    return [root / d for d in json.loads(Path(fetched_path).read_text()).get("task_directories", [])]


def score_model(
    model: Any,
    tokenizer: Any,
    tasks: Mapping[str, int],
    settings: EvalSettings,
    include_path: str | Path | Sequence[str | Path] | None = None,
    cache_prefix: str | Path | None = None,
) -> ScoreRun:
    """Score an in-memory causal LM on lm-eval tasks; ``tasks`` maps task name -> num_fewshot.

    Tasks sharing a shot count run in one ``simple_evaluate`` call (the paper's code makes a
    zero-shot and a k-shot call). Every name is checked against lm-eval's index before any
    model work. ``include_path`` is a directory of task YAMLs (e.g. one that
    :func:`condensation.evaluation.tasks.build_local_tasks` wrote), searched recursively, or several. ``cache_prefix``
    keeps responses in ``<prefix>_rank0.db`` (lm-eval's cache file, :class:`ResponseCache`); its
    key ignores the model, so give each checkpoint its own prefix (:func:`model_cache_prefix`).

    The scores use ``<metric> = settings.metric`` (so "acc" by default). The shot count is the
    one lm-eval used, which differs from the request for tasks whose YAML pins
    ``num_fewshot: 0``. Group tasks (e.g. mmlu) are reported under their own name with
    ``num_items`` summed over their subtasks. Per-item results are kept (lm-eval's
    ``log_samples``), which holds every request in memory until the call returns. The model
    runs in eval mode without gradients and gets its previous train/eval mode back afterwards,
    and the global RNGs that lm-eval reseeds are restored, so scoring in the middle of training
    does not change the training run.
    """
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
        lm = _quiet_hflm_class()(pretrained=model, tokenizer=tokenizer, batch_size=settings.batch_size)
        with ResponseCache.opened(cache_prefix) as responses, _preserved_rng_state(), _no_bytecode_files():
            lm.answer_from(responses)
            run = _run_groups(lm, by_shots, manager, settings)
    finally:
        model.train(was_training)
    return run


def _quiet_hflm_class() -> type:
    """lm-eval's HFLM with its request bars off while stderr is not a terminal (it draws them with
    an explicit ``disable=False``, which TQDM_DISABLE cannot override, and in a job's log file a
    bar is a run of carriage returns; lm-eval's own log lines still say what runs), answering
    from its ``responses`` cache (a :class:`ResponseCache`, or None) where it can."""
    # deferred: lm-eval, see the imports
    from lm_eval.models.huggingface import HFLM  # noqa: PLC0415

    def bars_off(requested: bool) -> bool:
        return requested or not sys.stderr.isatty()

    class QuietHFLM(HFLM):
        responses: ResponseCache | None = None

        def answer_from(self, responses: ResponseCache | None) -> None:
            """Answer from ``responses`` (None: compute every request), which keeps each response computed."""
            self.responses = responses
            if responses is not None:
                self.set_cache_hook(responses)

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            return self._answer("loglikelihood", requests, super().loglikelihood, disable_tqdm)

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            return self._answer("loglikelihood_rolling", requests, super().loglikelihood_rolling, disable_tqdm)

        def generate_until(self, requests, disable_tqdm: bool = False):
            return self._answer("generate_until", requests, super().generate_until, disable_tqdm)

        def _answer(self, kind: str, requests: list, compute: Any, disable_tqdm: bool) -> list:
            def run(todo: list) -> list:
                return compute(todo, disable_tqdm=bars_off(disable_tqdm))

            return run(requests) if self.responses is None else self.responses.answer(kind, requests, run)

    return QuietHFLM


class ResponseCache:
    """The response cache of one scoring job: lm-eval's (``CachingLM``: a file ``<prefix>_rank0.db``,
    a SqliteDict of responses keyed by ``hash_args(kind, request.args)``, each written as it is
    computed, so a killed job's rerun computes only the rest), committed every
    :data:`COMMIT_SECONDS` instead of after every write. lm-eval's own commits each of a job's
    ~10,000 writes, waiting for the disk each time, and records a stack trace per SQLite call:
    16 % of the CPU of a 4,800-request scoring job of the default on a CPU, and ~20 s of waiting
    on a loaded machine (benchmarks/scoring_job.py). The file and its keys are lm-eval's, so
    either reads the other's."""

    COMMIT_SECONDS = 30.0
    """At most this much of a killed job's work is lost (computed again by its rerun)."""

    def __init__(self, path: Path) -> None:
        # deferred: sqlitedict, see the imports
        from sqlitedict import SqliteDict  # noqa: PLC0415

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._store = SqliteDict(str(path), autocommit=False, outer_stack=False)
        self._committed = time.monotonic()

    @classmethod
    @contextlib.contextmanager
    def opened(cls, prefix: str | Path | None) -> Iterator[ResponseCache | None]:
        """The cache of ``prefix`` (lm-eval's file name for rank 0), committed and closed on exit; None for None."""
        if prefix is None:
            yield None
            return
        cache = cls(Path(f"{prefix}_rank0.db"))
        try:
            yield cache
        finally:
            cache._store.commit()
            cache._store.close()

    def add_partial(self, kind: str, request: Any, response: Any) -> None:
        """lm-eval's cache hook: one response, as the model computes it."""
        # deferred: lm-eval, see the imports
        from lm_eval.api.model import hash_args  # noqa: PLC0415

        self._store[hash_args(kind, request)] = response
        if time.monotonic() - self._committed >= self.COMMIT_SECONDS:
            self._store.commit(blocking=False)
            self._committed = time.monotonic()

    def answer(self, kind: str, requests: list, compute: Any) -> list:
        """The responses to ``requests``: cached ones from the file, the others from ``compute``
        (whose model reports each to :meth:`add_partial` as it goes); sampled generations are
        never answered from the cache."""
        # deferred: lm-eval, see the imports
        from lm_eval.api.model import hash_args  # noqa: PLC0415

        keys = [hash_args(kind, request.args) for request in requests]
        stored = set(self._store.keys())
        cached = [
            key in stored and not (kind == "generate_until" and request.args[1].get("do_sample", False))
            for key, request in zip(keys, requests)
        ]
        log.info("%s: %d responses from the cache %s, %d to compute", kind, sum(cached), self.path, cached.count(False))
        computed = iter(compute([request for request, hit in zip(requests, cached) if not hit])
                        if not all(cached) else [])
        responses = [self._store[key] if hit else next(computed) for key, hit in zip(keys, cached)]
        self._store.update({key: response for key, hit, response in zip(keys, cached, responses) if not hit})
        self._store.commit()
        self._committed = time.monotonic()
        return responses


def _run_groups(lm: Any, by_shots: Mapping[int, list[str]], manager: Any, settings: EvalSettings) -> ScoreRun:
    """One ``simple_evaluate`` call per shot count; the scores, items and outputs of all of them."""
    # deferred: torch and lm-eval, see the imports
    import torch  # noqa: PLC0415
    from lm_eval import simple_evaluate  # noqa: PLC0415

    run = ScoreRun(scores={}, samples=[], lm_eval=[])
    for shots, names in sorted(by_shots.items()):
        with torch.no_grad(), _without_environment_report():
            out = simple_evaluate(
                model=lm,
                tasks=names,
                num_fewshot=shots,
                task_manager=manager,
                limit=settings.limit,
                bootstrap_iters=settings.bootstrap_iters,
                log_samples=True,
                use_cache=None,  # lm's own ResponseCache
                random_seed=settings.seed,
                numpy_random_seed=settings.seed,
                torch_random_seed=settings.seed,
                fewshot_random_seed=settings.seed,
            )
        for name in names:
            run.scores[name] = _task_scores(out, name, shots, settings.metric)
            run.samples.extend(_sample_rows(out, name))
        run.lm_eval.append(_lm_eval_parts(out, names, shots))
    return run


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


# --------------------------------------------------------------------------------------------
# Per-item results
# --------------------------------------------------------------------------------------------


def _leaf_tasks(name: str, group_subtasks: Mapping[str, Sequence[str]]) -> list[str]:
    """The lm-eval tasks holding the items of ``name``: itself, or the leaves of its group tree."""
    members = group_subtasks.get(name)
    if not members:
        return [name]
    return [leaf for member in members for leaf in _leaf_tasks(member, group_subtasks)]


def _loglikelihoods(responses: Sequence[Any]) -> list[float] | None:
    """The per-choice log-likelihoods of a log-likelihood item (each response is a
    ``(loglikelihood, is_greedy)`` pair); None for other kinds of output."""
    if responses and all(isinstance(r, (tuple, list)) and len(r) == 2 and isinstance(r[0], (int, float))
                         for r in responses):
        return [float(r[0]) for r in responses]
    return None


def _sample_rows(out: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    """One compact row per item scored for the requested task or group ``name``."""
    rows = []
    for leaf in _leaf_tasks(name, out.get("group_subtasks", {})):
        shots = int(out.get("n-shot", {}).get(leaf, 0))
        for sample in out["samples"].get(leaf, []):
            row = {
                "task": name, "subtask": leaf, "doc_id": int(sample["doc_id"]), "filter": sample["filter"],
                "num_fewshot": shots, "target": sample["target"],
            }
            for metric in sample["metrics"]:
                value = sample.get(metric)
                if isinstance(value, (bool, int, float)):  # corpus-level metrics keep (gold, pred) pairs
                    row[metric] = float(value)
            row["loglikelihoods"] = _loglikelihoods(sample["filtered_resps"])
            rows.append(row)
    return rows


def _lm_eval_parts(out: Mapping[str, Any], names: Sequence[str], shots: int) -> dict[str, Any]:
    """lm-eval's aggregated output of one call, as plain JSON (sets and NumPy scalars converted,
    functions as their source)."""
    # deferred: lm-eval, see the imports
    from lm_eval.utils import handle_non_serializable  # noqa: PLC0415

    parts = {key: out[key] for key in LM_EVAL_PARTS if key in out}
    return {"num_fewshot": shots, "tasks": list(names),
            **json.loads(json.dumps(parts, default=handle_non_serializable))}


# --------------------------------------------------------------------------------------------
# Scoring jobs
# --------------------------------------------------------------------------------------------


def model_cache_prefix(handle: ModelHandle, job: str, cache_dir: str | Path = EVAL_CACHE_DIR) -> Path:
    """The lm-eval response cache of one scoring job: ``cache_dir/<model content>/<job>``.

    lm-eval's cache keys requests but not the model, so each model content gets its own: named
    by the checksum of the model directory's manifest (written by this pipeline), else of the
    handle (hub id pinned to a commit, or a path outside the pipeline). A retrained checkpoint
    under the same name therefore never meets the old one's answers. ``job`` keeps two jobs that
    score the same checkpoint (``selected`` and its ``step-N``) off one SQLite file.
    """
    manifest = Path(handle.location) / "manifest.json"
    identity = manifest.read_bytes() if manifest.is_file() else json.dumps(handle.__dict__, sort_keys=True).encode()
    return Path(cache_dir) / hashlib.sha256(identity).hexdigest()[:16] / job


def score_checkpoint(
    handle: ModelHandle,
    *,
    tasks: Mapping[str, int],
    settings: EvalSettings,
    include_path: str | Path | Sequence[str | Path] | None,
    record: Mapping[str, Any],
    out_path: str | Path,
    job: str,
    threads: int = 1,
    cache_dir: str | Path = EVAL_CACHE_DIR,
) -> dict[str, Any]:
    """One scoring job: load the model of ``handle``, score it on ``tasks`` (name ->
    num_fewshot), and write ``out_path``: ``record`` plus ``scores``, ``metric``, ``limit``,
    ``lm_eval_version`` and ``seconds``. Returns what was written.

    Beside it go :func:`item_rows_path` (per-item rows, :func:`read_item_rows`) and
    :func:`lm_eval_path` (lm-eval's aggregated results), both written before the record, which
    marks a complete job. ``include_path`` is searched for task YAMLs (e.g. the directory the
    offline tasks were built in; None for built-in tasks only). Responses are cached under
    :func:`model_cache_prefix` (``handle``, ``job``, ``cache_dir``).
    """
    # deferred: lm-eval and torch, see the imports
    import lm_eval  # noqa: PLC0415
    import torch  # noqa: PLC0415

    torch.set_num_threads(threads)
    tokenizer = models.load_tokenizer(handle)
    model = models.load_model(handle, dtype="auto", device="auto", causal_lm=True)
    cache = model_cache_prefix(handle, job, cache_dir)
    cache.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    run = score_model(model, tokenizer, tasks, settings, include_path=include_path, cache_prefix=cache)
    written = {
        **record, "scores": run.scores, "metric": settings.metric, "limit": settings.limit,
        "lm_eval_version": lm_eval.__version__, "seconds": time.perf_counter() - started,
    }
    write_item_rows(item_rows_path(out_path), run.samples)
    write_json(lm_eval_path(out_path), {"lm_eval_version": lm_eval.__version__, "runs": run.lm_eval})
    write_json(out_path, written)
    log.info("%s: %s", written.get("checkpoint"), {task: entry[settings.metric] for task, entry in run.scores.items()})
    return written
