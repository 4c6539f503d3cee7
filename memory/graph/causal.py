"""Causal links from discourse cues, offline (MAGMA 3.4: the causal graph the slow path infers).

A turn that says "because", "so", "that's why", "made me", "after ..., I
decided" states a cause and an effect. When both halves are in the turn, the
turn already reads as an explanation and no edge is needed. When one half
points elsewhere, the edge joins the turn to that other record:
- an anaphoric half ("I painted *it* because it was calming", "*That's* why I
  moved") opening a turn refers to a turn just before in the same session: the
  nearest of the last few turns sharing an entity with this one, else the turn
  right before (later in a turn, "that" is what the turn's own sentences said,
  and after a session break nothing was just said);
- a half naming specific things ("counseling and support groups improved my
  life, so I started ...") refers to the earlier turn, in any session, that
  shares one of those entities and is closest in meaning to the half.
The edge goes from the cause's record to the effect's record; its weight is
the similarity that chose the other record (a fixed weight for the turn just
before).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from pydantic import BaseModel, Field
from strata.memory.facts import without_small_talk
from strata.memory.graph.entities import find_mentions
from strata.memory.records import Link, LinkType, Record
from strata.memory.speakers import listener_of

# (pattern, the side of the cue the cause is on). A cue's left part is the text before it.
_CUES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(?:because|'cause|cause of|due to|thanks to)\b", re.I), "right"),
    (re.compile(r"\b(?:that's why|that is why|which is why|this is why|so that's why|therefore|as a result)\b", re.I),
     "left"),
    (re.compile(r"(?:^|[,.;!-]\s*)so,?\s+(?=i\b|we\b|now\b|i'm\b|i've\b)", re.I), "left"),
    (re.compile(r"\b(?:made me|makes me|inspired me|motivated me|pushed me|led me|got me)\b", re.I), "left"),
    (re.compile(r"\b(?:after|since)\b[^.!?]{3,80}?,\s*(?:i|we)\s+(?:decided|started|began|chose)\b", re.I), "left"),
)
_ANAPHORA = re.compile(r"^\W*(?:\w+\W+){0,3}?(?:it|that|this|those|these|them|him|her|he|she|they)\b", re.I)
RECENT_WINDOW = 4  # an anaphoric half refers to one of this many turns before
ANAPHORA_WEIGHT = 0.6  # the weight of a link to a turn found by position rather than by meaning
# Least similarity (MiniLM cosine, half-sentence to turn) for a cause or effect found in an earlier session.
MIN_SIMILARITY = 0.45


class Cue(BaseModel):
    """A cause/effect split of one turn's sentence."""

    cause: str
    effect: str
    marker: str
    cause_first: bool = Field(..., description="The cause is the sentence's first half (before the cue word).")
    opens: bool = Field(True, description="The sentence is the text's first: nothing said before it in the text.")


class CausalLink(BaseModel):
    cause: str
    effect: str
    weight: float = Field(..., gt=0, le=1)
    reason: str


def cues(text: str) -> list[Cue]:
    """Every cause/effect split the cue words give in a text (one per sentence at most)."""
    found: list[Cue] = []
    for number, sentence in enumerate(re.split(r"(?<=[.!?])\s+", text.strip())):
        for pattern, cause_side in _CUES:
            match = pattern.search(sentence)
            if not match:
                continue
            left, right = sentence[: match.start()].strip(" ,;-"), sentence[match.end():].strip(" ,;-.!?")
            if cause_side == "right":
                cause, effect = right, left
            else:
                cause, effect = left, right
            if pattern is _CUES[-1][0]:  # "after X, I decided Y": the cause sits inside the match
                cause, effect = match.group(0), right
            marker = match.group(0).strip()
            found.append(Cue(cause=cause, effect=effect, marker=marker, cause_first=cause_side == "left",
                             opens=number == 0))
            break
    return found


def _anaphoric(half: str) -> bool:
    return not half.strip() or (bool(_ANAPHORA.match(half)) and len(half.split()) <= 8)


def infer(
    record: Record, earlier: Sequence[Record], similarity: Callable[[str, Sequence[Record]], list[float]],
    known: Sequence[str] = (),
) -> list[CausalLink]:
    """Causal links between `record` and the earlier records its cue halves point to.

    `earlier` is the turns before it, oldest first; `similarity(text, records)` gives the cosine of
    a text to each record (the caller owns the embedder).
    """
    links: list[CausalLink] = []
    own = {m.key for m in find_mentions(record.text, record.speaker, known=known)}
    # the turn as its context shows it, its small talk left out: "Thanks, Caroline! I painted it because ..."
    # opens with the cue sentence
    for cue in cues(without_small_talk(record.text, record.speaker, listener_of(record.speaker, tuple(known)))):
        # the sentence's first half is the one that points back ("I painted *it* because ...",
        # "*That's* why I ..."); the second half is what the turn itself adds
        halves = [(cue.cause, "cause"), (cue.effect, "effect")]
        for half, role in halves if cue.cause_first else halves[::-1]:
            if _anaphoric(half) and not cue.opens:
                continue  # "It made me reflect", after the turn's own account: the turn explains itself
            other, weight = _referent(half, own, record, earlier, similarity, known)
            if other is None:
                continue
            cause, effect = (other.id, record.id) if role == "cause" else (record.id, other.id)
            links.append(CausalLink(cause=cause, effect=effect, weight=weight,
                                    reason=f"'{cue.marker}' in {record.dialogue_id}"))
            break  # one half explained by another record is enough: the other half is the turn itself
    return links


def _referent(
    half: str, own: set[str], record: Record, earlier: Sequence[Record],
    similarity: Callable[[str, Sequence[Record]], list[float]], known: Sequence[str],
) -> tuple[Record | None, float]:
    if not earlier:
        return None, 0.0
    if _anaphoric(half):
        recent = [r for r in earlier[-RECENT_WINDOW:] if r.session == record.session]
        if not recent:
            return None, 0.0  # a session's first turn: what was said just before is days old
        for candidate in reversed(recent):
            theirs = {m.key for m in find_mentions(_with_caption(candidate), candidate.speaker, known=known)}
            if own & theirs:
                return candidate, ANAPHORA_WEIGHT
        return recent[-1], ANAPHORA_WEIGHT
    keys = {m.key for m in find_mentions(half, record.speaker, known=known) if m.type != "person"}
    if not keys:
        return None, 0.0
    sharing = [r for r in earlier if keys & set(r.keywords)]
    if not sharing:
        return None, 0.0
    scores = similarity(half, sharing)
    best = max(range(len(sharing)), key=lambda i: scores[i])
    if scores[best] < MIN_SIMILARITY:
        return None, 0.0
    return sharing[best], round(min(1.0, scores[best]), 4)


def _with_caption(record: Record) -> str:
    return f"{record.text} {record.image_caption}".strip()


def causal_links(namespace: str, found: Sequence[CausalLink]) -> list[Link]:
    return [
        Link(namespace=namespace, src=c.cause, dst=c.effect, type=LinkType.CAUSAL, weight=c.weight)
        for c in found
        if c.cause != c.effect
    ]
