"""The durable, transactional side of the memory: links, history, working buffer.

Chroma holds texts and vectors; it has no transactions. What must never be half
written (the typed edges between records, every change the refresher makes, the
recent-turn buffer) lives here, in one SQLite file beside the Chroma folder.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path

from strata.memory.records import Action, Change, Link, LinkType, Status

_SCHEMA = """
CREATE TABLE IF NOT EXISTS links (
    namespace TEXT NOT NULL, src TEXT NOT NULL, dst TEXT NOT NULL, type TEXT NOT NULL,
    weight REAL NOT NULL DEFAULT 1.0,
    PRIMARY KEY (namespace, src, dst, type)
);
CREATE INDEX IF NOT EXISTS links_dst ON links (namespace, dst);
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT NOT NULL, record_id TEXT NOT NULL, kind TEXT NOT NULL, action TEXT NOT NULL,
    old_text TEXT NOT NULL, new_text TEXT NOT NULL, old_status TEXT NOT NULL, new_status TEXT NOT NULL,
    reason TEXT NOT NULL, policy TEXT NOT NULL, time TEXT NOT NULL,
    undone INTEGER NOT NULL DEFAULT 0, undoes INTEGER,
    old_fields TEXT NOT NULL DEFAULT '{}', new_fields TEXT NOT NULL DEFAULT '{}', follows INTEGER
);
CREATE INDEX IF NOT EXISTS history_ns ON history (namespace, id);
CREATE TABLE IF NOT EXISTS working (
    namespace TEXT NOT NULL, participant TEXT NOT NULL, seq INTEGER NOT NULL,
    dia_id TEXT NOT NULL, text TEXT NOT NULL, time TEXT,
    PRIMARY KEY (namespace, participant, seq)
);
CREATE TABLE IF NOT EXISTS state (
    namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (namespace, key)
);
"""


@contextmanager
def immediate_transaction(conn: sqlite3.Connection, lock: threading.RLock) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT on an autocommit connection, rolled back on any failure."""
    with lock:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


class Ledger:
    """One SQLite file shared by every namespace of a data folder."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.executescript(_SCHEMA)
        self._migrate()
        self._lock = threading.RLock()

    def _migrate(self) -> None:
        """Bring a ledger written by an earlier version up to this schema (columns are only ever added)."""
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(history)")}
        if "follows" not in columns:
            self._conn.execute("ALTER TABLE history ADD COLUMN follows INTEGER")

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """All-or-nothing block: a failure inside rolls every statement back."""
        return immediate_transaction(self._conn, self._lock)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # links -------------------------------------------------------------
    def add_links(self, links: Iterable[Link], conn: sqlite3.Connection | None = None) -> int:
        """Insert or replace edges; pass `conn` to join an open transaction."""
        rows = [(lk.namespace, lk.src, lk.dst, lk.type.value, lk.weight) for lk in links]
        if not rows:
            return 0
        sql = "INSERT OR REPLACE INTO links (namespace, src, dst, type, weight) VALUES (?, ?, ?, ?, ?)"
        if conn is not None:
            conn.executemany(sql, rows)
            return len(rows)
        with self.transaction() as own:
            own.executemany(sql, rows)
        return len(rows)

    def neighbours(
        self, namespace: str, ids: Iterable[str], types: Iterable[LinkType] | None = None
    ) -> list[Link]:
        """Edges touching any of `ids`, in either direction."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        sql = (
            f"SELECT namespace, src, dst, type, weight FROM links WHERE namespace = ? "
            f"AND (src IN ({marks}) OR dst IN ({marks}))"
        )
        params: list[object] = [namespace, *ids, *ids]
        if types is not None:
            type_values = [t.value for t in types]
            sql += f" AND type IN ({','.join('?' * len(type_values))})"
            params += type_values
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [Link(namespace=r[0], src=r[1], dst=r[2], type=LinkType(r[3]), weight=r[4]) for r in rows]

    def count_links(self, namespace: str) -> dict[str, int]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT type, COUNT(*) FROM links WHERE namespace = ? GROUP BY type", (namespace,)
            ).fetchall()
        return {r[0]: r[1] for r in rows}

    # history -----------------------------------------------------------
    def record_change(self, change: Change, conn: sqlite3.Connection | None = None) -> int:
        """Append one change; pass `conn` to join an open transaction."""
        sql = (
            "INSERT INTO history (namespace, record_id, kind, action, old_text, new_text, old_status, "
            "new_status, reason, policy, time, undone, undoes, old_fields, new_fields, follows) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        params = (
            change.namespace, change.record_id, change.kind, change.action.value, change.old_text,
            change.new_text, change.old_status.value, change.new_status.value, change.reason,
            change.policy, change.time.isoformat(), int(change.undone), change.undoes,
            json.dumps(change.old_fields), json.dumps(change.new_fields), change.follows,
        )
        if conn is not None:
            return int(conn.execute(sql, params).lastrowid or 0)
        with self.transaction() as own:
            return int(own.execute(sql, params).lastrowid or 0)

    def history(self, namespace: str, record_id: str | None = None, limit: int = 100) -> list[Change]:
        sql = "SELECT * FROM history WHERE namespace = ?"
        params: list[object] = [namespace]
        if record_id:
            sql += " AND record_id = ?"
            params.append(record_id)
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(limit)
        return self._changes(sql, params)

    def get_change(self, namespace: str, change_id: int) -> Change | None:
        found = self._changes("SELECT * FROM history WHERE namespace = ? AND id = ?", [namespace, change_id])
        return found[0] if found else None

    def followers(self, namespace: str, change_id: int) -> list[Change]:
        """The changes made together with this one (undone with it), not yet undone."""
        return self._changes(
            "SELECT * FROM history WHERE namespace = ? AND follows = ? AND undone = 0 ORDER BY id DESC",
            [namespace, change_id],
        )

    def _changes(self, sql: str, params: list[object]) -> list[Change]:
        """History rows of a query, as changes."""
        with self._lock:
            cursor = self._conn.execute(sql, params)
            names = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
        return [_change_from_row(dict(zip(names, row, strict=True))) for row in rows]

    def mark_undone(self, change_id: int, conn: sqlite3.Connection) -> None:
        conn.execute("UPDATE history SET undone = 1 WHERE id = ?", (change_id,))

    # working buffer ----------------------------------------------------
    def push_working(
        self, namespace: str, participant: str, dia_id: str, text: str, time: datetime | None, size: int
    ) -> None:
        """Append a turn to a participant's FIFO and drop what falls out (AdaMem working memory).

        A turn already in the window (its derive is being retried) is not pushed twice.
        """
        with self.transaction() as conn:
            if dia_id and conn.execute(
                "SELECT 1 FROM working WHERE namespace = ? AND participant = ? AND dia_id = ?",
                (namespace, participant, dia_id),
            ).fetchone():
                return
            row = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM working WHERE namespace = ? AND participant = ?",
                (namespace, participant),
            ).fetchone()
            seq = int(row[0]) + 1
            conn.execute(
                "INSERT INTO working (namespace, participant, seq, dia_id, text, time) VALUES (?, ?, ?, ?, ?, ?)",
                (namespace, participant, seq, dia_id, text, time.isoformat() if time else None),
            )
            conn.execute(
                "DELETE FROM working WHERE namespace = ? AND participant = ? AND seq <= ?",
                (namespace, participant, seq - size),
            )

    def working(self, namespace: str) -> list[dict[str, str]]:
        """Every participant's recent turns, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT participant, dia_id, text, time, seq FROM working WHERE namespace = ? ORDER BY time, rowid",
                (namespace,),
            ).fetchall()
        return [{"speaker": r[0], "dia_id": r[1], "text": r[2], "time": r[3] or ""} for r in rows]

    # small per-namespace state (open episode, counters) ----------------
    def get_state(self, namespace: str, key: str, default: object = None) -> object:
        with self._lock:
            row = self._conn.execute(
                "SELECT value FROM state WHERE namespace = ? AND key = ?", (namespace, key)
            ).fetchone()
        return json.loads(row[0]) if row else default

    def set_state(self, namespace: str, key: str, value: object, conn: sqlite3.Connection | None = None) -> None:
        """Store one value; pass `conn` to join an open transaction (several keys that change together)."""
        sql = "INSERT OR REPLACE INTO state (namespace, key, value) VALUES (?, ?, ?)"
        if conn is not None:
            conn.execute(sql, (namespace, key, json.dumps(value)))
            return
        with self.transaction() as own:
            own.execute(sql, (namespace, key, json.dumps(value)))

    def bump(self, namespace: str, key: str, by: int = 1) -> int:
        """Add `by` to an integer counter in one transaction and return its new value.

        Read and write happen under one write lock of the database, so two writers
        (threads or processes sharing the ledger) never receive the same numbers.
        """
        with self.transaction() as conn:
            row = conn.execute("SELECT value FROM state WHERE namespace = ? AND key = ?", (namespace, key)).fetchone()
            value = int(json.loads(row[0]) if row else 0) + by
            conn.execute(
                "INSERT OR REPLACE INTO state (namespace, key, value) VALUES (?, ?, ?)",
                (namespace, key, json.dumps(value)),
            )
        return value

    def drop_namespace(self, namespace: str) -> None:
        with self.transaction() as conn:
            for table in ("links", "history", "working", "state"):
                conn.execute(f"DELETE FROM {table} WHERE namespace = ?", (namespace,))


def _change_from_row(row: dict[str, object]) -> Change:
    return Change(
        id=int(row["id"]),  # type: ignore[arg-type]
        namespace=str(row["namespace"]),
        record_id=str(row["record_id"]),
        kind=row["kind"],  # type: ignore[arg-type]
        action=Action(row["action"]),
        old_text=str(row["old_text"]),
        new_text=str(row["new_text"]),
        old_status=Status(row["old_status"]),
        new_status=Status(row["new_status"]),
        reason=str(row["reason"]),
        policy=str(row["policy"]),
        time=datetime.fromisoformat(str(row["time"])),
        undone=bool(row["undone"]),
        undoes=int(row["undoes"]) if row["undoes"] is not None else None,  # type: ignore[arg-type]
        old_fields=json.loads(str(row.get("old_fields") or "{}")),
        new_fields=json.loads(str(row.get("new_fields") or "{}")),
        follows=int(row["follows"]) if row.get("follows") is not None else None,  # type: ignore[arg-type]
    )
