"""Shapes of the chat model's replies (validated by `agents.llm.parse_json`), and how they are read.

The memory graph's replies follow the JSON contracts of prompts/graph.py; the
roles' reply models (agents/) are built from the same parts. Fields a model
tends to omit have defaults, and a reply that does not fit is refused (the
offline policy then stands in). What a model may get wrong without spoiling
the rest is read leniently, as the Judge's verdict is: a null or a number in an
advisory text is read as text (`Advisory`), a weight outside 0..1 is clamped
(`Weight`), one id is a list of one (`Ids`), and a bad item of a list is dropped
rather than the whole reply (`SOME_USABLE`, `ANY_USABLE`). What the model writes
is bounded too: a list keeps its first items and a text is cut at a word, under
the limits below. Both are noted on the reply (`Reply.cuts`) for the role's trace.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
    model_validator,
)
from strata.memory.graph.entities import ENTITY_TYPES

# Limits on what one reply may write. A model that loops or pads can return megabytes, and each item costs
# a record, an embedding and a catalogue entry; a real reply stays far below them.
MAX_ITEMS = 20  # items of one list (a turn's facts, a note's entities, links, edits): a turn gives a handful
MAX_NAME_CHARS = 100  # an entity's name, a keyword, a tag or an id: a few words
MAX_LINE_CHARS = 1_000  # a fact, a title, a note's context, an answer, a query, a reason: one statement
MAX_STORY_CHARS = 8_000  # an episode, a summary or a record rewritten whole: a few paragraphs
UNREADABLE_WEIGHT = 0.5  # a weight written as no number at all: the middle, each weight's default

# what was cut or dropped while a reply is validated (each `Reply` collects its own and its items')
_CUTS: ContextVar[list[str] | None] = ContextVar("strata_reply_cuts", default=None)


def noted(what: str) -> None:
    """Say that part of the reply being validated was cut or dropped (the role puts it in its trace)."""
    cuts = _CUTS.get()
    if cuts is not None:
        cuts.append(what)


@contextmanager
def collected() -> Iterator[list[str]]:
    """What every reply validated inside the block cut or dropped: for a role that asks several prompts."""
    cuts: list[str] = []
    token = _CUTS.set(cuts)
    try:
        yield cuts
    finally:
        _CUTS.reset(token)


class Reply(BaseModel):
    """A model's reply: its `cuts` say what the limits cut and what bad items were dropped."""

    _cuts: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _collect_cuts(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        outer = _CUTS.get()
        mine: list[str] = []
        token = _CUTS.set(mine)
        try:
            reply = handler(data)
        finally:
            _CUTS.reset(token)
        reply._cuts = list(dict.fromkeys(mine))
        if outer is not None:  # an item of a reply, or a role collecting: only a reply that validated counts
            outer.extend(reply._cuts)
        return reply

    @property
    def cuts(self) -> list[str]:
        return list(self._cuts)


# --- lenient reading ----------------------------------------------------------------------------------
def advisory(value: object) -> object:
    """An advisory text: null is empty, a number its digits, a list or an object nothing (it only informs)."""
    if value is None or isinstance(value, list | dict):
        return ""
    return str(value) if isinstance(value, int | float) else value


def weight(value: object) -> float:
    """A weight in 0..1: read "0.8", "80%" and 80 (a percentage without its sign), clamp the rest, and take
    `UNREADABLE_WEIGHT` for anything else (null, NaN, a word). The same reading as the Judge's confidence."""
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        match = re.search(r"-?\d+(?:\.\d+)?", value)
        if match:
            number = float(match.group()) / (100.0 if "%" in value else 1.0)
    if number is None or number != number:  # NaN
        return UNREADABLE_WEIGHT
    if 10.0 < number <= 100.0:
        number /= 100.0
    return min(1.0, max(0.0, number))


def ids(value: object) -> list[str]:
    """Ids as a list: one id as a string is a list of one, null none, a number its digits; other items go."""
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, list):
        return [str(v) for v in value if isinstance(v, str | int) and not isinstance(v, bool)]
    return []


def _usable_items(value: object, handler: ValidatorFunctionWrapHandler, *, some: bool) -> object:
    """A list whose bad items are dropped (and noted), not the whole reply. What is not a list is refused as
    before; so is a list with no usable item when `some` is asked (it was all the reply had to say)."""
    cuts = _CUTS.get()
    mark = len(cuts) if cuts is not None else 0
    try:
        return handler(value)
    except ValidationError:
        if not isinstance(value, list):
            raise
        if cuts is not None:
            del cuts[mark:]  # what the failed attempt's items noted is noted again below
        kept: list[Any] = []
        for item in value:
            try:
                kept.extend(handler([item]))
            except ValidationError:
                continue
        if some and not kept:
            raise
    noted(f"{len(value) - len(kept)} unusable item(s) of {len(value)} dropped")
    return kept


SOME_USABLE = WrapValidator(lambda v, h: _usable_items(v, h, some=True))  # the reply's content: none usable refuses
ANY_USABLE = WrapValidator(lambda v, h: _usable_items(v, h, some=False))  # beside the content: all may go


def at_most(limit: int) -> AfterValidator:
    """Keep a list's first `limit` items (a model lists the most important first)."""
    def cut(items: list[Any], info: ValidationInfo) -> list[Any]:
        if len(items) > limit:
            noted(f"{info.field_name}: kept the first {limit} of {len(items)}")
            return items[:limit]
        return items
    return AfterValidator(cut)


def shortened(text: str, limit: int) -> str:
    """The text cut to at most `limit` characters, at the last space before it (mid-word when it has none)."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip()


def clipped(limit: int) -> AfterValidator:
    """Cut a text longer than `limit` characters (`shortened`), and say so."""
    def cut(text: str, info: ValidationInfo) -> str:
        if len(text) > limit:
            noted(f"{info.field_name}: cut from {len(text):,} to {limit:,} characters")
        return shortened(text, limit)
    return AfterValidator(cut)


# Text a record or an answer is made of: spaces around it go, and nothing but spaces is refused ("   " is no
# fact, title, summary or answer; the offline policy stands in).
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Line = Annotated[Text, clipped(MAX_LINE_CHARS)]  # one statement: a fact, a title, an answer, a query
Story = Annotated[Text, clipped(MAX_STORY_CHARS)]  # an episode or a summary
Name = Annotated[str, BeforeValidator(advisory), clipped(MAX_NAME_CHARS)]  # a keyword, a tag, a name's part of a slot
Advisory = Annotated[str, BeforeValidator(advisory), clipped(MAX_LINE_CHARS)]  # informs, decides nothing
Weight = Annotated[float, BeforeValidator(weight)]
Ids = Annotated[list[str], BeforeValidator(ids)]  # kept only where they name what was shown
Names = Annotated[list[Name], ANY_USABLE, at_most(MAX_ITEMS)]


class ModelEntity(Reply):
    name: Annotated[str, Field(min_length=1), clipped(MAX_NAME_CHARS)]
    type: str = "other"

    @field_validator("type", mode="before")
    @classmethod
    def _known_type(cls, value: object) -> object:
        text = str(value or "other").strip().lower()
        text = {"organization": "organisation", "place/location": "place", "location": "place"}.get(text, text)
        return text if text in ENTITY_TYPES else "other"


class ModelLink(Reply):
    id: str = Field(..., min_length=1)
    strength: Weight = 0.5


class ModelEvolution(Reply):
    id: str = Field(..., min_length=1)
    tags: Names = Field(default_factory=list)
    context: Advisory = ""


class ModelNote(Reply):
    """A-MEM's note, links and evolution for one turn."""

    entities: Annotated[list[ModelEntity], ANY_USABLE, at_most(MAX_ITEMS)] = Field(default_factory=list)
    keywords: Names = Field(default_factory=list)
    tags: Names = Field(default_factory=list)
    context: Annotated[str, Field(min_length=1), clipped(MAX_LINE_CHARS)]
    links: Annotated[list[ModelLink], ANY_USABLE, at_most(MAX_ITEMS)] = Field(default_factory=list)
    evolve: Annotated[list[ModelEvolution], ANY_USABLE, at_most(MAX_ITEMS)] = Field(default_factory=list)


class ModelCausalLink(Reply):
    cause: str = Field(..., min_length=1)
    effect: str = Field(..., min_length=1)
    confidence: Weight = 0.5
    reason: Advisory = ""


class ModelCausal(Reply):
    """MAGMA's slow-path inference over one neighbourhood.

    `links` is required: a reply without it (a bare list, `"Links"`) was not read, and taking it as "no
    causes" would drop the cue rule's links; refused, the cue rule stands in. An empty list is the answer."""

    links: Annotated[list[ModelCausalLink], SOME_USABLE, at_most(MAX_ITEMS)]


class ModelSummary(Reply):
    """AdaMem's merge prompt output for one topic or persona group."""

    title: Line
    content: Story
