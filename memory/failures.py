"""What the stores' own failures tell a caller: one line that says what to do, never a library's traceback.

Two failures are the world's, not a bug's, and a caller can act on them: a Chroma server that stopped
answering mid-call, and a disk (this machine's, the Chroma server's or the ledger database's) with no room
left. Every door into the memory (`Memory`'s calls, the LangGraph store's batches, the operator's routes
through `Memory`) says them alike. Writes are ordered so that a call cut off by either keeps what it stored
and the same call, repeated, resumes (the ledger commits only what Chroma holds).
"""

from __future__ import annotations

from strata.memory.chroma import server_stopped, server_stopped_message
from strata.memory.errors import DiskFullError, StrataError, UnavailableError, disk_full, disk_full_message
from strata.memory.settings import StoreSettings


def in_one_line(error: BaseException, settings: StoreSettings) -> StrataError | None:
    """The one-line error for `error` raised by the stores of `settings`, or None when it is none of theirs
    (a bug keeps its traceback)."""
    if server_stopped(error):
        return UnavailableError(server_stopped_message(error))
    local = not settings.chroma_host or not settings.ledger_url  # a half of the memory kept in data_dir
    if disk_full(error, settings.data_dir if local else None):
        return DiskFullError(disk_full_message(disk_of(settings)))
    return None


def disk_of(settings: StoreSettings) -> str:
    """Where a memory writes, as a full disk's message names it."""
    if not settings.chroma_host and not settings.ledger_url:
        return settings.data_dir
    return f"the memory (data_dir {settings.data_dir}, the Chroma server or the ledger's database)"
