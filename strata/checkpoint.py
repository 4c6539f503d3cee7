"""Thread checkpoints in SQLite, beside the memory, for apps that embed the graph.

Long-term memory lives in Chroma and the ledger whatever happens to a thread;
a checkpointer is what lets one conversation thread (its messages, the graph's
per-thread state) pick up where it stopped after the process restarts. The
file sits in the memory's data folder so one folder holds everything a user
needs to back up.

```python
from strata.checkpoint import sqlite_checkpointer
from strata.graph import build_graph

with sqlite_checkpointer(".strata") as saver:
    app = build_graph(checkpointer=saver)
    app.invoke({"turns": [...]}, {"configurable": {"thread_id": "ann"}}, context=Context(mode="chat"))
```
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import ormsgpack
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from pydantic import BaseModel

import strata.graph.state
import strata.memory.records
from strata.memory.erasure import Said
from strata.memory.errors import ConfigError
from strata.memory.ledger_sql import BUSY_SECONDS, sqlite_uri, vacuum
from strata.memory.private_files import make_private_file, make_private_folder
from strata.memory.settings import DEFAULT_DATA_DIR, check_folder
from strata.thread_owners import Holders, owner

THREADS_FILE = "threads.sqlite3"
TypeName = tuple[str, str]


def state_types() -> list[TypeName]:
    """The project's own types that travel in graph state (evidence, verdicts, turns ...).

    A checkpoint is read back only into types on an explicit list (LangGraph's
    msgpack allowlist), so a tampered checkpoint file cannot name arbitrary code.
    """
    found: list[TypeName] = []
    for module in (strata.graph.state, strata.memory.records):
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__ and issubclass(value, (BaseModel, Enum)):
                found.append((value.__module__, value.__name__))
    return sorted(found)


def serializer(extra_types: Iterable[type | TypeName] = ()) -> JsonPlusSerializer:
    """LangGraph's serializer with the state types (and an app's own) allowed back in."""
    extra = [(t.__module__, t.__name__) if isinstance(t, type) else tuple(t) for t in extra_types]
    return JsonPlusSerializer(allowed_msgpack_modules=[*state_types(), *extra])


def checkpoint_path(data_dir: str | Path = DEFAULT_DATA_DIR) -> Path:
    """Where the thread checkpoints of a data folder live."""
    if not isinstance(data_dir, str | os.PathLike):
        raise ConfigError(f"data_dir must be a folder's path, not {type(data_dir).__name__}: e.g. '.strata'")
    return Path(check_folder(os.fspath(data_dir))).expanduser() / THREADS_FILE


def _unusable(path: Path, exc: BaseException) -> ConfigError:
    """The one line for a threads file that cannot be opened or is not a database."""
    what = "is not a SQLite database" if isinstance(exc, sqlite3.DatabaseError) else f"cannot be opened ({exc})"
    return ConfigError(f"the thread checkpoints at {path} {what}: point data_dir at a writable memory folder, "
                       f"or move that file aside")


def open_checkpointer(
    data_dir: str | Path = DEFAULT_DATA_DIR, extra_types: Iterable[type | TypeName] = ()
) -> SqliteSaver:
    """A SqliteSaver on `<data_dir>/threads.sqlite3`; close it with `close_checkpointer`.

    For long-lived apps that keep one saver open; prefer `sqlite_checkpointer`
    (a context manager) elsewhere. `extra_types` are an app's own state types
    (pydantic models, enums) to read back from checkpoints.
    """
    path = checkpoint_path(data_dir)
    try:
        make_private_folder(path.parent)
        make_private_file(path)
        conn = sqlite3.connect(str(path), check_same_thread=False)
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(
            f"cannot open the thread checkpoints at {path} ({type(exc).__name__}): "
            "check data_dir points to a writable folder"
        ) from exc
    saver = SqliteSaver(conn, serde=serializer(extra_types))
    try:
        saver.setup()
    except sqlite3.Error as exc:
        conn.close()
        raise _unusable(path, exc) from None
    return saver


def close_checkpointer(saver: SqliteSaver) -> None:
    """Close the saver's connection (everything written is already committed)."""
    saver.conn.close()


@contextmanager
def sqlite_checkpointer(
    data_dir: str | Path = DEFAULT_DATA_DIR, extra_types: Iterable[type | TypeName] = ()
) -> Iterator[SqliteSaver]:
    """A SqliteSaver for the duration of a block, closed afterwards."""
    saver = open_checkpointer(data_dir, extra_types)
    try:
        yield saver
    finally:
        close_checkpointer(saver)


@asynccontextmanager
async def async_sqlite_checkpointer(
    data_dir: str | Path = DEFAULT_DATA_DIR, extra_types: Iterable[type | TypeName] = ()
) -> AsyncIterator[AsyncSqliteSaver]:
    """The same file through AsyncSqliteSaver, for apps that run graphs with `ainvoke`/`astream`."""
    import aiosqlite

    path = checkpoint_path(data_dir)
    try:
        make_private_folder(path.parent)
    except OSError as exc:
        raise _unusable(path, exc) from None
    make_private_file(path)
    async with aiosqlite.connect(str(path)) as conn:
        saver = AsyncSqliteSaver(conn, serde=serializer(extra_types))
        try:
            await saver.setup()
        except sqlite3.Error as exc:
            raise _unusable(path, exc) from None
        yield saver


def checkpointer_for(memory: object) -> SqliteSaver:
    """An open SqliteSaver in the data folder of a `strata.Memory` (embedded case)."""
    if not callable(getattr(memory, "context", None)):
        raise ConfigError(f"checkpointer_for takes a strata.Memory, not {type(memory).__name__}")
    context = memory.context("chat")  # type: ignore[attr-defined]
    return open_checkpointer(context.data_dir)


# erasure -------------------------------------------------------------------------------------------
# `Memory.erase` removes what someone said from the memory; a thread saved here may still hold it (the
# turns it ingested, the evidence it was shown, the answer). LangGraph can delete a thread, not part
# of one, so a thread whose saved state holds an erased record goes whole. A saved state does not say
# whose memory it read, so a record is known by what the state keeps of it: its id beside its text (a
# turn's `dia_id` and `text`, an evidence item's `id` and `text`), which another namespace's thread
# holds only if it holds the same record. The tables read are the ones SqliteSaver and
# AsyncSqliteSaver write (`checkpoints`, `writes`).
_BLOBS = (("checkpoints", "type", "checkpoint"), ("checkpoints", "'json'", "metadata"), ("writes", "type", "value"))
_ID_FIELDS = ("id", "dia_id", "dialogue_id")


@dataclass(frozen=True)
class Choice:
    """The saved threads an erase or a drop deletes, each with the other namespaces that ran on it too (their
    runs there go with it, which a listing must say), and those it leaves because nothing says whose they
    are: saved before runs recorded their namespace, and holding records of no namespace or of several
    (strata/thread_owners.py)."""

    threads: dict[str, list[str]] = field(default_factory=dict)
    unattributed: list[str] = field(default_factory=list)


def threads_holding(data_dir: str | Path, said: Iterable[Said], namespace: str | None = None,
                    holders: Holders | None = None) -> list[str]:
    """The threads of a data folder whose saved state holds one of the (id, text) pairs `said`: a
    record (a turn, an evidence item) with that id and that text, in any checkpoint or pending write;
    with `namespace`, only threads run on it (`threads_to_erase`)."""
    return sorted(threads_to_erase(data_dir, said, namespace, holders).threads)


def threads_to_erase(data_dir: str | Path, said: Iterable[Said], namespace: str | None = None,
                     holders: Holders | None = None) -> Choice:
    """What `erase_threads` deletes (`_holding`), and what it leaves unattributed."""
    wanted = set(said)
    if not wanted:
        return Choice()
    with _threads_file(data_dir) as conn:
        return _holding(conn, wanted, namespace, holders) if conn is not None else Choice()


def threads_run_on(data_dir: str | Path, namespace: str, holders: Holders | None = None) -> dict[str, list[str]]:
    """The threads of a data folder run on `namespace`, what `drop_threads` deletes (`threads_to_drop`)."""
    return threads_to_drop(data_dir, namespace, holders).threads


def threads_to_drop(data_dir: str | Path, namespace: str, holders: Holders | None = None) -> Choice:
    """What `drop_threads` deletes (`_run_on`), and what it leaves unattributed."""
    with _threads_file(data_dir, "dropped") as conn:
        return _run_on(conn, namespace, holders) if conn is not None else Choice()


def erase_threads(data_dir: str | Path, said: Iterable[Said], namespace: str | None = None,
                  holders: Holders | None = None) -> tuple[Choice, bool]:
    """Delete the threads that hold one of `said` (`threads_to_erase`), their bytes included: deletes
    overwrite what they free, and the file is rebuilt. Returns what was deleted (and left) and whether the
    file was rebuilt (not while another connection is writing to it: the deleted rows' bytes are then
    overwritten already, and only the file's free pages remain to reclaim)."""
    wanted = set(said)
    return _delete_threads(data_dir, lambda conn: _holding(conn, wanted, namespace, holders), "erased") if (
        wanted) else (Choice(), False)


def drop_threads(data_dir: str | Path, namespace: str, holders: Holders | None = None) -> tuple[Choice, bool]:
    """Delete the threads run on `namespace` (`threads_to_drop`), as `erase_threads` deletes: a dropped
    namespace is empty, so no erase could find its threads afterwards, and they held its words."""
    return _delete_threads(data_dir, lambda conn: _run_on(conn, namespace, holders), "dropped")


def _delete_threads(
    data_dir: str | Path, choose: Callable[[sqlite3.Connection], Choice], done: str
) -> tuple[Choice, bool]:
    """Delete the threads `choose` picks, with secure delete, then rebuild the file (`erase_threads`)."""
    with _threads_file(data_dir, done) as conn:
        if conn is None:
            return Choice(), False
        conn.execute("PRAGMA secure_delete=ON")
        chosen = choose(conn)
        with conn:
            for table in ("checkpoints", "writes"):
                conn.executemany(f"DELETE FROM {table} WHERE thread_id = ?", [(t,) for t in chosen.threads])
    try:
        return chosen, _vacuumed(data_dir) if chosen.threads else False
    except sqlite3.Error:
        return chosen, False  # the deletes are done; another connection kept the file from being rebuilt


@contextmanager
def _threads_file(data_dir: str | Path, done: str = "erased") -> Iterator[sqlite3.Connection | None]:
    """The threads file, open for reading and writing (None when there is none);
    any SQLite error is one `ConfigError` (the memory's records are `done` only after this succeeds)."""
    path = checkpoint_path(data_dir)
    if not path.is_file():
        yield None
        return
    try:
        conn = sqlite3.connect(sqlite_uri(path, "mode=rw"), uri=True, timeout=BUSY_SECONDS)
    except sqlite3.Error as exc:
        raise ConfigError(f"cannot open the saved threads at {path} ({exc}): check the file; "
                          f"nothing was {done}") from None
    try:
        yield conn
    except sqlite3.Error as exc:
        raise ConfigError(f"cannot read or change the saved threads in {path} ({exc}): check the file is a "
                          f"writable SQLite database; nothing was {done}") from None
    finally:
        conn.close()


def _vacuumed(data_dir: str | Path) -> bool:
    conn = sqlite3.connect(checkpoint_path(data_dir), timeout=BUSY_SECONDS)
    try:
        return vacuum(conn)
    finally:
        conn.close()


def _holding(conn: sqlite3.Connection, wanted: set[Said], namespace: str | None, holders: Holders | None) -> Choice:
    """The threads holding one of `wanted`, and, given a namespace, run on it: a thread records the namespace
    of each run (`start_run`), and two namespaces may hold the same id and text ("hi" as `raw:T1`). One saved
    before runs recorded it is the namespace's when the erased records it holds are no other namespace's."""
    found, spaces = _scan(conn, wanted)
    if namespace is None:
        return Choice({thread: sorted(spaces.get(thread, ())) for thread in sorted(found)})
    chosen = {thread: sorted(spaces[thread] - {namespace}) for thread in sorted(found)
              if namespace in spaces.get(thread, ())}
    unknown: list[str] = []
    for thread, pairs in _pairs(conn, [t for t in found if not spaces.get(t)]).items():
        if holders is not None and not holders(pairs & wanted) - {namespace}:  # `wanted` is the namespace's
            chosen[thread] = []
        else:
            unknown.append(thread)
    return Choice(dict(sorted(chosen.items())), sorted(unknown))


def _run_on(conn: sqlite3.Connection, namespace: str, holders: Holders | None) -> Choice:
    """The threads with a run on `namespace`, and those saved before runs recorded it whose records are the
    namespace's only (strata/thread_owners.py); the rest of those, unless another namespace's, unattributed."""
    spaces = _scan(conn, set())[1]
    chosen = {thread: sorted(names - {namespace}) for thread, names in sorted(spaces.items()) if namespace in names}
    unknown: list[str] = []
    for thread, pairs in _pairs(conn, [t for t, names in spaces.items() if not names]).items():
        whose = owner(holders(pairs), namespace) if holders is not None else "unknown"
        if whose == "this":
            chosen[thread] = []
        elif whose == "unknown":
            unknown.append(thread)
    return Choice(dict(sorted(chosen.items())), sorted(unknown))


def _pairs(conn: sqlite3.Connection, threads: list[str]) -> dict[str, set[Said]]:
    """The (id, text) pairs each of `threads` holds, in any checkpoint or pending write (`said_in`)."""
    found: dict[str, set[Said]] = {thread: set() for thread in threads}
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for chunk in (threads[i:i + 400] for i in range(0, len(threads), 400)):
        marks = ", ".join("?" * len(chunk))
        for table, kind, column in _BLOBS:
            if table in tables:
                for thread, serialised, blob in conn.execute(
                        f"SELECT thread_id, {kind}, {column} FROM {table} WHERE thread_id IN ({marks})", chunk):
                    found[thread] |= said_in(_read(serialised, blob))
    return found


def _scan(conn: sqlite3.Connection, wanted: set[Said]) -> tuple[set[str], dict[str, set[str]]]:
    """The threads holding one of `wanted`, and the run namespaces each thread records, from every
    checkpoint and pending write (`_BLOBS`)."""
    found: set[str] = set()
    spaces: dict[str, set[str]] = {}
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, kind, column in _BLOBS:
        if table not in tables:
            continue
        channel = "channel" if table == "writes" else "''"
        for thread, name, serialised, blob in conn.execute(f"SELECT thread_id, {channel}, {kind}, {column} "
                                                           f"FROM {table}"):
            value = _read(serialised, blob)
            spaces.setdefault(thread, set()).update(namespaces_in(name, value))
            if wanted and thread not in found and not wanted.isdisjoint(said_in(value)):
                found.add(thread)
    return found, spaces


def namespaces_in(channel: str, value: object) -> set[str]:
    """The run namespaces a saved row records: a pending write to the `namespace` channel, or a
    checkpoint's channel values."""
    if channel == "namespace":
        return {value} if isinstance(value, str) and value else set()
    return run_namespaces(value.get("channel_values") if isinstance(value, dict) else None)


def run_namespaces(values: object) -> set[str]:
    """The namespace a state's values record (`start_run` writes it), as a set: empty when none."""
    found = values.get("namespace") if isinstance(values, dict) else None
    return {found} if isinstance(found, str) and found else set()


def _read(serialised: str, blob: bytes | str | None) -> object:
    """One saved value as plain lists and dicts, without rebuilding any object (so no type needs
    allowing): an extension (a model, a message, a set ...) is itself msgpack, read the same way."""

    def extension(_tag: int, data: bytes) -> object:
        return ormsgpack.unpackb(data, ext_hook=extension)

    try:
        if serialised == "msgpack" and blob is not None:
            return ormsgpack.unpackb(blob, ext_hook=extension)
        if serialised == "json" and blob is not None:
            return json.loads(blob)
    except (ValueError, TypeError, ormsgpack.MsgpackDecodeError):
        pass  # a value this cannot read holds no record it can match
    return None


def said_in(value: object) -> set[Said]:
    """The (id, text) pairs of the records a value holds: every dict with a text and an id field (an
    evidence item, a turn, a record), in a value read back from JSON or msgpack."""
    found: set[Said] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            text = item.get("text")
            if isinstance(text, str):
                found |= {(item[key], text) for key in _ID_FIELDS if isinstance(item.get(key), str)}
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found
