"""Who may write a namespace now, and which process may open an embedded memory folder.

Within a process, one re-entrant lock per namespace serialises the
read-modify-write steps of the write path (the turn-id counter, the pending
list, the open episode, a change and its history row), so concurrent runs on
one namespace (two threads, two runs of a LangGraph server) cannot lose a turn
or hand out one id twice.

Across processes, an embedded Chroma folder cannot be shared: each process
keeps its own in-memory index of the folder and never sees what another wrote.
The first process to open a folder holds an OS lock on it (`fcntl.flock`, freed
by the kernel even when the process is killed) until it closes its stores;
another process waits a bounded time, then gets one line saying the folder is
in use and how to share a memory between processes (a Chroma server).
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

from strata.memory.errors import ConfigError
from strata.memory.private_files import make_private_folder
from strata.memory.settings import StoreSettings, env_number

LOCK_WAIT_SECONDS = 30.0  # how long a second process waits for a busy folder (STRATA_LOCK_WAIT)
_POLL_SECONDS = 0.05

_NAMESPACE_LOCKS: dict[tuple[str, str], threading.RLock] = {}
_FOLDERS: dict[Path, tuple[int | None, int]] = {}  # folder -> (locked descriptor, users in this process)
_GUARD = threading.Lock()


def location_of(settings: StoreSettings) -> str:
    """Where a memory's records live: the Chroma server, or the embedded folder."""
    if settings.chroma_host:
        return f"chroma://{settings.chroma_host}:{settings.chroma_port}"
    return str(settings.chroma_path.resolve())


def namespace_lock(settings: StoreSettings, namespace: str) -> threading.RLock:
    """The one lock every write to `namespace` at this location takes in this process."""
    key = (location_of(settings), namespace)
    with _GUARD:
        return _NAMESPACE_LOCKS.setdefault(key, threading.RLock())


def lock_wait_seconds() -> float:
    """The bounded wait for a busy folder, from STRATA_LOCK_WAIT (seconds) or the default."""
    return env_number("lock_wait", LOCK_WAIT_SECONDS, 0, unit="seconds")


def hold_folder(folder: Path) -> None:
    """Take this process's share of the folder lock (the OS lock on the first use)."""
    folder = folder.resolve()
    with _GUARD:
        descriptor, users = _FOLDERS.get(folder, (None, 0))
        if users == 0:
            descriptor = _lock(folder, lock_wait_seconds())
        _FOLDERS[folder] = (descriptor, users + 1)


def release_folder(folder: Path) -> None:
    """Give back one share; the OS lock goes when the last store of the folder closes."""
    folder = folder.resolve()
    with _GUARD:
        descriptor, users = _FOLDERS.get(folder, (None, 0))
        if users <= 1:
            _FOLDERS.pop(folder, None)
            if descriptor is not None:
                os.close(descriptor)  # closing the descriptor frees the flock
        else:
            _FOLDERS[folder] = (descriptor, users - 1)


def _lock(folder: Path, wait: float) -> int | None:
    """An exclusive flock on the folder's lock file, waiting at most `wait` seconds.

    A folder this process may not write to (read-only media) is opened without
    a lock: nothing can be written there, so there is nothing to serialise.
    """
    path = folder.with_name(f"{folder.name}.lock")  # beside the Chroma folder, not inside it
    try:
        make_private_folder(folder.parent)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # (it names the process holding it)
    except OSError:
        try:
            descriptor = os.open(path, os.O_RDONLY)
        except OSError:
            return None
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = _holder(path)
                os.close(descriptor)
                raise ConfigError(
                    f"the memory folder {folder.parent} is in use by another process{holder} and stayed busy for "
                    f"{wait:g} s: let it finish (or raise STRATA_LOCK_WAIT), or serve the memory from a Chroma server "
                    "(`chroma run`, then STRATA_CHROMA_HOST) so several processes can share it"
                ) from None
            time.sleep(_POLL_SECONDS)
    try:
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
    except OSError:
        pass  # a read-only lock file still locks; the holder's pid is only a courtesy
    return descriptor


def _holder(path: Path) -> str:
    try:
        pid = path.read_text().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


def forget_after_fork() -> None:
    """In a forked child: the folders the parent holds are not the child's. Their descriptors share the
    parent's lock, so the child would take a folder as its own; they are closed here (the parent keeps
    its lock), and the child waits for a folder like any other process."""
    global _GUARD
    _GUARD = threading.Lock()  # another thread may have held it at the fork
    for descriptor, _ in _FOLDERS.values():
        if descriptor is not None:
            os.close(descriptor)
    _FOLDERS.clear()
    _NAMESPACE_LOCKS.clear()
