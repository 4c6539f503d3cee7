"""Erasure: remove what someone said for good, with everything that repeats it.

A request to forget (memory/forgetting.py) tombstones records and keeps every
version in the history, so that `undo` can bring them back. A person who asks
for their data to be removed needs the opposite: nothing left to bring back.
`Memory.erase` (this module's plan, then its apply) therefore removes, in one
call that cannot be undone:

- the records asked for, or every turn a participant said and every fact,
  persona trait and summary about them or naming them (`about`: its subject or
  participant, or the name in its text, entities or note, `names_in`); another
  speaker's turns that mention them stay, and an episode naming them is told
  again from the facts that stay;
- what was derived from an erased turn: its facts and persona traits and the
  summaries that cite it, or that cite the turn an erased fact came from
  (a later consolidation summarises what is left); an
  episode that also tells of turns that stay is told again without it (the
  offline narrative), one that told of nothing else goes;
- their links, their history rows, the working-memory rows of erased turns,
  the row that told the turn of a request to forget an erased record without
  its words (its old text is the request, which names what it forgot: an undo
  would tell it again; `request_rows`) and the undo of that row, for every such
  request, in force or undone; a request's turn that an undo gave its words
  back is told without them again (`requests_told`), and so are the words its
  working-memory row kept, and their place in the open episode and the graph's state (the entity
  catalogue's names no other record mentions; the turns either side are
  linked in time instead);
- what an erased note added to its neighbours (A-MEM evolution: tags and a
  context line), by giving each neighbour back what it had before, and what the
  Refresher changed in records that stay for an erased turn (each change names
  the turn it was made for, its `cause`): such a record's history is replayed
  without those changes (`MemoryStore._take_back_edits`), so what turns that stay
  changed stands, and a delete stands with a neutral reason; a slot that had its
  current value decided by an erased turn is decided again from the facts that stay
  (`memory/slots.py` `settle_again`: the later statement supersedes the older);
- every version of an erased LangGraph store item (memory/store_items.py);
  `Memory.erase` also deletes the saved threads that hold an erased record
  (strata/checkpoint.py), with `ErasurePlan.said`;
- the bytes on disk, where this process can reach them: the ledger deletes with
  SQLite's secure delete and is vacuumed at once. Chroma drops the records from
  its write-ahead log when a collection's index is next saved: at once for the
  small collections of a typical user's memory (up to 5,000 records a kind,
  which are saved at every write), after up to 1,000 more writes for larger
  ones; the report counts what the log still holds. The deleted rows' bytes stay
  in free pages of Chroma's database file until it is rebuilt, which is only
  safe with no Chroma client open on the folder: `compact_chroma` does it once
  the memory is closed (`strata erase --yes` does both). A Chroma server or a
  PostgreSQL ledger compacts its own files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field, PrivateAttr
from strata.memory.chroma import collection_names, open_clients
from strata.memory.episodes import OPEN_SEGMENT, OpenSegment, narrate, photo_line, title_of
from strata.memory.errors import ConfigError, InputError, shown_value
from strata.memory.facts import comparable
from strata.memory.forgetting import shown_ids
from strata.memory.graph.consolidation import DIGESTS, DONE_LISTS
from strata.memory.graph.links import CATALOGUE, LAST_TURN, still_mentioned
from strata.memory.journal import PENDING
from strata.memory.locks import hold_folder, release_folder
from strata.memory.names import canonical_name, names_in
from strata.memory.records import KINDS, Action, Change, Link, LinkType, Record, Status, chronological_key
from strata.memory.reindex import CHROMA_DB, open_chroma_db
from strata.memory.slots import settle_again
from strata.memory.store import ERASING, MemoryStore

DERIVED_KINDS = ("fact", "persona", "episode", "summary")  # kinds that cite the turns they came from
NAMING_KINDS = ("fact", "persona", "summary")  # they go when they name the person (`about`); an episode is told again
LOG_WAIT_SECONDS = 2.0  # how long an erase waits for Chroma to drop the records from its log before reporting
VACUUM_SECONDS = 600  # a large folder's database takes a while to rebuild
REINDEX_SECONDS = 3_600  # copying a collection's index: 85 s at 100,000 records (README, "Erase for good")
_DELETE = 3  # Chroma's code for a delete in its write-ahead log (the rows that still hold text are the others)


class ErasureReport(BaseModel):
    """What an erasure removed, and what may still be on disk."""

    erased: list[str] = Field(default_factory=list, description="ids of the records removed")
    links: int = 0
    history: int = 0
    working: int = 0
    reverted: int = Field(0, description="notes given back the tags and context they had before an erased note")
    retold: int = Field(0, description="episodes told again without the erased turns")
    edits_taken_back: int = Field(0, description="records that stay given back what they were before the "
                                  "Refresher changed them for an erased turn")
    items: int = Field(0, description="versions of LangGraph store items removed (strata/langgraph_store.py)")
    threads: list[str] = Field(default_factory=list, description="saved threads deleted: they held an erased record")
    threads_unattributed: list[str] = Field(
        default_factory=list, description="saved threads kept that hold an erased record but say not whose they are "
        "(saved before runs recorded their namespace, and holding another namespace's record of the same id and text)")
    threads_compacted: bool = Field(False, description="the threads file rebuilt without the deleted threads' pages")
    ledger_compacted: bool = False
    in_chroma_log: int | None = Field(
        0, description="erased ids Chroma's write-ahead log still holds (see module doc); None: it could not be read"
    )
    _asked: str = PrivateAttr("")  # an erase finished from its mark: the request it carried out (`asked`)

    def summary(self) -> str:
        disk = "ledger vacuumed" if self.ledger_compacted else "ledger not vacuumed (PostgreSQL vacuums its own)"
        log = f"; {self.in_chroma_log} still in Chroma's log until its index is saved" if self.in_chroma_log else ""
        if self.in_chroma_log is None:
            log = "; Chroma's log could not be read to check it: rebuild its file (compact_chroma) to be sure"
        items = f", {self.items} store item versions" if self.items else ""
        threads = f"; {len(self.threads)} threads deleted ({shown_ids(self.threads)})" if self.threads else ""
        if self.threads_unattributed:
            threads += (f"; {len(self.threads_unattributed)} saved threads hold an erased record but say not whose "
                        f"they are, kept: {shown_ids(self.threads_unattributed)} (delete those that were this "
                        "namespace's with the checkpointer's delete_thread)")
        return (f"erased {len(self.erased)} records, {self.links} links, {self.history} history rows, "
                f"{self.working} working-memory rows{items}; {self.reverted} notes restored, "
                f"{self.edits_taken_back} edits taken back, {self.retold} episodes retold{threads}; {disk}{log}")


Said = tuple[str, str]  # (the id a saved state names a record by, a text the record had)


@dataclass(frozen=True)
class ErasurePlan:
    """What an erasure will remove, worked out before anything changes (a listing shows it; `apply`
    carries it out). `said` pairs every id an erased record goes by (its id; a turn's dialogue id too)
    with every text it had, each version: what a thread's saved state may still hold (a turn or an
    evidence item is an id beside a text). It is not part of any report. `requests`: the history rows that
    told a request's turn without its words and their undos, for every request, in force or undone, that
    forgot an erased record (`request_rows`)."""

    targets: list[str]
    turns: set[str]
    retold: list[Record]
    said: list[Said]
    requests: list[Change] = field(default_factory=list)
    asked: str = ""  # the request, as `asked` writes it
    naming: list[str] = field(default_factory=list)  # episodes told again because they name the person (`about`)

    @property
    def texts(self) -> set[str]:
        return {text for _, text in self.said}


def asked(ids: Sequence[str], about: str) -> str:
    """An erase's request as a digest, not its words (the ids in any order, the person's name in any spelling):
    an erase stopped midway notes it, so that the same request sent again, which finds nothing left to erase
    once the erase is finished, is told that the erase was its own (`finished_for`)."""
    key = json.dumps([sorted(set(ids)), canonical_name(about) if about else ""])
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def finished_for(report: ErasureReport | None, ids: Sequence[str], about: str) -> bool:
    """Whether `report`, of an erase stopped midway and finished since (`finish_erasure`), carried out this
    very request: then sending it again asked for what is done, not for something that is not there."""
    return report is not None and bool(report._asked) and report._asked == asked(ids, about)


def plan_erasure(store: MemoryStore, ids: Sequence[str] = (), about: str = "") -> ErasurePlan:
    """The records `erase` would remove (`erasure_targets`), the episodes it would tell again, and what
    they said: each record's texts, now and in every earlier version, by each id it goes by."""
    if not ids and not about:
        raise InputError("erase needs record ids or a participant's name (about=...): nothing was erased")
    targets = erasure_targets(store, ids, about)
    turns = erased_turns(store.get(targets))
    naming = episodes_naming(store, about, set(targets))
    episodes = retold(store, turns, set(targets), naming)
    still = [e.id for e in episodes if about and _names(e, about)]  # told again, it names them still (a photo line)
    targets += still
    episodes = [e for e in episodes if e.id not in still]
    records = store.get(targets)
    requests = request_rows(store, records)
    said_records = [*records, *store.get([e.id for e in episodes])]
    texts: dict[str, set[str]] = {record.id: {record.text} for record in said_records}
    for change in store.histories(list(texts)):
        texts[change.record_id] |= {change.old_text, change.new_text}
    told = told_requests(requests)  # the request's own words, which a thread that made it may hold: as it reads
    for request in store.get(sorted(told)):  # now (an undo gave them back) and in its history
        said_records.append(request)
        texts[request.id] = {request.text} - {told[request.id]}
    for change in store.histories(sorted(told)):
        texts[change.record_id] |= {change.old_text, change.new_text} - {told[change.record_id]}
    said: set[Said] = set()
    for record in said_records:
        names = {record.id, record.dialogue_id} if record.kind == "raw" and record.dialogue_id else {record.id}
        said |= {(name, text) for name in names for text in texts[record.id] if text.strip()}
    # what the Refresher wrote into records that stay, for an erased turn: the erase takes it back
    said |= {(c.record_id, c.new_text) for c in store.ledger.changes_caused_by(store.namespace, sorted(turns))
             if c.record_id not in texts and c.new_text.strip() and c.new_text != c.old_text}  # new words only
    return ErasurePlan(targets, turns, episodes, sorted(said), requests, asked(ids, about),
                       sorted(naming - set(still)))


def request_rows(store: MemoryStore, records: Sequence[Record]) -> list[Change]:
    """The rows that hold the words of a request to forget one of `records` ("Please forget that my PIN is 4321"):
    the row that told the request's turn without them ("[asked the memory to forget ...]", agents/refresher.py
    `tell_request_without_words`), whose old text is the request, and the undo of that row, whose new text is
    the request again; for every request that forgot one of them, in force or undone, however many forgets and
    undos came before (an undone request's turn holds its words again: `requests_told` tells it without them).
    The request's turn stays. A forget is one edit (its changes follow its first delete); the rewrite is its
    one update of a turn, the rest delete records or tell an episode again (which the erase tells again
    itself)."""
    erased = {r.id for r in records}
    leads: set[int] = set()
    for change in store.histories(sorted(erased)):
        if change.action == Action.DELETE:  # undone or not: its request's turn may have its words back
            while change.follows is not None and (lead := store.ledger.get_change(store.namespace,
                                                                                   change.follows)):
                change = lead
            leads.add(int(change.id or 0))
    group: list[Change] = []
    waiting = sorted(leads)
    while waiting:
        followers = store.ledger.followers(store.namespace, waiting.pop(), undone=True)
        group += followers
        waiting += [int(c.id or 0) for c in followers]
    rewrites = {int(c.id or 0): c for c in group
                if c.action == Action.UPDATE and c.kind == "raw" and c.record_id not in erased}
    undos = [c for c in store.histories(sorted({c.record_id for c in rewrites.values()}))
             if c.action == Action.UNDO and c.undoes in rewrites]
    return sorted([*rewrites.values(), *undos], key=lambda c: c.id or 0)


def told_requests(rows: Iterable[Change]) -> dict[str, str]:
    """Each request's turn among `rows` (`request_rows`), as its latest request told it without its words."""
    return {c.record_id: c.new_text for c in sorted(rows, key=lambda c: c.id or 0) if c.action == Action.UPDATE}


def requests_told(store: MemoryStore, rows: Sequence[Change]) -> tuple[list[Record], list[Change]]:
    """The request turns of `rows` (`request_rows`, which go) told without their words: the turns an undo of
    their request gave the words back to, as their request had told them (their text was the request again:
    found by search, answered from, exported), and the rows of theirs that stay (a later request's delete of
    the turn, which said the words too, and its undo) told with that text, so that undoing them still works."""
    told = told_requests(rows)
    going = {int(c.id or 0) for c in rows}
    turns = [r.model_copy(update={"text": told[r.id], "version": r.version + 1})
             for r in store.get(sorted(told)) if r.text != told[r.id]]
    kept = [c for c in store.histories(sorted(told)) if int(c.id or 0) not in going]
    again = [c.model_copy(update={"old_text": told[c.record_id], "new_text": told[c.record_id]}) for c in kept]
    return turns, [c for c, was in zip(again, kept, strict=True) if c != was]


def erasure_targets(store: MemoryStore, ids: Sequence[str] = (), about: str = "", done: str = "erased") -> list[str]:
    """The records to erase: those named, or everything said by or about `about`, and whatever was
    derived from an erased turn. Unknown ids are an error (nothing is erased): a typo must not pass
    for a completed erasure. `done` names what a refusal did not do (a person's export asks too)."""
    person = canonical_name(about)  # every spelling of the name: NFC or NFD, any case, no-break spaces
    if about and not person:  # "" would match every record that names no one: that is not a person
        raise InputError(f"about={about!r} names no one: give a participant's name "
                         f"(participants: {', '.join(store.participants()) or 'none'}); nothing was {done}")
    chosen: dict[str, Record] = {}
    found = {r.id: r for r in store.get(ids)}
    unknown = [i for i in ids if i not in found]
    if unknown:
        raise InputError(f"no record {', '.join(unknown[:5])} in this memory: erase takes ids as `history` and "
                         f"`explain` show them (e.g. raw:D1:3); nothing was {done}")
    chosen.update(found)
    if person:
        for kind in KINDS:
            for record in store.all(kind, include_inactive=True):
                if person in (canonical_name(record.speaker), canonical_name(record.subject),
                              canonical_name(record.participant)) or (kind in NAMING_KINDS and _names(record, about)):
                    chosen[record.id] = record
        if not chosen:
            raise InputError(f"nothing in this memory was said by or about {shown_value(about)}: check the name "
                             f"(participants: {', '.join(store.participants()) or 'none'}); nothing was {done}")
    turns = erased_turns(chosen.values())
    for kind in DERIVED_KINDS:
        for record in store.all(kind, include_inactive=True):  # type: ignore[arg-type]
            if turns & set(record.source_ids) and not _retellable(record, turns):
                chosen[record.id] = record
    # a summary retells the facts of the turns it cites: one citing a turn an erased fact came from (a fact
    # about the person from another's turn, which stays) goes too; the next consolidation writes it anew
    told = _fact_turns(store, set(chosen))
    for record in store.all("summary", include_inactive=True):
        if told & set(record.source_ids):
            chosen[record.id] = record
    return list(chosen)


def _names(record: Record, person: str) -> bool:
    """Whether a record names the person anywhere a reader or a search finds it: its text, title, entities or
    note ("Ann told Bob her locker code is 5521" is about Ann, whatever its subject field says)."""
    fields = (record.text, record.title, record.context, *record.entities, *record.keywords, *record.tags)
    return any(names_in(text, person) for text in fields if text)


def episodes_naming(store: MemoryStore, about: str, gone: set[str]) -> set[str]:
    """The episodes that name the person (`about`) and are not erased whole: each is told again from the facts
    that stay (`retold`), none of which names them."""
    if not about:
        return set()
    return {e.id for e in store.all("episode", include_inactive=True) if e.id not in gone and _names(e, about)}


def erased_turns(records: Iterable[Record]) -> set[str]:
    return {r.dialogue_id for r in records if r.kind == "raw" and r.dialogue_id}


def _retellable(record: Record, turns: set[str]) -> bool:
    """An episode that also tells of turns that stay is told again without the erased ones (`retold`)."""
    return record.kind == "episode" and bool(set(record.source_ids) - turns)


def retold(store: MemoryStore, turns: set[str], gone: set[str] = frozenset(),
           naming: set[str] = frozenset()) -> list[Record]:
    """The episodes that tell of an erased turn, or of an erased fact (one about the person, from a turn
    that stays), and of turns that stay, told again from the facts that stay (the offline narrative,
    memory/episodes.py): what was erased leaves the episode's text. `gone`: every erased record's id;
    `naming`: episodes told again as well, since they name the person (`episodes_naming`)."""
    told_from = turns | _fact_turns(store, gone)
    found = []
    for episode in store.all("episode", include_inactive=True):
        told = bool(told_from & set(episode.source_ids)) or episode.id in naming
        if not told or not _retellable(episode, turns) or episode.id in gone:
            continue
        kept = [t for t in episode.source_ids if t not in turns]
        segment = told_again(store, episode.session, kept, turns, gone)
        title = title_of(segment.facts, segment.speakers)
        found.append(episode.model_copy(update={
            "text": narrate(segment, title), "title": title, "source_ids": kept, "dialogue_id": kept[0],
            "speaker": ", ".join(segment.speakers),  # as ingest names an episode's speakers (agents/memory.py)
            "time": segment.start or episode.time, "time_end": segment.end or episode.time_end,
            "utc_offset": segment.utc_offset if segment.start else episode.utc_offset,
            "version": episode.version + 1, "keywords": [], "tags": [], "context": "",
        }))
    return found


def still_telling(store: MemoryStore, turns: set[str], gone: set[str]) -> tuple[list[Record], list[str]]:
    """What still tells records a request to forget deleted (`gone`, their ids, and `turns`, the dialogue ids
    of the turns among them; they stay in the store as tombstones): the live episodes that also tell of turns
    that stay, told again without them (`retold`), and the live episodes that tell of nothing else and the
    summaries that retell them, to be deleted too (the next consolidation writes a summary of what is left)."""
    again = [e for e in retold(store, turns, gone) if e.status == Status.ACTIVE]
    told = turns | _fact_turns(store, gone)
    kept = {e.id for e in again} | gone
    emptied = [r.id for kind in ("episode", "summary") for r in store.all(kind)  # type: ignore[arg-type]
               if told & set(r.source_ids) and r.id not in kept]
    return again, emptied


def _fact_turns(store: MemoryStore, gone: set[str]) -> set[str]:
    """The turns the erased facts were derived from: read from those still stored, and from the ids
    (`fact:<turn>:<n>`), which an erase finished after a stop still has when the records are gone."""
    facts = sorted(i for i in gone if i.startswith("fact:"))
    from_ids = {":".join(i.split(":")[1:-1]) for i in facts if i.count(":") >= 2}
    return from_ids | {t for fact in store.get(facts) for t in fact.source_ids}


def told_again(
    store: MemoryStore, session: str, kept: Sequence[str], erased: set[str], gone: set[str] = frozenset()
) -> OpenSegment:
    """An episode's segment as the turns that stay make it: their speakers, facts (`_told_facts`) and span."""
    records = store.get(f"raw:{t}" for t in kept)
    dated = sorted((r for r in records if r.time is not None), key=chronological_key)
    return OpenSegment(session=session, turn_ids=list(kept),
                       speakers=list(dict.fromkeys(r.speaker for r in records if r.speaker)),
                       facts=_told_facts(store, records, erased, gone),
                       start=dated[0].time if dated else None, end=dated[-1].time if dated else None,
                       utc_offset=dated[0].utc_offset if dated else None)  # told on its first turn's clock


class _Unfinished(BaseModel):
    """What an erase writes down before it removes anything (ids only, never text): all that it needs to
    finish once the records it reads are gone, should it be stopped midway (`finish_erasure`)."""

    targets: list[str]
    turns: list[str]
    rejoined: list[tuple[str, str]]
    settle: list[str] = Field(default_factory=list)  # facts that stay whose slot is decided again (`_unsettled`)
    requests: list[int] = Field(default_factory=list)  # history rows of requests' words (`request_rows`)
    told: list[str] = Field(default_factory=list)  # their turns, whose working-memory rows lose the words
    asked: str = ""  # the request, as a digest (`asked`)
    naming: list[str] = Field(default_factory=list)  # episodes told again as they named the person (`retold`)


def apply_erasure(store: MemoryStore, plan: ErasurePlan) -> ErasureReport:
    """Carry out a plan (`plan_erasure`, made on this store just before, under its write lock), and
    report what went and what may remain on disk; `Memory.erase` also deletes the saved threads first.
    The plan's ids go to the ledger first (`ERASING`): stopped at any point after, the erase is finished
    from them by the next read or write of the namespace, on any replica (`MemoryStore._finish_erase`),
    since a second erase could no longer find its records."""
    rejoined = _rejoined(store, set(plan.targets))
    unfinished = _Unfinished(targets=plan.targets, turns=sorted(plan.turns),
                             rejoined=[(link.src, link.dst) for link in rejoined],
                             settle=_unsettled(store, set(plan.targets), plan.turns),
                             requests=[int(c.id or 0) for c in plan.requests],
                             told=sorted({c.record_id for c in plan.requests}), asked=plan.asked,
                             naming=plan.naming)
    store.ledger.set_state(store.namespace, ERASING, unfinished.model_dump(mode="json"))
    removed = _carry_out(store, unfinished, plan.retold)
    store.embedder.forget(plan.texts)
    return _finished(store, plan.targets, removed)


def finish_erasure(store: MemoryStore) -> ErasureReport | None:
    """Carry an erase that was stopped midway (its process killed) to its end, from the ids it wrote down
    first; None when there is none. The records it had already removed are not needed: what is left of
    them is found by id, and the episodes are told again from the facts that stay."""
    value = store.state(ERASING)
    if not value:
        return None
    unfinished = _Unfinished.model_validate(value)
    removed = _carry_out(store, unfinished, retold(store, set(unfinished.turns), set(unfinished.targets),
                                                   set(unfinished.naming)))
    report = _finished(store, unfinished.targets, removed)
    report._asked = unfinished.asked
    return report


def _carry_out(store: MemoryStore, unfinished: _Unfinished, retold_episodes: Sequence[Record]) -> dict[str, int]:
    """Every step of an erase, each one harmless to repeat; the mark goes last."""
    turns = set(unfinished.turns)
    out_of_open_episode(store, turns, set(unfinished.targets))
    rows = [c for i in unfinished.requests if (c := store.ledger.get_change(store.namespace, i)) is not None]
    told_turns, told_rows = requests_told(store, rows)  # none left once the rows are gone: done then
    removed = store.erase(unfinished.targets, sorted(turns), retold_episodes, unfinished.requests, unfinished.told,
                          told_turns, told_rows)
    if unfinished.settle:
        settle_again(store, unfinished.settle)
    store.link([Link(namespace=store.namespace, src=src, dst=dst, type=LinkType.TEMPORAL)
                for src, dst in unfinished.rejoined])
    _out_of_graph_state(store, set(unfinished.targets))
    store.ledger.clear_state(store.namespace, ERASING)
    return removed


def _unsettled(store: MemoryStore, targets: set[str], turns: set[str]) -> list[str]:
    """The facts that stay whose slot an erase may leave with two current values: those the Refresher changed
    for an erased turn (a supersession it takes back), and those sharing a slot with an erased fact (the newer
    value that superseded them may go). Ids only: the mark holds no words."""
    def slot(record: Record) -> tuple[str, str]:
        return comparable(record.subject), comparable(record.attribute)

    facts = [r for r in store.all("fact", include_inactive=True) if r.subject and r.attribute]
    erased = {slot(r) for r in facts if r.id in targets}
    changed = {c.record_id for c in store.ledger.changes_caused_by(store.namespace, sorted(turns))}
    return sorted(r.id for r in facts if r.id not in targets and r.status != Status.DELETED
                  and (slot(r) in erased or r.id in changed))


def _finished(store: MemoryStore, targets: list[str], removed: dict[str, int]) -> ErasureReport:
    report = ErasureReport(erased=targets, **removed)
    report.ledger_compacted = store.ledger.compact()
    if not store.settings.chroma_host:
        report.in_chroma_log = _in_chroma_log(store, targets)
        deadline = time.monotonic() + LOG_WAIT_SECONDS
        while report.in_chroma_log and time.monotonic() < deadline:  # a small collection's log empties at once
            time.sleep(0.1)
            report.in_chroma_log = _in_chroma_log(store, targets)
    return report


def _told_facts(store: MemoryStore, turns: Sequence[Record], erased: set[str], gone: set[str]) -> list[str]:
    """What an episode tells of the turns that stay, gathered as ingest gathers it (agents/memory.py):
    each turn's facts in turn order, or its photo when it gave no fact; none derived from an erased turn,
    none erased itself (`gone`: a fact about the person from another's turn)."""
    told: list[str] = []
    for turn in turns:
        facts = [f.text for f in store.facts_from([turn.dialogue_id])
                 if not erased & set(f.source_ids) and f.id not in gone]
        told += facts or ([photo_line(turn.speaker, turn.image_caption)] if turn.image_caption else [])
    return told


def _rejoined(store: MemoryStore, erased: set[str]) -> list[Link]:
    """The temporal links that keep the chain of turns whole: the turn before a run of erased turns
    is linked to the turn after it (the erased turns' own links go with them)."""
    edges = store.edges(sorted(erased), [LinkType.TEMPORAL])
    before: dict[str, set[str]] = {}
    after: dict[str, set[str]] = {}
    for link in edges:
        before.setdefault(link.dst, set()).add(link.src)
        after.setdefault(link.src, set()).add(link.dst)
    joined = {(first, last) for turn in erased for first in _kept_along(turn, before, erased)
              for last in _kept_along(turn, after, erased) if first != last}
    return [Link(namespace=store.namespace, src=a, dst=b, type=LinkType.TEMPORAL) for a, b in sorted(joined)]


def _kept_along(turn: str, step: dict[str, set[str]], erased: set[str]) -> set[str]:
    """The turns that stay first met from `turn` along the temporal links (`step`: one direction of
    them), through erased turns only; a turn sent again makes a cycle, walked once."""
    kept: set[str] = set()
    seen = {turn}
    frontier = [turn]
    while frontier:
        for other in step.get(frontier.pop(), ()):
            if other in seen:
                continue
            seen.add(other)
            if other in erased:
                frontier.append(other)
            else:
                kept.add(other)
    return kept


def _out_of_graph_state(store: MemoryStore, erased: set[str]) -> None:
    """What the graph keeps in the ledger's state forgets the erased records: the catalogue drops the
    entities (their names) no record mentions any more, the lists of turns consolidated and pending and
    the summaries' digests drop their ids, and the next turn's temporal link starts from the latest turn
    that stays."""
    catalogue = dict(store.state(CATALOGUE, {}) or {})
    kept = still_mentioned(store, catalogue)
    if len(kept) < len(catalogue):
        store.set_state(CATALOGUE, {key: entry for key, entry in catalogue.items() if key in kept})
    for key in (*DONE_LISTS, PENDING):  # lists of record ids
        ids = list(store.state(key, []) or [])  # type: ignore[call-overload]
        if erased & set(ids):
            store.set_state(key, [rid for rid in ids if rid not in erased])
    digests = dict(store.state(DIGESTS, {}) or {})  # type: ignore[call-overload]
    if erased & set(digests):
        store.set_state(DIGESTS, {sid: d for sid, d in digests.items() if sid not in erased})
    if store.state(LAST_TURN) in erased:  # the latest turn derived: an add under way has stored later ones
        pending = set(store.state(PENDING, []) or [])  # type: ignore[call-overload]  # raw, not derived yet
        turns = [t for t in store.timeline() if t.id not in pending]
        store.set_state(LAST_TURN, turns[-1].id if turns else None)


def out_of_open_episode(store: MemoryStore, turns: set[str], gone: set[str]) -> None:
    """The episode being written forgets erased (or forgotten) turns and facts: it is made again from the turns
    that stay (their ids, speakers, facts and span), so an erased speaker's name is not in the next episode."""
    segment = OpenSegment.model_validate(store.state(OPEN_SEGMENT, {}))
    kept = [t for t in segment.turn_ids if t not in turns]
    if kept == segment.turn_ids and not _fact_turns(store, gone) & set(kept):
        return
    segment = told_again(store, segment.session, kept, turns, gone)
    store.set_state(OPEN_SEGMENT, segment.model_dump(mode="json"))


def _in_chroma_log(store: MemoryStore, ids: Iterable[str]) -> int | None:
    """Erased ids still in Chroma's write-ahead log (its `embeddings_queue` table), counted in this namespace's
    collections only: another namespace's records share ids (every chat starts at raw:T1) and their rows
    are not erased text. None when the tables cannot be read (a Chroma whose file is laid out otherwise),
    which is not the same as none left."""
    conn = open_chroma_db(store.settings.chroma_path)
    if conn is None:
        return 0
    try:
        names = collection_names(store.namespace)
        own = {str(row[0]) for row in conn.execute(
            f"SELECT id FROM collections WHERE name IN ({', '.join('?' * len(names))})", names)}
        wanted = list(ids)
        found: set[str] = set()
        for start in range(0, len(wanted), 400):
            chunk = wanted[start : start + 400]
            rows = conn.execute(f"SELECT topic, id FROM embeddings_queue WHERE operation != {_DELETE} "
                                f"AND id IN ({', '.join('?' * len(chunk))})", chunk)
            found |= {str(rid) for topic, rid in rows if str(topic).rsplit("/", 1)[-1] in own}  # topic: .../<id>
        return len(found)
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def compact_chroma(chroma_path: Path) -> bool:
    """Rebuild an embedded Chroma folder without what its deletes left behind, so that erased records leave
    its files too: the database's freed pages (Chroma's own `chroma vacuum`), and the vectors and stray
    bytes its indexes keep (memory/reindex.py rebuilds them). Each runs in a process of its own while this
    one holds the folder's lock (no other process opens the folder meanwhile). Only with every memory of
    the folder closed here (`close_all()`): rebuilding the files under an open Chroma client corrupts
    them, so an open one is refused. Every index of the folder is rebuilt (reindex.rebuild_folder says
    why). False when a step did not finish (what it did not reach is kept)."""
    folder = chroma_path.resolve()
    if any(not s.chroma_host and s.chroma_path.resolve() == folder for s in open_clients()):
        raise ConfigError(f"the memory folder {folder.parent} is open in this process: close it first "
                          "(strata.memory.registry.close_all()), then compact it")
    if not (folder / CHROMA_DB).is_file():
        return False
    program = Path(sys.executable).with_name("chroma")
    command = str(program) if program.is_file() else shutil.which("chroma")
    if command is None:
        return False
    vacuum = [command, "vacuum", "--path", str(folder), "--force"]
    reindex = [sys.executable, "-m", "strata.memory.reindex", str(folder)]  # a process that never held them
    hold_folder(folder)
    try:
        for step in (vacuum, reindex, vacuum):  # the copy reads a file without their pages, then drops its own
            done = subprocess.run(step, capture_output=True, text=True, check=False,
                                  timeout=REINDEX_SECONDS if step is reindex else VACUUM_SECONDS,
                                  env={**os.environ, "ANONYMIZED_TELEMETRY": "False"})
            if done.returncode != 0:
                return False
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        release_folder(folder)
    return True
