"""The datasets behind the paper's 10 lm-eval tasks, with the real repositories' configs, splits
and columns (as lm-eval's task YAMLs read them), a few rows per split cut from Austen's novels.

Every split holds :data:`ROWS` rows, so 5-shot contexts can be drawn from any of them (lm-eval
draws one more than asked when the few-shot split is the evaluated one). The items are
sentence completions: a sentence's words but the last, and that last word among the final words
of other sentences; each dataset words them in its own schema.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stand_in_hub.catalog import MMLU_SUBJECTS
from stand_in_hub.prose import ChoiceItem, Prose, choice_items, passages
from stand_in_hub.repository import DatasetConfig, write_dataset_repo
from stand_in_hub.text_datasets import NOTE

ROWS = 8
LETTERS = "ABCD"


def _by_split(splits: tuple[str, ...], make: Callable[[str], list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    return {split: make(split) for split in splits}


def anli(prose: Prose, root: Path) -> None:
    def rows(split: str) -> list[dict[str, Any]]:
        premises = passages(prose, "sensesensibility", ROWS, 30, f"anli/{split}/premise")
        items = choice_items(prose, "sensesensibility", ROWS, f"anli/{split}")
        return [{"uid": f"{split}-{i:04d}", "premise": premise,
                 "hypothesis": f"{item.stem} {item.choices[item.answer]}.", "label": i % 3, "reason": ""}
                for i, (premise, item) in enumerate(zip(premises, items))]

    splits = tuple(f"{part}_r{r}" for r in (1, 2, 3) for part in ("train", "dev", "test"))
    columns = {"uid": "string", "premise": "string", "hypothesis": "string",
               "label": ("entailment", "neutral", "contradiction"), "reason": "string"}
    write_dataset_repo(root, "facebook/anli", [DatasetConfig("plain_text", _by_split(splits, rows), columns)], NOTE)


def lambada_openai(prose: Prose, root: Path) -> None:
    texts = passages(prose, "persuasion", ROWS, 60, "lambada")
    # A LAMBADA passage ends on its target word, with no closing punctuation.
    rows = [{"text": text.rstrip(".,;:!?\"'_ ")} for text in texts]
    configs = [DatasetConfig(name, {"test": rows}, {"text": "string"}, default=name == "default")
               for name in ("default", "en")]
    write_dataset_repo(root, "EleutherAI/lambada_openai", configs, NOTE)


def _lettered(item: ChoiceItem) -> dict[str, Any]:
    return {"choices": {"text": list(item.choices), "label": list(LETTERS)}, "answerKey": LETTERS[item.answer]}


def openbookqa(prose: Prose, root: Path) -> None:
    def rows(split: str) -> list[dict[str, Any]]:
        items = choice_items(prose, "northangerabbey", ROWS, f"openbookqa/{split}")
        return [{"id": f"{split}-{i}", "question_stem": item.stem, **_lettered(item)} for i, item in enumerate(items)]

    columns = {"id": "string", "question_stem": "string", "choices": {"text": ["string"], "label": ["string"]},
               "answerKey": "string"}
    config = DatasetConfig("main", _by_split(("train", "validation", "test"), rows), columns, default=True)
    write_dataset_repo(root, "allenai/openbookqa", [config], NOTE)


def piqa(prose: Prose, root: Path) -> None:
    def rows(split: str) -> list[dict[str, Any]]:
        items = choice_items(prose, "emma", ROWS, f"piqa/{split}", num_choices=2)
        return [{"goal": item.stem, "sol1": item.choices[0], "sol2": item.choices[1],
                 "label": -1 if split == "test" else item.answer} for item in items]

    columns = {"goal": "string", "sol1": "string", "sol2": "string", "label": "int64"}
    write_dataset_repo(root, "baber/piqa",
                       [DatasetConfig("default", _by_split(("train", "validation", "test"), rows), columns)], NOTE)


def truthful_qa(prose: Prose, root: Path) -> None:
    items = choice_items(prose, "mansfieldpark", ROWS, "truthfulqa")
    questions = [f"{item.stem} what?" for item in items]
    # The real data lists the correct answer(s) first; lm-eval's doc_to_target is 0.
    ordered = [[item.choices[item.answer]] + [c for j, c in enumerate(item.choices) if j != item.answer]
               for item in items]
    multiple_choice = [{"question": q, "mc1_targets": {"choices": o, "labels": [1, 0, 0, 0]},
                        "mc2_targets": {"choices": o, "labels": [1, 1, 0, 0]}} for q, o in zip(questions, ordered)]
    generation = [{"type": "Adversarial", "category": "Misconceptions", "question": q, "best_answer": o[0],
                   "correct_answers": o[:2], "incorrect_answers": o[2:], "source": "https://example.org/austen"}
                  for q, o in zip(questions, ordered)]
    targets = {"choices": ["string"], "labels": ["int32"]}
    configs = [
        DatasetConfig("generation", {"validation": generation},
                      {"type": "string", "category": "string", "question": "string", "best_answer": "string",
                       "correct_answers": ["string"], "incorrect_answers": ["string"], "source": "string"}),
        DatasetConfig("multiple_choice", {"validation": multiple_choice},
                      {"question": "string", "mc1_targets": targets, "mc2_targets": targets}),
    ]
    write_dataset_repo(root, "truthfulqa/truthful_qa", configs, NOTE)


def winogrande(prose: Prose, root: Path) -> None:
    vocabulary = prose.words("prideprejudice")

    def rows(split: str) -> list[dict[str, Any]]:
        rng, result = random.Random(f"winogrande/{split}"), []
        for sentence in rng.sample(prose.sentences("prideprejudice"), ROWS):
            words = sentence.split()
            blank = rng.randrange(1, len(words) - 1)  # text follows the blank: lm-eval scores it
            word = words[blank].strip(".,;:!?\"'()_")
            options = [word or "it", rng.choice(vocabulary)]
            answer = rng.randrange(2)
            result.append({"sentence": " ".join(words[:blank] + ["_"] + words[blank + 1:]),
                           "option1": options[answer], "option2": options[1 - answer],
                           "answer": "" if split == "test" else str(answer + 1)})
        return result

    columns = {"sentence": "string", "option1": "string", "option2": "string", "answer": "string"}
    config = DatasetConfig("winogrande_xl", _by_split(("train", "validation", "test"), rows), columns)
    write_dataset_repo(root, "allenai/winogrande", [config], NOTE)


def ai2_arc(prose: Prose, root: Path) -> None:
    def config(name: str, novel: str) -> DatasetConfig:
        def rows(split: str) -> list[dict[str, Any]]:
            items = choice_items(prose, novel, ROWS, f"{name}/{split}")
            return [{"id": f"Austen_{split}_{i}", "question": f"{item.stem} ...?", **_lettered(item)}
                    for i, item in enumerate(items)]

        columns = {"id": "string", "question": "string", "choices": {"text": ["string"], "label": ["string"]},
                   "answerKey": "string"}
        return DatasetConfig(name, _by_split(("train", "validation", "test"), rows), columns)

    write_dataset_repo(root, "allenai/ai2_arc", [config("ARC-Challenge", "emma"), config("ARC-Easy", "persuasion")],
                       NOTE)


def mmlu(prose: Prose, root: Path) -> None:
    novels = sorted(prose.novels)
    columns = {"question": "string", "subject": "string", "choices": ["string"], "answer": tuple(LETTERS)}

    def config(number: int, subject: str) -> DatasetConfig:
        def rows(split: str) -> list[dict[str, Any]]:
            items = choice_items(prose, novels[number % len(novels)], ROWS, f"mmlu/{subject}/{split}")
            return [{"question": f"{item.stem} ...", "subject": subject, "choices": list(item.choices),
                     "answer": item.answer}
                    for item in items]

        return DatasetConfig(subject, _by_split(("test", "validation", "dev"), rows), columns)

    write_dataset_repo(root, "cais/mmlu", [config(n, subject) for n, subject in enumerate(MMLU_SUBJECTS)], NOTE)


def medmcqa(prose: Prose, root: Path) -> None:
    def rows(split: str) -> list[dict[str, Any]]:
        items = choice_items(prose, "mansfieldpark", ROWS, f"medmcqa/{split}")
        return [{"id": f"austen-{split}-{i:04d}", "question": f"{item.stem} ...",
                 **dict(zip(("opa", "opb", "opc", "opd"), item.choices)),
                 "cop": -1 if split == "test" else item.answer, "choice_type": "single", "exp": "",
                 "subject_name": "Medicine", "topic_name": ""} for i, item in enumerate(items)]

    columns = {"id": "string", "question": "string", "opa": "string", "opb": "string", "opc": "string", "opd": "string",
               "cop": ("a", "b", "c", "d"), "choice_type": "string", "exp": "string", "subject_name": "string",
               "topic_name": "string"}
    config = DatasetConfig("default", _by_split(("train", "test", "validation"), rows), columns)
    write_dataset_repo(root, "openlifescienceai/medmcqa", [config], NOTE)


TASK_WRITERS: dict[str, Callable[[Prose, Path], None]] = {
    "facebook/anli": anli,
    "EleutherAI/lambada_openai": lambada_openai,
    "allenai/openbookqa": openbookqa,
    "baber/piqa": piqa,
    "truthfulqa/truthful_qa": truthful_qa,
    "allenai/winogrande": winogrande,
    "allenai/ai2_arc": ai2_arc,
    "cais/mmlu": mmlu,
    "openlifescienceai/medmcqa": medmcqa,
}
"""Dataset path (lm-eval's ``dataset_path``) -> writer; see ``catalog.TASK_DATASETS``."""
