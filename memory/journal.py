"""The edit journal: what the edits of an unfinished unit of work changed, so a crash can take them back.

Chroma has no transactions, so an edit (update, delete, supersede, evolve,
undo, no-op) cannot write its history row and its record in one step. Each
edit therefore commits, in one ledger transaction, its history row, the links
it adds and a journal entry holding the record as it was; only then is Chroma
written. The entries stay until the unit of work they belong to is complete:
a Refresher step (its update and the persona changes that follow it), or a
batch of derived turns, whose note evolutions are cleared in the transaction
that writes the batch's links and clears its pending marks. A process killed
in between leaves the journal behind; the next writer of the namespace
restores those records, removes their rows and links and un-marks what an
undo marked (`MemoryStore.recover`), and the unit is redone whole: the turn
is still pending, so the same refresh and evolutions happen once again.

A flush journals its batch too (the records it is about to overwrite, and the
ids it creates), so a crash after the batch reached Chroma but before its
ledger transaction leaves no derived record of a turn that is still pending:
the turns are redone over the memory exactly as it was before them, and find
what an uninterrupted ingest found. In an ingest or a chat the Refresher's
edits belong to their turn's batch in the same way (cleared by its flush).

The journal lives in the ledger's per-namespace state, so it works alike on
SQLite and on a shared PostgreSQL ledger, where the namespace's write lock
keeps another replica from taking back edits still in progress.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from strata.memory.ledger import Ledger
from strata.memory.ledger_sql import Session
from strata.memory.records import Link, Record

EDIT_JOURNAL = "edit_journal"  # ledger state key: the entries of the unit of work in progress
PENDING = "pending_derive"  # ledger state key: raw turns written ahead whose derive has not finished


class JournalEntry(BaseModel):
    """One edit of an unfinished unit of work: what is needed to take it back."""

    change: int = Field(0, description="The history row the edit wrote (0 for a batch's write).")
    records: list[Record] = Field(default_factory=list, description="Records as they were before (none for a no-op).")
    created: list[str] = Field(default_factory=list, description="Ids a batch wrote that did not exist before.")
    undid: int | None = Field(None, description="The change an undo marked undone.")
    links: list[Link] = Field(default_factory=list, description="Links the edit added.")


def entries(ledger: Ledger, namespace: str) -> list[JournalEntry]:
    """The journal as stored (inside a transaction: as this transaction sees it)."""
    value = ledger.get_state(namespace, EDIT_JOURNAL, [])
    return [JournalEntry.model_validate(v) for v in value] if isinstance(value, list) else []


def keep(ledger: Ledger, namespace: str, kept: list[JournalEntry], session: Session | None = None) -> None:
    """Store the journal as exactly these entries, in the caller's transaction."""
    ledger.set_state(namespace, EDIT_JOURNAL, [e.model_dump(mode="json") for e in kept], session)


def append(ledger: Ledger, namespace: str, entry: JournalEntry, session: Session) -> None:
    """Add an entry in the caller's transaction (the one that writes the edit's history row)."""
    keep(ledger, namespace, [*entries(ledger, namespace), entry], session)


def clear(ledger: Ledger, namespace: str, session: Session | None = None) -> None:
    """The unit of work is complete: its edits stand."""
    keep(ledger, namespace, [], session)
