"""A-MEM notes and semantic link decisions (A-MEM 3.1 note construction, 3.2 link generation).

Every raw turn becomes a note: keywords (its entity keys), tags (themes it shares
with other notes, grown by memory evolution) and a one-line context. On insert,
its nearest earlier notes by embedding are the candidates, and a link decision
keeps some of them as weighted `semantic` links. Offline the decision is a rule:
close enough in meaning *and* sharing at least one keyword, so two turns that
merely sound alike ("That's so cool!") are not linked, and two turns about the
same thing in different words still are when they name one shared thing. The
weight is the cosine similarity. With a chat model, the model decides which
candidates to link and how strongly.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field
from strata.memory.entities import stem
from strata.memory.graph.entities import Mention
from strata.memory.records import Link, LinkType, Record

# The nearest earlier notes considered for links (A-MEM's top-k).
CANDIDATES = 5
# Least cosine similarity (MiniLM) for an offline semantic link; below it two turns
# share a word but not a subject.
MIN_SIMILARITY = 0.35
MAX_KEYWORDS = 8


class Note(BaseModel):
    """A record's note attributes (stored on the record: keywords, tags, context)."""

    keywords: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    context: str = ""


class Candidate(BaseModel):
    """An earlier record near the new one, with their cosine similarity."""

    record: Record
    similarity: float


class LinkDecision(BaseModel):
    """One semantic link to write: the earlier record, the weight, and the keywords the pair shares."""

    target: str
    weight: float = Field(..., gt=0, le=1)
    shared: list[str] = Field(default_factory=list)


def note_of(record: Record, mentions: Sequence[Mention]) -> Note:
    """The note of a new record, offline: its entity keys as keywords, a who/when/what context line."""
    people = {m.key for m in mentions if m.type == "person"}
    words = [m.key for m in mentions if m.key not in people][:MAX_KEYWORDS]
    return Note(keywords=words, tags=[], context=context_line(record, words))


def context_line(record: Record, words: Sequence[str]) -> str:
    when = said.strftime("%-d %B %Y") if (said := record.local_time()) else "an unknown date"
    about = ", ".join(words[:4]) or "small talk"
    return f"{record.speaker or 'someone'} on {when}, about {about}"


def shared_keywords(a: Sequence[str], b: Sequence[str]) -> list[str]:
    """Keywords two notes share, compared by stem of each word ("kids" meets "kid", "support group" meets itself)."""
    def stems(word: str) -> str:
        return " ".join(stem(w) for w in word.split())

    theirs = {stems(w) for w in b}
    return [w for w in a if stems(w) in theirs]


def decide_offline(note: Note, candidates: Sequence[Candidate]) -> list[LinkDecision]:
    """Similar enough and sharing a keyword: a semantic link weighted by the similarity."""
    decisions: list[LinkDecision] = []
    for candidate in candidates:
        if candidate.similarity < MIN_SIMILARITY:
            continue
        shared = shared_keywords(note.keywords, candidate.record.keywords)
        if shared:
            decisions.append(
                LinkDecision(target=candidate.record.id, weight=round(min(1.0, candidate.similarity), 4), shared=shared)
            )
    return decisions


def semantic_links(namespace: str, source: str, decisions: Sequence[LinkDecision]) -> list[Link]:
    return [
        Link(namespace=namespace, src=source, dst=d.target, type=LinkType.SEMANTIC, weight=d.weight)
        for d in decisions
        if d.target != source
    ]
