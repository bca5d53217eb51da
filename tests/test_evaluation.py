"""Offline lm-eval tasks from held-out text, and scoring with the real lm-eval (never mocked)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import yaml

from condensation.evaluation import (
    EvalSettings,
    UnknownTaskError,
    build_local_tasks,
    cloze_items,
    next_sentence_items,
    score_model,
    sentences,
    words,
    write_local_task,
)

SUBJECTS = ["The man", "His wife", "A single man", "Their daughters", "Some one", "The families", "Anne", "Lady Russell"]
VERBS = ["must be in want of", "is considered", "knew nothing of", "spoke of", "is so well fixed in", "thought of"]
OBJECTS = [
    "the truth", "a good fortune", "a wife", "the property", "the neighbourhood", "their minds", "such feelings",
    "his views", "the daughters", "possession", "Kellynch", "Bath", "Uppercross", "Lyme",
]


def synthetic_novel(num_sentences: int = 400, seed: int = 7) -> str:
    """Seeded prose in the tiny tokenizer's vocabulary: paragraphs of 4 sentences of 5-12 words,
    with chapter headings that must not reach any item."""
    rng = random.Random(seed)
    blocks, paragraph = [], []
    for n in range(num_sentences):
        if n % 40 == 0:
            blocks.append(f"Chapter {n // 40 + 1}")
        stop = rng.choice([".", ".", ".", "!", "?"])
        paragraph.append(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{stop}")
        if len(paragraph) == 4:
            # Lines wrapped as in the Austen files: paragraph() must join them back.
            blocks.append("\n".join(paragraph))
            paragraph = []
    return "\n\n".join(blocks) + "\n"


@pytest.fixture(scope="module")
def novel() -> str:
    return synthetic_novel()


@pytest.fixture(scope="module")
def stream(novel) -> str:
    """The text as the item builders see it: prose words joined by single spaces."""
    return " ".join(words(novel))


# --------------------------------------------------------------------------------------------
# Text and items
# --------------------------------------------------------------------------------------------


def test_words_drop_headings_and_sentences_split_at_stops(novel):
    assert "Chapter" not in words(novel)
    got = sentences(novel)
    assert len(got) == 400
    assert all(re.search(r"[.!?]$", s) for s in got)
    # Abbreviations and initials do not end a sentence.
    assert sentences("Mrs. Smith met J. Elliot at Bath. It rained.") == ["Mrs. Smith met J. Elliot at Bath.", "It rained."]


def test_cloze_items_are_true_continuations(novel, stream):
    items = cloze_items(novel, num_items=30, num_choices=4, seed=0, context_words=20)
    assert len(items) == 30
    for item in items:
        choices, answer = item["choices"], item["choices"][item["gold"]]
        assert len(choices) == 4 and len({c.lower() for c in choices}) == 4
        assert len(item["query"].split()) == 20 and item["query"] == item["query"].strip()
        assert all(c.isalpha() and len(c) >= 3 for c in choices)
        # The answer is the word that ends the sentence right after the query.
        assert re.search(re.escape(f"{item['query']} {answer}") + r"[.!?]", stream)
        # Distractors share the answer's case shape, so capitals give nothing away.
        assert all(c.istitle() == answer.istitle() for c in choices)
    # Answers are spread over the text, and not always at the same index.
    assert len({stream.index(item["query"]) for item in items}) == 30
    assert len({item["gold"] for item in items}) > 1


def test_cloze_items_depend_only_on_the_seed(novel):
    first = cloze_items(novel, 10, 3, seed=1, context_words=15)
    assert first == cloze_items(novel, 10, 3, seed=1, context_words=15)
    assert first != cloze_items(novel, 10, 3, seed=2, context_words=15)
    assert all(len(item["choices"]) == 3 for item in first)


def test_next_sentence_items_are_true_continuations(novel, stream):
    items = next_sentence_items(novel, num_items=20, num_choices=4, seed=0, context_sentences=2)
    assert len(items) == 20
    all_sentences = set(sentences(novel))
    for item in items:
        choices, answer = item["choices"], item["choices"][item["gold"]]
        assert len(choices) == 4 and len(set(choices)) == 4
        assert set(choices) <= all_sentences
        assert f"{item['query']} {answer}" in stream
        assert len(sentences(item["query"])) == 2
    assert len({item["gold"] for item in items}) > 1
    assert items == next_sentence_items(novel, 20, 4, seed=0, context_sentences=2)
    assert items != next_sentence_items(novel, 20, 4, seed=1, context_sentences=2)


def test_next_sentence_respects_max_answer_words(novel):
    items = next_sentence_items(novel, 10, 2, seed=0, max_answer_words=6)
    assert all(len(c.split()) <= 6 for item in items for c in item["choices"])


def test_too_short_text_says_how_many_items_it_gives():
    text = "Anne walked to the garden. Mary stayed in the house. The admiral wrote a letter."
    with pytest.raises(ValueError, match=r"only \d+"):
        cloze_items(text, num_items=5, num_choices=2, seed=0, context_words=3)
    with pytest.raises(ValueError, match=r"only \d+"):
        next_sentence_items(text, num_items=5, num_choices=2, seed=0, context_sentences=1)
    with pytest.raises(ValueError, match="num_choices"):
        cloze_items(text, num_items=1, num_choices=1, seed=0, context_words=3)


# --------------------------------------------------------------------------------------------
# Task files
# --------------------------------------------------------------------------------------------

SPECS = {
    "tiny_cloze": {"kind": "cloze", "documents": ["novel"], "num_items": 12, "num_choices": 4, "seed": 0, "context_words": 20},
    "tiny_next": {
        "kind": "next_sentence", "documents": ["novel"], "num_items": 12, "num_choices": 4, "seed": 0,
        "context_sentences": 2, "max_answer_words": 12,
    },
}


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory, novel) -> Path:
    """The two tiny tasks, plus a group over them (to exercise lm-eval's group results)."""
    out = tmp_path_factory.mktemp("tasks")
    build_local_tasks({"novel": novel, "other": "Unused text."}, SPECS, out)
    group = {"group": "tiny_group", "task": list(SPECS), "aggregate_metric_list": [{"metric": "acc", "weight_by_size": True}], "metadata": {"version": 1.0}}
    (out / "tiny_group.yaml").write_text(yaml.safe_dump(group))
    return out


def test_build_local_tasks_writes_index_and_absolute_paths(task_dir):
    index = json.loads((task_dir / "tasks.json").read_text())
    assert index["tasks"] == list(SPECS)
    assert index["details"]["tiny_cloze"]["num_items"] == 12
    config = yaml.safe_load((task_dir / "tiny_cloze.yaml").read_text())
    data = Path(config["dataset_kwargs"]["data_files"]["test"])
    assert data.is_absolute() and data == task_dir / "tiny_cloze.jsonl"
    assert len(data.read_text().splitlines()) == 12


def test_build_local_tasks_rejects_bad_specs(tmp_path, novel):
    spec = dict(SPECS["tiny_cloze"], documents=["emma"])
    with pytest.raises(ValueError, match=r"emma.*available: \['novel'\]"):
        build_local_tasks({"novel": novel}, {"t": spec}, tmp_path)
    with pytest.raises(ValueError, match="context_sentences"):
        build_local_tasks({"novel": novel}, {"t": dict(SPECS["tiny_cloze"], context_sentences=2)}, tmp_path)
    with pytest.raises(ValueError, match="not usable"):
        build_local_tasks({"novel": novel}, {"bad name": SPECS["tiny_cloze"]}, tmp_path)
    with pytest.raises(ValueError, match="'t' from"):
        build_local_tasks({"novel": novel}, {"t": dict(SPECS["tiny_cloze"], num_items=10_000)}, tmp_path)
    assert not any(tmp_path.iterdir()), "nothing is written when a spec fails"


def test_rebuild_removes_tasks_no_longer_specified(tmp_path, novel):
    build_local_tasks({"novel": novel}, SPECS, tmp_path)
    build_local_tasks({"novel": novel}, {"tiny_next": SPECS["tiny_next"]}, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks.json", "tiny_next.jsonl", "tiny_next.yaml"]


def test_write_local_task_checks_its_input(tmp_path):
    item = {"query": "Anne", "choices": ["walked", "sat"], "gold": 0}
    with pytest.raises(ValueError, match="kind"):
        write_local_task("t", "lambada", [item], tmp_path)
    with pytest.raises(ValueError, match="gold"):
        write_local_task("t", "cloze", [dict(item, gold=2)], tmp_path)
    assert write_local_task("t", "cloze", [item], tmp_path) == tmp_path.resolve() / "t.yaml"


def test_written_tasks_load_in_lm_eval_from_another_directory(task_dir, tmp_path, monkeypatch):
    from lm_eval.tasks import TaskManager

    monkeypatch.chdir(tmp_path)  # the data path must not depend on the working directory
    manager = TaskManager(include_path=str(task_dir), include_defaults=False)
    assert {"tiny_cloze", "tiny_next", "tiny_group"} <= set(manager.all_tasks)
    built = manager.load(["tiny_cloze", "tiny_next"])["tasks"]  # what simple_evaluate calls
    for name in SPECS:
        task = built[name]
        docs = list(task.test_docs())
        assert len(docs) == 12
        expected = json.loads((task_dir / f"{name}.jsonl").read_text().splitlines()[0])
        assert task.doc_to_text(docs[0]) == expected["query"]
        assert task.doc_to_choice(docs[0]) == expected["choices"]
        assert task.doc_to_target(docs[0]) == expected["gold"]


# --------------------------------------------------------------------------------------------
# Scoring with lm-eval
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)), AutoTokenizer.from_pretrained(str(tiny_model_dir))


@pytest.mark.slow
def test_score_model_runs_local_tasks_and_groups(tiny_lm, task_dir, tmp_path):
    import torch

    model, tokenizer = tiny_lm
    model.train()
    prefix = tmp_path / "cache" / "step-0"
    settings = EvalSettings(batch_size=8)
    torch.manual_seed(99)
    scores = score_model(model, tokenizer, {"tiny_group": 0, "tiny_cloze": 1}, settings, task_dir, prefix)
    after_scoring = torch.rand(3)
    torch.manual_seed(99)
    assert torch.equal(after_scoring, torch.rand(3)), "lm-eval's reseeding must not leak into the caller"

    assert set(scores) == {"tiny_group", "tiny_cloze"}
    for entry in scores.values():
        assert set(entry) == {"acc", "acc_stderr", "num_fewshot", "num_items"}
        assert 0.0 <= entry["acc"] <= 1.0 and entry["acc_stderr"] >= 0.0
    assert scores["tiny_group"]["num_items"] == 24 and scores["tiny_group"]["num_fewshot"] == 0
    assert scores["tiny_cloze"]["num_items"] == 12 and scores["tiny_cloze"]["num_fewshot"] == 1
    assert (tmp_path / "cache" / "step-0_rank0.db").is_file()
    assert model.training, "the caller's train mode comes back"

    # Another metric, a limit, and responses served from the cache just written.
    norm = score_model(model, tokenizer, {"tiny_cloze": 1}, EvalSettings(limit=4, metric="acc_norm"), task_dir, prefix)
    assert set(norm["tiny_cloze"]) == {"acc_norm", "acc_norm_stderr", "num_fewshot", "num_items"}
    assert norm["tiny_cloze"]["num_items"] == 4
    with pytest.raises(KeyError, match=r"tiny_cloze.*available metrics: \['acc,none', 'acc_norm,none'\]"):
        score_model(model, tokenizer, {"tiny_cloze": 0}, EvalSettings(limit=2, metric="f1"), task_dir, prefix)


@pytest.mark.slow
def test_score_model_rejects_unknown_task_before_running(tiny_lm, task_dir, tmp_path):
    model, tokenizer = tiny_lm
    prefix = tmp_path / "cache" / "x"
    with pytest.raises(UnknownTaskError, match="no_such_task_xyz"):
        score_model(model, tokenizer, {"tiny_cloze": 0, "no_such_task_xyz": 0}, EvalSettings(), task_dir, prefix)
    assert not prefix.parent.exists(), "nothing was evaluated"


def test_score_model_rejects_bad_shot_counts(tiny_lm, task_dir):
    model, tokenizer = tiny_lm
    with pytest.raises(ValueError, match="tiny_cloze.*num_fewshot"):
        score_model(model, tokenizer, {"tiny_cloze": -1}, EvalSettings(), task_dir, None)
