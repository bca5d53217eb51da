"""The items of the offline multiple-choice tasks: text split into words and sentences, and one
item builder per task kind (see :mod:`condensation.evaluation.tasks` for the kinds, their conventions and
how each fares on the default's models).

Every builder takes ``(text, num_items, num_choices, seed, **options)`` and returns
``{"query", "choices", "gold"}`` dicts in text order, deterministic given ``seed``: the query never
ends in whitespace, no choice starts with it, the answer's place among the choices is shuffled,
and items sit far enough apart that no item's query holds another item's answer.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from condensation.data.corpus import paragraphs

DEFAULT_CONTEXT_WORDS = 60
DEFAULT_CONTEXT_SENTENCES = 3
# Answer sentences outside this range make poor items: very short ones ("Yes, sir.") are
# guessable from anywhere, very long ones dominate the log-likelihood comparison.
MIN_SENTENCE_WORDS = 4
MAX_SENTENCE_WORDS = 50

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


def _check_at_least(**bounds: tuple[Any, int]) -> None:
    """Each keyword is ``(value, least)``: the value must be an integer of at least ``least``."""
    for name, (value, least) in bounds.items():
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


def cloze_items(
    text: str, num_items: int, num_choices: int, seed: int, context_words: int = DEFAULT_CONTEXT_WORDS
) -> list[dict]:
    """LAMBADA-like items: the ``context_words`` words before a sentence-final word, and that word.

    Targets are alphabetic words of at least 3 letters that end a sentence, at places whose
    contexts do not overlap. Distractors are drawn at random from the ``3 * (num_choices - 1)``
    words of the same text nearest in frequency rank among words of the same case shape
    (lower-case or Capitalised), so neither frequency nor capitalisation betrays the answer.
    Returns ``{"query", "choices", "gold"}`` dicts in text order; deterministic given ``seed``.
    """
    _check_at_least(num_items=(num_items, 1), num_choices=(num_choices, 2), context_words=(context_words, 1))
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
    model's context, so a model with a short one needs a lower bound). Distractors are sentences
    at least a tenth of the text away (and never inside the item's window), drawn at random among
    the ``4 * (num_choices - 1)`` closest in word count to the answer, because a multiple-choice
    log-likelihood comparison otherwise mostly rewards the shortest choice. Returns
    ``{"query", "choices", "gold"}`` dicts in text order; deterministic given ``seed``.
    """
    _check_at_least(
        num_items=(num_items, 1), num_choices=(num_choices, 2), context_sentences=(context_sentences, 1),
        max_answer_words=(max_answer_words, MIN_SENTENCE_WORDS),
    )
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
            "next-sentence", num_items, len(chosen),
            f"{len(all_sentences)} sentences, context_sentences={context_sentences}",
        )

    items = []
    for j in chosen:
        distractors = [all_sentences[k] for k in rng.sample(distractor_pools[j], num_choices - 1)]
        query = " ".join(all_sentences[j - context_sentences : j])
        items.append(_shuffled_item(query, all_sentences[j], distractors, rng))
    return items


# --------------------------------------------------------------------------------------------
# Sentence variants: word_order and word_choice
# --------------------------------------------------------------------------------------------

# The sentence kinds score whole sentences, so their defaults keep a one-shot prompt (two
# queries and two sentences) inside the toy models' 256-token context.
DEFAULT_SENTENCE_CONTEXT_WORDS = 20
DEFAULT_SENTENCE_MAX_WORDS = 30
# A token that is a bare lower-case word: moving or replacing it changes no punctuation or
# capital letter, so only the words themselves tell the variants apart.
_PLAIN_WORD = re.compile(r"^[a-z]+$")

# Alternatives to one sentence (its word tokens): groups of altered copies, each group a set of
# interchangeable distractors (an item draws all its distractors from one group).
VariantGroups = Callable[[Sequence[str]], list[list[str]]]


def _check_sentence_options(num_items: int, num_choices: int, context_words: int, max_answer_words: int) -> None:
    _check_at_least(
        num_items=(num_items, 1), num_choices=(num_choices, 2), context_words=(context_words, 1),
        max_answer_words=(max_answer_words, MIN_SENTENCE_WORDS),
    )


def _sentence_variant_items(
    tokens: Sequence[str], kind: str, variant_groups: VariantGroups, num_items: int, num_choices: int, seed: int,
    context_words: int, max_answer_words: int,
) -> list[dict]:
    """Items whose query is the ``context_words`` words before a sentence of 4 to
    ``max_answer_words`` words and whose choices are that sentence and ``num_choices - 1``
    altered copies from one of its variant groups (picked at random among those big enough)."""
    candidates: dict[int, tuple[int, list[list[str]]]] = {}
    for start, end in _sentence_spans(tokens):
        if start < context_words or not MIN_SENTENCE_WORDS <= end - start <= max_answer_words:
            continue
        groups = [group for group in variant_groups(tokens[start:end]) if len(group) >= num_choices - 1]
        if groups:
            candidates[start] = (end, groups)

    rng = random.Random(seed)
    # Starts more than context + longest sentence apart: no query holds another item's sentence.
    chosen = _spread(sorted(candidates), context_words + max_answer_words, num_items, rng)
    if len(chosen) < num_items:
        hint = f"{len(tokens)} words, context_words={context_words}, max_answer_words={max_answer_words}"
        raise _too_short(kind, num_items, len(chosen), hint)

    items = []
    for start in chosen:
        end, groups = candidates[start]
        distractors = rng.sample(rng.choice(groups), num_choices - 1)
        query = " ".join(tokens[start - context_words : start])
        items.append(_shuffled_item(query, " ".join(tokens[start:end]), distractors, rng))
    return items


def _reorderings(size: int) -> VariantGroups:
    """Groups of a sentence: for every run of ``size`` adjacent, different plain words, the
    sentence with that run in each of its other orders (all distinct, as the words are)."""

    def groups(sentence: Sequence[str]) -> list[list[str]]:
        found = []
        for i in range(len(sentence) - size + 1):
            run = tuple(sentence[i : i + size])
            if len(set(run)) == size and all(_PLAIN_WORD.match(word) for word in run):
                before, after = sentence[:i], sentence[i + size :]
                found.append(
                    [" ".join([*before, *order, *after]) for order in itertools.permutations(run) if order != run]
                )
        return found

    return groups


def _frequency_runs(tokens: Sequence[str], size: int) -> VariantGroups:
    """Groups of a sentence for :func:`word_choice_items`: for every replaceable word and every
    run of ``size`` consecutive frequency ranks (among the text's lower-case words of its length)
    that holds it, the sentence with each other word of the run in its place."""
    by_length: dict[int, list[str]] = defaultdict(list)
    for word in _frequency_pools(tokens).get("lower", []):  # most frequent first
        by_length[len(word)].append(word)
    ranks = {word: rank for pool in by_length.values() for rank, word in enumerate(pool)}

    def groups(sentence: Sequence[str]) -> list[list[str]]:
        found = []
        for i, word in enumerate(sentence[1:], start=1):
            if len(word) < 3 or not _PLAIN_WORD.match(word):
                continue
            pool, rank = by_length[len(word)], ranks[word]
            # Only words that every placement of the run can hold: none of the most or least frequent.
            if not size - 1 <= rank <= len(pool) - size:
                continue
            for first in range(rank - size + 1, rank + 1):
                others = [pool[r] for r in range(first, first + size) if r != rank]
                found.append([" ".join([*sentence[:i], other, *sentence[i + 1 :]]) for other in others])
        return found

    return groups


def _window_size(num_choices: int) -> int:
    """The fewest words (at least 2) that have ``num_choices`` or more orders."""
    size = 2
    while math.factorial(size) < num_choices:
        size += 1
    return size


def word_order_items(
    text: str, num_items: int, num_choices: int, seed: int,
    context_words: int = DEFAULT_SENTENCE_CONTEXT_WORDS, max_answer_words: int = DEFAULT_SENTENCE_MAX_WORDS,
) -> list[dict]:
    """BLiMP-like items: after the ``context_words`` words before a sentence, pick the sentence
    as written among copies of it in which a run of adjacent words comes in another order.

    The run is the shortest with ``num_choices`` orders (2 words for 2 choices, a minimal pair
    as in BLiMP; 3 words for 3 to 6 choices), of different bare lower-case words (never a
    capitalised or punctuated token), so every choice has the same words, punctuation and
    length, and a byte-level BPE gives each choice the same tokens: only their order differs.
    The other orders are drawn at random among all of them, so the sentence as written is one
    order among exchangeable ones and a model that knows nothing scores chance. (Copies that
    each swap a different pair would not do: every copy would be one swap away from the answer,
    and a model that scores at random would pick the answer less often than chance.)
    """
    _check_sentence_options(num_items, num_choices, context_words, max_answer_words)
    reorderings = _reorderings(_window_size(num_choices))
    return _sentence_variant_items(
        words(text), "word-order", reorderings, num_items, num_choices, seed, context_words, max_answer_words
    )


def word_choice_items(
    text: str, num_items: int, num_choices: int, seed: int,
    context_words: int = DEFAULT_SENTENCE_CONTEXT_WORDS, max_answer_words: int = DEFAULT_SENTENCE_MAX_WORDS,
) -> list[dict]:
    """Items like :func:`word_order_items` whose altered copies replace one word of the sentence
    (the same place in every copy) by another word of the text.

    The replaced word is a bare lower-case word of at least 3 letters, not the sentence's first.
    Among the text's lower-case words of its length ranked by frequency, a run of
    ``num_choices`` consecutive ranks is placed at random around it, and the run's other words
    replace it. Every choice has the same length, and the answer is equally likely to be the
    most or least frequent word of its run, so a model that knows word frequencies and nothing
    else scores chance. Unlike ``cloze``, the words after the place count too: the item asks
    which word fits there, given both sides.
    """
    _check_sentence_options(num_items, num_choices, context_words, max_answer_words)
    tokens = words(text)
    return _sentence_variant_items(
        tokens, "word-choice", _frequency_runs(tokens, num_choices), num_items, num_choices, seed, context_words,
        max_answer_words,
    )


# Each kind's item builder and the options (keywords of the builder) that a task spec may set.
KIND_BUILDERS: dict[str, tuple[Callable[..., list[dict]], tuple[str, ...]]] = {
    "cloze": (cloze_items, ("context_words",)),
    "next_sentence": (next_sentence_items, ("context_sentences", "max_answer_words")),
    "word_order": (word_order_items, ("context_words", "max_answer_words")),
    "word_choice": (word_choice_items, ("context_words", "max_answer_words")),
}
KINDS = tuple(KIND_BUILDERS)
