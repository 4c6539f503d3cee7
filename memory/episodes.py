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
from strata.memory.moments import MaybeUtcTime, local

TRANSITION = re.compile(
    r"^\s*(by the way|btw|anyway|anyways|on another note|speaking of|changing the subject|oh,? also|so,? what about)\b",
    re.IGNORECASE,
)
SHIFT_SIMILARITY = 0.12  # below this a turn is off the segment's topic
MIN_TURNS_BEFORE_SHIFT = 4


OPEN_SEGMENT = "open_episode"  # the ledger state key the episode being written is kept under
NO_SESSION = "0"  # the session of turns that name none (`Turn.session_label`): a chat, told apart by its days


class OpenSegment(BaseModel):
    """The episode being written: its turns so far (persisted in the ledger)."""

    session: str = ""
    turn_ids: list[str] = Field(default_factory=list)
    speakers: list[str] = Field(default_factory=list)
    facts: list[str] = Field(default_factory=list)
    start: MaybeUtcTime = None
    end: MaybeUtcTime = None
    utc_offset: int | None = None  # the clock of its first turn (`Turn.utc_offset`): the day it is told under


class Boundary(BaseModel):
    """Whether the new turn starts a new episode, and why (AMA's trigger output)."""

    split: bool
    reason: str
    settled: bool = False  # decided by the turns' sessions, times or count: a model's topic judgement cannot undo it


def detect_boundary(
    segment: OpenSegment, session: str, text: str, vector: np.ndarray, member_vectors: np.ndarray, max_turns: int,
    time: datetime | None = None, utc_offset: int | None = None,
) -> Boundary:
    """Decide if the incoming turn closes the open segment before joining a new one."""
    if not segment.turn_ids:
        return Boundary(split=False, reason="first turn of an episode")
    if session != segment.session:
        return Boundary(split=True, reason="session ended", settled=True)
    if time is not None and segment.end is not None and time < segment.end:
        return Boundary(split=True, reason="said before the episode's last turn (older talk added later)", settled=True)
    if session == NO_SESSION and _another_day(time, utc_offset, segment):
        return Boundary(split=True, reason="a new day (the turns name no session)", settled=True)
    if len(segment.turn_ids) >= max_turns:
        return Boundary(split=True, reason=f"saturation: {max_turns} turns", settled=True)
    if len(segment.turn_ids) >= 2 and TRANSITION.search(text):
        return Boundary(split=True, reason="explicit transition")
    if len(segment.turn_ids) >= MIN_TURNS_BEFORE_SHIFT and member_vectors.size:
        centroid = member_vectors.mean(axis=0)
        norm = float(np.linalg.norm(centroid)) or 1.0
        similarity = float(vector @ centroid) / norm
        if similarity < SHIFT_SIMILARITY:
            return Boundary(split=True, reason=f"topic shift (similarity {similarity:.2f})")
    return Boundary(split=False, reason="same topic")


def _another_day(time: datetime | None, utc_offset: int | None, segment: OpenSegment) -> bool:
    """Whether a turn was said on another day than the segment's last turn, on the speaker's clock."""
    said, last = local(time, utc_offset), local(segment.end, segment.utc_offset)
    return said is not None and last is not None and said.date() != last.date()


def photo_line(speaker: str, caption: str) -> str:
    """What an episode tells of a turn that gave no fact but a photo."""
    return f"{speaker} shared a photo of {caption}"


def title_of(facts: list[str], people: list[str] | None = None) -> str:
    """The segment's main entities (memory/graph/entities.py), most mentioned first; people left out."""
    from strata.memory.graph.entities import find_mentions

    known = [p.lower() for p in people or []]
    counts = Counter(
        m.label for fact in facts for m in find_mentions(fact, known=people or []) if m.key not in known
    )
    return ", ".join(label for label, _ in counts.most_common(4)) or "small talk"


def narrate(segment: OpenSegment, title: str, max_facts: int = 14) -> str:
    """A third-person narrative of who did what and when, in order, from the segment's resolved facts.

    The facts already name their subject and carry absolute dates (memory/facts.py), so the
    narrative is the session's date and people, then the facts in the order they were said.
    """
    start = local(segment.start, segment.utc_offset)
    when = start.strftime("%-d %B %Y") if start else "an undated session"
    people = " and ".join(dict.fromkeys(segment.speakers)) or "the participants"
    facts = list(dict.fromkeys(as_sentence(f) for f in segment.facts))
    if not facts:
        return f"On {when}, {people} exchanged a few words ({title}); nothing was stated as fact."
    shown = " ".join(facts[:max_facts])
    more = f" ({len(facts) - max_facts} more facts in the turns.)" if len(facts) > max_facts else ""
    return f"On {when}, with {people}: {shown}{more}"


SENTENCE_ENDS = (".", "!", "?", "。", "！", "？", "؟")


def as_sentence(text: str) -> str:
    """A fact told in a narrative: with its own end mark, or a full stop (not one after "。")."""
    text = text.strip()
    return text if text.endswith(SENTENCE_ENDS) else text + "."
