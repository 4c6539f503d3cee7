"""The shapes of everything the memory stores, validated at the boundary.

One pydantic model per store in the design's table: raw turns, facts, episodes,
persona traits, links and the refresher's history. Chroma keeps the text and the
embedding; these models say which metadata travels with each record.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from functools import lru_cache
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from strata.memory.errors import unstorable
from strata.memory.ledger_sql import LARGEST_INTEGER
from strata.memory.moments import (
    MAX_OFFSET_MINUTES,
    MaybeUtcTime,
    UtcTime,
    epoch_seconds,
    local,
    offset_of,
    utc_now,
)
from strata.memory.names import blank

Kind = Literal["raw", "fact", "episode", "persona", "summary"]
KINDS: tuple[Kind, ...] = ("raw", "fact", "episode", "persona", "summary")
OFFLINE = "offline"  # the policy a rule-made record or change is recorded under (else "model:<name>")


# A shared photo's caption usually opens with what it is ("a photo of ..."); said once, not twice.
CAPTION_LEAD = re.compile(
    r"^(?:(?:a|an|the)\s+)?(?:photo(?:graph|graphy)?|picture|pic|image|snapshot)s?\s+of\s+", re.IGNORECASE
)


def photo_subject(caption: str) -> str:
    """What a photo shows: its caption without the "a photo of" it opens with."""
    return CAPTION_LEAD.sub("", caption).strip()



class Status(StrEnum):
    """Lifecycle of a stored record: nothing is destroyed silently."""

    ACTIVE = "active"
    SUPERSEDED = "superseded"  # a newer statement replaced it: its text stays, what was said then
    DELETED = "deleted"  # a tombstone until purged on purpose


class Turn(BaseModel):
    """One incoming utterance: the unit the graph processes (AMA's u_t)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    speaker: str = Field("user", min_length=1, description="Who said it (a name, or 'user').")
    text: str = Field(..., description="What was said, verbatim.")
    time: MaybeUtcTime = Field(
        None, description="When it was said: ISO 8601 (any offset), epoch seconds or a LoCoMo stamp; kept as naive UTC."
    )
    dia_id: str | None = Field(None, description="Dialogue id such as 'D1:3'; generated when absent.")
    session: str | None = Field(None, description="Session label such as '1'; derived from dia_id when absent.")
    listener: str | None = Field(None, description="Who it was said to; resolves 'you'.")
    image_caption: str | None = Field(None, description="Caption of a photo shared with the turn.")
    utc_offset: int | None = Field(
        None, ge=-MAX_OFFSET_MINUTES, le=MAX_OFFSET_MINUTES,
        description="The speaker's clock, in minutes east of UTC (-360 for -06:00): read from the time's own offset "
        "when not given; give it with a UTC time ('...Z') to have days such as 'yesterday' read on that clock.",
    )

    @model_validator(mode="before")
    @classmethod
    def _offset_from_time(cls, data: object) -> object:
        """The offset the time was sent with, before the time is converted to UTC and the offset dropped."""
        if isinstance(data, dict) and data.get("utc_offset") is None and data.get("time") is not None:
            offset = offset_of(data["time"])
            if offset is not None:
                return {**data, "utc_offset": offset}
        return data

    def local_time(self) -> datetime | None:
        """When it was said on the speaker's clock: the time the day of 'yesterday' is counted from."""
        return local(self.time, self.utc_offset)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        """Words a reader can see: zero-width spaces or combining marks alone were stored as a turn of nothing."""
        if blank(value):
            raise ValueError("text is empty: give the turn some words")
        return value

    @field_validator("speaker", "text", "dia_id", "session", "listener", "image_caption")
    @classmethod
    def _storable(cls, value: str | None) -> str | None:
        """Refused before anything is written: a NUL made a PostgreSQL ledger fail half-way through a turn."""
        problem = unstorable(value) if value is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("speaker", "listener")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        """A name is one line: "Ann\nBob" split every one-line output that names the speaker."""
        if value is not None and len(value.splitlines()) > 1:
            raise ValueError("a name holds a line break: write it on one line")
        return value

    def session_label(self) -> str:
        """The session this turn belongs to, from `session` or the `D<s>:<t>` id."""
        if self.session:
            return self.session
        match = re.match(r"D(\d+):", self.dia_id or "")
        return match.group(1) if match else "0"


class Record(BaseModel):
    """Fields every stored memory shares (the metadata of the design's table)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    kind: Kind
    text: str = Field(..., description="The core text that is embedded and shown as evidence.")
    namespace: str
    dialogue_id: str = Field("", description="The dia_id of the turn (raw) or of its first source turn.")
    session: str = ""
    speaker: str = ""
    time: MaybeUtcTime = None
    source_ids: list[str] = Field(default_factory=list, description="dia_ids of the turns it came from.")
    status: Status = Status.ACTIVE
    version: int = Field(1, ge=1, le=LARGEST_INTEGER)  # a larger int Chroma keeps as a float no load reads back
    policy: str = Field("offline", description="Which policy wrote it: 'offline' or 'model:<name>'.")
    # kind-specific fields; empty where they do not apply
    subject: str = ""  # fact: who or what it is about
    attribute: str = ""  # fact: the property, for conflict detection
    value: str = ""  # fact: the property's value
    title: str = ""  # episode
    time_end: MaybeUtcTime = None  # episode: end of its span
    participant: str = ""  # persona
    aspect: str = ""  # persona
    image_caption: str = ""  # raw
    utc_offset: int | None = Field(  # minutes east of UTC of the clock `time` was said on (a turn's); None: UTC
        None, ge=-MAX_OFFSET_MINUTES, le=MAX_OFFSET_MINUTES)  # bounded as Turn's: an import is checked as ingest
    entities: list[str] = Field(default_factory=list)
    # A-MEM note attributes (memory/graph/notes.py); tags and context may evolve as later notes arrive
    keywords: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    context: str = ""

    def local_time(self) -> datetime | None:
        """`time` on the clock of the one who said it (`utc_offset`): the day the record is told under."""
        return local(self.time, self.utc_offset)

    def said_on(self, undated: str = "undated") -> str:
        """The day it was said, on the speaker's clock, as YYYY-MM-DD (what prompts and labels show)."""
        said = self.local_time()
        return said.strftime("%Y-%m-%d") if said else undated

    def label(self) -> str:
        """How the record is shown on its own (CLI, tools): id, date, kind and text."""
        when = self.said_on()
        return f"[{self.dialogue_id or self.id} | {when} | {self.kind}] {self._said()}"

    def line(self, text: str | None = None, until: datetime | None = None) -> str:
        """How the record appears in a role's context, under a heading with its date: the id, the kind
        when it is not a raw turn, and the text (the date is shared by the lines below one heading).
        `text` shows other words in the record's place (a turn without its small talk). A photo reads
        "[shared a photo of a bookcase]", not "[shared a photo: a photo of a bookcase]". A superseded
        record says it is past, and `until` when it stopped holding: it is shown for a time it held."""
        tag = "" if self.kind == "raw" else f" {self.kind}"
        if self.status == Status.SUPERSEDED:
            tag += f", until {until.day} {until:%B %Y}" if until is not None else ", no longer current"
        photo = f" [shared a photo of {photo_subject(self.image_caption)}]" if self.image_caption else ""
        return f"[{self.dialogue_id or self.id}{tag}] {self._said(text, photo)}"

    def _said(self, text: str | None = None, photo: str | None = None) -> str:
        who = f"{self.speaker}: " if self.kind == "raw" and self.speaker else ""
        if photo is None:
            photo = f" [shared a photo: {self.image_caption}]" if self.image_caption else ""
        return f"{who}{self.text if text is None else text}{photo}"


class LinkType(StrEnum):
    """Typed edges between records (MAGMA's four graphs, A-MEM's links).

    What each type means and how its weight reads (weights lie in (0, 1]; the
    writers are in memory/graph/ and agents/memory.py):
    - temporal: src turn precedes dst turn; weight 1.
    - entity: two records mention the same entity node; weight is the entity's
      specificity (rare entities near 1, common ones lower; memory/graph/links.py).
    - mentions: record -> entity node `entity:<key>` (not a record: `MemoryStore.get`
      skips it); the entity graph itself. Weight as for entity.
    - semantic: A-MEM link between a note and one of its nearest earlier notes;
      weight is the similarity (or the model's strength) of the pair.
    - causal: src is a cause or reason of dst (MAGMA's causal graph, written by the
      slow path, memory/graph/consolidation.py); weight is the cue's confidence.
    - derived_from: a fact, persona trait, episode or summary -> the raw turns it came from.
    - supersedes: newer record -> the one it replaced.
    - related: AMA's R_t, an earlier turn this one refers to.
    """

    TEMPORAL = "temporal"
    ENTITY = "entity"
    MENTIONS = "mentions"
    SEMANTIC = "semantic"
    DERIVED_FROM = "derived_from"
    SUPERSEDES = "supersedes"
    CAUSAL = "causal"
    RELATED = "related"  # AMA's R_t: an earlier turn this one refers to


class Link(BaseModel):
    """One typed, directed edge; stored in the ledger beside Chroma."""

    namespace: str
    src: str
    dst: str
    type: LinkType
    weight: float = Field(1.0, allow_inf_nan=False)  # a NaN would be stored as NULL, which the ledger refuses


class Action(StrEnum):
    """What the refresher (or a user) did to a record."""

    UPDATE = "update"
    DELETE = "delete"
    NOOP = "noop"
    UNDO = "undo"
    EVOLVE = "evolve"  # A-MEM memory evolution: a neighbour's tags/context refined by a newer note


ENTITY_NODE = "entity:"


def entity_node_id(key: str) -> str:
    """The id of an entity node in the link graph (`entity:pottery`, `entity:caroline's sister`)."""
    return f"{ENTITY_NODE}{key}"


class Change(BaseModel):
    """One entry of the refresher's history: enough to undo it."""

    id: int | None = None
    namespace: str
    record_id: str
    kind: Kind
    action: Action
    old_text: str = ""
    new_text: str = ""
    old_status: Status = Status.ACTIVE
    new_status: Status = Status.ACTIVE
    reason: str = ""
    policy: str = "offline"
    old_fields: dict[str, str] = Field(default_factory=dict, description="subject/attribute/value before the change.")
    new_fields: dict[str, str] = Field(default_factory=dict)
    time: UtcTime = Field(default_factory=utc_now)
    undone: bool = False
    undoes: int | None = None
    follows: int | None = Field(None, description="The change this one came with: undone together with it.")
    cause: str = Field("", description="The dia_id of the stored turn the Refresher made this change for ('' when "
                       "none): an erase of that turn takes the change back (memory/erasure.py).")


class ChangeNote(BaseModel):
    """What the Refresher did, as shown to the caller; `change_id` undoes it. Its texts and statuses are those
    of the history row `change_id` names: what the record held before and holds now. An older fact a newer
    statement replaced is superseded, not rewritten: it keeps its words (`new_text == old_text`), its status
    turns `superseded`, and `superseded_by` names the newer record."""

    action: Literal["update", "delete", "noop"]
    record_id: str
    old_text: str = ""
    new_text: str = ""
    old_status: Status = Status.ACTIVE
    new_status: Status = Status.ACTIVE
    superseded_by: str = ""
    reason: str = ""
    change_id: int | None = None
    policy: str = "offline"


def raw_record(turn: Turn, namespace: str, entities: list[str] | None = None) -> Record:
    """A turn as the raw record stored for it: id `raw:<dia_id>`, verbatim text, photo caption kept."""
    dia = turn.dia_id or ""
    return Record(
        id=f"raw:{dia}", kind="raw", text=turn.text, namespace=namespace, dialogue_id=dia,
        session=turn.session_label(), speaker=turn.speaker, time=turn.time, source_ids=[dia],
        image_caption=turn.image_caption or "", entities=list(entities or []), utc_offset=turn.utc_offset,
    )


class Dated(Protocol):
    """Anything placed on the conversation's timeline: a stored record, or an item of evidence."""

    id: str
    dialogue_id: str
    time: datetime | None


@lru_cache(maxsize=200_000)
def natural_order(record_id: str) -> tuple[str | int, ...]:
    """An id's sort key with its numbers compared as numbers (raw:D1:2 before raw:D1:10): how equal scores
    are ordered, so that the order a memory was loaded in never decides a ranking."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", record_id))


def chronological_key(item: Dated) -> tuple[float, tuple[int, ...], str]:
    """Chronological order: time, then the numbers of the dialogue id (D3:12 -> (3, 12)). An undated item
    sorts before every dated one, those before 1970 (negative epochs) and at its very start included."""
    moment = epoch_seconds(item.time) if item.time else float("-inf")
    return moment, id_numbers(item.dialogue_id or item.id), item.id


def id_numbers(text: str) -> tuple[int, ...]:
    """The numbers of an id, in order, as they sort ids of one conversation: D3:12 -> (3, 12), T100 after T20."""
    return tuple(int(n) for n in re.findall(r"\d+", text))
