"""The plain-text datasets of the pipeline configs, with the real repositories' configs, splits
and columns, filled with Austen's prose (a different novel for each dataset)."""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stand_in_hub.prose import Prose, passages
from stand_in_hub.repository import (
    DatasetConfig,
    write_dataset_repo,
    write_json_lines_repo,
)

NOTE = ("Rows cut from Jane Austen's novels (public domain) by stand_in_hub; the real "
        "dataset's configs, splits and columns, a few hundred rows at most.")
# Rows per split: enough text to sample a few sequences of several hundred words.
TRAIN_ROWS, EVAL_ROWS = 240, 40


# --------------------------------------------------------------------------------------------
# WikiText: articles as rows of headings, paragraphs and blank lines, tokenised with spaces
# around punctuation and @-@ inside hyphenated words; the non-raw configs replace rare words by <unk>.
# --------------------------------------------------------------------------------------------


def _wikitext_tokens(text: str) -> str:
    text = re.sub(r"(?<=\w)-(?=\w)", " @-@ ", text)
    return " ".join(re.sub(r"([,.;:!?()\"])", r" \1 ", text).split())


def _wikitext_rows(paragraphs: list[str], title: str) -> list[str]:
    rows = ["", f" = {title} = \n", ""]
    for index, paragraph in enumerate(paragraphs):
        if index and index % 6 == 0:
            rows += [f" = = Part {index // 6} = = \n", ""]
        rows += [f" {_wikitext_tokens(paragraph)} \n", ""]
    return rows


def _with_unk(rows: list[str]) -> list[str]:
    counts = Counter(word for row in rows for word in row.split())

    def replace(row: str) -> str:
        return " " + " ".join(w if counts[w] > 1 else "<unk>" for w in row.split()) + " \n"

    return [replace(row) if row.strip() else row for row in rows]


def wikitext(prose: Prose, root: Path) -> None:
    paragraphs = prose.paragraphs("emma")
    cut = {"train": paragraphs[:TRAIN_ROWS], "validation": paragraphs[TRAIN_ROWS:TRAIN_ROWS + EVAL_ROWS],
           "test": paragraphs[TRAIN_ROWS + EVAL_ROWS:TRAIN_ROWS + 2 * EVAL_ROWS]}
    raw = {split: _wikitext_rows(rows, f"Emma {split}") for split, rows in cut.items()}
    escaped = {split: _with_unk(rows) for split, rows in raw.items()}
    configs = []
    for size in ("103", "2"):
        for name, lines in ((f"wikitext-{size}-raw-v1", raw), (f"wikitext-{size}-v1", escaped)):
            splits = {split: [{"text": line} for line in rows] for split, rows in lines.items()}
            configs.append(DatasetConfig(name, splits, {"text": "string"}))
    write_dataset_repo(root, "Salesforce/wikitext", configs, NOTE)


def pubmed_qa(prose: Prose, root: Path) -> None:
    rng = random.Random("pubmed_qa")
    questions = [s for s in prose.sentences("mansfieldpark") if s.endswith("?")]
    paragraphs = prose.paragraphs("mansfieldpark")
    rows = []
    for index in range(TRAIN_ROWS):
        start = rng.randrange(len(paragraphs) - 3)
        contexts = paragraphs[start:start + 2]
        rows.append({
            "pubid": 10_000_000 + index, "question": rng.choice(questions),
            "context": {"contexts": contexts, "labels": ["BACKGROUND", "RESULTS"], "meshes": ["Humans"],
                        "reasoning_required_pred": ["yes"], "reasoning_free_pred": ["yes"]},
            "long_answer": paragraphs[start + 2], "final_decision": rng.choice(["yes", "no", "maybe"]),
        })
    spec = {"pubid": "int32", "question": "string",
            "context": {key: ["string"]
                        for key in ("contexts", "labels", "meshes", "reasoning_required_pred", "reasoning_free_pred")},
            "long_answer": "string", "final_decision": "string"}
    write_dataset_repo(root, "qiaojin/PubMedQA", [DatasetConfig("pqa_labeled", {"train": rows}, spec)], NOTE)


def imdb(prose: Prose, root: Path) -> None:
    def reviews(split: str, count: int, labelled: bool) -> list[dict[str, Any]]:
        texts = passages(prose, "northangerabbey", count, 150, f"imdb/{split}")
        # the real splits are sorted by label
        labels = sorted(i % 2 for i in range(count)) if labelled else [-1] * count
        return [{"text": text, "label": label} for text, label in zip(texts, labels)]

    splits = {"train": reviews("train", TRAIN_ROWS // 2, True), "test": reviews("test", EVAL_ROWS, True),
              "unsupervised": reviews("unsupervised", EVAL_ROWS, False)}
    config = DatasetConfig("plain_text", splits, {"text": "string", "label": ("neg", "pos")}, default=True)
    write_dataset_repo(root, "stanfordnlp/imdb", [config], NOTE)


def squad(prose: Prose, root: Path) -> None:
    paragraphs = [p for p in prose.paragraphs("prideprejudice") if len(p.split()) >= 60]

    def rows(split: str, contexts: list[str]) -> list[dict[str, Any]]:
        rng, result = random.Random(f"squad/{split}"), []
        for number, context in enumerate(contexts):
            for question in range(2):  # the real set asks several questions about each paragraph
                words = context.split()
                start = rng.randrange(len(words) - 3)
                answer = " ".join(words[start:start + rng.randint(1, 3)])
                result.append({"id": f"{split}{number:05d}{question}", "title": "Pride_and_Prejudice",
                               "context": context,
                               "question": f"What follows '{' '.join(words[max(0, start - 4):start])}'?",
                               "answers": {"text": [answer], "answer_start": [context.index(answer)]}})
        return result

    spec = {"id": "string", "title": "string", "context": "string", "question": "string",
            "answers": {"text": ["string"], "answer_start": ["int32"]}}
    splits = {"train": rows("train", paragraphs[:TRAIN_ROWS // 2]),
              "validation": rows("validation", paragraphs[TRAIN_ROWS // 2:TRAIN_ROWS // 2 + EVAL_ROWS // 2])}
    write_dataset_repo(root, "rajpurkar/squad", [DatasetConfig("plain_text", splits, spec, default=True)], NOTE)


def fineweb_edu(prose: Prose, root: Path) -> None:
    texts = passages(prose, "sensesensibility", TRAIN_ROWS, 200, "fineweb-edu")
    rows = [{"text": text, "id": f"<urn:uuid:stand-in-{i:06d}>", "dump": "CC-MAIN-2024-10",
             "url": f"https://example.org/sense-and-sensibility/{i}", "date": "2024-02-20T00:00:00Z",
             "file_path": "s3://commoncrawl/stand-in.warc.gz", "language": "en", "language_score": 0.95,
             "token_count": len(text.split()), "score": 3.5, "int_score": 4} for i, text in enumerate(texts)]
    spec = {"text": "string", "id": "string", "dump": "string", "url": "string", "date": "string",
            "file_path": "string", "language": "string", "language_score": "float64", "token_count": "int64",
            "score": "float64", "int_score": "int64"}
    write_dataset_repo(root, "codelion/fineweb-edu-1B", [DatasetConfig("default", {"train": rows}, spec)], NOTE)


def c4(prose: Prose, root: Path) -> None:
    def rows(split: str, count: int) -> list[dict[str, str]]:
        texts = passages(prose, "persuasion", count, 120, f"c4/{split}")
        return [{"text": text, "timestamp": f"2019-04-{1 + i % 28:02d}T12:00:00Z",
                 "url": f"https://example.org/persuasion/{split}/{i}"} for i, text in enumerate(texts)]

    write_json_lines_repo(root, "allenai/c4", "en",
                          {"train": rows("train", TRAIN_ROWS), "validation": rows("validation", EVAL_ROWS)}, NOTE)


@dataclass(frozen=True)
class TextDataset:
    configs: tuple[str | None, ...]
    """Config names a pipeline config may ask for (None: the default config)."""
    write: Callable[[Prose, Path], None]


TEXT_DATASETS = {
    "Salesforce/wikitext": TextDataset(
        ("wikitext-103-v1", "wikitext-103-raw-v1", "wikitext-2-v1", "wikitext-2-raw-v1"), wikitext),
    "qiaojin/PubMedQA": TextDataset(("pqa_labeled", None), pubmed_qa),
    "stanfordnlp/imdb": TextDataset(("plain_text", None), imdb),
    "rajpurkar/squad": TextDataset(("plain_text", None), squad),
    "codelion/fineweb-edu-1B": TextDataset(("default", None), fineweb_edu),
    "allenai/c4": TextDataset(("en", None), c4),
}
