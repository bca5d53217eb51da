"""Real English prose for the stand-in datasets: Jane Austen's novels from the offline corpus.

Every dataset row is cut from the novels (paragraphs, sentences, words), so sampling several
hundred words, tokenising and scoring behave as on natural text. Choices are drawn with
``random.Random`` seeded by strings, which is stable across runs and Python processes.
"""

from __future__ import annotations

import random
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from condensation.data import corpus
from condensation.evaluation.task_items import sentences as split_sentences

MIN_PARAGRAPH_WORDS = 25
SENTENCE_WORDS = (6, 40)
_WORD = re.compile(r"^[A-Za-z]{4,}$")


@dataclass
class Prose:
    """The novels' prose paragraphs, with sentences and plain words computed on demand."""

    novels: dict[str, list[str]]
    _sentences: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def paragraphs(self, novel: str) -> list[str]:
        return self.novels[novel]

    def sentences(self, novel: str) -> list[str]:
        """Sentences of a novel between 6 and 40 words long."""
        if novel not in self._sentences:
            low, high = SENTENCE_WORDS
            every = split_sentences("\n\n".join(self.novels[novel]))
            self._sentences[novel] = [s for s in every if low <= len(s.split()) <= high]
        return self._sentences[novel]

    def words(self, novel: str) -> list[str]:
        """Distinct plain words (letters only, 4 or more) of a novel, in order of first use."""
        found = (w.strip(".,;:!?\"'()_-") for p in self.novels[novel] for w in p.split())
        return list(dict.fromkeys(w.lower() for w in found if _WORD.match(w)))


def load_prose(debs_dir: str | Path | None = None) -> Prose:
    """Unpack ``r-cran-janeaustenr`` (see :mod:`condensation.data.corpus`) and keep each novel's prose
    paragraphs of at least 25 words."""
    with tempfile.TemporaryDirectory() as scratch:
        corpus.unpack_deb(corpus.find_deb("r-cran-janeaustenr", debs_dir), scratch)
        novels = corpus.austen_novels(scratch)
    return Prose({name: corpus.paragraphs(text, MIN_PARAGRAPH_WORDS) for name, text in novels.items()})


@dataclass(frozen=True)
class ChoiceItem:
    """A multiple-choice item cut from a sentence: its words but the last (``stem``), and that
    last word among distractors (final words of other sentences)."""

    stem: str
    choices: tuple[str, ...]
    answer: int


def choice_items(prose: Prose, novel: str, count: int, seed: str, num_choices: int = 4) -> list[ChoiceItem]:
    rng = random.Random(seed)
    pool = prose.sentences(novel)
    items = []
    for sentence in rng.sample(pool, count):
        *stem, last = sentence.split()
        answer = last.strip(".,;:!?\"'()_")
        distractors: list[str] = []
        while len(distractors) < num_choices - 1:
            other = rng.choice(pool).split()[-1].strip(".,;:!?\"'()_")
            if other and other != answer and other not in distractors:
                distractors.append(other)
        position = rng.randrange(num_choices)
        choices = distractors[:position] + [answer] + distractors[position:]
        items.append(ChoiceItem(" ".join(stem), tuple(choices), position))
    return items


def passages(prose: Prose, novel: str, count: int, min_words: int, seed: str) -> list[str]:
    """``count`` passages of consecutive paragraphs, each of at least ``min_words`` words,
    starting at random places."""
    rng = random.Random(seed)
    paragraphs = prose.paragraphs(novel)
    result = []
    for _ in range(count):
        index, taken, words = rng.randrange(len(paragraphs)), [], 0
        while words < min_words:
            taken.append(paragraphs[index % len(paragraphs)])
            words += len(taken[-1].split())
            index += 1
        result.append(" ".join(taken))
    return result
