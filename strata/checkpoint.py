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
import sqlite3
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from enum import Enum
from pathlib import Path

import ormsgpack
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from pydantic import BaseModel

import strata.graph.state
import strata.memory.records
from strata.memory.errors import ConfigError
from strata.memory.ledger_sql import BUSY_SECONDS, vacuum
from strata.memory.settings import DEFAULT_DATA_DIR

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
    return Path(data_dir).expanduser() / THREADS_FILE


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
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), check_same_thread=False)
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(
            f"cannot open the thread checkpoints at {path} ({type(exc).__name__}): "
            "check data_dir points to a writable folder"
        ) from exc
    saver = SqliteSaver(conn, serde=serializer(extra_types))
    saver.setup()
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
    path.parent.mkdir(parents=True, exist_ok=True)
    async with aiosqlite.connect(str(path)) as conn:
        saver = AsyncSqliteSaver(conn, serde=serializer(extra_types))
        await saver.setup()
        yield saver


def checkpointer_for(memory: object) -> SqliteSaver:
    """An open SqliteSaver in the data folder of a `strata.Memory` (embedded case)."""
    context = memory.context("chat")  # type: ignore[attr-defined]
    return open_checkpointer(context.data_dir)


# erasure -------------------------------------------------------------------------------------------
# `Memory.erase` removes what someone said from the memory; a thread saved here may still hold it (the
# turns it ingested, the evidence it was shown, the answer). LangGraph can delete a thread, not part
# of one, so a thread whose saved state holds an erased text goes whole. The tables read are the ones
# SqliteSaver and AsyncSqliteSaver write (`checkpoints`, `writes`).
_BLOBS = (("checkpoints", "type", "checkpoint"), ("checkpoints", "'json'", "metadata"), ("writes", "type", "value"))


def threads_holding(data_dir: str | Path, texts: Iterable[str]) -> list[str]:
    """The threads of a data folder whose saved state holds one of `texts` as a whole string value
    (a turn's text, an evidence item's, a message's), in any of their checkpoints or pending writes."""
    wanted = set(texts)
    path = checkpoint_path(data_dir)
    if not wanted or not path.is_file():
        return []
    conn = _connect(path)
    try:
        return sorted(_holding(conn, wanted))
    finally:
        conn.close()


def erase_threads(data_dir: str | Path, texts: Iterable[str]) -> tuple[list[str], bool]:
    """Delete the threads that hold one of `texts` (`threads_holding`), their bytes included: deletes
    overwrite what they free, and the file is rebuilt. Returns the threads deleted and whether the file
    was rebuilt (not while another connection is writing to it: the deleted rows' bytes are then
    overwritten already, and only the file's free pages remain to reclaim)."""
    wanted = set(texts)
    path = checkpoint_path(data_dir)
    if not wanted or not path.is_file():
        return [], False
    conn = _connect(path)
    try:
        conn.execute("PRAGMA secure_delete=ON")
        threads = sorted(_holding(conn, wanted))
        with conn:
            for table in ("checkpoints", "writes"):
                conn.executemany(f"DELETE FROM {table} WHERE thread_id = ?", [(t,) for t in threads])
    except sqlite3.Error as exc:
        conn.close()
        raise ConfigError(f"cannot delete the saved threads in {path} ({exc}): check the file is writable; "
                          "the memory's records were not erased") from None
    try:
        compacted = vacuum(conn) if threads else False
    except sqlite3.OperationalError:  # another process holds the file: its deletes are done all the same
        compacted = False
    finally:
        conn.close()
    return threads, compacted


def _connect(path: Path) -> sqlite3.Connection:
    try:
        return sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True, timeout=BUSY_SECONDS)
    except sqlite3.Error as exc:
        raise ConfigError(f"cannot open the thread checkpoints at {path} ({exc}): check the file's permissions; "
                          "the memory's records were not erased") from exc


def _holding(conn: sqlite3.Connection, wanted: set[str]) -> set[str]:
    found: set[str] = set()
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, kind, column in _BLOBS:
        if table not in tables:
            continue
        for thread, serialised, blob in conn.execute(f"SELECT thread_id, {kind}, {column} FROM {table}"):
            if thread not in found and not wanted.isdisjoint(_strings(serialised, blob)):
                found.add(thread)
    return found


def _strings(serialised: str, blob: bytes | str | None) -> set[str]:
    """Every string in one saved value, read without rebuilding any object (so no type needs allowing):
    an extension (a model, a message, a set ...) is itself msgpack, read the same way."""
    found: set[str] = set()

    def extension(_tag: int, data: bytes) -> None:
        _collect(ormsgpack.unpackb(data, ext_hook=extension), found)

    try:
        if serialised == "msgpack" and blob is not None:
            _collect(ormsgpack.unpackb(blob, ext_hook=extension), found)
        elif serialised == "json" and blob is not None:
            _collect(json.loads(blob), found)
    except (ValueError, TypeError, ormsgpack.MsgpackDecodeError):
        pass  # a value this cannot read holds no string it can match
    return found


def strings_in(value: object) -> set[str]:
    """Every string in a value read back from JSON or msgpack (dict keys and values, list items)."""
    found: set[str] = set()
    _collect(value, found)
    return found


def _collect(value: object, found: set[str]) -> None:
    if isinstance(value, str):
        found.add(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _collect(key, found)
            _collect(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, found)
