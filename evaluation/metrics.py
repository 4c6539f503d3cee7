"""Scores for the LoCoMo harness: answer overlap, evidence coverage, abstention.

Pure functions, so a score can be checked by hand. F1 and BLEU-1 follow the
usual SQuAD/LoCoMo answer normalisation, so "The cat." and "cat" agree; the
evidence measure is the design's "evidence recall" (strict: the raw turn or a
fact derived from it reached the context the answer was written from).
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict
from strata.memory.entities import plain_words
from strata.memory.lemmas import forms, text_forms
from strata.memory.records import Kind, Record

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# Kinds whose presence in the context shows the gold turn itself under the strict rule.
_STRICT_KINDS: frozenset[str] = frozenset({"raw", "fact"})
# An answer's verdict words, which no context is expected to hold ("Yes, he is" looks for "he is" only).
_VERDICT_WORDS: frozenset[str] = frozenset({"yes", "no", "likely", "unlikely", "probably"})


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation and the articles a/an/the, collapse whitespace (SQuAD)."""
    lowered = text.lower()
    no_punctuation = "".join(ch for ch in lowered if ch not in _PUNCTUATION)
    no_articles = _ARTICLES.sub(" ", no_punctuation)
    return " ".join(no_articles.split())


def _tokens(text: str) -> list[str]:
    return normalize_answer(text).split()


def f1_score(prediction: str, gold: str) -> float:
    """Token-level F1 between normalised answers; 1.0 when both normalise to nothing."""
    predicted, expected = _tokens(prediction), _tokens(gold)
    if not predicted or not expected:
        return float(predicted == expected)
    same = sum((Counter(predicted) & Counter(expected)).values())
    if same == 0:
        return 0.0
    precision = same / len(predicted)
    recall = same / len(expected)
    return 2 * precision * recall / (precision + recall)


def bleu1(prediction: str, gold: str) -> float:
    """Unigram BLEU: clipped precision times the brevity penalty exp(1 - r/c) when c < r.

    c is the candidate's token count and r the reference's, both after
    normalisation; an empty candidate scores 0.
    """
    candidate, reference = _tokens(prediction), _tokens(gold)
    if not candidate:
        return 0.0
    reference_counts = Counter(reference)
    clipped = sum(min(count, reference_counts[token]) for token, count in Counter(candidate).items())
    precision = clipped / len(candidate)
    c, r = len(candidate), len(reference)
    penalty = 1.0 if c >= r else math.exp(1 - r / c)
    return precision * penalty


class ContextItem(NamedTuple):
    """What the evidence measure needs to know about one item of an answer's context."""

    kind: Kind
    dialogue_id: str
    source_ids: Sequence[str]

    @classmethod
    def from_record(cls, record: Record) -> ContextItem:
        return cls(record.kind, record.dialogue_id, tuple(record.source_ids))


class EvidenceCoverage(BaseModel):
    """How much of one question's gold evidence reached the context.

    `recall` is strict (a raw turn, or a fact citing the turn); `lenient` also
    credits episodes and persona traits that cite it; `full` is True when the
    strict rule covers every gold turn.
    """

    model_config = ConfigDict(frozen=True)

    gold: tuple[str, ...]
    reached: tuple[str, ...]
    reached_lenient: tuple[str, ...]
    recall: float
    lenient: float
    full: bool


def _covered(item: ContextItem) -> set[str]:
    return {item.dialogue_id, *item.source_ids} - {""}


def evidence_recall(
    gold_ids: Iterable[str], context_items: Iterable[ContextItem | tuple[str, str, Sequence[str]]]
) -> EvidenceCoverage | None:
    """Coverage of the gold turns by the context; None when the question has no gold evidence.

    A question without gold evidence cannot be scored, so it returns None and
    stays out of averages rather than counting as 0 or 1.
    """
    gold = tuple(dict.fromkeys(g.strip() for g in gold_ids if g and g.strip()))
    if not gold:
        return None
    strict: set[str] = set()
    lenient: set[str] = set()
    for raw_item in context_items:
        item = ContextItem(*raw_item)
        covered = _covered(item)
        lenient |= covered
        if item.kind in _STRICT_KINDS:
            strict |= covered
    reached = tuple(g for g in gold if g in strict)
    reached_lenient = tuple(g for g in gold if g in lenient)
    return EvidenceCoverage(
        gold=gold,
        reached=reached,
        reached_lenient=reached_lenient,
        recall=len(reached) / len(gold),
        lenient=len(reached_lenient) / len(gold),
        full=len(reached) == len(gold),
    )


def answer_words_found(answer: str, context_text: str) -> float | None:
    """Share of the gold answer's content words that appear in the context (either word's forms may meet).

    A guard beside evidence recall, not an answer score: recall credits a turn by
    its id, so a context that shows a turn cut down (one sentence, one fact) keeps
    its recall while the words that answer may be gone. Comparing this share
    between two rankings at the same budget shows such a loss. None when the
    answer has no content words ("Yes", "No"). A date is found when the context
    writes it as the answer does ("7 May 2023", as the date headings do); a
    relative one ("yesterday" under its heading) is not.
    """
    wanted = [w for w in dict.fromkeys(plain_words(answer)) if w not in _VERDICT_WORDS]
    if not wanted:
        return None
    present = text_forms(context_text)
    return sum(1 for w in wanted if forms(w) & present) / len(wanted)


class CoverageSummary(BaseModel):
    """Evidence coverage averaged over the questions that have gold evidence."""

    questions: int
    recall: float | None
    lenient: float | None
    full: float | None


def summarize_coverage(coverages: Iterable[EvidenceCoverage | None]) -> CoverageSummary:
    """Average the per-question coverages, leaving out questions without gold evidence."""
    scored = [c for c in coverages if c is not None]
    if not scored:
        return CoverageSummary(questions=0, recall=None, lenient=None, full=None)
    n = len(scored)
    return CoverageSummary(
        questions=n,
        recall=sum(c.recall for c in scored) / n,
        lenient=sum(c.lenient for c in scored) / n,
        full=sum(c.full for c in scored) / n,
    )


_ABSTENTION = re.compile(
    r"""
    \bnot\s+(?:\w+\s+)?in\s+(?:my\s+|the\s+)?(?:memory|memories|conversations?|context|records?|notes)\b
    | \b(?:does|do|did|has|have|had)\s*(?:not|n't)\s+(?:\w+\s+)?(?:mention|state|specify|contain|include
        |discuss|indicate|reveal|provide|describe|record)
    | \bnot\s+(?:explicitly\s+|directly\s+)?(?:mentioned|stated|specified|recorded|discussed|provided|known
        |available|given|said|indicated|revealed)\b
    | \bno\s+(?:\w+\s+)?(?:information|mention|record|records|evidence|details?|data|indication)\b
    | \b(?:i|we)\s+(?:do\s+not|don't|cannot|can't|could\s+not|couldn't)\s+(?:know|tell|say|find|recall|determine)\b
    | \b(?:cannot|can't|could\s+not|couldn't|unable\s+to)\s+(?:be\s+)?(?:find|found|determine|determined|answer
        |answered|tell|say|infer|inferred)\b
    | \bnothing\s+(?:is\s+)?(?:known|mentioned|said|recorded)\b
    | \bnothing\s+in\s+(?:the\s+|my\s+)?(?:memory|memories|conversations?|context|records?)\b
    | \bunanswerable\b
    | ^\s*(?:unknown|n/?a|not\s+sure)\s*[.!]?\s*$
    """,
    re.IGNORECASE | re.VERBOSE,
)


def is_abstention(answer: str) -> bool:
    """True when the answer declines because memory lacks it (LoCoMo category 5's right behaviour)."""
    text = answer.replace("\u2019", "'").replace("\u2018", "'")
    return bool(_ABSTENTION.search(text))
