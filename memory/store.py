"""One namespace's memory: four Chroma collections, a ledger, a lexical index.

This is the single door through which roles read and write memory. Writes go
to Chroma and the BM25 index together; every edit goes through `update` /
`delete`, which record the old value in the ledger first, so `undo` can
always restore it. Nothing is destroyed silently (design, "Memory").

Each process mirrors the records it reads (and their BM25 index) in memory.
Every write stamps the namespace's change sequence in the ledger, in the same
transaction, after Chroma took the write; before trusting its mirror a reader
compares that one number and reloads only the records changed since, so a write,
update or undo made by another replica is seen at once (docs/architecture.md).
"""

from __future__ import annotations

import gc
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from pydantic import BaseModel
from strata.memory import journal, run_locks, snapshots, store_items
from strata.memory.bm25 import BM25Index, reciprocal_rank_fusion
from strata.memory.chroma import (
    collection_name,
    collection_names,
    get_collection,
    grown_large,
    make_new_indexes_private,
    mark_of,
    open_client,
    owner_of,
    set_mark,
)
from strata.memory.embeddings import CachedEmbedder, embedder_name, get_embedder
from strata.memory.errors import ConfigError, InputError, NotFoundError, StrataError
from strata.memory.facts import comparable
from strata.memory.journal import JournalEntry
from strata.memory.ledger import EVERY_NAMESPACE, Ledger, chunked
from strata.memory.locks import namespace_lock
from strata.memory.moments import epoch_seconds
from strata.memory.provenance import (
    CHROMA_AT,
    EMBEDDER,
    EXPLICIT_DROP,
    elsewhere_advice,
    embedder_mismatch,
    location_of,
    shown,
    unrecorded_guess,
)
from strata.memory.records import (
    ENTITY_NODE,
    KINDS,
    Action,
    Change,
    Kind,
    Link,
    LinkType,
    Record,
    Status,
)
from strata.memory.reindex import REBUILT_SUFFIX, remove_orphan_indexes
from strata.memory.settings import StoreSettings
from strata.memory.staging import FLUSH_TURNS, StagedWrites, merge_nearest
from strata.memory.timeline import Timeline
from strata.memory.vector_index import EXACT_LIMIT, ExactIndex

LOG = logging.getLogger(__name__)
_LIST_FIELDS = ("source_ids", "entities", "keywords", "tags")
IMPORTING = "import_in_progress"  # ledger state while an import writes (memory/portability.py)
ERASING = "erasure_in_progress"  # ledger state: the ids of an erase under way (memory/erasure.py: `finish_erasure`)
DROPPING = "drop_in_progress"  # ledger state: a drop under way (strata/api.py `Memory.drop`), gone with the namespace
ERASED_AT = "erased_at"
"""Ledger state: the change sequence at which an erase last removed records of the namespace; a mirror saved
before it holds erased words (memory/snapshots.py)."""
MIRRORS_OUTDATED = "mirrors_outdated"
"""Ledger-wide state (`EVERY_NAMESPACE`): a count of erases and drops, which every replica reads with each
namespace's sequence; when it moves, the replica deletes its saved mirrors that hold what went."""
LEDGER_MARK = "ledger_mark"
"""Ledger state: the random mark this ledger gave the namespace, which its collections on a Chroma server
carry (memory/chroma.py: `MARK`); dropped with the namespace."""
READ_PAGE = 5_000  # records per Chroma read when a collection is mirrored (see read_collection)
FALLBACK_WRITE_BATCH = 5_000  # records per Chroma write when the client cannot say its limit (`_write_batch`)
WINDOW_IDS = 5_000
"""A time-windowed dense search names the window's records to Chroma (found in the mirror's time
index) when there are at most this many: Chroma's own time filter reads every record's metadata
(300-500 ms a query at 100,000 records), while a search among given ids takes a few ms."""
FREEZE_OBJECTS = 100_000
"""Objects a mirror's load must create for them to be frozen out of the cycle collector (a few thousand
records; see `_no_collection_pauses`)."""
UNFILTERED_SLACK = 500
"""Dense search asks Chroma for k + (inactive records) nearest without a status filter while the
inactive ones are at most this many: Chroma runs a metadata filter by reading every record's
status (about 35 ms a query at 20,000 records), while a few hundred extra neighbours cost less."""
_FACT_FIELDS = ("subject", "attribute", "value")
ERASED_CAUSE = "made for a turn since erased"  # the reason a change kept by an erase gets (its own may quote it)


@dataclass
class _Replay:
    """A record's history replayed without the changes made for erased turns (`MemoryStore._take_back_edits`)."""

    rewritten: list[Change]  # the rows that stay whose texts, states or reason the replay told otherwise
    dropped: list[int]  # the ids of the rows that go
    end: tuple[str, Status, dict[str, str]]  # the record's text, status and fields after the last row
    unsuperseded: bool  # a supersede was among the rows that go
    followed: list[int]  # the changes the rows that go followed (a trait retired with its fact's change)


def _without(reason: str, said: dict[str, str]) -> str:
    """A reason that quoted what a dropped row made the record say, told with what it says instead."""
    for new, old in sorted(said.items(), key=lambda pair: -len(pair[0])):  # the longest first
        reason = reason.replace(new, old)
    return reason


def _state_of(record: Record) -> tuple[str, Status, dict[str, str]]:
    """A record's text, status and fact fields, as a replayed history leaves them (`_replayed`)."""
    return record.text, record.status, {k: getattr(record, k) for k in _FACT_FIELDS}


def _replayed(rows: Sequence[Change], erased_turns: set[str], standing: set[int] = frozenset()) -> _Replay:
    """Replay a record's rows (oldest first) from the state before the first, leaving out the updates and
    supersedes and no-op notes made for an erased turn and the undos of those; not one that follows a
    delete that stands (`standing`): an episode a request to forget told without what it forgot is part of
    that forget, which stands (taken back, it was left deleted, its text the forgotten words, and no undo
    of the forget brought it back)."""
    text, status, fields = rows[0].old_text, rows[0].old_status, dict(rows[0].old_fields)
    before: dict[int, tuple[str, Status, dict[str, str]]] = {}
    rewritten: list[Change] = []
    dropped: list[int] = []
    unsuperseded = False
    followed: list[int] = []
    said: dict[str, str] = {}  # what a dropped row made the record say -> what it says without it
    for row in rows:
        row_id = int(row.id or 0)
        if (row.cause in erased_turns and row.action in (Action.UPDATE, Action.NOOP)
                and row.follows not in standing) or (
                row.action == Action.UNDO and row.undoes in dropped):
            dropped.append(row_id)
            unsuperseded |= row.new_status == Status.SUPERSEDED
            followed += [row.follows] if row.follows is not None else []
            said.update({new: old for new, old in [(row.new_text, text)] + [
                (value, fields.get(name, "")) for name, value in row.new_fields.items()] if new and new != old})
            continue
        before[row_id] = (text, status, fields)
        told: dict[str, object] = {"old_text": text, "old_status": status,
                                   "reason": _without(row.reason, said)}  # "lives_in 'Zorbatown' -> 'Austin'"
        if row.action == Action.UPDATE and row.new_status != Status.SUPERSEDED:  # an update: the new words
            told["old_fields"] = {**row.old_fields, **{k: v for k, v in fields.items() if k in row.old_fields}}
            text, status, fields = row.new_text, row.new_status, {**fields, **row.new_fields}
        elif row.action == Action.UNDO and row.undoes in before:  # back to what the undone row found
            text, status, fields = before[row.undoes]
            told.update(new_text=text, new_status=status, new_fields=dict(fields))
        elif row.action in (Action.UPDATE, Action.DELETE):  # a supersede or a delete keeps the words
            status = row.new_status
            told.update(new_text=text)
        elif row.action == Action.EVOLVE:  # tags and context: the words stay as they are
            told.update(new_text=text)
        else:  # a no-op note of a turn that stays: no words of the record, only its reason
            told = {"reason": told["reason"]}
        if row.cause in erased_turns:  # a delete for an erased turn stands; its reason may quote the turn
            told["reason"] = ERASED_CAUSE
        told_again = row.model_copy(update=told)
        if told_again != row:
            rewritten.append(told_again)
    return _Replay(rewritten=rewritten, dropped=dropped, end=(text, status, fields), unsuperseded=unsuperseded,
                   followed=followed)


_TIME_FIELDS = ("time", "time_end")


class Hit(BaseModel):
    """A retrieved record with the evidence of how it was found."""

    record: Record
    score: float
    found_by: list[str]


def kind_of(record_id: str) -> Kind:
    """Record ids start with their kind (`raw:D1:3`, `fact:D1:3:0`, ...)."""
    prefix = record_id.split(":", 1)[0]
    if prefix not in KINDS:  # wrong input, not a record that is missing (HTTP 400, not 404)
        raise InputError(
            f"{record_id!r} is not a memory id: ids start with raw:, fact:, episode:, persona: or summary:"
        )
    return prefix  # type: ignore[return-value]


def to_metadata(record: Record) -> dict[str, Any]:
    """Chroma metadata: scalars only, lists as JSON, times as ISO text plus an epoch for filters. An empty
    field is None, which an upsert reads as "remove the key": left out, the value it had stayed, and an
    attribute or note context cleared by an edit or an undo came back when the memory was opened again."""
    data = record.model_dump(mode="json", exclude={"text", "id"})
    meta: dict[str, Any] = {}
    for key, value in data.items():
        if key in _LIST_FIELDS:
            meta[key] = json.dumps(value)
        else:
            meta[key] = None if value == "" else value
    for key in _TIME_FIELDS:
        moment: datetime | None = getattr(record, key)
        meta[f"{key}_ts"] = epoch_seconds(moment) if moment is not None else None
    return meta


def from_metadata(record_id: str, text: str, meta: dict[str, Any]) -> Record:
    data = {k: v for k, v in meta.items() if not k.endswith("_ts")}
    for key in _LIST_FIELDS:
        if isinstance(data.get(key), str):
            data[key] = json.loads(data[key])
    return Record(id=record_id, text=text, **data)


class MemoryStore:
    """The memory of one namespace (a user, an agent, a conversation)."""

    def __init__(self, settings: StoreSettings, namespace: str, ledger: Ledger) -> None:
        self.settings = settings
        self.namespace = namespace
        self.ledger = ledger
        # With a Chroma server other processes may write this namespace too (an embedded folder is
        # locked to one process): derived writes are then flushed turn by turn (see `stage`).
        self._shared = settings.chroma_host is not None
        self._client = open_client(settings)
        self._collections: dict[Kind, Any] = {}  # opened (or created again after a drop) on first use
        self._records: dict[Kind, dict[str, Record]] = {}
        self._active: dict[Kind, dict[str, Record]] = {}  # the active records of each mirror, kept with it
        self._superseded: dict[Kind, dict[str, Record]] = {}  # and those superseded (read for past times)
        self._lexical: dict[Kind, BM25Index] = {}
        self._seen = 0  # the change sequence the mirrors reflect
        self._saved: dict[Kind, int] = {}  # the sequence each mirror was last saved at (memory/snapshots.py)
        self._written: set[Kind] = set()  # the kinds this store has written to Chroma (`_write`)
        self.finished_erasure: Any = None  # the report of an erase stopped midway, finished here (`_finish_erase`)
        self._timeline = Timeline()  # the active raw turns in order, kept with the raw mirror
        self._turn_list: list[Record] | None = None  # `timeline()` as a list, until the next raw change
        self._facts_of: dict[str, set[str]] = {}  # dialogue id -> ids of the facts derived from it
        self._times: dict[Kind, tuple[np.ndarray, list[str]]] = {}  # active dated records by time (`_within`)
        self._staged = StagedWrites()  # derived writes not yet in Chroma and the ledger (memory/staging.py)
        # with a server, other processes may write this namespace too: their state must not be
        # overwritten by a batch staged here, so each turn is written at its end
        self._batch_turns = 1 if self._shared else FLUSH_TURNS
        self._vectors: dict[str, np.ndarray] = {}  # large kinds' vectors read back for graph traversal, by id
        # each small kind's vectors, searched exactly in memory (memory/vector_index.py); None: too many
        self._exact: dict[Kind, ExactIndex | None] = {}
        self._lock = threading.RLock()
        self._max_batch: int | None = None  # `_write_batch`
        self._write_lock = _WriterLock(namespace_lock(settings, namespace), ledger, namespace,
                                       run_locks.writer_place(settings))
        self._group_depth = 0  # how deep the holder of the write lock is in `edits()` groups
        self._journaled = False  # this process wrote journal entries that a flush or a group's end clears
        self.importer: int | None = None  # the thread whose import writes the namespace (`check_whole` lets it)
        self._halves_agree = False  # Chroma and the ledger were found to hold the same namespace (`_check_halves`)
        self._until_flush = False  # the entries belong to a turn being stored: only its batch's flush clears them
        self._embedder_fits = False  # the ledger records no other embedder for the namespace (`embedder`)
        self._dimensions: int | None = None  # the vector size found to fit the namespace's (`check_vectors`)
        self._embedder_noted = False  # and the ledger records it

    @contextmanager
    def writing(self) -> Iterator[None]:
        """The namespace's write lock: hold it around every read-modify-write of its records or state.

        It is this process's lock of the namespace, then the ledger's: on a shared PostgreSQL
        ledger, a lock every replica's writers of the namespace take in turn. Taken outside a
        unit of work, it first takes back the edits a crashed writer left unfinished (`recover`).
        """
        with self._write_lock:
            if not self._group_depth:
                self.check_whole()
                self.recover()
                if self._write_lock.depth() == 1:  # not inside this thread's own erase
                    self._finish_erase()
            yield

    def _finish_erase(self) -> None:
        """Finish an erase stopped midway (its process killed, on this replica or another) from the ids it
        wrote down, before anything else reads or writes what it erased; the caller holds the write lock.
        A replica that had the namespace open went on serving the records otherwise (memory/erasure.py)."""
        from strata.memory.erasure import finish_erasure  # (erasure.py builds on this module)

        if self.read_only:
            return
        report = finish_erasure(self)
        if report is not None:
            self.finished_erasure = report
            LOG.warning("an erase of %d records in namespace %r, stopped midway, was finished here",
                        len(report.erased), self.namespace)

    def _may_finish_erase(self) -> bool:
        """Whether a read in this thread may take the write lock to finish an erase: not on a read-only folder,
        nor while the thread holds the write lock (its own erase, or one it checked on taking the lock), the
        store's lock or a ledger transaction, which come after the write lock."""
        owned = getattr(self._lock, "_is_owned", lambda: False)()
        return not (self.read_only or owned or self._write_lock.held_here() or self.ledger.in_transaction())

    def check_whole(self) -> None:
        """One line, before anything reads or writes a namespace an import has not finished (a killed one
        leaves it half written): its answers would come from part of the memory, and what a write added
        would go with the next import, which starts again from nothing. Not for the import itself."""
        if self.importer == threading.get_ident():
            return
        began = self.state(IMPORTING)
        if began is not None:
            raise InputError(f"an import into the namespace {self.namespace!r} has not finished (begun with an "
                             f"export of {began}): wait for it if it is still running; if it was stopped, run the "
                             "import again to finish it, or drop the namespace (Memory.drop()). Until then nothing "
                             "else reads or writes it")
        began = self.state(DROPPING)
        if began is not None:
            raise InputError(f"a drop of the namespace {self.namespace!r} stopped midway (begun {began}), its saved "
                             "threads perhaps deleted already: run the drop again to finish it (Memory.drop(), or "
                             "`strata drop --yes`). Until then nothing reads or writes it")
        if not self._halves_agree:
            self._check_halves()

    def _check_halves(self) -> None:
        """Once per open: a ledger that remembers this namespace (changes, links, the Chroma it was written
        through) beside a Chroma holding none of its records means Chroma's half is not here (another server
        or folder, a lost volume). Read on, it answered "not in memory" and took new writes that the old links
        and history no longer matched. The line says where the records are when the ledger can tell, and
        advises a drop only when they were written here (memory/provenance.py)."""
        if self.state(ERASING) is None:  # an erase under way explains a Chroma without the records
            collections, records = self._held_here()
            if collections:
                self._note_location()
            else:
                wrong = self._written_elsewhere()
                if wrong is not None:
                    raise ConfigError(f"{wrong}; nothing was changed")
            if not records:
                remembered = self._remembered()
                if remembered:
                    raise ConfigError(self._lost_half(remembered))
        self._halves_agree = True

    def _held_here(self) -> tuple[bool, bool]:
        """Whether this Chroma has a collection of the namespace, and whether it holds a record of it, of any
        kind, creating no collection to find out (raw first: nearly always the answer)."""
        found = False
        for kind in KINDS:
            collection = self._collection(kind)
            if collection is not NO_COLLECTION:
                found = True
                if collection.count():
                    return True, True
        return found, False

    def _remembered(self) -> int:
        """How many changes and links the ledger holds of the namespace (what a Chroma without its records
        would strand)."""
        return self.ledger.count_history(self.namespace) + sum(self.ledger.count_links(self.namespace).values())

    def _note_location(self) -> None:
        """Record where the namespace's records are, found here (an earlier version recorded none; a data folder
        moved or a server renamed moves it)."""
        if not self.read_only and self.state(CHROMA_AT) != location_of(self.settings):
            self.set_state(CHROMA_AT, location_of(self.settings))

    def _claim_location(self) -> None:
        """Before the namespace's first collection here is created: this location, recorded when the ledger
        has none; refused in one line when the ledger says the records were written through another Chroma
        that this one does not stand for (no collection of the namespace here)."""
        here = location_of(self.settings)
        recorded = self.ledger.claim_state(self.namespace, CHROMA_AT, here)
        if recorded != here:
            if not self._held_here()[0]:
                raise ConfigError(f"{self._written_elsewhere()}; nothing was written")
            self.set_state(CHROMA_AT, here)

    def _written_elsewhere(self) -> str | None:
        """What is wrong, when the ledger records that the namespace was written through another Chroma than
        this one (the caller found none of its collections here); None when it does not."""
        recorded = self.state(CHROMA_AT)
        here = location_of(self.settings)
        if recorded is None or recorded == here:
            return None
        return (f"the namespace {self.namespace!r} was written through {shown(str(recorded))} (its ledger "
                f"{self.ledger.where} says so), and this memory opens {shown(here)}, which holds none of its "
                f"records: {elsewhere_advice(str(recorded), self.settings)}")

    def _lost_half(self, remembered: int) -> str:
        """The line for a ledger that remembers the namespace beside a Chroma here holding none of its records
        (no other location recorded): a drop is advised only when the records were written here."""
        here = location_of(self.settings)
        said = f"the ledger holds {remembered} changes and links of the namespace {self.namespace!r}"
        if self.state(CHROMA_AT) == here:
            return (f"{said}, written through {shown(here)}, which holds none of its records now (a lost folder or "
                    "volume): restore it from a backup; if the records are lost for good, drop the namespace to "
                    "start it again (Memory.drop(), `strata drop --yes`)")
        guess = unrecorded_guess(self.settings, self.state(LEDGER_MARK) is not None)
        return (f"{said}, and {shown(here)} none of its records; the ledger does not say where they were written "
                f"(an earlier version did not record it): {guess}")

    def exists(self) -> bool:
        """Whether the namespace exists here: known to the ledger (`Ledger.knows`), or with a collection in this
        Chroma. A read of a name never written creates neither (a misspelt one is told apart: memory/catalog.py)."""
        return self.ledger.knows(self.namespace) or self._held_here()[0]

    def drop_refusal(self) -> str | None:
        """Why a drop here would lose what is not here, or None: a drop deletes the namespace's ledger half
        (its links, history, working memory and saved threads), which belongs to records another Chroma holds
        when the ledger says they were written there, or cannot say where and this Chroma has none of them.
        `Memory.drop(records_elsewhere=True)` drops all the same (memory/provenance.py `EXPLICIT_DROP`)."""
        if self._held_here()[0]:
            return None
        wrong = self._written_elsewhere()
        if wrong is None:
            if self.state(CHROMA_AT) is not None or not self._remembered():
                return None
            wrong = (f"the ledger remembers the namespace {self.namespace!r}, and {shown(location_of(self.settings))} "
                     "holds none of its records; the ledger does not say where they were written")
        return (f"{wrong}. A drop here would delete the ledger's half of that memory (links, history, working "
                "memory, saved threads) and strand its records: open it as it was written and drop it there, or, "
                f"if its records are lost for good, {EXPLICIT_DROP}; nothing was dropped")

    @contextmanager
    def edits(self, until_flush: bool = False) -> Iterator[None]:
        """A unit of work whose edits stand or fall together (memory/journal.py): a Refresher step,
        an undo and the changes that follow it, a turn's derive.

        Each edit journals the record as it was with its history row before it touches Chroma.
        When the outermost unit ends with nothing staged, the journal is cleared (the edits stand);
        while a batch is staged, or with `until_flush` (the Refresher's step of a turn being
        stored, on a memory no other process writes), the next flush clears it. A unit that
        raises is taken back whole, unless a batch staged before it still owns the journal.
        """
        self.ledger.check_writable()
        with self.writing():
            self._group_depth += 1
            try:
                yield
            except BaseException:
                self._group_depth -= 1
                if not self._group_depth and not self._staged and self._journaled:
                    try:
                        self._take_back(journal.entries(self.ledger, self.namespace))
                    except BaseException:
                        # Chroma (or the ledger) is down: the unit's journal stays in the ledger, and this
                        # process no longer owns it, so the next write here, or the next opener, takes it
                        # back before anything else (`recover`); a later unit must not clear it as its own
                        self._journaled = self._until_flush = False
                        raise
                raise
            self._group_depth -= 1
            if until_flush and self._journaled and not self._shared:
                self._until_flush = True
            if not self._group_depth and not self._staged and self._journaled and not self._until_flush:
                journal.clear(self.ledger, self.namespace)
                self._journaled = False

    def recover(self) -> int:
        """Take back the journaled edits of a unit of work that never finished; returns how many.

        Only outside any unit, with nothing staged and no entries of this process's own: then
        every entry in the journal was left by a writer that died, so the records are restored
        (or removed, when a batch created them), their history rows and links removed, and what
        an undo marked is un-marked.
        """
        if self.read_only:
            return 0
        with self._write_lock:
            if self._group_depth or self._staged or self._journaled:
                return 0
            found = journal.entries(self.ledger, self.namespace)
            if found:
                self._take_back(found)
            return len(found)

    def _take_back(self, entries: list[JournalEntry]) -> None:
        """Each record as it was before its first journaled write (or gone, if that write created
        it), then the rows, links and marks gone."""
        before: dict[str, Record | None] = {}
        for entry in entries:
            for record in entry.records:
                before.setdefault(record.id, record)
            for record_id in entry.created:
                before.setdefault(record_id, None)
        self._rewrite_all([record for record in before.values() if record is not None])
        created: dict[Kind, list[str]] = {}
        for record_id, record in before.items():
            if record is None:
                created.setdefault(kind_of(record_id), []).append(record_id)
        for kind, ids in created.items():
            self._remove(kind, ids)
        with self.ledger.transaction() as session:
            for entry in entries:
                if entry.change:
                    self.ledger.remove_change(self.namespace, entry.change, session)
                # this namespace's only, whatever an entry says (the journal is state an import could bring)
                self.ledger.remove_links((link.model_copy(update={"namespace": self.namespace})
                                          for link in entry.links), session)
                if entry.undid is not None:
                    self.ledger.mark_undone(self.namespace, entry.undid, session, undone=False)
            left = [e for e in journal.entries(self.ledger, self.namespace) if e not in entries]
            journal.keep(self.ledger, self.namespace, left, session)
        if not left:
            self._journaled = self._until_flush = False

    def _journal(self, entry: JournalEntry, session: Any) -> None:
        journal.append(self.ledger, self.namespace, entry, session)
        self._journaled = True

    def _collection(self, kind: Kind, create: bool = False) -> Any:
        """The namespace's Chroma collection of `kind`. Only a write creates it (`create`): a read of a kind
        never written sees `NO_COLLECTION`, so a question on a made-up namespace leaves nothing behind."""
        with self._lock:
            collection = self._collections.get(kind)
            if collection is None:
                if create:
                    self._claim_location()
                mark = self._claim_mark() if create and self._shared else None
                collection = get_collection(self._client, self.namespace, kind, not self._shared, create, mark)
                if collection is None:
                    return NO_COLLECTION
                if self._shared:
                    self._check_mark(collection, kind)
                self._collections[kind] = collection
            return collection

    def _claim_mark(self) -> str:
        """This ledger's mark for the namespace, given now if it has none (when replicas of one ledger race,
        the first one's stands)."""
        return str(self.ledger.claim_state(self.namespace, LEDGER_MARK, uuid.uuid4().hex))

    def _check_mark(self, collection: Any, kind: Kind) -> None:
        """Refuse a server collection written through another ledger. Processes sharing a Chroma server but
        not a ledger (`ledger_url` forgotten: a SQLite file each) handed out the same turn ids from their own
        counters and silently overwrote each other's turns. A collection of an earlier version (no mark) is
        adopted by the first ledger to open it that wrote the namespace (or finds it empty)."""
        theirs, ours = mark_of(collection), self.state(LEDGER_MARK)
        if theirs is not None and theirs == ours:
            return
        if theirs is None:
            if self.read_only:
                return
            if self.ledger.sequence(self.namespace)[0] or not collection.count():
                set_mark(collection, self.namespace, kind, str(ours) if ours else self._claim_mark())
                return
        host = f"{self.settings.chroma_host}:{self.settings.chroma_port}"
        raise ConfigError(f"the namespace {self.namespace!r} on the Chroma server at {host} is written through "
                          f"another ledger than this one ({self.ledger.where}): give every replica the same "
                          "ledger_url (PostgreSQL, STRATA_LEDGER_URL)")

    @property
    def read_only(self) -> bool:
        """True for a memory folder this process may read but not write: every write is refused."""
        return self.ledger.read_only

    @property
    def embedder(self) -> CachedEmbedder:
        """Loaded on first use: stats, history and undo never need it. Refused in one line, before it is
        loaded, when the namespace records another embedder (memory/provenance.py `EMBEDDER`)."""
        if not self._embedder_fits:
            recorded = self.state(EMBEDDER)
            if isinstance(recorded, dict) and recorded.get("name") != embedder_name(self.settings.embedder):
                raise ConfigError(embedder_mismatch(self.namespace, recorded, self.settings.embedder, None))
            self._embedder_fits = True
        return get_embedder(self.settings.embedder)

    def check_vectors(self, dimensions: int, writing: bool = False) -> None:
        """Refuse in one line vectors that are not the namespace's: another embedder's, or another size than
        the stored ones. The first write records the embedder (name and size); a namespace of an earlier
        version, which recorded none, takes on the one that first searches or writes it when the size of its
        stored vectors fits (memory/provenance.py). Called where vectors meet Chroma: `dense` and `_write`."""
        if dimensions == self._dimensions and (self._embedder_noted or not writing):
            return
        name = embedder_name(self.settings.embedder)
        recorded = self.state(EMBEDDER)
        if recorded is None:
            stored = self._stored_dimensions()
            if stored is not None and stored != dimensions:
                raise ConfigError(embedder_mismatch(self.namespace, {"dimensions": stored}, self.settings.embedder,
                                                    dimensions))
            if (writing or stored is not None) and not self.read_only:
                recorded = self.ledger.claim_state(self.namespace, EMBEDDER, {"name": name, "dimensions": dimensions})
        if isinstance(recorded, dict):
            if recorded.get("name") != name or recorded.get("dimensions") != dimensions:
                raise ConfigError(embedder_mismatch(self.namespace, recorded, self.settings.embedder, dimensions))
            self._embedder_noted = True
        self._dimensions = dimensions

    def _stored_dimensions(self) -> int | None:
        """The size of the namespace's stored vectors (one read), None when Chroma holds none of them."""
        for kind in KINDS:
            collection = self._collection(kind)
            if collection.count():
                got = collection.get(limit=1, include=["embeddings"])
                if len(got["ids"]):
                    return len(got["embeddings"][0])
        return None

    # reading -----------------------------------------------------------
    def _load(self, kind: Kind, force: bool = False) -> dict[str, Record]:
        """The in-memory mirror of a collection (for BM25 and fast reads), brought up to date first.

        A collection is loaded once per process, from its saved mirror when there is one (then only
        what changed since it was saved is read from Chroma), else read whole from Chroma; after that
        only the records whose change sequence moved past the mirror's are fetched again.
        """
        self._refresh()
        with self._lock:
            if force or kind not in self._records:
                with _no_collection_pauses():
                    try:
                        if force or not self._load_saved(kind):
                            self._reset_mirror(kind)
                            for rid, doc, meta in read_collection(self._collection(kind)):
                                self._remember(from_metadata(rid, doc or "", meta or {}))
                            self._save(kind)
                    except BaseException:  # a Chroma server that stopped answering: read again next time,
                        self._records.pop(kind, None)  # not a mirror half read kept as if it were the kind
                        raise
                    if len(self._records[kind]) >= snapshots.MIN_RECORDS:  # the open pays, not a question
                        self._time_index(kind)
            return self._records[kind]

    def _snapshot(self, kind: Kind) -> Path:
        return snapshots.snapshot_path(self._mirror_folder, collection_name(self.namespace, kind))

    @property
    def _mirror_folder(self) -> Path:
        """The folder whose `mirrors/` holds this process's saved mirrors: its own data folder, whatever
        ledger and Chroma it shares with other replicas."""
        return self.settings.ledger_path.parent

    def _marks(self, namespace: str | None = None) -> snapshots.Marks:
        """What a saved mirror of the namespace is checked against (`snapshots.outdated`)."""
        return self.ledger.outdating(namespace or self.namespace, ERASED_AT, ERASING)

    def _load_saved(self, kind: Kind) -> bool:
        """Load a kind's saved mirror and bring it up to date from the ledger's change sequence;
        False when there is none, or it does not match the collection (then it is read whole)."""
        saved = snapshots.load(self._snapshot(kind), self.namespace, kind)
        if saved is None:
            return False
        seq, records, index = saved
        current, _ = self.ledger.sequence(self.namespace)
        if seq > current:  # another ledger
            return False
        marks = self._marks()
        if snapshots.outdated(seq, marks):  # saved before a drop, or before an erase: it holds what went
            if not self.read_only:
                snapshots.discard_outdated(self._snapshot(kind), marks)
            if marks[0] > seq:  # dropped since: nothing in it is this namespace's now
                return False
        self._reset_mirror(kind)
        self._lexical[kind] = BM25Index.restore(index)
        for record in records:
            self._remember(record, indexed=True)
        if len(self._active[kind]) != len(self._lexical[kind]):  # the index is not the records'
            return False
        changed = [rid for rid in self.ledger.changed_since(self.namespace, seq) if kind_of(rid) == kind]
        collection = self._collection(kind)
        for start in range(0, len(changed), READ_PAGE):
            ids = changed[start : start + READ_PAGE]
            got = collection.get(ids=ids, include=["documents", "metadatas"])
            for rid, doc, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
                self._remember(from_metadata(rid, doc or "", meta or {}))
            for gone in set(ids) - set(got["ids"]):
                self._forget(kind, gone)
        if collection.count() != len(self._records[kind]):  # the collection is not the one saved
            return False
        if snapshots.outdated(seq, marks):  # what the erase removed has just left the mirror: saved anew
            self._save(kind)
        else:
            self._saved[kind] = seq
        return True

    def _save(self, kind: Kind) -> None:
        """Save a large mirror that changed since it was last saved (never with writes staged in it)."""
        records = self._records.get(kind)
        if (
            records is None or len(records) < snapshots.MIN_RECORDS or self._saved.get(kind) == self._seen
            or self.ledger.read_only or any(r.kind == kind for r in self._staged.records.values())
        ):
            return
        try:
            marks = self._marks()
        except StrataError:  # the ledger stopped answering: whether an erase came since is unknown
            return
        if snapshots.outdated(self._seen, marks):  # not read since a drop or an erase: it may hold what went
            snapshots.discard_outdated(self._snapshot(kind), marks)
            self._saved.pop(kind, None)
            return
        state = self._lexical[kind].state()
        if snapshots.save(self._snapshot(kind), self.namespace, kind, self._seen, records.values(), state):
            self._saved[kind] = self._seen

    def _reset_mirror(self, kind: Kind) -> None:
        """An empty mirror of `kind`, with its lexical index and lookups."""
        self._records[kind] = {}
        self._times.pop(kind, None)
        self._exact.pop(kind, None)
        self._active[kind] = {}
        self._superseded[kind] = {}
        self._lexical[kind] = BM25Index()
        if kind == "raw":
            self._timeline = Timeline()
            self._turn_list = None
        elif kind == "fact":
            self._facts_of = {}

    def _clear_mirrors(self) -> None:
        self._records.clear()
        self._times.clear()
        self._exact.clear()
        self._active.clear()
        self._superseded.clear()
        self._lexical.clear()
        self._saved.clear()
        self._timeline = Timeline()
        self._turn_list = None
        self._facts_of = {}

    def _refresh(self) -> None:
        """Compare the namespace's change sequence with the mirror's; reload what changed since.

        The ledger is read before the mirror lock is taken, and a dropped namespace forgets
        every mirror.
        """
        seq, reset, erasing, outdating = self.ledger.freshness(self.namespace, ERASING, MIRRORS_OUTDATED)
        if erasing and self._may_finish_erase():  # stopped midway, by another replica say: finished first
            with self.writing():  # (`_finish_erase`), so this read never sees what it erases
                pass
            seq, reset, _, outdating = self.ledger.freshness(self.namespace, ERASING, MIRRORS_OUTDATED)
        if not self.read_only:  # an erase or a drop here or on another replica: saved mirrors that hold it go
            gone = snapshots.sweep(self._mirror_folder, outdating, self._marks)
            if gone:
                with self._lock:  # written again, from the mirror as it now reads, when the namespace closes
                    for kind in [k for k in self._saved if self._snapshot(k) in gone]:
                        del self._saved[kind]
        if seq == self._seen:
            return
        if reset > self._seen:  # dropped since (by another replica, say): its collections went with it, and
            with self._lock:  # the handles kept here failed every later call with Chroma's NotFoundError
                self._clear_mirrors()
                self._collections.clear()
                self._vectors.clear()
                self._forget_embedder()  # written again, perhaps with another embedder
                self._seen = max(self._seen, seq)
            return
        if not self._records:  # nothing mirrored yet: the first read of each kind loads it whole
            self._seen = seq
            return
        changed = self.ledger.changed_since(self.namespace, self._seen)
        with self._lock:
            by_kind: dict[Kind, list[str]] = {}
            for record_id in changed:
                kind = kind_of(record_id)
                if kind in self._records:
                    by_kind.setdefault(kind, []).append(record_id)
            for kind, ids in by_kind.items():
                exact = self._exact.get(kind)
                include = ["documents", "metadatas"] + (["embeddings"] if exact is not None else [])
                got = self._collection(kind).get(ids=ids, include=include)
                for rid, doc, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
                    self._remember(from_metadata(rid, doc or "", meta or {}))
                if exact is not None and got["ids"]:
                    exact.put(got["ids"], np.asarray(got["embeddings"], dtype=np.float32).reshape(len(got["ids"]), -1))
                for gone in set(ids) - set(got["ids"]):  # purged by another process
                    self._forget(kind, gone)
            self._seen = max(self._seen, seq)

    def _advance(self, seq: int) -> None:
        """After this process's own write at `seq`: the mirror is current if it was just before."""
        if self._seen == seq - 1:
            self._seen = seq

    def all(self, kind: Kind, include_inactive: bool = False) -> list[Record]:
        records = self._load(kind)
        with self._lock:
            return list(records.values() if include_inactive else self._active[kind].values())

    def active(self, kind: Kind) -> Mapping[str, Record]:
        """The active records of `kind` by id, brought up to date first: a read-only view, not a copy,
        so a question can look records up in a large namespace without copying it."""
        self._load(kind)
        return MappingProxyType(self._active[kind])

    def get(self, ids: Iterable[str]) -> list[Record]:
        """Records by id, in the order asked; unknown ids are skipped."""
        found: list[Record] = []
        mirrors: dict[Kind, dict[str, Record]] = {}  # one freshness check per kind, not per id
        for record_id in ids:
            if record_id.startswith(ENTITY_NODE):  # an entity node of the link graph, not a stored record
                continue
            kind = kind_of(record_id)
            if kind not in mirrors:
                mirrors[kind] = self._load(kind)
            record = mirrors[kind].get(record_id)
            if record is not None:
                found.append(record)
        return found

    def written(self, ids: Iterable[str]) -> list[Record]:
        """`get`, and the records Chroma holds that the mirror does not: a write whose ledger commit failed
        reached Chroma but not the mirror, which moves with the ledger (`_took`). An input's raw turns
        written ahead so are what its retry takes their ids from again (agents/memory.py `_with_ids`)."""
        ids = list(dict.fromkeys(ids))
        found = {record.id: record for record in self.get(ids)}
        missing: dict[Kind, list[str]] = {}
        for record_id in ids:
            if record_id not in found and not record_id.startswith(ENTITY_NODE):
                missing.setdefault(kind_of(record_id), []).append(record_id)
        for kind, wanted in missing.items():
            got = self._collection(kind).get(ids=wanted, include=["documents", "metadatas"])
            for rid, doc, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
                found[rid] = from_metadata(rid, doc or "", meta or {})
        return [found[i] for i in ids if i in found]

    def get_one(self, record_id: str) -> Record:
        records = self.get([record_id])
        if not records:
            raise NotFoundError(
                f"no record {record_id!r} in namespace {self.namespace!r}: list them with `strata stats`"
            )
        return records[0]

    def has(self, record_id: str) -> bool:
        return bool(self.get([record_id]))

    def vectors(self, ids: Iterable[str]) -> dict[str, np.ndarray]:
        """Stored vectors by id (a traversal scores the records it reaches by their own similarity to the
        question): from a small kind's in-memory index, else read back from Chroma once; ids that are not
        records, or unknown, are left out."""
        ids = list(dict.fromkeys(ids))
        with self._lock:
            found: dict[str, np.ndarray] = {}
            missing: dict[Kind, list[str]] = {}
            for record_id in ids:
                if record_id.split(":", 1)[0] not in KINDS:  # an entity node, not a record
                    continue
                kind = kind_of(record_id)
                exact = self._exact.get(kind)
                held = exact.get(record_id) if exact is not None else self._vectors.get(record_id)
                if held is not None:
                    found[record_id] = held
                else:
                    missing.setdefault(kind, []).append(record_id)
            for kind, wanted in missing.items():
                got = self._collection(kind).get(ids=wanted, include=["embeddings"])
                for record_id, vector in zip(got["ids"], got["embeddings"], strict=True):
                    found[record_id] = self._vectors[record_id] = np.asarray(vector, dtype=np.float32)
            return {i: found[i] for i in ids if i in found}

    def count(self, kind: Kind) -> int:
        return self._collection(kind).count()

    # writing -----------------------------------------------------------
    def add(self, records: Sequence[Record], vectors: np.ndarray | None = None) -> None:
        """Insert or replace records of any kinds (embedding their core text)."""
        self.ledger.check_writable()
        if not records:
            return
        if vectors is None:
            vectors = self.embedder.embed([r.text for r in records])
        by_kind: dict[Kind, list[int]] = {}
        for i, record in enumerate(records):
            by_kind.setdefault(record.kind, []).append(i)
        self._write(records, vectors, by_kind)

    def _write(self, records: Sequence[Record], vectors: np.ndarray, by_kind: dict[Kind, list[int]]) -> None:
        """Chroma upsert, mirror and change sequence as one step: the sequence is committed only
        once Chroma holds the records, so no reader can see the number before the data; the mirror
        takes them only once the number is committed (`_took`)."""
        self.check_vectors(int(vectors.shape[1]), writing=True)
        for kind in by_kind:
            self._load(kind)
            self._collection(kind, create=True)  # its mark claimed and committed before Chroma's collection has it
        # One order for the two locks everywhere: the store's, then the ledger's (`flush` holds the
        # store's while it opens ledger transactions; the other order here deadlocked a writer thread
        # against another thread's write, e.g. a consolidation beside an ingest).
        with self._lock, self.ledger.transaction():
            seq = self.ledger.log_changes(self.namespace, (r.id for r in records))
            for kind, positions in by_kind.items():
                for part in chunked(positions, self._write_batch()):  # Chroma refuses larger writes
                    self._collection(kind, create=True).upsert(
                        ids=[records[i].id for i in part],
                        documents=[records[i].text for i in part],
                        embeddings=[vectors[i].tolist() for i in part],
                        metadatas=[to_metadata(records[i]) for i in part],
                    )
            self.ledger.after_commit(lambda: self._took(records, vectors, by_kind, seq))

    def _took(self, records: Sequence[Record], vectors: np.ndarray, by_kind: dict[Kind, list[int]], seq: int) -> None:
        """The mirror after a committed write (`_write`). Taken before the commit, a failed commit left it
        ahead of the ledger: it served what no other replica could see, and it took the rolled-back number,
        which the next writer (another replica's update or erase) gets, for its own, and never read that
        change (nor did a process that loaded the mirror it saved at that number)."""
        grown: list[Kind] = []
        with self._lock:
            for kind, positions in by_kind.items():
                for i in positions:
                    self._remember(records[i])
                    self._vectors.pop(records[i].id, None)  # read back again if a traversal needs it
                exact = self._exact.get(kind)
                if exact is not None:
                    exact.put((records[i].id for i in positions), vectors[positions])
                    if len(exact) > EXACT_LIMIT:  # grown past the limit: Chroma searches it from now on
                        self._exact[kind] = None
                        grown.append(kind)
                if kind not in self._written and not self._shared:  # a new collection's index: made private
                    make_new_indexes_private(self.settings.chroma_path)
                    self._written.add(kind)
            self._advance(seq)
            for kind in grown:
                grown_large(self._collection(kind))

    def _write_batch(self) -> int:
        """The most records one Chroma write takes (5,461 embedded: SQLite's limit on a statement's
        parameters); asked once, as a server may set its own."""
        if self._max_batch is None:
            try:
                self._max_batch = max(1, int(self._client.get_max_batch_size()))
            except Exception:  # a client that cannot say: the embedded figure, rounded down
                self._max_batch = FALLBACK_WRITE_BATCH
        return self._max_batch

    def stage(
        self, records: Sequence[Record], links: Iterable[Link] = (), state: dict[str, object] | None = None,
        unlinks: Iterable[Link] = (),
    ) -> bool:
        """Hold one turn's derived records, links (and links it removes) and small ledger state for the
        next `flush` (readable at once); True when the batch is full and should be flushed now.

        The records' vectors are computed on the embedder's background thread while the next
        turns are derived, and filled in when a search of their kind or the flush needs them."""
        self.embedder.prefetch([r.text for r in records], background=True)
        with self._lock:
            mirrors = {kind: self._load(kind) for kind in {r.kind for r in records}}
            stored = {r.id: mirrors[r.kind][r.id] for r in records if r.id in mirrors[r.kind]}
            self._staged.put(records, None, links, state or {}, stored, unlinks)
            for record in records:
                self._remember(record)
            return self._staged.turns >= self._batch_turns

    def flush(self) -> int:
        """Write what is staged: one upsert per kind, then links and state in one ledger transaction.

        The staged batch is dropped only once both are written; a failure leaves it to the next flush.
        Returns the number of records written.
        """
        with self._lock:
            staged = self._staged
            if not staged:
                return 0
            self._resolve()
            records = list(staged.records.values())
            if records:
                with self.ledger.transaction() as session:  # the batch can be taken back until its state commits
                    before = staged.before
                    self._journal(JournalEntry(records=[r for r in before.values() if r is not None],
                                               created=[i for i, r in before.items() if r is None]), session)
                self.add(records, np.vstack([staged.vectors[r.id] for r in records]))
            with self.ledger.transaction() as conn:
                self.ledger.remove_links(staged.unlinks.values(), conn)
                self.ledger.add_links(staged.links.values(), conn)
                for key, value in staged.state.items():
                    self.ledger.set_state(self.namespace, key, value, conn)
                if self._journaled:  # the batch, its note evolutions and its turns' refreshes stand
                    journal.clear(self.ledger, self.namespace, conn)
            self._staged = StagedWrites()
            self._journaled = self._until_flush = False
            return len(records)

    def _resolve(self, kind: Kind | None = None) -> None:
        """Fill in the vectors of staged records (of `kind`, or all), waiting for the background batch
        that holds them."""
        with self._lock:
            waiting = self._staged.unresolved(kind)
            if waiting:
                vectors = self.embedder.embed([r.text for r in waiting])
                for record, vector in zip(waiting, vectors, strict=True):
                    self._staged.vectors[record.id] = vector

    def has_staged(self) -> bool:
        """Whether derived writes wait for a flush (an ingest is in progress)."""
        with self._lock:
            return bool(self._staged)

    def state(self, key: str, default: object = None) -> object:
        """A small ledger value (open episode, link trackers, pending marks) as staged, else as stored."""
        with self._lock:
            if key in self._staged.state:
                return self._staged.state[key]
        return self.ledger.get_state(self.namespace, key, default)

    def set_state(self, key: str, value: object) -> None:
        """Write a small ledger value now, and over a staged value of the key too: an erase or a forget that
        edits the open episode between two turns of an ingest would otherwise be undone by the ingest's next
        flush, which writes back the value it staged before."""
        with self._lock:
            if key in self._staged.state:
                self._staged.state[key] = value
            self.ledger.set_state(self.namespace, key, value)

    def close(self) -> None:
        """Let go of the in-memory mirrors (the registry closes idle namespaces), saving the large ones
        first (memory/snapshots.py); the data stays stored."""
        with self._lock:
            for kind in list(self._records):
                self._save(kind)
            self._clear_mirrors()
            self._collections.clear()
            self._vectors.clear()

    def timeline(self) -> list[Record]:
        """The active raw turns in chronological order (kept sorted as turns come and go)."""
        self._load("raw")
        with self._lock:
            if self._turn_list is None:
                self._turn_list = self._timeline.records()
            return self._turn_list

    def adjacent(self, record_ids: Iterable[str], step: int) -> dict[str, Record]:
        """For each active turn among `record_ids`, the active turn `step` places after it (negative:
        before) in the timeline, where there is one."""
        self._load("raw")
        with self._lock:
            found = {rid: self._timeline.adjacent(rid, step) for rid in record_ids}
        return {rid: other for rid, other in found.items() if other is not None}

    def latest_time(self) -> datetime | None:
        """The latest time of an active turn, None when no turn is dated."""
        self._load("raw")
        with self._lock:
            return self._timeline.latest_time()

    def latest_turn(self) -> Record | None:
        """The active turn said last (its time, and the clock it was said on), None when no turn is dated."""
        self._load("raw")
        with self._lock:
            return self._timeline.latest_turn()

    def turn_count(self) -> int:
        """How many active turns `timeline()` holds, without building its list (which every raw change
        drops: the fast path took its length for each turn, an O(n) copy per turn)."""
        self._load("raw")
        with self._lock:
            return len(self._timeline)

    def participants(self) -> list[str]:
        """Who takes part: the distinct speakers of the stored turns, in order of appearance."""
        self._load("raw")
        with self._lock:
            return self._timeline.participants()

    def facts_from(self, dialogue_ids: Iterable[str]) -> list[Record]:
        """The active facts derived from any of these turns (by dialogue id), from an index kept with the mirror."""
        facts = self._load("fact")
        with self._lock:
            ids = {fid for dia in dialogue_ids for fid in self._facts_of.get(dia, ())}
            found = (facts.get(fid) for fid in sorted(ids))
            return [r for r in found if r is not None and r.status == Status.ACTIVE]

    def _remember(self, record: Record, indexed: bool = False) -> None:
        """Put a record in the mirror and its lookups (`indexed`: its BM25 entry is already there)."""
        kind = record.kind
        self._times.pop(kind, None)
        old = self._records[kind].get(record.id)
        if old is not None and kind == "fact":
            self._unfile_fact(old)
        self._records[kind][record.id] = record
        index = self._lexical[kind]
        active = record.status == Status.ACTIVE
        if active:
            self._active[kind][record.id] = record
            if not indexed:
                index.add(record.id, _lexical_text(record))
        else:
            self._active[kind].pop(record.id, None)
            index.remove(record.id)
        if record.status == Status.SUPERSEDED:
            self._superseded[kind][record.id] = record
        else:
            self._superseded[kind].pop(record.id, None)
        if kind == "raw":
            self._turn_list = None
            if active:
                self._timeline.put(record)
            else:
                self._timeline.remove(record.id)
        elif kind == "fact":
            for dia in record.source_ids:
                self._facts_of.setdefault(dia, set()).add(record.id)

    def _unfile_fact(self, record: Record) -> None:
        for dia in record.source_ids:
            ids = self._facts_of.get(dia)
            if ids is not None:
                ids.discard(record.id)
                if not ids:
                    del self._facts_of[dia]

    def _forget(self, kind: Kind, record_id: str) -> None:
        old = self._records[kind].pop(record_id, None)
        self._times.pop(kind, None)
        exact = self._exact.get(kind)
        if exact is not None:
            exact.remove(record_id)
        self._active[kind].pop(record_id, None)
        self._superseded[kind].pop(record_id, None)
        self._lexical[kind].remove(record_id)
        if kind == "raw":
            self._turn_list = None
            self._timeline.remove(record_id)
        elif kind == "fact" and old is not None:
            self._unfile_fact(old)

    def _rewrite(self, record: Record) -> None:
        """Store a changed record (new text or status) in place, stamped with a new sequence.

        While a batch is staged (a note evolution inside an ingest: every other edit flushes
        first), the new version joins the batch and is written with it, one upsert for all of
        them instead of one each. Its history row and journal entry are written at once; a crash
        before the flush takes both back (memory/journal.py) and deriving the turns again evolves
        the note again."""
        self._rewrite_all([record])

    def _rewrite_all(self, records: Sequence[Record]) -> None:
        """`_rewrite` for several records, with one embedding call (a unit of work taken back)."""
        if not records:
            return
        vectors = self.embedder.embed([record.text for record in records])
        for kind in {record.kind for record in records}:
            self._load(kind)
        with self._lock:  # held to the write: no batch is staged between the check and the write
            if self._staged:
                for record, vector in zip(records, vectors, strict=True):
                    self._staged.records[record.id] = record
                    self._staged.vectors[record.id] = vector
                    self._remember(record)
                return
            by_kind: dict[Kind, list[int]] = {}
            for i, record in enumerate(records):
                by_kind.setdefault(record.kind, []).append(i)
            self._write(records, vectors, by_kind)

    def update(
        self, record_id: str, new_text: str, reason: str, policy: str = "offline",
        fields: dict[str, str] | None = None, follows: int | None = None, cause: str = "",
    ) -> Change:
        """Replace a record's text (and its subject/attribute/value); the old ones go to history first."""
        with self.edits():  # read and rewrite as one step: a concurrent edit cannot slip in between
            record = self.get_one(record_id)
            old_fields = {name: getattr(record, name) for name in _FACT_FIELDS}
            new_fields = {**old_fields, **(fields if fields is not None else _fields_of(record, new_text))}
            change = Change(
                namespace=self.namespace, record_id=record_id, kind=record.kind, action=Action.UPDATE,
                old_text=record.text, new_text=new_text, old_status=record.status, new_status=Status.ACTIVE,
                reason=reason, policy=policy, old_fields=old_fields, new_fields=new_fields, follows=follows,
                cause=cause,
            )
            updated = record.model_copy(
                update={"text": new_text, "version": record.version + 1, "status": Status.ACTIVE, **new_fields}
            )
            return self._apply(change, record, updated)

    def delete(
        self, record_id: str, reason: str, policy: str = "offline", follows: int | None = None, cause: str = ""
    ) -> Change:
        """Tombstone a record: hidden from search, kept until purged on purpose."""
        with self.edits():
            record = self.get_one(record_id)
            change = Change(
                namespace=self.namespace, record_id=record_id, kind=record.kind, action=Action.DELETE,
                old_text=record.text, new_text=record.text, old_status=record.status, new_status=Status.DELETED,
                reason=reason, policy=policy, follows=follows, cause=cause,
            )
            updated = record.model_copy(update={"status": Status.DELETED, "version": record.version + 1})
            return self._apply(change, record, updated)

    def evolve(self, record_id: str, tags: list[str], context: str, reason: str, policy: str = "offline") -> Change:
        """Refine a record's note (tags, context) after a newer note arrived (A-MEM 3.3); undoable by id.

        Kept apart from `update` (action `evolve`) so that a plain `undo()` still
        reverses the latest edit of a record's content, not a background refinement.
        """
        with self.edits():
            record = self.get_one(record_id)
            old_fields = {"tags": json.dumps(record.tags), "context": record.context}
            new_fields = {"tags": json.dumps(tags), "context": context}
            change = Change(
                namespace=self.namespace, record_id=record_id, kind=record.kind, action=Action.EVOLVE,
                old_text=record.text, new_text=record.text, old_status=record.status, new_status=record.status,
                reason=reason, policy=policy, old_fields=old_fields, new_fields=new_fields,
            )
            updated = record.model_copy(update={"tags": list(tags), "context": context})  # the text's version stays
            # no flush: an evolution runs inside a turn's derive, and `_rewrite` keeps a staged copy in step
            return self._apply(change, record, updated, flush=False)

    def supersede(
        self, old_id: str, new_id: str, reason: str, policy: str = "offline", follows: int | None = None,
        cause: str = "",
    ) -> Change:
        """Mark an old record as replaced by a newer one, with a supersedes link."""
        with self.edits():
            record = self.get_one(old_id)
            change = Change(
                namespace=self.namespace, record_id=old_id, kind=record.kind, action=Action.UPDATE,
                old_text=record.text, new_text=record.text, old_status=record.status,
                new_status=Status.SUPERSEDED, reason=reason, policy=policy, follows=follows, cause=cause,
            )
            updated = record.model_copy(update={"status": Status.SUPERSEDED, "version": record.version + 1})
            link = Link(namespace=self.namespace, src=new_id, dst=old_id, type=LinkType.SUPERSEDES)
            return self._apply(change, record, updated, [link])

    def _apply(
        self, change: Change, record: Record, updated: Record, links: Sequence[Link] = (), flush: bool = True
    ) -> Change:
        """The history row, the links and a journal entry holding `record` as it was, committed
        together; then the Chroma write. A crash in between is taken back by `recover`, a failed
        write at once, so a record never changes without its history row, nor the reverse."""
        if flush:
            self.flush()  # an edit must land after the staged version of the record, never under it
        with self.edits():
            entry = JournalEntry(records=[record], links=list(links))
            with self.ledger.transaction() as session:
                entry.change = self.ledger.record_change(change, session)
                self.ledger.add_links(links, session)
                self._journal(entry, session)
            self._write_or_take_back(updated, entry)
        return change.model_copy(update={"id": entry.change})

    def _write_or_take_back(self, updated: Record, entry: JournalEntry) -> None:
        try:
            self._rewrite(updated)
        except BaseException:
            self._take_back([entry])
            raise

    def undo(self, change_id: int | None = None) -> Change:
        """Reverse one change (the latest update or delete not yet undone when no id is given; an
        evolution or other change by its id), and the changes that
        came with it (a persona trait retired with its fact).

        Changes to one record are undone newest first: undoing an older one while a newer one
        is in force would restore a value the record no longer holds and write a history the
        record never went through, so it is refused with the change to undo first.
        """
        return self.undo_rows(change_id)[-1]

    def undo_rows(self, change_id: int | None = None) -> list[Change]:
        """`undo`, returning every row it wrote: the followers' undos first, the change's own last (what a
        slot decided again after the undo reads: memory/slots.py `undo`)."""
        with self.edits():  # the change and its followers are reversed together, or not at all
            self.flush()
            change = self._find_undoable(change_id)
            together = self._with_followers(change)
            for member in together:  # checked before anything is reversed: all or nothing
                self._refuse_if_overtaken(member, {int(c.id or 0) for c in together})
            written: list[Change] = []
            self._reverse(change, written)
            return written

    def _with_followers(self, change: Change) -> list[Change]:
        """The change and, recursively, the changes made with it."""
        found = [change]
        for follower in self.ledger.followers(self.namespace, int(change.id or 0)):
            found += self._with_followers(follower)
        return found

    def _reverse(self, change: Change, written: list[Change]) -> None:
        for follower in self.ledger.followers(self.namespace, int(change.id or 0)):
            self._reverse(follower, written)
        record = self.get_one(change.record_id)
        names = [*_FACT_FIELDS, *(n for n in change.old_fields if n not in _FACT_FIELDS)]  # an evolution's tags too
        now = {name: json.dumps(value) if name in _LIST_FIELDS else value
               for name in names if (value := getattr(record, name, None)) is not None}
        text, status, fields = change.old_text, change.old_status, dict(change.old_fields)
        if record.kind == "summary" and (record.text, record.status) != (change.new_text, change.new_status):
            # told again since (a consolidation writes no history): its old text would name turns it no longer
            # cites; it stays as told, and the next consolidation tells it from what this undo gives back
            text, status, fields = record.text, record.status, now
        restored = record.model_copy(
            update={"text": text, "status": status, "version": record.version + 1, **_field_values(fields)}
        )
        undo = Change(
            namespace=self.namespace, record_id=record.id, kind=record.kind, action=Action.UNDO,
            old_text=record.text, new_text=text, old_status=record.status,
            new_status=status, reason=f"undo of change {change.id}", policy="user",
            undoes=change.id, old_fields=now, new_fields=fields,
        )
        entry = JournalEntry(records=[record], undid=change.id)
        # "X supersedes it" no longer holds: the link would still date the record's end (`valid_until`)
        taken_back = change.new_status == Status.SUPERSEDED and status != Status.SUPERSEDED
        unlinked = self._superseded_by(record.id) if taken_back else []
        with self.ledger.transaction() as session:
            entry.change = self.ledger.record_change(undo, session)
            self.ledger.mark_undone(self.namespace, int(change.id or 0), session)
            self.ledger.remove_links(unlinked, session)
            self._journal(entry, session)
        self._write_or_take_back(restored, entry)
        written.append(undo.model_copy(update={"id": entry.change}))

    def _refuse_if_overtaken(self, change: Change, together: set[int]) -> None:
        """Raise when a newer change to the same record is still in force (and is not undone with this one)
        and the undo would overwrite it: any newer update or delete, and a newer evolution when this is an
        evolution too (both set the note's tags and context)."""
        overtaking = {Action.UPDATE, Action.DELETE} | ({Action.EVOLVE} if change.action == Action.EVOLVE else set())
        for newer in self.ledger.history(self.namespace, change.record_id, limit=1_000_000):
            if int(newer.id or 0) <= int(change.id or 0):
                break
            if newer.undone or newer.action not in overtaking or newer.id in together:
                continue
            first = newer.follows or newer.id
            raise InputError(
                f"change {change.id} on {change.record_id} was followed by change {newer.id}, still in force: "
                f"undo change {first} first (`strata undo {first}`), then change {change.id}"
            )

    def _find_undoable(self, change_id: int | None) -> Change:
        if change_id is not None:
            change = self.ledger.get_change(self.namespace, change_id)
            if change is None:
                raise NotFoundError(f"no change {change_id} in namespace {self.namespace!r}: see `strata history`")
            if change.undone or change.action in (Action.UNDO, Action.NOOP):
                raise NotFoundError(f"change {change_id} cannot be undone (already undone, or itself an undo or no-op)")
            return change
        change = self.ledger.latest_edit(self.namespace)
        if change is not None:
            return change
        raise NotFoundError(
            f"nothing to undo in namespace {self.namespace!r}: no update or delete is in force "
            "(an evolution is undone by its id: see `strata history`, then `strata undo N`)"
        )

    def record_noop(self, record_id: str, kind: Kind, reason: str, policy: str, cause: str = "") -> Change:
        """Note that the refresher looked at a conflict and chose to leave it."""
        change = Change(
            namespace=self.namespace, record_id=record_id, kind=kind, action=Action.NOOP, reason=reason, policy=policy,
            cause=cause,
        )
        with self.edits(), self.ledger.transaction() as session:  # taken back with its Refresher step
            entry = JournalEntry(change=self.ledger.record_change(change, session))
            self._journal(entry, session)
        return change.model_copy(update={"id": entry.change})

    def discard(self, kind: Kind, ids: Sequence[str]) -> int:
        """Remove derived records their sources no longer make (a summary whose group dissolved), with
        their links and history (a Refresher may have edited one; an undo of that edit could only fail
        now); returns how many. The links and rows go first, so a crash in between leaves the record,
        found again next time.
        Nothing staged is flushed: derived records of this sort are written directly, never staged, and a
        flush from here could end another thread's unit of work early (memory/journal.py)."""
        self.ledger.check_writable()
        wanted = [record.id for record in self.get(ids) if record.kind == kind]
        if not wanted:
            return 0
        self.ledger.remove_links(self.ledger.neighbours(self.namespace, wanted))
        self.ledger.remove_history(self.namespace, wanted)
        self._remove(kind, wanted)
        return len(wanted)

    def purge(self) -> int:
        """Remove tombstoned records for good (on purpose only)."""
        self.ledger.check_writable()
        self.flush()
        removed = 0
        for kind in KINDS:
            dead = [r.id for r in self.all(kind, include_inactive=True) if r.status == Status.DELETED]
            if dead:
                self._remove(kind, dead)
                removed += len(dead)
        return removed

    def erase(
        self, ids: Sequence[str], dia_ids: Sequence[str] = (), retold: Sequence[Record] = (),
        changes: Sequence[int] = (), told: Sequence[str] = (), told_turns: Sequence[Record] = (),
        told_rows: Sequence[Change] = (),
    ) -> dict[str, int]:
        """Remove records for good, with their links and history, and the working-memory rows of
        `dia_ids` (memory/erasure.py chooses what to erase); write `retold` records in place of their
        old versions, whose history goes too (it holds what they said before); delete the history rows
        `changes` too, and write the working-memory rows of the turns `told` (ids) as they read now (a
        request's words that named an erased record: memory/erasure.py `request_rows`), after writing
        `told_turns` in place (such a turn an undo gave its words back to) and the rows `told_rows` of
        those turns as given, their history kept (`requests_told`). Not undoable: nothing is journaled.

        The notes these records evolved (A-MEM) get back the tags and context they had before the
        first such evolution, and their evolution rows from then on go too (those rows hold what the
        erased note added). Chroma first, then the ledger; every step is harmless to repeat, which is
        how an erase killed in between is finished (memory/erasure.py: `finish_erasure`). Saved mirrors
        of the namespace are dropped (they are caches, written again on a later open)."""
        wanted = list(dict.fromkeys(ids))
        with self.edits():  # which refuses a read-only folder first
            self.flush()
            reverted, rows = self._unevolve(wanted)
            # an episode told again is told from what stays, its history gone: nothing of it to take back
            taken_back, edit_rows = self._take_back_edits(dia_ids, {*wanted, *(r.id for r in retold)})
            rows += [*edit_rows, *changes]
            written = {r.id: r for r in [*retold, *taken_back, *told_turns]}  # one version of each in one upsert
            self._rewrite_all(list(written.values()))
            by_kind: dict[Kind, list[str]] = {}
            # every target, found or not: one Chroma deleted before a failed commit is found nowhere now, and
            # only its stamp tells the other replicas' mirrors that it went
            for record_id in wanted:
                by_kind.setdefault(kind_of(record_id), []).append(record_id)
            for kind, group in by_kind.items():
                self._remove(kind, group)
                for record_id in group:
                    self._vectors.pop(record_id, None)
            with self.ledger.transaction():
                self.ledger.rewrite_changes(self.namespace, told_rows)
                told_now = {r.dialogue_id: r.text for r in self.get(told) if r.dialogue_id}
                removed = self.ledger.erase(self.namespace, wanted, rows, dia_ids, [r.id for r in retold], told_now)
                removed["items"] = store_items.erase_items(self.ledger, self.namespace, wanted)
                # mirrors saved before now hold what went: other replicas delete theirs (memory/snapshots.py)
                self.ledger.set_state(self.namespace, ERASED_AT, self.ledger.sequence(self.namespace)[0])
                self.ledger.bump(EVERY_NAMESPACE, MIRRORS_OUTDATED)
            snapshots.remove(self._mirror_folder, collection_names(self.namespace))
        return {"reverted": reverted, "edits_taken_back": len(taken_back), "retold": len(retold), **removed}

    def _take_back_edits(self, turns: Sequence[str], erased: set[str]) -> tuple[list[Record], list[int]]:
        """What the Refresher changed in records that stay, for turns being erased (a listener's "you moved
        to X" updated the other's fact; a model's reason quotes the turn), taken out of their history as if
        never made: each such record's rows are replayed without the updates (and supersedes) and no-op
        notes made for an erased turn, nor the undos of those; the rows that stay, made for turns that stay,
        are told again from the text the replay reaches (their old text held the erased words), and the
        record ends as the last of them leaves it. A delete made for an erased turn (a forget the owner
        asked for) stays, with a neutral reason. Returns the records as they come out and the rows to
        delete; the rows told again are rewritten here (repeating this gives the same)."""
        caused = self.ledger.changes_caused_by(self.namespace, list(turns))
        touched = sorted({c.record_id for c in caused} - erased)
        standing = {int(c.id or 0) for c in caused if c.action == Action.DELETE and c.record_id not in erased}
        by_record: dict[str, list[Change]] = {}
        for change in self.ledger.histories(self.namespace, touched):  # oldest first
            by_record.setdefault(change.record_id, []).append(change)
        restored: list[Record] = []
        dropped: list[int] = []
        rewritten: list[Change] = []
        unlinked: list[Link] = []
        ends: dict[str, tuple[str, Status, dict[str, str]]] = {}
        for record_id, rows in sorted(by_record.items(), key=lambda item: item[0].startswith("persona:")):
            replay = _replayed(rows, set(turns), standing)  # facts first: a trait ends as the fact it follows ends
            dropped += replay.dropped
            rewritten += replay.rewritten
            found = self.get([record_id])
            if not found:
                continue
            record = found[0]
            text, status, fields = replay.end
            fields = {**{k: getattr(record, k) for k in _FACT_FIELDS}, **fields}  # a supersede's rows hold none
            ends[record_id] = (text, status, fields)
            status = self._as_its_fact_ends(record, status, replay.followed, ends)
            if _state_of(record) != (text, status, {k: fields.get(k, getattr(record, k)) for k in _FACT_FIELDS}):
                restored.append(record.model_copy(update={
                    "text": text, "status": status, "version": record.version + 1,
                    **{k: v for k, v in fields.items() if k in _FACT_FIELDS},
                }))
            if replay.unsuperseded and status != Status.SUPERSEDED:  # "X supersedes it" no longer holds
                unlinked += self._superseded_by(record_id)
        self.ledger.rewrite_changes(self.namespace, rewritten)
        self.ledger.remove_links(unlinked)
        return restored, dropped

    def _superseded_by(self, record_id: str) -> list[Link]:
        """The supersedes links into a record (newer record -> it)."""
        return [link for link in self.ledger.neighbours(self.namespace, [record_id], [LinkType.SUPERSEDES])
                if link.dst == record_id]

    def valid_until(self, records: Iterable[Record]) -> dict[str, datetime]:
        """When each superseded record stopped holding: the time the earliest record superseding it was
        said (its turn's time). Kept as the supersedes link, not on the record, so an undo or an erase that
        takes the supersession back takes its end with it. Records not superseded are left out."""
        superseded = [r.id for r in records if r.status == Status.SUPERSEDED]
        if not superseded:
            return {}
        wanted = set(superseded)
        newer: dict[str, set[str]] = {}
        for link in self.edges(superseded, [LinkType.SUPERSEDES]):
            if link.dst in wanted:
                newer.setdefault(link.dst, set()).add(link.src)
        by_id = {r.id: r for r in self.get(sorted({i for ids in newer.values() for i in ids}))}
        turns = {r.dialogue_id: r.time for r in self.get(sorted({f"raw:{r.dialogue_id}" for r in by_id.values()
                                                                 if r.dialogue_id}))}
        until: dict[str, datetime] = {}
        for record_id, sources in newer.items():
            said = [turns.get(r.dialogue_id) or r.time for r in (by_id.get(s) for s in sources) if r is not None]
            moments = [moment for moment in said if moment is not None]
            if moments:
                until[record_id] = min(moments)
        return until

    def superseded(self, kind: Kind) -> list[Record]:
        """The records of `kind` no longer current (superseded by a newer statement), for questions about
        the past: kept apart in the mirror, so a question does not scan every record for the few."""
        self._load(kind)
        with self._lock:
            return list(self._superseded[kind].values())

    def _as_its_fact_ends(
        self, trait: Record, status: Status, leads: Sequence[int], ends: dict[str, tuple[str, Status, dict[str, str]]]
    ) -> Status:
        """A persona trait retired along with its fact's change for an erased turn comes back only if its fact
        still holds it (active, with the trait's value): a later change of the fact, for a turn that stays,
        found it retired already and did not retire it again."""
        if status != Status.ACTIVE or not leads:
            return status
        for lead in leads:
            change = self.ledger.get_change(self.namespace, lead)
            if change is None:
                continue
            fact = ends.get(change.record_id)
            if fact is None:
                found = self.get([change.record_id])
                if not found:
                    continue
                fact = _state_of(found[0])
            if fact[1] != Status.ACTIVE:
                return fact[1]
            if comparable(fact[2].get("value") or "") != comparable(trait.value):
                return Status.SUPERSEDED
        return status

    def _unevolve(self, sources: Sequence[str]) -> tuple[int, list[int]]:
        """Give each note the tags and context it had before the first evolution by one of `sources`;
        returns how many notes changed and the evolution rows to delete (that one and the later ones)."""
        erased = set(sources)
        rows: list[int] = []
        restored: list[Record] = []
        first_by_note: dict[str, Change] = {}
        for change in self.ledger.evolutions_by(self.namespace, sources):
            if change.record_id not in erased:
                first_by_note.setdefault(change.record_id, change)
        for note_id, first in first_by_note.items():
            later = [c for c in self.ledger.history(self.namespace, note_id, limit=1_000_000)
                     if c.action == Action.EVOLVE and int(c.id or 0) >= int(first.id or 0)]
            rows.extend(int(c.id or 0) for c in later)
            found = self.get([note_id])
            if found:
                tags = first.old_fields.get("tags")
                restored.append(found[0].model_copy(update={
                    "tags": json.loads(tags) if tags else [], "context": first.old_fields.get("context", ""),
                }))
        self._rewrite_all(restored)
        return len(restored), rows

    def _remove(self, kind: Kind, ids: list[str]) -> None:
        """Delete records from Chroma and the mirror, stamped with a new sequence (purge, a batch taken back,
        an erase). The mirror lets them go once the stamp is committed: after a failed commit it still holds
        them, so a retry deletes and stamps them again, and the other replicas, which reload only stamped
        records, learn of the delete."""
        self._load(kind)
        with self._lock, self.ledger.transaction():  # the store's lock first, as in `_write`
            seq = self.ledger.log_changes(self.namespace, ids)
            for part in chunked(ids, self._write_batch()):
                self._collection(kind).delete(ids=part)
            self.ledger.after_commit(lambda: self._let_go(kind, ids, seq))

    def _let_go(self, kind: Kind, ids: list[str], seq: int) -> None:
        """The mirror after a committed delete (`_remove`)."""
        with self._lock:
            for record_id in ids:
                self._forget(kind, record_id)
            self._advance(seq)

    def history(self, record_id: str | None = None, limit: int = 100) -> list[Change]:
        self._refresh()  # an erase stopped midway is finished first: its rows must not be read
        return self.ledger.history(self.namespace, record_id, limit)

    def histories(self, record_ids: Sequence[str]) -> list[Change]:
        """Every history row of these records, oldest first (a few queries for any number of them)."""
        return self.ledger.histories(self.namespace, record_ids)

    # links and working memory ------------------------------------------
    def link(self, links: Iterable[Link]) -> int:
        self.ledger.check_writable()
        return self.ledger.add_links(links)

    def edges(self, ids: Iterable[str], types: Iterable[LinkType] | None = None) -> list[Link]:
        """The links touching any of `ids`, written or staged (one ledger query for all of them)."""
        ids = list(ids)
        wanted = None if types is None else list(types)
        with self._lock:
            staged = [link for link in self._staged.neighbours(set(ids)) if wanted is None or link.type in wanted]
        return [*self.ledger.neighbours(self.namespace, ids, wanted), *staged]

    def neighbours(self, ids: Iterable[str], types: Iterable[LinkType] | None = None) -> list[str]:
        """Ids one edge away from `ids` (excluding them)."""
        ids = list(ids)
        seen = set(ids)
        found: list[str] = []
        for link in self.edges(ids, types):
            for other in (link.src, link.dst):
                if other not in seen:
                    seen.add(other)
                    found.append(other)
        return found

    def push_working(self, speaker: str, dia_id: str, text: str, time: datetime | None, size: int) -> None:
        self.ledger.check_writable()
        self.ledger.push_working(self.namespace, speaker, dia_id, text, time, size)

    def working(self) -> list[dict[str, str]]:
        """The recent turns, as their records now read: a forgotten turn leaves the window (an undo brings it
        back) and a request to forget shows as told without its words."""
        self._refresh()  # an erase stopped midway is finished before its rows are read
        rows = self.ledger.working(self.namespace)
        records = {r.dialogue_id: r for r in self.get(f"raw:{row['dia_id']}" for row in rows if row["dia_id"])}
        shown = []
        for row in rows:
            record = records.get(row["dia_id"])
            if record is None:  # a row without its record (an id-less turn of an older version): as it was written
                shown.append(row)
            elif record.status == Status.ACTIVE:
                shown.append({**row, "text": record.text})
        return shown

    # search ------------------------------------------------------------
    def dense(
        self, kind: Kind, vector: np.ndarray, k: int, time_window: tuple[datetime, datetime] | None = None,
        include_inactive: bool = False,
    ) -> list[tuple[str, float]]:
        """Cosine top-k ids with their similarity."""
        if k <= 0:
            return []
        with self._lock:
            self._resolve(kind)
            staged = self._staged.nearest(kind, vector, time_window, include_inactive)
            replaced = set(self._staged.records)
        records = self._load(kind)
        total = len(records)
        if total == 0:
            return merge_nearest([], staged, replaced, k)
        self.check_vectors(int(np.shape(vector)[-1]))
        collection = self._collection(kind)
        with self._lock:
            active = self._active[kind]
            inactive = total - len(active)
            exact = self._exact_index(kind, total)
            if exact is not None:
                allowed: Callable[[str], bool] = (lambda rid: True) if include_inactive else active.__contains__
                if time_window is not None:
                    within = set(self._within(kind, time_window)) if not include_inactive else None
                    if within is not None:
                        allowed = within.__contains__
                    else:
                        start, end = time_window

                        def allowed(rid: str) -> bool:
                            moment = records[rid].time if rid in records else None
                            return moment is not None and start <= moment <= end

                stored = exact.nearest(vector, k + len(replaced), lambda rid: rid not in replaced and allowed(rid))
                return merge_nearest(stored[:k], staged, replaced, k)
        if time_window is not None and not include_inactive:
            within = [rid for rid in self._within(kind, time_window) if rid not in replaced]
            if len(within) <= WINDOW_IDS:  # Chroma searches just these ids, no metadata filter to run
                stored = []
                if within:
                    result = collection.query(
                        query_embeddings=[vector.tolist()], ids=within, n_results=min(k, len(within)),
                        include=["distances"],
                    )
                    stored = _similarities(result)
                return merge_nearest(stored, staged, replaced, k)
        if time_window is None and (include_inactive or inactive <= UNFILTERED_SLACK):
            # the nearest k + inactive records hold the nearest k active ones: no metadata filter to run
            n = min(k + (0 if include_inactive else inactive), total)
            result = collection.query(query_embeddings=[vector.tolist()], n_results=n, include=["distances"])
            stored = [(rid, sim) for rid, sim in _similarities(result) if include_inactive or rid in active]
            return merge_nearest(stored[:k], staged, replaced, k)
        clauses: list[dict[str, Any]] = []
        if not include_inactive:
            clauses.append({"status": "active"})
        if time_window is not None:
            clauses.append({"time_ts": {"$gte": epoch_seconds(time_window[0])}})
            clauses.append({"time_ts": {"$lte": epoch_seconds(time_window[1])}})
        where: dict[str, Any] | None = None
        if len(clauses) == 1:
            where = clauses[0]
        elif clauses:
            where = {"$and": clauses}
        result = collection.query(
            query_embeddings=[vector.tolist()], n_results=min(k, total), where=where, include=["distances"]
        )
        return merge_nearest(_similarities(result), staged, replaced, k)

    def _exact_index(self, kind: Kind, total: int) -> ExactIndex | None:
        """The in-memory index of a kind of at most EXACT_LIMIT records, loaded with every stored vector
        on first use (the staged ones are searched apart); None for a larger kind."""
        if kind not in self._exact:
            if total > EXACT_LIMIT:
                self._exact[kind] = None
                grown_large(self._collection(kind))
            else:
                index = ExactIndex()
                for ids, vectors in read_vectors(self._collection(kind)):
                    index.put(ids, vectors)
                self._exact[kind] = index
        return self._exact[kind]

    def _time_index(self, kind: Kind) -> tuple[np.ndarray, list[str]]:
        """The active dated records of `kind` as sorted epochs and their ids: built with numpy (100 ms at
        100,000 records; per-record epochs took 200), when a large mirror loads or on first use."""
        with self._lock:
            index = self._times.get(kind)
            if index is None:
                dated = [r for r in self._active[kind].values() if r.time is not None]
                stamps = np.array([r.time for r in dated], dtype="datetime64[us]").astype(np.int64) / 1e6
                order = np.argsort(stamps, kind="stable")
                index = self._times[kind] = (stamps[order], [dated[i].id for i in order])
            return index

    def _within(self, kind: Kind, window: tuple[datetime, datetime]) -> list[str]:
        """Ids of the active records of `kind` dated inside `window`, from a time index built on first
        use and dropped when the kind changes."""
        epochs, ids = self._time_index(kind)
        low = int(np.searchsorted(epochs, epoch_seconds(window[0]), side="left"))
        high = int(np.searchsorted(epochs, epoch_seconds(window[1]), side="right"))
        return ids[low:high]

    def lexical(
        self, kind: Kind, query: str, k: int, time_window: tuple[datetime, datetime] | None = None
    ) -> list[tuple[str, float]]:
        records = self._load(kind)
        allowed = None
        if time_window is not None:
            start, end = time_window

            def allowed(rid: str) -> bool:
                moment = records[rid].time
                return moment is not None and start <= moment <= end

        return self._lexical[kind].search(query, k, allowed)

    def search(
        self, kind: Kind, query: str, k: int, time_window: tuple[datetime, datetime] | None = None,
        vector: np.ndarray | None = None,
    ) -> list[Hit]:
        """Hybrid search: dense and BM25 lists fused by reciprocal rank."""
        if k <= 0:
            return []
        if vector is None:
            vector = self.embedder.embed([query])[0]
        pool = max(k * 3, 20)
        dense = self.dense(kind, vector, pool, time_window)
        lexical = self.lexical(kind, query, pool, time_window)
        fused = reciprocal_rank_fusion([[rid for rid, _ in dense], [rid for rid, _ in lexical]])
        dense_ids = {rid for rid, _ in dense}
        lexical_ids = {rid for rid, _ in lexical}
        records = self._load(kind)
        hits: list[Hit] = []
        for rid, score in fused:
            record = records.get(rid)
            if record is None:
                continue
            found_by = [name for name, ids in (("dense", dense_ids), ("bm25", lexical_ids)) if rid in ids]
            hits.append(Hit(record=record, score=score, found_by=found_by))
            if len(hits) >= k:
                break
        return hits

    def stats(self) -> dict[str, Any]:
        counts: dict[str, Any] = {}
        for kind in KINDS:
            records = self.all(kind, include_inactive=True)
            counts[kind] = {
                "active": sum(r.status == Status.ACTIVE for r in records),
                "superseded": sum(r.status == Status.SUPERSEDED for r in records),
                "deleted": sum(r.status == Status.DELETED for r in records),
            }
        counts["links"] = self.ledger.count_links(self.namespace)
        counts["history"] = self.ledger.count_history(self.namespace)
        counts["working"] = len(self.working())
        return counts

    def drop(self, records_elsewhere: bool = False) -> None:
        """Delete this namespace entirely (collections, links, history); it can be written again at once. The
        ledger is compacted as after an erase, so the dropped rows' words leave its files (and its log) now.
        Refused in one line when the records may be in another Chroma (`drop_refusal`), unless
        `records_elsewhere` says to drop the ledger's half all the same."""
        self.ledger.check_writable()
        with self._write_lock, self._lock:
            refusal = None if records_elsewhere else self.drop_refusal()
            if refusal is not None:
                raise ConfigError(refusal)
            existing = {c.name: c for c in self._client.list_collections()}
            dropped = [held for name in collection_names(self.namespace)  # its current and earlier names
                       for held in (name, name + REBUILT_SUFFIX)  # a rebuild's copy too: the next opener keeps it
                       if held in existing and owner_of(existing[held]) in (self.namespace, None)]
            if self._shared:  # never another ledger's namespace on a shared server (it would lose its turns)
                for held in dropped:
                    if mark_of(existing[held]) not in (None, self.state(LEDGER_MARK)):
                        self._check_mark(existing[held], "raw")
            for held in dropped:
                self._client.delete_collection(held)
            if not self.settings.chroma_host:  # Chroma leaves a deleted collection's index folder, vectors and all
                remove_orphan_indexes(self.settings.chroma_path)
            with self.ledger.transaction():
                self.ledger.drop_namespace(self.namespace)
                self.ledger.bump(EVERY_NAMESPACE, MIRRORS_OUTDATED)  # other replicas' saved mirrors of it go
            self.ledger.compact()
            snapshots.remove(self._mirror_folder, collection_names(self.namespace))
            self._saved.clear()
            self._staged = StagedWrites()
            self._collections.clear()
            self._clear_mirrors()
            self._vectors.clear()
            self._forget_embedder()

    def _forget_embedder(self) -> None:
        """After a drop: the next write records its own embedder (`check_vectors`)."""
        self._embedder_fits = self._embedder_noted = False
        self._dimensions = None


class _WriterLock:
    """This process's lock of a namespace, then the ledger's (a database lock on PostgreSQL), then, for a SQLite
    ledger that processes share through a data folder (records on a Chroma server), its `writer` file lock
    (memory/run_locks.py `writer_turn`): the SQLite ledger has no lock of its own across processes.

    Re-entrant like the lock it wraps, across this namespace's store objects too (the registry may reopen one
    inside another's step: `writer_turn` counts each thread's holds by file); they are always taken in that
    order and let go in reverse.
    """

    def __init__(self, local: threading.RLock, ledger: Ledger, namespace: str, across: Path | None = None) -> None:
        self._local = local
        self._ledger = ledger
        self._namespace = namespace
        self._across = across
        self._held = threading.local()

    def depth(self) -> int:
        """How many times this thread holds the lock (0: not at all)."""
        return len(getattr(self._held, "stack", ()))

    def held_here(self) -> bool:
        return self.depth() > 0

    def __enter__(self) -> None:
        self._local.acquire()
        try:
            held = ExitStack()
            with held:
                held.enter_context(self._ledger.namespace_lock(self._namespace))
                if self._across is not None and not self.depth():
                    held.enter_context(run_locks.writer_turn(self._across, self._namespace))
                shared = held.pop_all()
        except BaseException:
            self._local.release()
            raise
        self._held.__dict__.setdefault("stack", []).append(shared)

    def __exit__(self, *exc: object) -> None:
        shared = self._held.stack.pop()
        try:
            shared.__exit__(*exc)
        finally:
            self._local.release()


def _field_values(fields: dict[str, str]) -> dict[str, object]:
    """History keeps fields as text; list fields (note tags) go back to lists."""
    return {name: json.loads(value) if name in _LIST_FIELDS else value for name, value in fields.items()}


def _similarities(result: Any) -> list[tuple[str, float]]:
    """(id, cosine similarity) of a one-vector Chroma query, nearest first."""
    return [(rid, 1.0 - float(dist)) for rid, dist in zip(result["ids"][0], result["distances"][0], strict=True)]


@contextmanager
def _no_collection_pauses() -> Iterator[None]:
    """Hold Python's cycle collector while a mirror is loaded: the load creates a few objects per
    record and none of them cyclic garbage, yet at 100,000 records the collector would pass over the
    whole growing heap again and again (a third of a cold open, measured with cProfile).

    A large load's objects are then frozen (`gc.freeze`: kept out of every later collection). They
    live as long as the namespace stays open, and otherwise the collections that follow would walk
    those millions of objects young generation by young generation: half-second pauses in the next
    questions (p95 of `ask()` at 100,000 records: 530 ms, every slow one a collection). Records that
    leave the mirror are still freed by reference counting."""
    was_enabled = gc.isenabled()
    before = gc.get_count()[0]  # objects made in the youngest generation so far (it grows while disabled)
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_count()[0] - before >= FREEZE_OBJECTS:
                gc.freeze()
            gc.enable()


class _NoCollection:
    """What a read sees of a kind the namespace never wrote: empty. Creating the collection there instead
    would make every namespace a question names one (listed, exported, counted)."""

    def count(self) -> int:
        return 0

    def get(self, **_: Any) -> dict[str, list[Any]]:
        return {"ids": [], "documents": [], "metadatas": [], "embeddings": []}

    def query(self, **_: Any) -> dict[str, list[list[Any]]]:
        return {"ids": [[]], "distances": [[]]}

    def delete(self, **_: Any) -> None:
        return None


NO_COLLECTION = _NoCollection()


def read_collection(collection: Any) -> Iterator[tuple[str, str | None, dict[str, Any] | None]]:
    """Every (id, document, metadata) of a collection, read a page at a time: Chroma binds one SQL
    variable per record of a read, and SQLite refuses more than 32,766 (a namespace past about
    30,000 records could not be read whole)."""
    offset = 0
    while True:
        page = collection.get(include=["documents", "metadatas"], limit=READ_PAGE, offset=offset)
        yield from zip(page["ids"], page["documents"], page["metadatas"], strict=True)
        if len(page["ids"]) < READ_PAGE:
            return
        offset += READ_PAGE


def read_vectors(collection: Any) -> Iterator[tuple[list[str], np.ndarray]]:
    """Every (ids, vectors) page of a collection (see `read_collection`)."""
    offset = 0
    while True:
        page = collection.get(include=["embeddings"], limit=READ_PAGE, offset=offset)
        if page["ids"]:
            yield page["ids"], np.asarray(page["embeddings"], dtype=np.float32).reshape(len(page["ids"]), -1)
        if len(page["ids"]) < READ_PAGE:
            return
        offset += READ_PAGE


def _fields_of(record: Record, new_text: str) -> dict[str, str]:
    """Re-read subject/attribute/value from a fact's new text, so conflict checks see the new value."""
    if record.kind != "fact" or not record.attribute:
        return {}
    from strata.memory.facts import extract_facts
    from strata.memory.records import Turn

    drafts = extract_facts(Turn(speaker=record.speaker or "user", text=new_text), None, None)
    for draft in drafts:
        if draft.attribute == record.attribute and (not record.subject or draft.subject == record.subject):
            return {"value": draft.value}
    return {"value": ""}


def _lexical_text(record: Record) -> str:
    """What BM25 sees: the text plus the speaker, title, image caption and note tags."""
    parts = (record.speaker, record.title, record.text, record.image_caption, " ".join(record.tags))
    return " ".join(part for part in parts if part)
