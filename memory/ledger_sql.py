"""Where the ledger's tables live: one SQLite file (embedded) or a PostgreSQL database (shared).

Both backends speak the same SQL (written with `?` placeholders, upserts as
`ON CONFLICT ... DO UPDATE`, new ids by `RETURNING`), hold the same tables and
give the same guarantees: a transaction is all-or-nothing, a thread's reads
inside its open transaction see its own writes, and `namespace_lock` serialises
the writers of one namespace across every process that shares the database.
The schema is versioned in `schema_version` and migrated under a lock, so two
processes starting at once migrate it exactly once.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from strata.memory.errors import ConfigError, DiskFullError, disk_full, disk_full_message
from strata.memory.private_files import make_private_file
from strata.memory.settings import folder_is_read_only

SCHEMA_VERSION = 5
LARGEST_INTEGER = 2**63 - 1  # what an INTEGER column holds (SQLite and PostgreSQL's BIGINT)
# The tables as of SCHEMA_VERSION; `{id}` is the dialect's auto-increment key.
_TABLES = (
    """CREATE TABLE IF NOT EXISTS links (
        namespace TEXT NOT NULL, src TEXT NOT NULL, dst TEXT NOT NULL, type TEXT NOT NULL,
        weight DOUBLE PRECISION NOT NULL DEFAULT 1.0,
        PRIMARY KEY (namespace, src, dst, type))""",
    "CREATE INDEX IF NOT EXISTS links_dst ON links (namespace, dst)",
    """CREATE TABLE IF NOT EXISTS history (
        id {id},
        namespace TEXT NOT NULL, record_id TEXT NOT NULL, kind TEXT NOT NULL, action TEXT NOT NULL,
        old_text TEXT NOT NULL, new_text TEXT NOT NULL, old_status TEXT NOT NULL, new_status TEXT NOT NULL,
        reason TEXT NOT NULL, policy TEXT NOT NULL, time TEXT NOT NULL,
        undone INTEGER NOT NULL DEFAULT 0, undoes BIGINT,
        old_fields TEXT NOT NULL DEFAULT '{{}}', new_fields TEXT NOT NULL DEFAULT '{{}}', follows BIGINT,
        cause TEXT NOT NULL DEFAULT '')""",
    "CREATE INDEX IF NOT EXISTS history_ns ON history (namespace, id)",
    # (4) one record's history without reading the namespace's: undo, and an erasure's plan
    "CREATE INDEX IF NOT EXISTS history_record ON history (namespace, record_id)",
    """CREATE TABLE IF NOT EXISTS working (
        namespace TEXT NOT NULL, participant TEXT NOT NULL, seq BIGINT NOT NULL,
        dia_id TEXT NOT NULL, text TEXT NOT NULL, time TEXT, arrival BIGINT,
        PRIMARY KEY (namespace, participant, seq))""",
    """CREATE TABLE IF NOT EXISTS state (
        namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
        PRIMARY KEY (namespace, key))""",
    # The change sequence: one counter per namespace, bumped by every write to its records,
    # and the sequence at which each record last changed (what a reader reloads).
    """CREATE TABLE IF NOT EXISTS namespaces (
        namespace TEXT PRIMARY KEY, seq BIGINT NOT NULL DEFAULT 0, reset_seq BIGINT NOT NULL DEFAULT 0)""",
    """CREATE TABLE IF NOT EXISTS changes (
        namespace TEXT NOT NULL, record_id TEXT NOT NULL, seq BIGINT NOT NULL,
        PRIMARY KEY (namespace, record_id))""",
    "CREATE INDEX IF NOT EXISTS changes_seq ON changes (namespace, seq)",
    # The LangGraph store's items (strata/langgraph_store.py): every `put` of a key is one version.
    """CREATE TABLE IF NOT EXISTS store_items (
        seq {id},
        namespace TEXT NOT NULL, key TEXT NOT NULL,
        value TEXT NOT NULL, text TEXT NOT NULL, indexed INTEGER NOT NULL,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS store_items_key ON store_items (namespace, key, seq)",
)
# Columns that ledgers written by earlier versions lack (columns are only ever added).
_ADDED_COLUMNS = (("history", "follows", "BIGINT"), ("working", "arrival", "BIGINT"),
                  ("history", "cause", "TEXT NOT NULL DEFAULT ''"))


class Session(Protocol):
    """One connection inside a transaction (or a plain read): DB-API style `execute`."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> Any: ...

    def lock_namespace(self, namespace: str) -> None: ...


class Backend(Protocol):
    """What the ledger needs from a database."""

    dialect: str
    where: str
    closed: bool

    def transaction(self) -> Any: ...

    def read(self) -> Any: ...

    def namespace_lock(self, namespace: str) -> Any: ...

    def in_transaction(self) -> bool: ...

    def compact(self) -> bool: ...

    def close(self) -> None: ...


def lock_key(text: str) -> int:
    """A stable signed 32-bit key for a name (PostgreSQL advisory locks take two such keys)."""
    value = zlib.crc32(text.encode("utf-8"))
    return value - (1 << 32) if value >= 1 << 31 else value


def migrate(backend: Backend, session: Session, id_column: str) -> None:
    """Bring the tables up to SCHEMA_VERSION inside the caller's locked transaction."""
    session.execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
    row = session.execute("SELECT MAX(version) FROM schema_version").fetchone()
    current = int(row[0]) if row and row[0] is not None else 0
    if current >= SCHEMA_VERSION:
        return
    for statement in _TABLES:
        session.execute(statement.format(id=id_column))
    for table, column, kind in _ADDED_COLUMNS:
        _add_column(backend, session, table, column, kind)
    # working memory written before `arrival` existed keeps its order of insertion
    if backend.dialect == "sqlite":
        session.execute("UPDATE working SET arrival = rowid WHERE arrival IS NULL")
    session.execute("DELETE FROM schema_version")
    session.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))


def _add_column(backend: Backend, session: Session, table: str, column: str, kind: str) -> None:
    if backend.dialect == "postgres":
        session.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")
        return
    columns = {row[1] for row in session.execute(f"PRAGMA table_info({table})")}
    if column not in columns:
        session.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")


class _SqliteSession:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> sqlite3.Cursor:
        return self.conn.executemany(sql, rows)

    def lock_namespace(self, namespace: str) -> None:
        """Nothing to do: BEGIN IMMEDIATE already holds the whole file."""


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


class SqliteBackend:
    """One SQLite file in WAL mode: a writing connection and a reading one per process.

    Reads outside a transaction use their own connection (WAL lets them run beside a
    writer), so a reader never waits for another thread's open transaction; inside
    its own transaction a thread reads through the writing connection and sees its writes.
    """

    dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        self.where = str(path)
        self.closed = False
        self._lock = threading.RLock()
        self._local = threading.local()
        self._read_lock = threading.Lock()
        self.read_only = folder_is_read_only(path.parent)  # creates the folder; a file in its place is refused
        if self.read_only:
            self._conn = self._reader = _open_read_only(path)
            return
        make_private_file(path)  # (a new ledger: SQLite would make it, and its log, as the umask says)
        try:
            self._conn = _connect(path)
            with self.transaction() as session:
                migrate(self, session, "INTEGER PRIMARY KEY AUTOINCREMENT")
        except sqlite3.DatabaseError as exc:
            if disk_full(exc, path.parent):
                raise DiskFullError(disk_full_message(path.parent)) from None
            raise ConfigError(
                f"cannot open the ledger {path} ({exc}): the memory folder holds another file under its name; "
                "point data_dir at another folder"
            ) from None
        self._reader = _connect(path)

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """BEGIN IMMEDIATE ... COMMIT; a transaction opened inside another joins it."""
        if self.read_only:
            raise ConfigError(read_only_message(Path(self.where).parent))
        check_open(self)
        with self._lock:
            if getattr(self._local, "depth", 0):
                self._local.depth += 1
                try:
                    yield _SqliteSession(self._conn)
                finally:
                    self._local.depth -= 1
                return
            self._local.depth = 1
            try:
                with immediate_transaction(self._conn, self._lock):
                    yield _SqliteSession(self._conn)
            finally:
                self._local.depth = 0

    @contextmanager
    def read(self) -> Iterator[Session]:
        check_open(self)
        if getattr(self._local, "depth", 0):
            with self._lock:
                yield _SqliteSession(self._conn)
            return
        with self._read_lock:
            yield _SqliteSession(self._reader)

    @contextmanager
    def namespace_lock(self, namespace: str) -> Iterator[None]:
        """Nothing beyond the store's own lock: an embedded folder is locked to one process, and processes sharing
        a data folder beside a Chroma server take the store's writer file lock (memory/run_locks.py)."""
        yield

    def in_transaction(self) -> bool:
        """Whether this thread has a transaction open here."""
        return bool(getattr(self._local, "depth", 0))

    def compact(self) -> bool:
        """Deleted rows out of the files: the write-ahead log folded in and emptied, the file rebuilt
        without free pages (deletes already zero what they free: `PRAGMA secure_delete`)."""
        with self._lock, self._read_lock:
            return vacuum(self._conn)

    def close(self) -> None:
        with self._lock, self._read_lock:
            self.closed = True
            self._conn.close()
            self._reader.close()


def check_open(backend: Backend) -> None:
    """A ledger used after `close_all()` (a store handle kept from before it) says so in one line."""
    if backend.closed:
        raise ConfigError("this memory was closed (close_all): use the Memory again, or take memory.store anew, "
                          "to reopen it")


def vacuum(conn: sqlite3.Connection) -> bool:
    """Fold a SQLite file's write-ahead log in, rebuild the file without free pages, and empty the log;
    False when a reader kept an older snapshot of the log past BUSY_SECONDS (the bytes stay there until
    the next checkpoint)."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    deadline = time.monotonic() + BUSY_SECONDS
    # the log is emptied only once no reader holds an older snapshot of it: wait that out
    while conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def read_only_message(folder: Path) -> str:
    return (
        f"the memory folder {folder} is read-only: reading works, but storing, changing or undoing needs write "
        "access (make it writable, or copy it and point data_dir at the copy)"
    )


def sqlite_uri(path: Path, options: str) -> str:
    """The URI SQLite opens `path` by, with `options` (`mode=ro`, ...): the path made absolute first, as a
    relative one (`data_dir=".strata"`, the default) has no file URI."""
    return f"{path.absolute().as_uri()}?{options}"


def _open_read_only(path: Path) -> sqlite3.Connection:
    """The ledger of a read-only folder, opened for reading: through its write-ahead log when that can be
    read, else as an immutable file (no writer can exist when nobody may write)."""
    if not path.is_file():
        raise ConfigError(
            f"the memory folder {path.parent} is read-only and holds no memory yet: point data_dir at a "
            "folder you can write, or at a copy of a memory"
        )
    for options in ("mode=ro", "mode=ro&immutable=1"):
        conn = sqlite3.connect(sqlite_uri(path, options), uri=True, check_same_thread=False, isolation_level=None)
        try:
            conn.execute("SELECT count(*) FROM history").fetchone()
            return conn
        except sqlite3.Error:
            conn.close()
    raise ConfigError(f"cannot read the ledger {path}: the memory folder is read-only and the file is not a ledger")


BUSY_SECONDS = 30  # how long an opener waits for another connection's lock before giving up


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=BUSY_SECONDS)
    _enter_wal(conn)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA secure_delete=ON")  # a deleted row's bytes are overwritten, not left in a free page
    return conn


def _enter_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL, waiting out openers that race for a new file: SQLite answers this pragma with
    'database is locked' at once, without its busy wait, while another connection holds the file."""
    deadline = time.monotonic() + BUSY_SECONDS
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
