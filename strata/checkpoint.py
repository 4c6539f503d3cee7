"""Thread checkpoints in SQLite, beside the memory, for apps that embed the graph.

Long-term memory lives in Chroma and the ledger whatever happens to a thread;
a checkpointer is what lets one conversation thread (its messages, the graph's
per-thread state) pick up where it stopped after the process restarts. The
file sits in the memory's data folder so one folder holds everything a user
needs to back up.

```python
from strata.checkpoint import sqlite_checkpointer
from graph import build_graph

with sqlite_checkpointer(".strata") as saver:
    app = build_graph(checkpointer=saver)
    app.invoke({"turns": [...]}, {"configurable": {"thread_id": "ann"}}, context=Context(mode="chat"))
```
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from memory.errors import ConfigError
from memory.settings import DEFAULT_DATA_DIR

THREADS_FILE = "threads.sqlite3"


def checkpoint_path(data_dir: str | Path = DEFAULT_DATA_DIR) -> Path:
    """Where the thread checkpoints of a data folder live."""
    return Path(data_dir).expanduser() / THREADS_FILE


def open_checkpointer(data_dir: str | Path = DEFAULT_DATA_DIR) -> SqliteSaver:
    """A SqliteSaver on `<data_dir>/threads.sqlite3`; close it with `close_checkpointer`.

    For long-lived apps that keep one saver open; prefer `sqlite_checkpointer`
    (a context manager) elsewhere.
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
    saver = SqliteSaver(conn)
    saver.setup()
    return saver


def close_checkpointer(saver: SqliteSaver) -> None:
    """Close the saver's connection (everything written is already committed)."""
    saver.conn.close()


@contextmanager
def sqlite_checkpointer(data_dir: str | Path = DEFAULT_DATA_DIR) -> Iterator[SqliteSaver]:
    """A SqliteSaver for the duration of a block, closed afterwards."""
    saver = open_checkpointer(data_dir)
    try:
        yield saver
    finally:
        close_checkpointer(saver)


@asynccontextmanager
async def async_sqlite_checkpointer(data_dir: str | Path = DEFAULT_DATA_DIR) -> AsyncIterator[AsyncSqliteSaver]:
    """The same file through AsyncSqliteSaver, for apps that run graphs with `ainvoke`/`astream`."""
    path = checkpoint_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        yield saver


def checkpointer_for(memory: object) -> SqliteSaver:
    """An open SqliteSaver in the data folder of a `strata.Memory` (embedded case)."""
    context = memory.context("chat")  # type: ignore[attr-defined]
    return open_checkpointer(context.data_dir)
