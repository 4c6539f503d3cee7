"""Offline episode segmentation and narration.

AMA closes an episode on a topic shift, an explicit transition, or saturation,
and prefers splitting when unsure; we detect the shift by the cosine similarity
between a turn and the running segment's centroid (MiniLM vectors), close on a
session change or after `max_turns`, and narrate the segment from its facts,
which already carry names and absolute dates.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime

import numpy as np
from pydantic import BaseModel, Field

TRANSITION = re.compile(
    r"^\s*(by the way|btw|anyway|anyways|on another note|speaking of|changing the subject|oh,? also|so,? what about)\b",
    re.IGNORECASE,
)
SHIFT_SIMILARITY = 0.12  # below this a turn is off the segment's topic
MIN_TURNS_BEFORE_SHIFT = 4


class OpenSegment(BaseModel):
    """The episode being written: its turns so far (persisted in the ledger)."""

    session: str = ""
    turn_ids: list[str] = Field(default_factory=list)
    speakers: list[str] = Field(default_factory=list)
    facts: list[str] = Field(default_factory=list)
    start: datetime | None = None
    end: datetime | None = None


class Boundary(BaseModel):
    """Whether the new turn starts a new episode, and why (AMA's trigger output)."""

    split: bool
    reason: str


def detect_boundary(
    segment: OpenSegment, session: str, text: str, vector: np.ndarray, member_vectors: np.ndarray, max_turns: int
) -> Boundary:
    """Decide if the incoming turn closes the open segment before joining a new one."""
    if not segment.turn_ids:
        return Boundary(split=False, reason="first turn of an episode")
    if session != segment.session:
        return Boundary(split=True, reason="session ended")
    if len(segment.turn_ids) >= max_turns:
        return Boundary(split=True, reason=f"saturation: {max_turns} turns")
    if len(segment.turn_ids) >= 2 and TRANSITION.search(text):
        return Boundary(split=True, reason="explicit transition")
    if len(segment.turn_ids) >= MIN_TURNS_BEFORE_SHIFT and member_vectors.size:
        centroid = member_vectors.mean(axis=0)
        norm = float(np.linalg.norm(centroid)) or 1.0
        similarity = float(vector @ centroid) / norm
        if similarity < SHIFT_SIMILARITY:
            return Boundary(split=True, reason=f"topic shift (similarity {similarity:.2f})")
    return Boundary(split=False, reason="same topic")


def title_of(facts: list[str], stopwords: frozenset[str]) -> str:
    """A few salient words of the segment, most frequent first."""
    words = Counter(
        word.lower()
        for fact in facts
        for word in re.findall(r"[A-Za-z][A-Za-z'-]{3,}", fact)
        if word.lower() not in stopwords
    )
    return ", ".join(word for word, _ in words.most_common(4)) or "conversation"


def narrate(segment: OpenSegment, title: str, max_facts: int = 14) -> str:
    """A third-person narrative: when, who, what (from the segment's resolved facts)."""
    when = segment.start.strftime("%-d %B %Y") if segment.start else "an unknown date"
    people = " and ".join(dict.fromkeys(segment.speakers)) or "the participants"
    body = " ".join(_sentence(f) for f in segment.facts[:max_facts])
    return f"On {when}, {people} talked about {title}. {body}".strip()


def _sentence(fact: str) -> str:
    fact = fact.strip()
    return fact if fact.endswith((".", "!", "?")) else fact + "."
