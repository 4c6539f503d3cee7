"""A namespace's memory as one JSON document, and back: a backup, a move to other storage, a person's copy.

`export_memory` writes everything the memory holds of one namespace: its records of
every kind and status (tombstoned ones too, so `undo` still works after a move), its
links, its history, the working memory, the graph's state (open episode, entity
catalogue, what the slow path has done) and the LangGraph store items with every
version. `import_memory` writes such a document into an empty namespace of any
storage (an embedded folder, or a Chroma server and a PostgreSQL ledger), embedding
every record again with the target's embedder: moving a laptop's memory to a
deployment, or to another embedder, is an export and an import.

History ids are the target ledger's own (other namespaces share its counter), so the
links between changes (`undoes`, `follows`) are renumbered with them, and so is the change an
undo's reason names ("undo of change 18" becomes the new id: `strata undo` takes the ids
history shows). The counter of automatic turn ids is raised past every stored `T<n>` turn, so
the next turn without an id never takes a stored one's.

An import writes a whole memory or nothing: a document whose links, history or working memory
name records it does not hold is refused in one line (see `MemoryDocument.check_references`),
and the report counts what was stored. The records go to
Chroma first, then the rest in one ledger transaction; a mark in the ledger's state says
an import is under way, so an import stopped halfway (the process killed) is not taken
for a memory: no Memory call or graph run reads or writes the namespace until an import finishes
(`MemoryStore.check_whole`), and the next import drops what the stopped one wrote and
writes it all.

With `about`, the document holds the records `erase(about=...)` would remove for that
person, their history and the working-memory rows of their turns: the copy of their
data a person may ask for. Not their links (edges between records, no words of theirs),
nor the episodes an erase tells again without them, nor the topic summaries it removes
(they retell others' turns too; the person's own persona summaries are in it). It is not a backup of the memory
and cannot be imported.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from strata.memory import store_items
from strata.memory.episodes import OPEN_SEGMENT, OpenSegment
from strata.memory.errors import InputError, first_unstorable
from strata.memory.forgetting import same_person
from strata.memory.graph.consolidation import DIGESTS, DONE, DONE_BY, DONE_LISTS, RETRIED
from strata.memory.graph.links import CATALOGUE, LAST_TURN
from strata.memory.journal import PENDING
from strata.memory.ledger_sql import LARGEST_INTEGER
from strata.memory.moments import utc_now
from strata.memory.records import ENTITY_NODE, KINDS, Action, Change, Link, Record, Status
from strata.memory.store import IMPORTING, MemoryStore
from strata.memory.store_items import ITEM_PREFIX, ItemVersion, value_problem
from strata.memory.turn_ids import TURN_COUNTER, highest_numbered

FORMAT = "strata-memory"
VERSION = 1
EMBED_BATCH = 512  # records embedded and written per step of an import
UNDO_REASON = re.compile(r"undo of change (\d+)")  # the reason MemoryStore._reverse gives an undo


class WorkingRow(BaseModel):
    """One turn of a participant's working memory (AdaMem's FIFO), as the ledger keeps it."""

    participant: str
    seq: int = Field(..., ge=-LARGEST_INTEGER - 1, le=LARGEST_INTEGER)
    dia_id: str
    text: str
    time: str | None = None
    arrival: int | None = Field(None, ge=-LARGEST_INTEGER - 1, le=LARGEST_INTEGER)


# The graph's state values, by key, as the modules that own them write them: the state an export carries
# and an import accepts. Not carried: the journals of an unfinished edit (memory/journal.py), erase
# (memory/erasure.py) or import (IMPORTING), which the next opener of the namespace acts on.
_STATE_SHAPES: dict[str, TypeAdapter[Any]] = {
    CATALOGUE: TypeAdapter(dict[str, tuple[str, str]]),  # memory/graph/links.py: {key: [label, type]}
    LAST_TURN: TypeAdapter(str | None),
    DONE: TypeAdapter(list[str]),  # memory/graph/consolidation.py
    # ... and what an ablation run (causal or entity links off) did: an import would otherwise do it all again
    **{key: TypeAdapter(list[str]) for key in (*DONE_BY.values(), RETRIED)},
    DIGESTS: TypeAdapter(dict[str, str]),
    PENDING: TypeAdapter(list[str]),  # memory/journal.py
    OPEN_SEGMENT: TypeAdapter(OpenSegment),  # memory/episodes.py
    TURN_COUNTER: TypeAdapter(Annotated[int, Field(ge=0, le=LARGEST_INTEGER)]),  # memory/turn_ids.py
}


class MemoryDocument(BaseModel):
    """The whole memory of one namespace (or one person's part of it, `about`)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["strata-memory"] = FORMAT
    version: Literal[1] = VERSION
    namespace: str
    exported_at: datetime = Field(default_factory=utc_now)
    about: str | None = Field(None, description="set for one person's copy, which is not importable")
    records: list[Record] = Field(default_factory=list)
    links: list[Link] = Field(default_factory=list)
    history: list[Change] = Field(default_factory=list, description="oldest first")
    working: list[WorkingRow] = Field(default_factory=list)
    state: dict[str, Any] = Field(default_factory=dict)
    items: list[ItemVersion] = Field(default_factory=list, description="every version, oldest first")

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        """A record field no record has is refused, as the document's own unknown keys are: dropped silently,
        an edit made to the export was lost without a word."""
        records = data.get("records") if isinstance(data, dict) else None
        for record in records if isinstance(records, list) else ():
            if isinstance(record, dict):
                unknown = next((key for key in record if key not in Record.model_fields), None)
                if unknown is not None:
                    raise ValueError(f"the record {str(record.get('id'))[:80]!r} has a field {str(unknown)[:40]!r}, "
                                     "which no record has")
        return data

    @model_validator(mode="after")
    def _one_of_each(self) -> MemoryDocument:
        """What the stores keep once: a record id, a working-memory place, a history entry."""
        for what, keys in (("record id", [r.id for r in self.records]),
                           ("working-memory turn", [(w.participant, w.seq) for w in self.working]),
                           ("history entry", [c.id for c in self.history if c.id is not None]),
                           ("turn dia_id", [r.dialogue_id for r in self.records if r.kind == "raw"]),
                           ("link", [(k.src, k.dst, k.type.value) for k in self.links])):
            twice = [key for key, count in Counter(keys).items() if count > 1]
            if twice:
                raise ValueError(f"the {what} {twice[0]} is there twice")
        # an id names its kind (raw:D1:3, fact:D1:3:0): the stores find a record's collection by it
        for what, pairs in (("record", [(r.id, r.kind) for r in self.records]),
                            ("history entry of", [(c.record_id, c.kind) for c in self.history])):
            wrong = next(((i, k) for i, k in pairs if not i.startswith(f"{k}:") or i == f"{k}:"), None)
            if wrong:
                raise ValueError(f"the {what} {wrong[0]!r} is not a {wrong[1]} id (ids of its kind start "
                                 f"with '{wrong[1]}:')")
        # a turn's id is its dialogue id (records.py makes both from one): the links, sources and summaries
        # of later writes name a turn by its dialogue id, and one that differs named a record no export holds
        turn = next((r for r in self.records
                     if r.kind == "raw" and (not r.dialogue_id or r.id != f"raw:{r.dialogue_id}")), None)
        if turn is not None:
            raise ValueError(f"the turn {turn.id!r} has the dialogue id {turn.dialogue_id!r}: a turn's id is "
                             "'raw:' and its dialogue id")
        place = {c.id: n for n, c in enumerate(self.history) if c.id is not None}
        for n, change in enumerate(self.history):  # renumbered on import, so each must name an entry before it
            for what, other in (("undoes", change.undoes), ("follows", change.follows)):
                if other is not None and place.get(other, -1) >= n:
                    raise ValueError(f"the history entry {change.id} {what} entry {other}, which is not before "
                                     "it: history is oldest first")
        for record in self.records:  # what the embedder and Chroma take: UTF-8 text (no lone surrogate)
            try:
                json.dumps(record.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"the record {record.id!r} holds a character that is not text "
                                 "(a lone surrogate)") from None
        for key, value in self.state.items():  # what the graph reads back: a wrong shape breaks every write
            shape = _STATE_SHAPES.get(key)
            if shape is None:  # an unfinished edit's or erase's journal would be acted on at the next open
                raise ValueError(f"the state {key!r} is not one an export carries (those are "
                                 f"{', '.join(sorted(_STATE_SHAPES))})")
            try:
                shape.validate_python(value)
            except ValidationError as error:
                raise ValueError(f"the state {key!r} is not what the memory wrote there "
                                 f"({error.errors()[0].get('msg', 'wrong shape')})") from None
        return self

    def check_references(self) -> None:
        """Raise `ValueError` when the links, history or working memory name a record the document does not
        hold: imported, they made a namespace no command could use, nor a later import repair.

        Not a validator: an export of a memory must never fail on what that memory holds, and one thing
        leaves such names in a real memory: `MemoryStore.purge`, which removes tombstones (each deleted
        by a history entry that says so) and keeps their links, history and working-memory rows. Names
        of such records are accepted; entity nodes (`entity:<key>`, link ends) are not records."""
        held = {r.id for r in self.records}
        purged = {c.record_id for c in self.history if c.new_status == Status.DELETED} - held

        def known(record_id: str) -> bool:
            return record_id in held or record_id in purged

        if not self.records and (self.links or self.history or self.working):
            raise ValueError(f"it holds no records, yet {len(self.links)} links, {len(self.history)} history "
                             f"entries and {len(self.working)} working-memory turns (was its \"records\" list cut "
                             "out?)")
        self._check_state(known)
        for link in self.links:
            missing = next((end for end in (link.src, link.dst)
                            if not end.startswith(ENTITY_NODE) and not known(end)), None)
            if missing is not None:
                raise ValueError(f"the {link.type.value} link {link.src} -> {link.dst} names the record "
                                 f"{missing!r}, which it does not hold")
        for change in self.history:
            if not known(change.record_id):
                raise ValueError(f"the history entry {change.id} is about the record {change.record_id!r}, "
                                 "which it does not hold")
        turns = {r.dialogue_id for r in self.records if r.kind == "raw"}
        for row in self.working:
            if row.dia_id not in turns and not known(f"raw:{row.dia_id}"):
                raise ValueError(f"{row.participant}'s working memory holds the turn {row.dia_id!r}, which it "
                                 "does not hold")


    def _check_state(self, known: Any) -> None:
        """The records the graph's state names must be held: a session closed on an open episode naming an
        absent turn derived an episode from nothing, and every later export of the memory was refused."""
        segment = self.state.get(OPEN_SEGMENT)
        if segment:
            for dia_id in OpenSegment.model_validate(segment).turn_ids:
                if not known(f"raw:{dia_id}"):
                    raise ValueError(f"the state {OPEN_SEGMENT!r} holds the turn {dia_id!r}, which it does not hold")
        last = self.state.get(LAST_TURN)
        if last is not None and (not last.startswith("raw:") or last.startswith(ITEM_PREFIX) or not known(last)):
            raise ValueError(f"the state {LAST_TURN!r} names {last!r}, which is not a turn it holds")
        for key in (PENDING, *DONE_LISTS):
            missing = next((i for i in self.state.get(key) or () if not known(i)), None)
            if missing is not None:
                raise ValueError(f"the state {key!r} names the record {missing!r}, which it does not hold")


class ImportReport(BaseModel):
    """What an import wrote."""

    records: int = 0
    links: int = 0
    history: int = 0
    working: int = 0
    state: int = 0
    items: int = 0

    def summary(self) -> str:
        return (f"imported {self.records} records, {self.links} links, {self.history} history entries, "
                f"{self.working} working-memory turns, {self.state} state values, {self.items} store item versions")


def _only_theirs(summary: Record, person: str) -> bool:
    """A persona summary of the person (AdaMem's persona memory): what memory holds about them alone."""
    return same_person(summary.participant, person)  # names matched as the forget rule matches them


def export_memory(store: MemoryStore, about: str = "") -> MemoryDocument:
    """The namespace's memory as a document; with `about`, only what is said by or about that person."""
    from strata.memory.erasure import erasure_targets  # the same choice of records as an erasure

    ns = store.namespace
    with store.writing():  # no writer of this namespace in between (a read: a read-only folder exports too)
        if store.has_staged():
            store.flush()  # what is staged is part of the memory
        if about:
            chosen = set(erasure_targets(store, about=about, done="exported"))
            # not the summaries an erase takes along: they retell whole groups of turns, others' words too
            records = [r for r in store.get(sorted(chosen)) if r.kind != "summary" or _only_theirs(r, about)]
            chosen = {r.id for r in records}
            history = [c for c in _history(store) if c.record_id in chosen]
            items = [v for v in store_items.versions(store.ledger, ns) if store_items.ITEM_PREFIX + v.key in chosen]
            turns = {r.dialogue_id for r in records if r.kind == "raw"}  # their words in the working memory too
            working = [w for w in _working(store) if w.dia_id in turns]
            return MemoryDocument(namespace=ns, about=about, records=records, history=history, items=items,
                                  working=working)
        records = [r for kind in KINDS for r in store.all(kind, include_inactive=True)]
        with store.ledger.reading() as session:
            links = [Link(namespace=ns, src=r[0], dst=r[1], type=r[2], weight=float(r[3])) for r in session.execute(
                "SELECT src, dst, type, weight FROM links WHERE namespace = ? ORDER BY src, dst, type", (ns,))]
            state = {key: json.loads(value) for key, value in session.execute(  # the graph's own: not the
                "SELECT key, value FROM state WHERE namespace = ? ORDER BY key", (ns,))  # journals of an edit,
                if key in _STATE_SHAPES}  # an erase or an import left unfinished, acted on at the next open
        held = {r.id for r in records}  # a version no record holds (a put a full disk stopped) is no item
        items = [v for v in store_items.versions(store.ledger, ns) if store_items.ITEM_PREFIX + v.key in held]
        return MemoryDocument(namespace=ns, records=records, links=links, history=_history(store),
                              working=_working(store), state=state, items=items)


def read_document(data: object) -> MemoryDocument:
    """A document from parsed JSON, or an `InputError` of one line saying what is wrong with it."""
    first = data[0] if isinstance(data, list) and data else data  # a turn list's first turn, or a sample
    if isinstance(first, dict) and any(key in first for key in ("speaker_a", "conversation", "speaker")):
        raise InputError("this is a conversation, not a memory export: store it with `strata ingest FILE` "
                         "(Memory.add), or import a file `strata export` wrote")
    if not isinstance(data, dict):
        raise InputError(f"a memory export is a JSON object, not {type(data).__name__}: export one with "
                         "`strata export`")
    if data.get("format") != FORMAT:
        raise InputError(f"this is not a memory export (its format is {str(data.get('format'))[:40]!r}, "
                         f"expected {FORMAT!r}): export one with `strata export`")
    version = data.get("version")
    if version != VERSION or type(version) is not int:  # "1" and true are not 1
        advice = ("a newer strata wrote it: upgrade strata to import it" if type(version) is int and version > VERSION
                  else "export it again with this version")
        raise InputError(f"this export has version {json.dumps(version)[:20]}; this strata reads version "
                         f"{VERSION}: {advice}")
    found = first_unstorable(data)  # refused before anything is written
    if found is not None:
        raise InputError(f"the export is damaged: {found}; nothing was imported")
    try:
        return MemoryDocument.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = " at " + ".".join(str(p) for p in first.get("loc", ())) if first.get("loc") else ""
        problem = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        raise InputError(f"the export is damaged{where}: {problem}; nothing was imported") from None


def revalidated(document: MemoryDocument) -> MemoryDocument:
    """A document object validated again, as a file is: an app may edit its lists after loading it (a record
    appended twice, a state of another shape), or build it with `model_construct`."""
    try:
        data = document.model_dump()
    except Exception as error:  # a model_construct without its fields
        said = str(error).splitlines()[0][:120] if str(error) else ""
        raise InputError(f"the document is not a whole memory export ({type(error).__name__}: {said}): load it "
                         "with MemoryDocument.model_validate; nothing was imported") from None
    return read_document(data)


def _check_turns(document: MemoryDocument, max_turn_chars: int | None) -> None:
    """The raw turns checked as ingest checks a turn (graph/state.py `validate_turns`): words in the text,
    a speaker, names of at most 200 characters, `max_turn_chars`. Store items' records are no turns."""
    from strata.graph.state import validate_turns

    for record in document.records:
        if record.kind != "raw" or record.id.startswith(ITEM_PREFIX):
            continue
        turn = {"speaker": record.speaker, "text": record.text, "dia_id": record.dialogue_id,
                "session": record.session or None, "image_caption": record.image_caption or None}
        try:
            validate_turns([turn], max_chars=max_turn_chars)
        except InputError as error:
            raise InputError(f"the export is damaged: the record {record.id!r}"
                             f"{str(error).removeprefix('turn 1')}; nothing was imported") from None


def import_memory(store: MemoryStore, document: MemoryDocument, max_turn_chars: int | None = None) -> ImportReport:
    """Write a document into this store's namespace, which must be empty (see the module doc). Everything is
    checked before anything is written: what ingest and the store's writes could have produced goes in."""
    if document.about is not None:
        raise InputError(f"this export is {document.about}'s copy of their data, not a backup of the memory: "
                         "import a whole export (`strata export` without --about)")
    try:
        document.check_references()
    except ValueError as error:
        raise InputError(f"the export is damaged: {error}; export the memory again (`strata export`); nothing "
                         "was imported") from None
    _check_turns(document, max_turn_chars)
    for item in document.items:
        problem = value_problem(item.value)
        if problem is not None:
            raise InputError(f"the export is damaged: the store item {item.key[:80]!r} (version {item.seq}) is "
                             f"refused: {problem}; nothing was imported")
    ns = store.namespace
    records = [r.model_copy(update={"namespace": ns}) for r in document.records]
    if store.state(IMPORTING) is None:  # (a stopped import is finished below, which every other call refuses)
        store.check_whole()  # a namespace written through another Chroma is refused before anything is written
    store.importer = threading.get_ident()
    try:
        with store.edits():  # which refuses a read-only folder first
            if store.state(IMPORTING) is not None:  # an import stopped halfway: nothing else has written since
                store.drop()  # (MemoryStore.check_whole), so what is there is what it wrote; this one writes it all
            held = sum(store.count(kind) for kind in KINDS) + store.ledger.count_history(ns)
            if held:
                raise InputError(f"the namespace {ns!r} is not empty ({held} records and changes): import into a "
                                 "new namespace, or drop this one first; nothing was imported")
            store.ledger.set_state(ns, IMPORTING, document.exported_at.isoformat())
            try:
                _write(store, document, records)
            except BaseException:
                store.drop()  # the namespace was empty: it is again (a killed process leaves the mark instead)
                raise
            return _stored(store)
    finally:
        store.importer = None


def _stored(store: MemoryStore) -> ImportReport:
    """What the namespace holds once the import is written: the report counts that, not the document."""
    ns = store.namespace
    with store.ledger.reading() as session:
        working, items = (int(session.execute(f"SELECT COUNT(*) FROM {table} WHERE namespace = ?",
                                              (ns,)).fetchone()[0]) for table in ("working", "store_items"))
        state = sum(1 for row in session.execute("SELECT key FROM state WHERE namespace = ?", (ns,))
                    if row[0] in _STATE_SHAPES)  # the graph's own values, not a journal
    return ImportReport(records=sum(store.count(kind) for kind in KINDS),
                        links=sum(store.ledger.count_links(ns).values()), history=store.ledger.count_history(ns),
                        working=working, state=state, items=items)


def _write(store: MemoryStore, document: MemoryDocument, records: list[Record]) -> None:
    """The records to Chroma, then the rest in one ledger transaction that also clears the mark."""
    ns = store.namespace
    for start in range(0, len(records), EMBED_BATCH):
        store.add(records[start : start + EMBED_BATCH])
    with store.ledger.transaction() as session:
        store.ledger.add_links(link.model_copy(update={"namespace": ns}) for link in document.links)
        new_ids: dict[int, int] = {}
        for change in document.history:
            renumbered = change.model_copy(update={
                "namespace": ns, "id": None,
                "undoes": new_ids.get(change.undoes) if change.undoes is not None else None,
                "follows": new_ids.get(change.follows) if change.follows is not None else None,
                "reason": _renumbered_reason(change, new_ids),
            })
            new_ids[int(change.id or 0)] = store.ledger.record_change(renumbered)
        session.executemany(
            "INSERT INTO working (namespace, participant, seq, dia_id, text, time, arrival) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(ns, w.participant, w.seq, w.dia_id, w.text, w.time, w.arrival) for w in document.working],
        )
        for key, value in document.state.items():
            store.ledger.set_state(ns, key, value)
        counter = _turn_counter(document)
        if counter != document.state.get(TURN_COUNTER, 0):
            store.ledger.set_state(ns, TURN_COUNTER, counter)
        for item in document.items:
            store_items.insert_version(store.ledger, ns, item.key, item.value, item.text, item.indexed,
                                       item.created_at, item.updated_at)
        store.ledger.clear_state(ns, IMPORTING)


def _renumbered_reason(change: Change, new_ids: dict[int, int]) -> str:
    """An undo's reason naming the change it undid by this ledger's id: `strata undo N` takes what it says."""
    found = UNDO_REASON.fullmatch(change.reason) if change.action == Action.UNDO else None
    if found is None:
        return change.reason
    new = new_ids.get(int(found.group(1)))
    return f"undo of change {new}" if new is not None else "undo of a change no longer in the history"


def _turn_counter(document: MemoryDocument) -> int:
    """The counter of automatic turn ids, at least the highest `T<n>` the document names (a turn purged
    too): the next turn without an id is numbered past it, not refused for a stored turn's id."""
    ids = [r.id for r in document.records] + [c.record_id for c in document.history]
    turns = [i.removeprefix("raw:") for i in ids if i.startswith("raw:")]
    return max(int(document.state.get(TURN_COUNTER, 0)), highest_numbered(turns))


def _working(store: MemoryStore) -> list[WorkingRow]:
    """The namespace's working memory, participant by participant, oldest first."""
    with store.ledger.reading() as session:
        return [WorkingRow(participant=r[0], seq=int(r[1]), dia_id=r[2], text=r[3], time=r[4],
                           arrival=None if r[5] is None else int(r[5])) for r in session.execute(
            "SELECT participant, seq, dia_id, text, time, arrival FROM working WHERE namespace = ? "
            "ORDER BY participant, seq", (store.namespace,))]


def _history(store: MemoryStore) -> list[Change]:
    return list(reversed(store.history(limit=10**9)))
