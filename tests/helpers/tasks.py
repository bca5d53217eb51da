"""A seeded synthetic novel in the tiny tokenizer's vocabulary and the two tiny offline lm-eval tasks
built from it, with a group over them (tests/unit/test_tasks.py, test_evaluation.py, test_gpu.py)."""

from __future__ import annotations

import random
from pathlib import Path

import yaml

from condensation.evaluation.tasks import build_local_tasks

SUBJECTS = ["The man", "His wife", "A single man", "Their daughters", "Some one", "The families", "Anne",
            "Lady Russell"]
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


SPECS = {
    "tiny_cloze": {"kind": "cloze", "documents": ["novel"], "num_items": 12, "num_choices": 4, "seed": 0,
                   "context_words": 20},
    "tiny_next": {
        "kind": "next_sentence", "documents": ["novel"], "num_items": 12, "num_choices": 4, "seed": 0,
        "context_sentences": 2, "max_answer_words": 12,
    },
}


def write_tiny_tasks(out: Path, novel: str, specs: dict = SPECS) -> Path:
    """The tiny tasks (by default the two of SPECS), plus a group over them (to exercise
    lm-eval's group results)."""
    build_local_tasks({"novel": novel, "other": "Unused text."}, specs, out)
    group = {"group": "tiny_group", "task": list(specs),
             "aggregate_metric_list": [{"metric": "acc", "weight_by_size": True}], "metadata": {"version": 1.0}}
    (out / "tiny_group.yaml").write_text(yaml.safe_dump(group))
    return out
