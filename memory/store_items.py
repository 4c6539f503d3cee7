"""The LangGraph store's item versions (strata/langgraph_store.py), kept in the ledger.

An item's text is a record in Chroma like any other; its full value, every version of it and its
timestamps are rows of the ledger's `store_items` table. In the ledger they are where the rest of a
namespace's state is: in the SQLite file of an embedded memory, or in the PostgreSQL database that
replicas share (`ledger_url`), so an item put through one replica is read by every other.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator
from strata.memory.ledger import Ledger, chunked, delete_each
from strata.memory.ledger_sql import Session

ITEM_PREFIX = "raw:item:"  # the id of the record that carries an item's text: raw:item:<key>
MAX_DEPTH = 200  # levels of dicts and lists in a value: an export (pydantic) writes no deeper than 255 in all


def depth_of(value: Any) -> int:
    """How many dicts and lists deep a value goes, counted without recursion; past MAX_DEPTH it stops
    counting (a value holding itself never ends)."""
    deepest, stack = 0, [(value, 1)]
    while stack and deepest <= MAX_DEPTH:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list | tuple) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def value_problem(value: Any) -> str | None:
    """Why a store value could not be stored and exported as it is, or None: the check of a put and of an
    import alike. Nested past MAX_DEPTH, it was stored and then no export could write it; NaN or Infinity
    became null in the export, so the moved memory held another value."""
    if depth_of(value) > MAX_DEPTH:
        return f"it is nested too deeply (more than {MAX_DEPTH} levels): store a flatter dict"
    try:
        json.dumps(value, allow_nan=False)
    except ValueError as error:
        if "Out of range float" in str(error):
            return "it holds NaN or Infinity, which JSON cannot carry: store a number, or null"
        raise
    return None


class ItemVersion(BaseModel):
    """One `put` of a key. The newest version of each text the item had is kept, so an undo can find the
    value its restored text came from; an older version with the same text is never chosen, and goes."""

    model_config = ConfigDict(frozen=True)

    seq: int
    key: str
    value: dict[str, Any]
    text: str
    indexed: bool
    created_at: datetime
    updated_at: datetime

    @field_validator("created_at", "updated_at")
    @classmethod
    def _aware(cls, moment: datetime) -> datetime:
        """A time without an offset is UTC, as a record's is read: the store sorts it beside aware times."""
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


_COLUMNS = "seq, key, value, text, indexed, created_at, updated_at"


def insert_version(
    ledger: Ledger, namespace: str, key: str, value: dict[str, Any], text: str, indexed: bool,
    created: datetime, updated: datetime, prune: bool = False, first: bool = False,
) -> int:
    """Store one version; returns its sequence number. With `prune`, the key's older versions of the same
    text go in the same transaction (see `prune_older`); with `first` (the key has no record), every older
    version does: a put that a full disk stopped after its version, and that could not take it back either,
    left it with no record to show it."""
    with ledger.transaction() as session:
        if first:
            session.execute("DELETE FROM store_items WHERE namespace = ? AND key = ?", (namespace, key))
        row = session.execute(
            "INSERT INTO store_items (namespace, key, value, text, indexed, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq",
            (namespace, key, json.dumps(value, ensure_ascii=False), text, int(indexed),
             created.isoformat(), updated.isoformat()),
        ).fetchone()
        if prune:
            _prune(session, namespace, key, text, int(row[0]))
    return int(row[0])


def prune_older(ledger: Ledger, namespace: str, key: str, text: str, seq: int) -> None:
    """Delete the key's versions older than `seq` that hold the same text: the value of a text is always
    taken from its newest version, so nothing (a get, an undo, an export) could reach them again."""
    with ledger.transaction() as session:
        _prune(session, namespace, key, text, seq)


def _prune(session: Session, namespace: str, key: str, text: str, seq: int) -> None:
    session.execute(
        "DELETE FROM store_items WHERE namespace = ? AND key = ? AND seq < ? AND text = ?", (namespace, key, seq, text)
    )


def delete_versions(ledger: Ledger, seqs: list[int]) -> None:
    """Take back versions whose record write failed."""
    if seqs:
        with ledger.transaction() as session:
            session.executemany("DELETE FROM store_items WHERE seq = ?", [(s,) for s in seqs])


def erase_items(ledger: Ledger, namespace: str, record_ids: list[str]) -> int:
    """Delete every version of the items whose records are erased (memory/erasure.py); joins the open
    transaction. Returns how many versions went."""
    keys = [record_id.removeprefix(ITEM_PREFIX) for record_id in record_ids if record_id.startswith(ITEM_PREFIX)]
    with ledger.transaction() as session:
        return delete_each(session, "DELETE FROM store_items WHERE namespace = ? AND key IN ({ids})", namespace, keys)


def versions(ledger: Ledger, namespace: str, key: str | None = None) -> list[ItemVersion]:
    """A namespace's versions (of one key, or all), oldest first."""
    sql = f"SELECT {_COLUMNS} FROM store_items WHERE namespace = ?"
    params: list[object] = [namespace]
    if key is not None:
        sql += " AND key = ?"
        params.append(key)
    with ledger.reading() as session:
        rows = session.execute(sql + " ORDER BY seq", params).fetchall()
    return [_version(r) for r in rows]


def newest(ledger: Ledger, namespace: str, key: str, text: str | None = None) -> ItemVersion | None:
    """The key's newest version (holding `text`, when given): one row read, whatever the key's past."""
    sql = f"SELECT {_COLUMNS} FROM store_items WHERE namespace = ? AND key = ?"
    params: list[object] = [namespace, key]
    if text is not None:
        sql += " AND text = ?"
        params.append(text)
    with ledger.reading() as session:
        row = session.execute(sql + " ORDER BY seq DESC LIMIT 1", params).fetchone()
    return _version(row) if row is not None else None


def newest_seqs(ledger: Ledger, namespace: str) -> dict[str, int]:
    """Each key of a namespace with the sequence number of its newest version (from the index alone)."""
    with ledger.reading() as session:
        rows = session.execute(
            "SELECT key, MAX(seq) FROM store_items WHERE namespace = ? GROUP BY key", (namespace,)
        ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def unindexed(ledger: Ledger, namespace: str) -> set[str]:
    """The record ids of the items whose newest version was put with `index=False`: LangGraph's "do not index",
    so the memory's own questions never read them (`store.search` still lists them by filter)."""
    with ledger.reading() as session:
        rows = session.execute(
            "SELECT s.key FROM store_items s JOIN (SELECT key, MAX(seq) AS seq FROM store_items WHERE namespace = ? "
            "GROUP BY key) n ON s.seq = n.seq WHERE s.indexed = 0", (namespace,)).fetchall()
    return {ITEM_PREFIX + r[0] for r in rows}


def by_seq(ledger: Ledger, seqs: list[int]) -> list[ItemVersion]:
    """The versions of these sequence numbers (in chunks of bound values)."""
    found: list[ItemVersion] = []
    with ledger.reading() as session:
        for chunk in chunked(seqs):
            marks = ", ".join("?" * len(chunk))
            found.extend(_version(r) for r in session.execute(
                f"SELECT {_COLUMNS} FROM store_items WHERE seq IN ({marks})", chunk).fetchall())
    return found


def _version(row: Any) -> ItemVersion:
    return ItemVersion(
        seq=row[0], key=row[1], value=json.loads(row[2]), text=row[3], indexed=bool(row[4]),
        created_at=datetime.fromisoformat(row[5]), updated_at=datetime.fromisoformat(row[6]),
    )


def namespaces(ledger: Ledger) -> set[str]:
    """Every namespace an item was ever put in."""
    with ledger.reading() as session:
        return {r[0] for r in session.execute("SELECT DISTINCT namespace FROM store_items").fetchall()}


def has_items(ledger: Ledger, namespace: str) -> bool:
    with ledger.reading() as session:
        row = session.execute("SELECT 1 FROM store_items WHERE namespace = ? LIMIT 1", (namespace,)).fetchone()
    return row is not None
