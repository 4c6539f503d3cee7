"""The durable, transactional side of the memory: links, history, working buffer, change sequence.

Chroma holds texts and vectors; it has no transactions. What must never be half
written (the typed edges between records, every change the refresher makes, the
recent-turn buffer, the write-ahead of raw turns) lives here: in one SQLite file
beside the Chroma folder (embedded), or in a PostgreSQL database that every
replica of a deployment shares (`ledger_url`). Every write to a namespace's
records bumps its change sequence in the same transaction, so a reader in any
process compares one number to know whether its in-memory mirror is current,
and reloads only the records changed since (ledger_sql.py, ledger_postgres.py).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from strata.memory.errors import ConfigError
from strata.memory.ledger_sql import Backend, Session, SqliteBackend, immediate_transaction, read_only_message
from strata.memory.records import Action, Change, Link, LinkType, Status

__all__ = ["EVERY_NAMESPACE", "Ledger", "immediate_transaction", "open_ledger"]

EVERY_NAMESPACE = ""
"""The namespace column of state kept for the whole ledger (a counter every replica reads): no namespace
can be named "" (memory/namespaces.py)."""


def open_ledger(path: Path, url: str | None = None) -> Ledger:
    """The PostgreSQL ledger at `url` when one is given, else the SQLite file at `path`."""
    if url:
        from strata.memory.ledger_postgres import PostgresBackend

        return Ledger(PostgresBackend(url))
    return Ledger(SqliteBackend(path))


class Ledger:
    """The tables every namespace of a data folder (or a deployment) shares."""

    def __init__(self, backend: Backend | Path) -> None:
        self.backend: Backend = SqliteBackend(backend) if isinstance(backend, Path) else backend
        self._committed = threading.local()  # this thread's steps waiting for its transaction's commit

    @property
    def where(self) -> str:
        return self.backend.where

    def transaction(self) -> AbstractContextManager[Session]:
        """All-or-nothing block: a failure inside rolls every statement back; nested blocks join it.
        Every write comes here."""
        self.check_writable()
        return self._transaction()

    @contextmanager
    def _transaction(self) -> Iterator[Session]:
        if self.backend.in_transaction():  # joins the open one, whose commit runs the steps (`after_commit`)
            with self.backend.transaction() as session:
                yield session
            return
        steps: list[Callable[[], None]] = []
        self._committed.steps = steps
        try:
            with self.backend.transaction() as session:
                yield session
        finally:
            self._committed.steps = None
        for step in steps:
            step()

    def after_commit(self, step: Callable[[], None]) -> None:
        """Run `step` once this thread's open transaction has committed (at once when none is open), never
        when it rolls back: what a process keeps in memory of a write (a mirror, the change number it has
        seen) must not run ahead of the ledger, or a failed commit leaves it serving what the ledger never
        recorded and taking the rolled-back number, which the next writer gets, for its own."""
        steps = getattr(self._committed, "steps", None)
        if steps is None:
            step()
        else:
            steps.append(step)

    def reading(self) -> AbstractContextManager[Session]:
        """A plain read (this module's tables and those kept beside them, memory/store_items.py); inside
        this thread's open transaction it sees that transaction's writes."""
        return self.backend.read()

    def namespace_lock(self, namespace: str) -> AbstractContextManager[None]:
        """Serialise the writers of one namespace (across processes when the database is shared)."""
        return self.backend.namespace_lock(namespace)

    def in_transaction(self) -> bool:
        """Whether this thread has a transaction open on the ledger (a write in progress)."""
        return self.backend.in_transaction()

    @property
    def read_only(self) -> bool:
        """True for a ledger in a folder this process may read but not write."""
        return bool(getattr(self.backend, "read_only", False))

    def check_writable(self) -> None:
        """A one-line `ConfigError` before any write to a read-only memory folder (reading it still works)."""
        if self.read_only:
            raise ConfigError(read_only_message(Path(self.where).parent))

    def close(self) -> None:
        self.backend.close()

    # change sequence ---------------------------------------------------
    def log_changes(self, namespace: str, record_ids: Iterable[str]) -> int:
        """Bump the namespace's sequence and stamp the records with it; joins the open transaction.

        The bump takes the namespace's counter row, so writers commit in sequence order:
        a reader that sees sequence N can trust that every change up to N is stored.
        """
        ids = list(dict.fromkeys(record_ids))
        with self.transaction() as session:
            row = session.execute(
                "INSERT INTO namespaces (namespace, seq) VALUES (?, 1) "
                "ON CONFLICT (namespace) DO UPDATE SET seq = namespaces.seq + 1 RETURNING seq",
                (namespace,),
            ).fetchone()
            seq = int(row[0])
            if ids:
                session.executemany(
                    "INSERT INTO changes (namespace, record_id, seq) VALUES (?, ?, ?) "
                    "ON CONFLICT (namespace, record_id) DO UPDATE SET seq = excluded.seq",
                    [(namespace, rid, seq) for rid in ids],
                )
        return seq

    def sequence(self, namespace: str) -> tuple[int, int]:
        """(current sequence, sequence of the last drop): the one number a reader compares."""
        with self.reading() as session:
            row = session.execute(
                "SELECT seq, reset_seq FROM namespaces WHERE namespace = ?", (namespace,)
            ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def knows(self, namespace: str) -> bool:
        """Whether the namespace was written since its last drop, or holds state (an import, an erase or a drop
        under way; where it was written): whether it exists, as far as the ledger can tell."""
        with self.reading() as session:
            row = session.execute(
                "SELECT EXISTS (SELECT 1 FROM namespaces WHERE namespace = ? AND seq > reset_seq) "
                "OR EXISTS (SELECT 1 FROM state WHERE namespace = ?)", (namespace, namespace),
            ).fetchone()
        return bool(row[0])

    def live_namespaces(self) -> list[str]:
        """The namespaces written since their last drop (every write bumps the namespace's sequence)."""
        with self.reading() as session:
            rows = session.execute("SELECT namespace FROM namespaces WHERE seq > reset_seq").fetchall()
        return sorted(str(r[0]) for r in rows if r[0] != EVERY_NAMESPACE)

    def freshness(self, namespace: str, flag: str, counter: str) -> tuple[int, int, bool, int]:
        """`sequence`, whether the state `flag` is set, and the ledger-wide counter `counter` (`bump` under
        `EVERY_NAMESPACE`), in one query: a reader checks them before each read at the cost of the one number
        (memory/store.py: an erase stopped midway on another replica, mirrors saved before an erase)."""
        with self.reading() as session:
            row = session.execute(
                "SELECT (SELECT seq FROM namespaces WHERE namespace = ?), "
                "(SELECT reset_seq FROM namespaces WHERE namespace = ?), "
                "EXISTS (SELECT 1 FROM state WHERE namespace = ? AND key = ?), "
                "(SELECT value FROM state WHERE namespace = ? AND key = ?)",
                (namespace, namespace, namespace, flag, EVERY_NAMESPACE, counter),
            ).fetchone()
        return int(row[0] or 0), int(row[1] or 0), bool(row[2]), int(json.loads(row[3])) if row[3] else 0

    def outdating(self, namespace: str, seq_key: str, flag: str) -> tuple[int, int, bool]:
        """(the sequence of the namespace's last drop, the sequence kept under the state `seq_key`, whether
        the state `flag` is set), in one query: what a mirror saved at some sequence is checked against
        (memory/snapshots.py `outdated`)."""
        with self.reading() as session:
            row = session.execute(
                "SELECT (SELECT reset_seq FROM namespaces WHERE namespace = ?), "
                "(SELECT value FROM state WHERE namespace = ? AND key = ?), "
                "EXISTS (SELECT 1 FROM state WHERE namespace = ? AND key = ?)",
                (namespace, namespace, seq_key, namespace, flag),
            ).fetchone()
        return int(row[0] or 0), int(json.loads(row[1])) if row[1] else 0, bool(row[2])

    def changed_since(self, namespace: str, seq: int) -> list[str]:
        """Ids of the records written, updated, deleted or restored after sequence `seq`."""
        with self.reading() as session:
            rows = session.execute(
                "SELECT record_id FROM changes WHERE namespace = ? AND seq > ?", (namespace, seq)
            ).fetchall()
        return [str(r[0]) for r in rows]

    # links -------------------------------------------------------------
    def add_links(self, links: Iterable[Link], conn: Session | None = None) -> int:
        """Insert or replace edges; joins the transaction open in this thread, if any."""
        rows = [(lk.namespace, lk.src, lk.dst, lk.type.value, lk.weight) for lk in links]
        if not rows:
            return 0
        with self.transaction() as session:
            session.executemany(
                "INSERT INTO links (namespace, src, dst, type, weight) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (namespace, src, dst, type) DO UPDATE SET weight = excluded.weight",
                rows,
            )
        return len(rows)

    def remove_links(self, links: Iterable[Link], conn: Session | None = None) -> None:
        """Take back edges an unfinished edit added; joins the open transaction."""
        rows = [(lk.namespace, lk.src, lk.dst, lk.type.value) for lk in links]
        if rows:
            with self.transaction() as session:
                session.executemany("DELETE FROM links WHERE namespace = ? AND src = ? AND dst = ? AND type = ?", rows)

    def neighbours(
        self, namespace: str, ids: Iterable[str], types: Iterable[LinkType] | None = None
    ) -> list[Link]:
        """Edges touching any of `ids`, in either direction (each once)."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return []
        if len(ids) > _CHUNK // 2:  # each id is bound three times below: SQLite's older builds bind 999 at most
            seen: set[tuple[str, str, str]] = set()
            edges: list[Link] = []
            for part in chunked(ids, _CHUNK // 2):
                for link in self.neighbours(namespace, part, types):
                    if (key := (link.src, link.dst, link.type.value)) not in seen:
                        seen.add(key)
                        edges.append(link)
            return edges
        marks = ",".join("?" * len(ids))
        typed, type_values = "", []
        if types is not None:
            type_values = [t.value for t in types]
            typed = f" AND type IN ({','.join('?' * len(type_values))})"
        # two index searches (by source, the primary key; by destination, links_dst), not one
        # `src IN (...) OR dst IN (...)`, which SQLite answers by reading every link of the namespace
        sql = (
            f"SELECT namespace, src, dst, type, weight FROM links WHERE namespace = ? AND src IN ({marks}){typed} "
            f"UNION ALL SELECT namespace, src, dst, type, weight FROM links WHERE namespace = ? AND dst IN ({marks}) "
            f"AND src NOT IN ({marks}){typed}"
        )
        params: list[object] = [namespace, *ids, *type_values, namespace, *ids, *ids, *type_values]
        with self.reading() as session:
            rows = session.execute(sql, params).fetchall()
        # rows this ledger wrote from validated links: built without validating them again (a turn's
        # entity mentions read thousands of them during an ingest)
        return [
            Link.model_construct(namespace=r[0], src=r[1], dst=r[2], type=LinkType(r[3]), weight=float(r[4]))
            for r in rows
        ]

    def count_links(self, namespace: str) -> dict[str, int]:
        with self.reading() as session:
            rows = session.execute(
                "SELECT type, COUNT(*) FROM links WHERE namespace = ? GROUP BY type", (namespace,)
            ).fetchall()
        return {r[0]: int(r[1]) for r in rows}

    # history -----------------------------------------------------------
    def record_change(self, change: Change, conn: Session | None = None) -> int:
        """Append one change; it joins the transaction open in this thread, if any."""
        sql = (
            "INSERT INTO history (namespace, record_id, kind, action, old_text, new_text, old_status, "
            "new_status, reason, policy, time, undone, undoes, old_fields, new_fields, follows, cause) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
        )
        params = (
            change.namespace, change.record_id, change.kind, change.action.value, change.old_text,
            change.new_text, change.old_status.value, change.new_status.value, change.reason,
            change.policy, change.time.isoformat(), int(change.undone), change.undoes,
            json.dumps(change.old_fields), json.dumps(change.new_fields), change.follows, change.cause,
        )
        with self.transaction() as session:
            return int(session.execute(sql, params).fetchone()[0])

    def history(self, namespace: str, record_id: str | None = None, limit: int = 100) -> list[Change]:
        sql = "SELECT * FROM history WHERE namespace = ?"
        params: list[object] = [namespace]
        if record_id:
            sql += " AND record_id = ?"
            params.append(record_id)
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(limit)
        return self._changes(sql, params)

    def histories(self, namespace: str, record_ids: Sequence[str]) -> list[Change]:
        """Every history row of these records, oldest first: one query per `_CHUNK` ids, not one a record."""
        found: list[Change] = []
        for chunk in chunked(record_ids):
            marks = ", ".join("?" * len(chunk))
            found += self._changes(
                f"SELECT * FROM history WHERE namespace = ? AND record_id IN ({marks})", [namespace, *chunk]
            )
        return sorted(found, key=lambda change: change.id or 0)

    def changes_caused_by(self, namespace: str, turns: Sequence[str]) -> list[Change]:
        """The Refresher's changes made for these stored turns (their `cause`), oldest first. None in a ledger
        of an earlier version opened read-only (not migrated: it has no `cause`, and wrote none)."""
        if not self._history_has_cause():
            return []
        found: list[Change] = []
        for chunk in chunked([t for t in turns if t]):
            marks = ", ".join("?" * len(chunk))
            found += self._changes(
                f"SELECT * FROM history WHERE namespace = ? AND cause IN ({marks})", [namespace, *chunk]
            )
        return sorted(found, key=lambda change: change.id or 0)

    def _history_has_cause(self) -> bool:
        with self.reading() as session:
            cursor = session.execute("SELECT * FROM history WHERE 1 = 0")
            return "cause" in [d[0] for d in cursor.description]

    def rewrite_changes(self, namespace: str, changes: Sequence[Change]) -> None:
        """Write these rows of this namespace's history again, as given (texts, states, fields and reason):
        an erase tells the rows that stay without what an erased turn made the record say."""
        rows = [(c.old_text, c.new_text, c.old_status.value, c.new_status.value, json.dumps(c.old_fields),
                 json.dumps(c.new_fields), c.reason, namespace, int(c.id or 0)) for c in changes]
        if rows:
            with self.transaction() as session:
                session.executemany(
                    "UPDATE history SET old_text = ?, new_text = ?, old_status = ?, new_status = ?, old_fields = ?, "
                    "new_fields = ?, reason = ? WHERE namespace = ? AND id = ?", rows,
                )

    def count_history(self, namespace: str) -> int:
        with self.reading() as session:
            row = session.execute("SELECT COUNT(*) FROM history WHERE namespace = ?", (namespace,)).fetchone()
        return int(row[0])

    def get_change(self, namespace: str, change_id: int) -> Change | None:
        found = self._changes("SELECT * FROM history WHERE namespace = ? AND id = ?", [namespace, change_id])
        return found[0] if found else None

    def remove_history(self, namespace: str, record_ids: Sequence[str]) -> int:
        """Delete the history rows of records that are gone for good (derived records their sources no
        longer make): an undo could only fail on them. Returns how many rows went."""
        with self.transaction() as session:
            removed = delete_each(session, "DELETE FROM history WHERE namespace = ? AND record_id IN ({ids})",
                                  namespace, record_ids)
            relink_followers(session, namespace)
            return removed

    def latest_edit(self, namespace: str) -> Change | None:
        """The newest content edit (an update or delete made on its own) not yet undone: what a plain
        undo reverses, however many evolutions and no-ops were written after it."""
        found = self._changes(
            "SELECT * FROM history WHERE namespace = ? AND undone = 0 AND action IN ('update', 'delete') "
            "AND follows IS NULL ORDER BY id DESC LIMIT 1", [namespace],
        )
        return found[0] if found else None

    def followers(self, namespace: str, change_id: int, undone: bool = False) -> list[Change]:
        """The changes made together with this one (undone with it), not yet undone; with `undone`, those
        undone too (an erase looks for every request to forget what it erases, in force or not)."""
        return self._changes(
            "SELECT * FROM history WHERE namespace = ? AND follows = ? "
            f"{'' if undone else 'AND undone = 0 '}ORDER BY id DESC",
            [namespace, change_id],
        )

    def _changes(self, sql: str, params: list[object]) -> list[Change]:
        """History rows of a query, as changes."""
        with self.reading() as session:
            cursor = session.execute(sql, params)
            names = [d[0] for d in cursor.description]
            rows = cursor.fetchall()
        return [_change_from_row(dict(zip(names, row, strict=True))) for row in rows]

    def mark_undone(self, namespace: str, change_id: int, conn: Session | None = None, undone: bool = True) -> None:
        """Mark a change of this namespace undone (or not); another namespace's change of that id is untouched."""
        with self.transaction() as session:
            session.execute("UPDATE history SET undone = ? WHERE id = ? AND namespace = ?",
                            (int(undone), change_id, namespace))

    def remove_change(self, namespace: str, change_id: int, conn: Session | None = None) -> None:
        """Take back a history row of this namespace whose edit never finished (memory/journal.py); joins the
        open transaction."""
        with self.transaction() as session:
            session.execute("DELETE FROM history WHERE id = ? AND namespace = ?", (change_id, namespace))

    # erasure (memory/erasure.py) ----------------------------------------
    def evolutions_by(self, namespace: str, sources: Iterable[str]) -> list[Change]:
        """The note evolutions (A-MEM) that these records made to others, oldest first."""
        wanted = set(sources)
        found = self._changes(
            "SELECT * FROM history WHERE namespace = ? AND action = 'evolve' AND reason LIKE 'evolved by %' "
            "ORDER BY id", [namespace],
        )
        return [c for c in found if _evolved_by(c.reason) in wanted]

    def erase(
        self, namespace: str, ids: Sequence[str], changes: Sequence[int], dia_ids: Sequence[str],
        history_of: Sequence[str] = (), told: Mapping[str, str] | None = None,
    ) -> dict[str, int]:
        """Delete for good the links touching `ids`, their history rows, the rows `changes` and the history
        of `history_of` (records rewritten, their links kept), and the working-memory rows of `dia_ids`;
        write the working-memory rows of the turns `told` names with the text given (a request's turn, which
        kept its words there: reads show the record's text, an export and the file the row's). Joins the open
        transaction. Returns what each removed."""
        by_column = (("record_id", [*ids, *history_of]), ("id", [int(c) for c in changes]))
        with self.transaction() as session:
            links = delete_each(
                session, "DELETE FROM links WHERE namespace = ? AND (src IN ({ids}) OR dst IN ({ids}))", namespace, ids
            )
            gone = [row[0] for column, values in by_column for row in select_each(
                session, f"SELECT id FROM history WHERE namespace = ? AND {column} IN ({{ids}})", namespace, values)]
            if gone:  # their numbers only (never a record's id or words): an undo of one says it was erased
                held = self.get_state(namespace, ERASED_CHANGES, [])
                self.set_state(namespace, ERASED_CHANGES, with_numbers(held if isinstance(held, list) else [], gone))
            history = sum(
                delete_each(session, f"DELETE FROM history WHERE namespace = ? AND {column} IN ({{ids}})",
                             namespace, values)
                for column, values in by_column
            )
            working = delete_each(
                session, "DELETE FROM working WHERE namespace = ? AND dia_id IN ({ids})", namespace, dia_ids
            )
            for dia_id, text in (told or {}).items():
                session.execute("UPDATE working SET text = ? WHERE namespace = ? AND dia_id = ?",
                                (text, namespace, dia_id))
            relink_followers(session, namespace)
        return {"links": links, "history": history, "working": working}

    def was_erased(self, namespace: str, change_id: int) -> bool:
        """Whether the change `change_id` of the namespace was erased for good (`erase`), so an undo of it says
        so instead of "no change"."""
        held = self.get_state(namespace, ERASED_CHANGES, [])
        return isinstance(held, list) and any(
            isinstance(span, list) and len(span) == 2 and span[0] <= change_id <= span[1] for span in held)

    def compact(self) -> bool:
        """Give the space of deleted rows back so their bytes leave the files (SQLite: the write-ahead log
        checkpointed and truncated, the file vacuumed); False where the backend cannot (PostgreSQL keeps
        dead rows until its own vacuum reuses or rewrites their pages)."""
        self.check_writable()
        return self.backend.compact()

    # working buffer ----------------------------------------------------
    def push_working(
        self, namespace: str, participant: str, dia_id: str, text: str, time: datetime | None, size: int
    ) -> None:
        """Append a turn to a participant's window and drop what falls out, the earliest said first (AdaMem
        working memory).

        A turn already in the window (its derive is being retried) is not pushed twice.
        """
        with self.transaction() as session:
            session.lock_namespace(namespace)
            if dia_id and session.execute(
                "SELECT 1 FROM working WHERE namespace = ? AND participant = ? AND dia_id = ?",
                (namespace, participant, dia_id),
            ).fetchone():
                return
            row = session.execute(
                "SELECT COALESCE(MAX(seq), 0), (SELECT COALESCE(MAX(arrival), 0) FROM working WHERE namespace = ?) "
                "FROM working WHERE namespace = ? AND participant = ?",
                (namespace, namespace, participant),
            ).fetchone()
            seq, arrival = int(row[0]) + 1, int(row[1]) + 1
            session.execute(
                "INSERT INTO working (namespace, participant, seq, dia_id, text, time, arrival) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (namespace, participant, seq, dia_id, text, time.isoformat() if time else None, arrival),
            )
            # the window keeps the latest turns said, not the latest sent: older talk backfilled after today's
            # does not push today's out
            rows = session.execute(
                "SELECT seq, time, arrival FROM working WHERE namespace = ? AND participant = ?",
                (namespace, participant),
            ).fetchall()
            # undated first, then by time; rows of an import without an arrival order as the oldest sent
            rows.sort(key=lambda r: (r[1] is not None, r[1] or "", r[2] is not None, r[2] or 0, r[0]))
            for row in rows[: max(len(rows) - size, 0)]:
                session.execute("DELETE FROM working WHERE namespace = ? AND participant = ? AND seq = ?",
                                (namespace, participant, row[0]))

    def working(self, namespace: str) -> list[dict[str, str]]:
        """Every participant's recent turns, oldest first (by time, then by arrival)."""
        with self.reading() as session:
            rows = session.execute(
                "SELECT participant, dia_id, text, time FROM working WHERE namespace = ? "
                "ORDER BY time NULLS FIRST, arrival",
                (namespace,),
            ).fetchall()
        return [{"speaker": r[0], "dia_id": r[1], "text": r[2], "time": r[3] or ""} for r in rows]

    # small per-namespace state (open episode, counters, pending derives) -
    def get_state(self, namespace: str, key: str, default: object = None) -> object:
        with self.reading() as session:
            row = session.execute(
                "SELECT value FROM state WHERE namespace = ? AND key = ?", (namespace, key)
            ).fetchone()
        return json.loads(row[0]) if row else default

    def namespaces_holding(self, record_ids: Iterable[str]) -> dict[str, list[str]]:
        """The namespaces holding a record by one of these ids (every record written is stamped in
        `changes`), each with those ids: whose a saved thread is, when its states do not say."""
        found: dict[str, list[str]] = {}
        with self.reading() as session:
            for chunk in chunked(sorted(set(record_ids))):
                marks = ", ".join("?" * len(chunk))
                for namespace, record_id in session.execute(
                        f"SELECT namespace, record_id FROM changes WHERE record_id IN ({marks})", chunk).fetchall():
                    found.setdefault(namespace, []).append(record_id)
        return found

    def states_of(self, key: str) -> dict[str, object]:
        """One key's value in every namespace that holds it, in one query (listing namespaces by a mark)."""
        with self.reading() as session:
            rows = session.execute("SELECT namespace, value FROM state WHERE key = ?", (key,)).fetchall()
        return {row[0]: json.loads(row[1]) for row in rows}

    def set_state(self, namespace: str, key: str, value: object, conn: Session | None = None) -> None:
        """Store one value; joins the transaction open in this thread (several keys that change together)."""
        with self.transaction() as session:
            session.execute(
                "INSERT INTO state (namespace, key, value) VALUES (?, ?, ?) "
                "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value",
                (namespace, key, json.dumps(value)),
            )

    def claim_state(self, namespace: str, key: str, value: object) -> object:
        """Store `value` unless the key holds one already; the value that stands. Replicas of one ledger
        racing to set it all get the first one's (the insert waits for a rival's uncommitted row, then
        does nothing, and the read that follows sees that row)."""
        with self.transaction() as session:
            session.execute(
                "INSERT INTO state (namespace, key, value) VALUES (?, ?, ?) ON CONFLICT (namespace, key) DO NOTHING",
                (namespace, key, json.dumps(value)),
            )
            row = session.execute(
                "SELECT value FROM state WHERE namespace = ? AND key = ?", (namespace, key)
            ).fetchone()
        return json.loads(row[0])

    def clear_state(self, namespace: str, key: str) -> None:
        """Remove one value; joins the transaction open in this thread."""
        with self.transaction() as session:
            session.execute("DELETE FROM state WHERE namespace = ? AND key = ?", (namespace, key))

    def bump(self, namespace: str, key: str, by: int = 1) -> int:
        """Add `by` to an integer counter in one transaction and return its new value.

        Read and write happen under the namespace's statement lock (on SQLite, the file's
        write lock), so two writers (threads or processes sharing the ledger) never
        receive the same numbers.
        """
        with self.transaction() as session:
            session.lock_namespace(namespace)
            row = session.execute(
                "SELECT value FROM state WHERE namespace = ? AND key = ?", (namespace, key)
            ).fetchone()
            value = int(json.loads(row[0]) if row else 0) + by
            session.execute(
                "INSERT INTO state (namespace, key, value) VALUES (?, ?, ?) "
                "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value",
                (namespace, key, json.dumps(value)),
            )
        return value

    def drop_namespace(self, namespace: str) -> None:
        """Forget a namespace; its sequence moves on and marks the drop, so every mirror reloads."""
        with self.transaction() as session:
            for table in ("links", "history", "working", "state", "changes", "store_items"):
                session.execute(f"DELETE FROM {table} WHERE namespace = ?", (namespace,))
            session.execute(
                "INSERT INTO namespaces (namespace, seq, reset_seq) VALUES (?, 1, 1) "
                "ON CONFLICT (namespace) DO UPDATE SET seq = namespaces.seq + 1, reset_seq = namespaces.seq + 1",
                (namespace,),
            )


# The numbers of a namespace's changes erased for good (`Ledger.erase`), as runs: what an undo of one is told.
ERASED_CHANGES = "erased_changes"
_CHUNK = 400  # ids per statement: SQLite binds at most 999 variables and a link query binds each id twice


def chunked(values: Sequence[Any], size: int = _CHUNK) -> Iterator[list[Any]]:
    """`values` in lists of at most `size` (`_CHUNK`: each bound in one statement)."""
    for start in range(0, len(values), size):
        yield list(values[start : start + size])


def select_each(session: Session, sql: str, namespace: str, values: Sequence[Any]) -> list[Any]:
    """The rows of a SELECT whose `{ids}` stands for a list of values, read in chunks as `delete_each` deletes."""
    rows: list[Any] = []
    for chunk in chunked(values):
        marks = ", ".join("?" * len(chunk))
        rows += session.execute(sql.format(ids=marks), (namespace, *chunk * sql.count("{ids}"))).fetchall()
    return rows


def with_numbers(spans: list[Any], numbers: Iterable[int]) -> list[list[int]]:
    """Runs of whole numbers [[low, high], ...], sorted and merged, with `numbers` added: an erase of a person's
    thousand changes is kept as a few runs, not a thousand numbers."""
    merged: list[list[int]] = []
    pairs = [[int(s[0]), int(s[1])] for s in spans if isinstance(s, list) and len(s) == 2]
    for low, high in sorted([*pairs, *([int(n), int(n)] for n in numbers)]):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return merged


def delete_each(session: Session, sql: str, namespace: str, values: Sequence[Any]) -> int:
    """Run a DELETE whose `{ids}` stands for a list of values (each place bound once), in chunks; the rows
    it removed."""
    removed = 0
    for chunk in chunked(values):
        marks = ", ".join("?" * len(chunk))
        cursor = session.execute(sql.format(ids=marks), (namespace, *chunk * sql.count("{ids}")))
        removed += max(int(getattr(cursor, "rowcount", 0) or 0), 0)
    return removed


def relink_followers(session: Session, namespace: str) -> None:
    """Changes that followed a change now deleted (its record erased) follow the oldest of them instead,
    which leads. A request to forget two turns is one edit led by its first delete: with that turn erased
    for good, the other's delete followed nothing and no plain undo could reach it (an export then
    imported it as an edit of its own)."""
    orphaned = session.execute(
        "SELECT follows, MIN(id) FROM history WHERE namespace = ? AND follows IS NOT NULL "
        "AND follows NOT IN (SELECT id FROM history WHERE namespace = ?) GROUP BY follows",
        (namespace, namespace),
    ).fetchall()
    for gone, lead in orphaned:
        session.execute("UPDATE history SET follows = NULL WHERE namespace = ? AND id = ?", (namespace, lead))
        session.execute("UPDATE history SET follows = ? WHERE namespace = ? AND follows = ?", (lead, namespace, gone))


def _evolved_by(reason: str) -> str:
    """The record a note evolution came from: its reason reads "evolved by <id>" or "evolved by <id>: ..."."""
    return reason.removeprefix("evolved by ").split(": ", 1)[0].strip()


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
        cause=str(row.get("cause") or ""),
    )
