"""The LangGraph store's item versions (strata/langgraph_store.py), kept in the ledger.

An item's text is a record in Chroma like any other; its full value, every version of it and its
timestamps are rows of the ledger's `store_items` table. In the ledger they are where the rest of a
namespace's state is: in the SQLite file of an embedded memory, or in the PostgreSQL database that
replicas share (`ledger_url`), so an item put through one replica is read by every other.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from strata.memory.ledger import Ledger, delete_each

ITEM_PREFIX = "raw:item:"  # the id of the record that carries an item's text: raw:item:<key>


class ItemVersion(BaseModel):
    """One `put` of a key: every version is kept, so an undo can find the value its text came from."""

    model_config = ConfigDict(frozen=True)

    seq: int
    key: str
    value: dict[str, Any]
    text: str
    indexed: bool
    created_at: datetime
    updated_at: datetime


def insert_version(
    ledger: Ledger, namespace: str, key: str, value: dict[str, Any], text: str, indexed: bool,
    created: datetime, updated: datetime,
) -> int:
    """Store one version; returns its sequence number."""
    with ledger.transaction() as session:
        row = session.execute(
            "INSERT INTO store_items (namespace, key, value, text, indexed, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq",
            (namespace, key, json.dumps(value, ensure_ascii=False), text, int(indexed),
             created.isoformat(), updated.isoformat()),
        ).fetchone()
    return int(row[0])


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
    sql = "SELECT seq, key, value, text, indexed, created_at, updated_at FROM store_items WHERE namespace = ?"
    params: list[object] = [namespace]
    if key is not None:
        sql += " AND key = ?"
        params.append(key)
    with ledger.reading() as session:
        rows = session.execute(sql + " ORDER BY seq", params).fetchall()
    return [
        ItemVersion(
            seq=r[0], key=r[1], value=json.loads(r[2]), text=r[3], indexed=bool(r[4]),
            created_at=datetime.fromisoformat(r[5]), updated_at=datetime.fromisoformat(r[6]),
        )
        for r in rows
    ]


def namespaces(ledger: Ledger) -> set[str]:
    """Every namespace an item was ever put in."""
    with ledger.reading() as session:
        return {r[0] for r in session.execute("SELECT DISTINCT namespace FROM store_items").fetchall()}


def has_items(ledger: Ledger, namespace: str) -> bool:
    with ledger.reading() as session:
        row = session.execute("SELECT 1 FROM store_items WHERE namespace = ? LIMIT 1", (namespace,)).fetchone()
    return row is not None
