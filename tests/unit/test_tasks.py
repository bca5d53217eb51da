"""Offline lm-eval tasks from held-out text: items, task files, and loading them in the real lm-eval
(library and command line), never mocked."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from condensation.config.validate import ConfigError, validate_config
from condensation.evaluation import task_data
from condensation.evaluation.task_items import sentences
from condensation.evaluation.tasks import (
    build_local_tasks,
    cloze_items,
    next_sentence_items,
    word_choice_items,
    word_order_items,
    words,
    write_local_task,
)
from tests.helpers.tasks import SPECS, synthetic_novel, write_tiny_tasks


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
    assert sentences("Mrs. Smith met J. Elliot at Bath. It rained.") == ["Mrs. Smith met J. Elliot at Bath.",
                                                                         "It rained."]


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


def word_position(stream: str, passage: str) -> int:
    """The index (in words) of the first word of ``passage`` in ``stream``."""
    return len(stream[: stream.index(passage)].split())


def changed_places(choice: str, answer: str) -> list[int]:
    """Word indices where ``choice`` and ``answer`` (of equally many words) differ."""
    assert len(choice.split()) == len(answer.split())
    return [i for i, (a, b) in enumerate(zip(choice.split(), answer.split())) if a != b]


def check_sentence_variant_items(items: list[dict], stream: str, context_words: int, max_answer_words: int) -> None:
    """What the word_order and word_choice items share: the answer is the sentence after the
    query, choices are distinct and of one length, and items lie far apart in the text."""
    all_sentences = set(sentences(stream))
    for item in items:
        choices, answer = item["choices"], item["choices"][item["gold"]]
        assert len(set(choices)) == len(choices)
        assert answer in all_sentences and 4 <= len(answer.split()) <= max_answer_words
        assert len(item["query"].split()) == context_words and item["query"] == item["query"].strip()
        assert f"{item['query']} {answer}" in stream
        assert {len(c) for c in choices} == {len(answer)}, "equal length: acc compares like with like"
        assert all(c == c.strip() for c in choices)
    starts = sorted(word_position(stream, f"{item['query']} {item['choices'][item['gold']]}") for item in items)
    assert all(b - a > context_words + max_answer_words for a, b in zip(starts, starts[1:]))
    assert len({item["gold"] for item in items}) > 1


@pytest.mark.parametrize("num_choices, run", [(2, 2), (4, 3)])
def test_word_order_items_reorder_one_run_of_adjacent_plain_words(stream, num_choices, run):
    items = word_order_items(stream, num_items=20, num_choices=num_choices, seed=0, context_words=10,
                             max_answer_words=12)
    assert len(items) == 20
    check_sentence_variant_items(items, stream, context_words=10, max_answer_words=12)
    for item in items:
        answer = item["choices"][item["gold"]]
        changed = sorted({i for choice in item["choices"] for i in changed_places(choice, answer)})
        # One run of `run` adjacent words (the fewest with num_choices orders), the same in every copy.
        start = changed[0]
        assert len(changed) >= 2 and changed[-1] < start + run
        window = answer.split()[start : start + run]
        assert len(set(window)) == run and all(re.fullmatch(r"[a-z]+", w) for w in window), \
            "no capital or punctuation moves"
        for choice in item["choices"]:
            assert sorted(choice.split()[start : start + run]) == sorted(window)


def test_word_order_answer_is_at_chance_for_a_model_that_knows_nothing(stream):
    """A scorer that sums random bigram scores (a model with random weights) picks the sentence
    as written 1 time in 4 with 4 choices: the sentence is one order among exchangeable ones."""
    items = word_order_items(stream, num_items=60, num_choices=4, seed=0, context_words=3, max_answer_words=12)
    rng, wins, trials = random.Random(0), 0, 0
    for _ in range(200):
        bigram: dict[tuple[str, str], float] = {}

        def score(text: str) -> float:
            tokens = text.split()
            # called only within this iteration: it reads this iteration's bigram
            return sum(bigram.setdefault(pair, rng.gauss(0, 1)) for pair in zip(tokens, tokens[1:]))  # noqa: B023

        for item in items:
            scores = [score(f"{item['query']} {choice}") for choice in item["choices"]]
            wins += scores.index(max(scores)) == item["gold"]
            trials += 1
    assert abs(wins / trials - 0.25) < 0.02


def test_word_choice_items_replace_one_word_by_a_frequency_neighbour_of_the_same_length(stream):
    counts = Counter(re.findall(r"[A-Za-z]+", stream))
    lower = sorted((w for w in counts if w.islower() and len(w) >= 3), key=lambda w: (-counts[w], w))
    items = word_choice_items(stream, num_items=30, num_choices=3, seed=0, context_words=10, max_answer_words=12)
    assert len(items) == 30
    check_sentence_variant_items(items, stream, context_words=10, max_answer_words=12)
    answer_places = Counter()
    for item in items:
        answer = item["choices"][item["gold"]].split()
        places = [changed_places(c, " ".join(answer)) for n, c in enumerate(item["choices"]) if n != item["gold"]]
        assert len(places) == 2 and places[0] == places[1] and len(places[0]) == 1, "one place, the same in every copy"
        place = places[0][0]
        assert place > 0 and re.fullmatch(r"[a-z]{3,}", answer[place])
        # The words in that place: consecutive frequency ranks among lower-case words of one length.
        pool = [w for w in lower if len(w) == len(answer[place])]
        ranks = sorted(pool.index(choice.split()[place]) for choice in item["choices"])
        assert ranks == list(range(ranks[0], ranks[0] + 3))
        answer_places[ranks.index(pool.index(answer[place]))] += 1
    # The answer is sometimes the most, sometimes the least frequent word of its run.
    assert sorted(answer_places) == [0, 1, 2]


def test_sentence_kinds_depend_only_on_the_seed(stream):
    for build in (word_order_items, word_choice_items):
        first = build(stream, 10, 3, seed=1, context_words=5)
        assert first == build(stream, 10, 3, seed=1, context_words=5)
        assert first != build(stream, 10, 3, seed=2, context_words=5)
        with pytest.raises(ValueError, match="max_answer_words must be an integer >= 4"):
            build(stream, 10, 3, seed=1, max_answer_words=3)
        with pytest.raises(ValueError, match="num_choices must be an integer >= 2"):
            build(stream, 10, 1, seed=1)


def test_word_order_needs_a_long_enough_run_of_plain_words():
    # Plain-word runs: "walked to" (2 words) in the second sentence, "said that she was" (4) in the third.
    text = "Sir Walter came. Anne walked to Bath. Mary said that she was ill."
    pairs = {word_order_items(text, 1, 2, seed=seed, context_words=1)[0]["query"] for seed in range(20)}
    assert pairs == {"came.", "Bath."}, "two choices: both sentences have a pair to swap"
    assert all(word_order_items(text, 1, 3, seed=seed, context_words=1)[0]["query"] == "Bath." for seed in range(5))
    assert len(word_order_items(text, 1, 24, seed=0, context_words=1)[0]["choices"]) == 24  # all orders of 4 words
    with pytest.raises(ValueError, match="only 0"):
        word_order_items(text, 1, 25, seed=0, context_words=1)


def test_too_short_text_says_how_many_items_it_gives():
    text = "Anne walked to the garden. Mary stayed in the house. The admiral wrote a letter."
    with pytest.raises(ValueError, match=r"only \d+"):
        cloze_items(text, num_items=5, num_choices=2, seed=0, context_words=3)
    with pytest.raises(ValueError, match=r"only \d+"):
        next_sentence_items(text, num_items=5, num_choices=2, seed=0, context_sentences=1)
    for build in (word_order_items, word_choice_items):
        with pytest.raises(ValueError, match=r"only \d+"):
            build(text, num_items=5, num_choices=2, seed=0, context_words=3)
    with pytest.raises(ValueError, match="num_choices"):
        cloze_items(text, num_items=1, num_choices=1, seed=0, context_words=3)


# --------------------------------------------------------------------------------------------
# Task files
# --------------------------------------------------------------------------------------------

# The sentence kinds, kept apart from SPECS (whose group test_evaluation scores).
SENTENCE_SPECS = {
    "tiny_order": {
        "kind": "word_order", "documents": ["novel"], "num_items": 12, "num_choices": 4, "seed": 0, "context_words": 10,
    },
    "tiny_choice": {
        "kind": "word_choice", "documents": ["novel"], "num_items": 12, "num_choices": 3, "seed": 0,
        "max_answer_words": 12,
    },
}


def moved_copy(task_dir: Path, root: Path) -> Path:
    """A copy of ``task_dir`` built under one name and then moved (renamed) to another, as after
    an atomic build, ``dvc pull`` or a checkout elsewhere."""
    built = shutil.copytree(task_dir, root / "built-here")
    return Path(shutil.move(built, root / "moved-there"))


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory, novel) -> Path:
    return write_tiny_tasks(tmp_path_factory.mktemp("tasks"), novel)


def test_build_local_tasks_writes_index_and_relative_yamls(task_dir):
    from lm_eval.tasks._yaml_loader import load_yaml

    index = json.loads((task_dir / "tasks.json").read_text())
    assert index["tasks"] == list(SPECS)
    assert index["details"]["tiny_cloze"]["num_items"] == 12
    text = (task_dir / "tiny_cloze.yaml").read_text()
    assert str(task_dir) not in text and "/" not in text, "the YAML names nothing outside its directory"
    config = load_yaml(task_dir / "tiny_cloze.yaml", resolve_func=False)  # lm-eval's own reader
    # An unresolved !function reference reads as the YAML's directory joined with the reference.
    assert config["custom_dataset"] == str(task_dir / "task_data.load_items")
    assert config["dataset_kwargs"] == {"data_file": "tiny_cloze.jsonl"}
    assert (task_dir / "task_data.py").read_bytes() == Path(task_data.__file__).read_bytes()
    assert len((task_dir / "tiny_cloze.jsonl").read_text().splitlines()) == 12


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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["task_data.py", "tasks.json", "tiny_next.jsonl",
                                                          "tiny_next.yaml"]


def test_write_local_task_checks_its_input(tmp_path):
    item = {"query": "Anne", "choices": ["walked", "sat"], "gold": 0}
    with pytest.raises(ValueError, match="kind"):
        write_local_task("t", "lambada", [item], tmp_path)
    with pytest.raises(ValueError, match="gold"):
        write_local_task("t", "cloze", [dict(item, gold=2)], tmp_path)
    assert write_local_task("t", "cloze", [item], tmp_path) == tmp_path.resolve() / "t.yaml"


@pytest.mark.parametrize("specs", [SPECS, SENTENCE_SPECS], ids=["cloze-next", "order-choice"])
def test_written_tasks_load_in_lm_eval_after_moving_from_another_directory(specs, novel, tmp_path, monkeypatch):
    from lm_eval.tasks import TaskManager

    moved = moved_copy(write_tiny_tasks(tmp_path / "tasks", novel, specs), tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the data path must not depend on the working directory
    manager = TaskManager(include_path=str(moved), include_defaults=False)
    assert {*specs, "tiny_group"} <= set(manager.all_tasks)
    built = manager.load(list(specs))["tasks"]  # what simple_evaluate calls
    for name in specs:
        task = built[name]
        docs = list(task.test_docs())
        assert len(docs) == 12
        expected = [json.loads(line) for line in (moved / f"{name}.jsonl").read_text().splitlines()]
        assert [task.doc_to_text(doc) for doc in docs] == [item["query"] for item in expected]
        assert [task.doc_to_choice(doc) for doc in docs] == [item["choices"] for item in expected]
        assert [task.doc_to_target(doc) for doc in docs] == [item["gold"] for item in expected]
        assert task.config.metadata["kind"] == specs[name]["kind"]
    assert not list(elsewhere.iterdir()), "nothing is written where lm-eval runs"


def config_with_local_task(spec: dict) -> dict:
    task = {"corpus": "austen", "documents": ["persuasion"], **spec}
    return {
        "datasets": {"austen": {"source": "austen"}}, "models": {"m": {"source": "hub", "id": "gpt2"}},
        "evaluation": {"tasks": {"t": "zero"}, "local_tasks": {"t": task}},
    }


@pytest.mark.parametrize("kind", ["word_order", "word_choice"])
def test_schema_accepts_the_sentence_kinds_with_their_options(kind):
    config = validate_config(config_with_local_task({"kind": kind, "context_words": 10, "max_answer_words": 20}))
    task = config["evaluation"]["local_tasks"]["t"]
    assert (task["kind"], task["context_words"], task["max_answer_words"], task["num_choices"]) == (kind, 10, 20, 4)


@pytest.mark.parametrize(
    "kind, option",
    [("word_order", "context_sentences"), ("cloze", "max_answer_words"), ("next_sentence", "context_words")],
)
def test_schema_and_builder_reject_an_option_of_another_kind(kind, option, novel, tmp_path):
    with pytest.raises(ConfigError, match=rf"local_tasks\.t\.{option}: 2 should not be valid"):
        validate_config(config_with_local_task({"kind": kind, option: 2}))
    spec = {"kind": kind, "documents": ["novel"], "num_items": 2, "num_choices": 2, "seed": 0, option: 5}
    with pytest.raises(ValueError, match=rf"\['{option}'\] do not apply to kind '{kind}'"):
        build_local_tasks({"novel": novel}, {"t": spec}, tmp_path)


@pytest.mark.slow
def test_lm_eval_command_line_runs_moved_tasks_from_another_directory(task_dir, tiny_model_dir, tmp_path):
    """The tasks as a user runs them: the lm_eval command, a moved task directory, another cwd."""
    moved = moved_copy(task_dir, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    lm_eval = Path(sys.executable).parent / "lm_eval"
    command = [
        str(lm_eval), "--model", "hf", "--model_args", f"pretrained={tiny_model_dir},dtype=float32",
        "--include_path", str(moved), "--tasks", "tiny_cloze", "--device", "cpu", "--batch_size", "8", "--limit", "10",
    ]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    row = re.search(r"^\|tiny_cloze\s*\|\s*1\|none\s*\|\s*0\|acc\s*\|[^|]*\|\s*([0-9.]+)\|", done.stdout, re.MULTILINE)
    assert row is not None, done.stdout[-2000:]
    assert 0.0 <= float(row[1]) <= 1.0


def test_a_task_built_from_your_own_files_reads_the_files_dataset(tmp_path):
    """The stage builds a task from a `files` dataset (all its documents when none are named)."""
    from condensation.config.datasets import task_text_datasets
    from condensation.stages.evaluation import build_eval_tasks

    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "licence_a.txt").write_text(synthetic_novel(200, seed=1))
    (tmp_path / "texts" / "licence_b.txt").write_text(synthetic_novel(200, seed=2))
    config = validate_config({
        "datasets": {"licenses": {"source": "files", "files": [str(tmp_path / "texts" / "*.txt")]}},
        "models": {"m": {"source": "hub", "id": "gpt2"}},
        "evaluation": {
            "tasks": {"lic_cloze": "zero", "lic_b": "zero"},
            "local_tasks": {
                "lic_cloze": {"kind": "cloze", "corpus": "licenses", "num_items": 20},
                "lic_b": {"kind": "word_order", "corpus": "licenses", "documents": ["licence_b"], "num_items": 10},
            },
        },
    })
    texts = task_text_datasets(config)
    assert list(texts) == ["licenses"]
    out = tmp_path / "tasks"
    build_eval_tasks(specs=config["evaluation"]["local_tasks"], texts=texts, text_dirs={"licenses": None}, out_dir=out)
    everything = json.loads((out / "lic_cloze" / "tasks.json").read_text())["details"]["lic_cloze"]
    assert everything["documents"] == ["licence_a", "licence_b"] and everything["num_items"] == 20
    only_b = [json.loads(line) for line in (out / "lic_b" / "lic_b.jsonl").read_text().splitlines()]
    b_text = (tmp_path / "texts" / "licence_b.txt").read_text()
    assert only_b and all(" ".join(item["choices"][item["gold"]].split()[:3]) in " ".join(b_text.split())
                          for item in only_b)
