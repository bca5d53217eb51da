"""Scoring with the real lm-eval (never mocked): scores, per-item samples, and scoring jobs."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest

from condensation.evaluation.harness import (
    EvalSettings,
    UnknownTaskError,
    model_cache_prefix,
    score_checkpoint,
    score_model,
    task_directories,
)
from condensation.evaluation.score_files import (
    item_rows_path,
    lm_eval_path,
    read_item_rows,
    write_item_rows,
)
from condensation.models import ModelHandle
from tests.helpers.tasks import synthetic_novel, write_tiny_tasks


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    return write_tiny_tasks(tmp_path_factory.mktemp("tasks"), synthetic_novel())


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)), AutoTokenizer.from_pretrained(str(tiny_model_dir))


def check_samples_against_scores(samples, scores: dict, metric: str) -> None:
    """Each task's per-item mean is its reported score, and each item's accuracy follows from its
    choices' log-likelihoods (the gold choice scores highest exactly when acc is 1)."""
    for task, entry in scores.items():
        items = samples[samples["task"] == task]
        assert len(items) == entry["num_items"]
        assert items[metric].mean() == pytest.approx(entry[metric], abs=1e-12)
        assert set(items["num_fewshot"]) == {entry["num_fewshot"]}
    for row in samples.itertuples():
        best = max(range(len(row.loglikelihoods)), key=lambda k: row.loglikelihoods[k])
        assert row.acc == float(best == row.target)


# --------------------------------------------------------------------------------------------
# score_model
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_score_model_runs_local_tasks_and_groups(tiny_lm, task_dir, tmp_path, monkeypatch):
    import torch

    model, tokenizer = tiny_lm
    model.train()
    fresh = Path(shutil.copytree(task_dir, tmp_path / "tasks"))  # never loaded by lm-eval in this process
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    prefix = tmp_path / "cache" / "step-0"
    settings = EvalSettings(batch_size=8)
    # lm-eval's environment report (torch's collect_env, pip list in subprocesses) is skipped:
    # the score files never kept it, and it cost a scoring job a second or more
    import torch.utils.collect_env
    from lm_eval import evaluator

    report = evaluator.add_env_info
    probed = []
    monkeypatch.setattr(torch.utils.collect_env, "get_pretty_env_info", lambda: probed.append(1) or "")
    torch.manual_seed(99)
    run = score_model(model, tokenizer, {"tiny_group": 0, "tiny_cloze": 1}, settings, fresh, prefix)
    assert not probed and evaluator.add_env_info is report, "no environment report, and lm-eval's function back"
    after_scoring = torch.rand(3)
    torch.manual_seed(99)
    assert torch.equal(after_scoring, torch.rand(3)), "lm-eval's reseeding must not leak into the caller"
    assert not list(fresh.rglob("__pycache__")) and sys.dont_write_bytecode is False, \
        "the task directory stays as built"

    scores = run.scores
    assert set(scores) == {"tiny_group", "tiny_cloze"}
    for entry in scores.values():
        assert set(entry) == {"acc", "acc_stderr", "num_fewshot", "num_items"}
        assert 0.0 <= entry["acc"] <= 1.0 and entry["acc_stderr"] >= 0.0
    assert scores["tiny_group"]["num_items"] == 24 and scores["tiny_group"]["num_fewshot"] == 0
    assert scores["tiny_cloze"]["num_items"] == 12 and scores["tiny_cloze"]["num_fewshot"] == 1
    assert (tmp_path / "cache" / "step-0_rank0.db").is_file()
    assert model.training, "the caller's train mode comes back"

    # Per-item rows: the group's items keep their subtask, and every item appears once per request.
    path = tmp_path / "scores.samples.jsonl.gz"
    write_item_rows(path, run.samples)
    samples = read_item_rows(path)
    check_samples_against_scores(samples, scores, "acc")
    group = samples[samples["task"] == "tiny_group"]
    assert group.groupby("subtask")["doc_id"].apply(sorted).to_dict() == {"tiny_cloze": list(range(12)),
                                                                          "tiny_next": list(range(12))}
    assert samples.duplicated(["task", "subtask", "doc_id", "filter"]).sum() == 0
    assert set(samples["acc_norm"]) <= {0.0, 1.0} and all(len(ll) == 4 for ll in samples["loglikelihoods"])
    # lm-eval's own aggregated results, one entry per shot count, plain JSON, agreeing with the scores.
    assert [(part["num_fewshot"], part["tasks"]) for part in run.lm_eval] == [(0, ["tiny_group"]), (1, ["tiny_cloze"])]
    assert json.loads(json.dumps(run.lm_eval)) == run.lm_eval
    assert run.lm_eval[0]["groups"]["tiny_group"]["acc,none"] == scores["tiny_group"]["acc"]
    assert run.lm_eval[1]["results"]["tiny_cloze"]["acc,none"] == scores["tiny_cloze"]["acc"]
    assert run.lm_eval[0]["group_subtasks"] == {"tiny_group": ["tiny_cloze", "tiny_next"]}

    # Another metric, a limit, and responses served from the cache just written.
    norm = score_model(model, tokenizer, {"tiny_cloze": 1}, EvalSettings(limit=4, metric="acc_norm"), fresh, prefix)
    assert set(norm.scores["tiny_cloze"]) == {"acc_norm", "acc_norm_stderr", "num_fewshot", "num_items"}
    assert norm.scores["tiny_cloze"]["num_items"] == 4 and [row["doc_id"] for row in norm.samples] == [0, 1, 2, 3]
    with pytest.raises(KeyError, match=r"tiny_cloze.*available metrics: \['acc,none', 'acc_norm,none'\]"):
        score_model(model, tokenizer, {"tiny_cloze": 0}, EvalSettings(limit=2, metric="f1"), fresh, prefix)


@pytest.mark.slow
def test_response_cache_reads_and_writes_lm_eval_caches(tiny_lm, task_dir, tmp_path):
    """Scoring keeps each response in lm-eval's cache format (a killed job's rerun computes only
    what is missing): a cache lm-eval's CachingLM wrote answers our scoring without one forward
    pass, and the cache our scoring writes holds lm-eval's keys and the responses it computed."""
    import copy

    import torch
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from sqlitedict import SqliteDict

    model, tokenizer = tiny_lm
    model.eval()
    settings = EvalSettings(batch_size=8, limit=6)
    theirs = tmp_path / "lm_eval" / "job"
    with torch.no_grad():
        simple_evaluate(model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=8), tasks=["tiny_cloze"],
                        num_fewshot=0, task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
                        limit=6, use_cache=str(theirs))
    reference = score_model(model, tokenizer, {"tiny_cloze": 0}, settings, task_dir)  # no cache

    other = copy.deepcopy(model)  # other weights: its answers could only come from the cache
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(torch.randn_like(parameter))
    forwards = []
    other.register_forward_hook(lambda *args: forwards.append(1))
    from_theirs = score_model(other, tokenizer, {"tiny_cloze": 0}, settings, task_dir, theirs)
    assert forwards == [] and from_theirs.samples == reference.samples

    ours = tmp_path / "ours" / "job"
    written = score_model(model, tokenizer, {"tiny_cloze": 0}, settings, task_dir, ours)
    assert written.samples == reference.samples
    with SqliteDict(f"{ours}_rank0.db") as stored, SqliteDict(f"{theirs}_rank0.db") as expected:
        assert len(stored) == 6 * 4 and dict(stored.items()) == dict(expected.items())  # 4 choices per item


@pytest.mark.slow
def test_score_model_rejects_unknown_task_before_running(tiny_lm, task_dir, tmp_path):
    model, tokenizer = tiny_lm
    prefix = tmp_path / "cache" / "x"
    with pytest.raises(UnknownTaskError, match="no_such_task_xyz"):
        score_model(model, tokenizer, {"tiny_cloze": 0, "no_such_task_xyz": 0}, EvalSettings(), task_dir, prefix)
    assert not prefix.parent.exists(), "nothing was evaluated"


@pytest.mark.slow
def test_the_directories_of_built_in_tasks_define_them_and_all_their_members():
    """Scoring jobs index only the directories fetch_eval_tasks recorded: those must hold every
    task, group, tag and member the names reach (mmlu: a group of groups of tags of subjects)."""
    from lm_eval.tasks import TaskManager

    from condensation.evaluation.harness import _task_manager

    names = ["anli_r2", "truthfulqa_mc2", "arc_easy", "mmlu"]
    full = TaskManager()
    directories, missing = task_directories(full, names)
    assert not missing
    assert [d.relative_to(d.parents[1]).as_posix() if d.name == "default" else d.name for d in directories] == [
        "anli", "arc", "mmlu/default", "truthfulqa"
    ]
    small = _task_manager(directories, names)
    assert len(small.all_tasks) < len(full.all_tasks) / 20
    assert task_directories(small, names) == (directories, [])
    assert {"mmlu_stem", "mmlu_stem_tasks", "mmlu_abstract_algebra"} <= set(small.all_tasks)
    assert task_directories(full, ["mmlu", "no_such_task_xyz"])[1] == ["no_such_task_xyz"]


def test_score_model_rejects_bad_shot_counts(tiny_lm, task_dir):
    model, tokenizer = tiny_lm
    with pytest.raises(ValueError, match="tiny_cloze.*num_fewshot"):
        score_model(model, tokenizer, {"tiny_cloze": -1}, EvalSettings(), task_dir, None)


# --------------------------------------------------------------------------------------------
# Samples files
# --------------------------------------------------------------------------------------------

ROWS = [
    {"task": "t", "subtask": "t", "doc_id": 0, "filter": "none", "num_fewshot": 1, "target": 2, "acc": 1.0,
     "loglikelihoods": [-3.0, -2.5, -1.0]},
    {"task": "g", "subtask": "g_a", "doc_id": 0, "filter": "none", "num_fewshot": 0, "target": 0, "acc": 0.0,
     "loglikelihoods": None},
]


def test_samples_round_trip_with_key_columns_first(tmp_path):
    path = tmp_path / "x.samples.jsonl.gz"
    write_item_rows(path, ROWS)
    frame = read_item_rows(path)
    assert list(frame.columns) == ["task", "subtask", "doc_id", "filter", "num_fewshot", "target", "acc",
                                   "loglikelihoods"]
    assert frame.to_dict("records") == ROWS
    assert frame["acc"].dtype == "float64"
    with gzip.open(path, "rt") as lines:
        assert [json.loads(line) for line in lines] == ROWS
    # The bytes depend on the rows only (no time stamp or file name in the gzip header).
    again = tmp_path / "elsewhere" / "y.samples.jsonl.gz"
    write_item_rows(again, ROWS)
    assert again.read_bytes() == path.read_bytes()
    write_item_rows(again, [])
    assert list(read_item_rows(again).columns) == ["task", "subtask", "doc_id", "filter", "num_fewshot", "target"]


def test_sidecar_paths_sit_beside_the_record():
    record = Path("results/scores/m/dispersion/seed0/selected.json")
    assert item_rows_path(record) == Path("results/scores/m/dispersion/seed0/selected.samples.jsonl.gz")
    assert lm_eval_path(record) == Path("results/scores/m/dispersion/seed0/selected.lm_eval.json")


# --------------------------------------------------------------------------------------------
# Scoring jobs
# --------------------------------------------------------------------------------------------


def test_model_cache_prefix_follows_model_content(tmp_path):
    def checkpoint(name: str, manifest: dict) -> ModelHandle:
        path = tmp_path / name
        path.mkdir()
        (path / "manifest.json").write_text(json.dumps(manifest))
        return ModelHandle(name=name, location=str(path))

    first = checkpoint("a", {"artifact": "step-1", "files": {"model.safetensors": "aa"}})
    retrained = checkpoint("b", {"artifact": "step-1", "files": {"model.safetensors": "bb"}})
    same_content = checkpoint("c", {"artifact": "step-1", "files": {"model.safetensors": "aa"}})
    prefix = model_cache_prefix(first, "selected", tmp_path / "cache")
    assert prefix.parent.parent == tmp_path / "cache" and prefix.name == "selected" and len(prefix.parent.name) == 16
    assert model_cache_prefix(first, "selected", tmp_path / "cache") == prefix, "stable for one content"
    assert model_cache_prefix(same_content, "selected", tmp_path / "cache") == prefix, \
        "the content names it, not the path"
    assert model_cache_prefix(retrained, "selected", tmp_path / "cache").parent != prefix.parent
    assert model_cache_prefix(first, "step-1", tmp_path / "cache") == prefix.parent / "step-1"
    # Without a manifest (a hub id), the handle itself names the content: a new revision is new.
    hub = ModelHandle(name="gpt2", location="openai-community/gpt2", revision="abc")
    assert model_cache_prefix(hub, "pretrained").parent != model_cache_prefix(
        ModelHandle(name="gpt2", location="openai-community/gpt2", revision="def"), "pretrained"
    ).parent
    assert str(model_cache_prefix(hub, "pretrained")).startswith("runs/eval_cache/")


@pytest.mark.slow
def test_score_checkpoint_writes_record_samples_and_lm_eval_results(tiny_model_dir, task_dir, tmp_path):
    from condensation.evaluation.scores import load_scores

    handle = ModelHandle(name="tiny", location=str(tiny_model_dir))
    record = {"model": "tiny", "method": "pretrained", "seed": None, "checkpoint": "pretrained", "step": None,
              "val_loss": None}
    out_path = tmp_path / "scores" / "tiny" / "pretrained.json"
    written = score_checkpoint(
        handle, tasks={"tiny_cloze": 0, "tiny_next": 1}, settings=EvalSettings(batch_size=8, limit=6),
        include_path=task_dir, record=record, out_path=out_path, job="pretrained", cache_dir=tmp_path / "cache",
    )
    assert json.loads(out_path.read_text()) == written
    assert {key: written[key] for key in record} == record
    assert written["metric"] == "acc" and written["limit"] == 6 and written["seconds"] > 0
    assert set(written["scores"]) == {"tiny_cloze", "tiny_next"} and written["scores"]["tiny_next"]["num_fewshot"] == 1
    assert all(entry["num_items"] == 6 for entry in written["scores"].values())
    check_samples_against_scores(read_item_rows(item_rows_path(out_path)), written["scores"], "acc")
    lm_eval_results = json.loads(lm_eval_path(out_path).read_text())
    assert lm_eval_results["lm_eval_version"] == written["lm_eval_version"]
    assert {task for part in lm_eval_results["runs"] for task in part["results"]} == {"tiny_cloze", "tiny_next"}
    assert Path(f"{model_cache_prefix(handle, 'pretrained', tmp_path / 'cache')}_rank0.db").is_file()
    # The record is what the tables read.
    assert load_scores([out_path])["score"].tolist() == [written["scores"]["tiny_cloze"]["acc"],
                                                         written["scores"]["tiny_next"]["acc"]]
