"""The run gate across processes: where several processes share a namespace's memory, its runs take turns
with theirs too (memory/run_gate.py keeps the turns of one process, and is taken first).

Three locks per namespace, each taken shared (SH) or exclusive (EX):

- `input`: EX by a run that stores input (ingest, chat): one at a time, whichever process runs it;
- `runs`: SH by every run, EX by an erase or a drop: it waits for every run of the namespace, and every
  run waits while it works;
- `door`: passed SH by a run on its way to `runs` (let go at once), held EX by an erase or a drop from
  the moment it waits: a run that comes after a waiting erase waits behind it, as in one process.
  Without it, questions overlapping on one replica would keep `runs` shared for as long as they came, and
  an erase sent to another would wait for all of them.

A storing run takes `input` before the door: waiting there it holds nothing an erase waits for.

An erase inside a run of its own (an `on_turn` callback erasing) lets go of its run's `runs` first (before
it waits for the other runs of its process too), then takes the door and `runs` as any erase does, and
takes `runs` back shared once done (at once: it holds everything then). Holding it, two such erases in two
processes would each wait for the other's run, and one that waited for a run of its process waiting at the
door behind another process's erase waited for ever. Meanwhile its own run is stopped inside the call, so
whatever goes first finds nothing of it half done.

Where they live (`shared_place`): on a PostgreSQL ledger, session advisory locks on one connection the run
holds for its whole span (memory/ledger_postgres.py, `run_locks`); on a SQLite ledger in a data folder that
several processes use (records on a Chroma server), `fcntl.flock` on files in `<data_dir>/run_gates/`. A
process that dies lets go of them: PostgreSQL ends its sessions, the kernel closes its files. An embedded
Chroma folder is one process's at a time (memory/locks.py): nothing is taken there.

Waits poll the locks' try-forms (a short pause, growing to `MAX_POLL_SECONDS`): a thread sleeps between
looks, a task on an event loop awaits each look in one of this module's threads (`_IO`), so the loop never
blocks and a cancelled wait lets go of whatever the look in flight took once it returns.

A wait has no bound, as in one process: what it waits for ends (a run, however long an ingest is; a process
that dies lets go), and a bound would fail an input merely queued behind a long ingest on another replica,
whose retry would queue again. A client that stops waiting cancels its run, which lets go of the wait.

The same folder holds a fourth lock per namespace, `writer` (`writer_turn`): the per-step write lock of a
SQLite ledger shared through a data folder (memory/store.py `_WriterLock`), which PostgreSQL's advisory
lock is on a shared database (`namespace_lock`). Without it two processes' steps on one namespace went on
at once, each holding only its own process's lock: two turns took one id, two writes one sequence number.
A step is short, so it waits in `flock` itself, as PostgreSQL's `pg_advisory_lock` does.

A drop removes its namespace's four files (`FileLocks.remove`), once done and still holding the gate: they
stayed behind for every namespace ever dropped. A file is unlinked only while its lock is held exclusive
(`door` and `runs` by the drop itself; `input` and `writer` where a lock taken without waiting shows that no
other process holds them, else they stay). Unlinking a file another process held let a third create a new
one of that name and lock it, each believing it held the lock; so whoever locks one of these files checks,
once locked, that it is still the file at its path (`_still_there`), else opens the path again and retries:
a process that waited on the unlinked file (opened before the drop) ends up on the new one with the others.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import functools
import hashlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Literal, Protocol

from strata.memory.errors import DiskFullError, disk_full, disk_full_message
from strata.memory.private_files import make_private_folder
from strata.memory.settings import StoreSettings

Role = Literal["door", "runs", "input"]
ROLES: tuple[Role, ...] = ("input", "door", "runs")
Mode = Literal["SH", "EX"] | None  # None: let go
Step = tuple[Role, Mode]
FIRST_POLL_SECONDS = 0.05
MAX_POLL_SECONDS = 0.5  # a long wait looks twice a second (a query each, on PostgreSQL)
FOLDER = "run_gates"

_TAKE: dict[str, tuple[Step, ...]] = {
    "read": (("door", "SH"), ("runs", "SH"), ("door", None)),
    "store": (("input", "EX"), ("door", "SH"), ("runs", "SH"), ("door", None)),
    "close": (("door", "EX"), ("runs", "EX")),
}
_ASIDE: tuple[Step, ...] = (("runs", None),)  # an erase inside its own run, before it waits for the others
_INSIDE: tuple[Step, ...] = (("door", "EX"), ("runs", "EX"))  # ... once they are done here
_BACK: tuple[Step, ...] = (("runs", "SH"), ("door", None))  # ... once it is done
_IO: concurrent.futures.ThreadPoolExecutor | None = None  # where a task's looks run (see the docstring)
_IO_GUARD = threading.Lock()
_OPEN_FILES: weakref.WeakSet[FileLocks] = weakref.WeakSet()  # closed in a forked child (`forget_after_fork`)
_WRITERS: dict[int, object] = {}  # the `writer_turn` files open now, each with its hold: closed in a forked child too
_WRITERS_GUARD = threading.Lock()
_HELD = threading.local()  # per thread: how deep it holds each `writer` file (by path), see `writer_turn`


class Locks(Protocol):
    """One run's three locks of a namespace, in one place."""

    def try_set(self, role: Role, mode: Mode) -> bool:
        """Hold `role` in `mode` now (from another mode: converted), or False, holding what was held."""

    def close(self) -> None:
        """Let go of everything (from any thread)."""


def shared_place(settings: StoreSettings) -> str | None:
    """Where the runs of processes sharing these settings' memory take turns: the PostgreSQL ledger, the data
    folder of a SQLite ledger beside a Chroma server, or None (an embedded Chroma folder: one process)."""
    if not settings.chroma_host:
        return None
    return settings.ledger_url or settings.data_dir


def opener(settings: StoreSettings, namespace: str) -> Callable[[], Locks] | None:
    """How a run opens `namespace`'s locks under `settings` (None where no other process shares it)."""
    if not settings.chroma_host:
        return None
    if settings.ledger_url:
        def on_ledger() -> Locks:
            from strata.memory.registry import ledger_for  # (the registry imports the gate)

            return ledger_for(settings).backend.run_locks(namespace)  # type: ignore[attr-defined, no-any-return]
        return on_ledger
    folder = Path(settings.data_dir) / FOLDER
    return lambda: FileLocks(folder, namespace)


class CrossHold:
    """What one run holds of its namespace's locks across processes, from `enter` to `leave`."""

    def __init__(self, open_locks: Callable[[], Locks]) -> None:
        self._open = open_locks
        self._locks: Locks | None = None
        self._guard = threading.Lock()
        self._left = False

    def enter(self, kind: str) -> None:
        """Wait in this thread until `kind` holds its locks."""
        try:
            locks = self._opened()
            self._walk(locks, _TAKE[kind])
        except BaseException:
            self.leave()
            raise

    def try_enter(self, kind: str) -> bool:
        """`enter` without waiting: True holding `kind`'s locks, else False holding none (and `leave` done)."""
        try:
            locks = self._opened()
            if all(locks.try_set(role, mode) for role, mode in _TAKE[kind]):
                return True
        except BaseException:
            self.leave()
            raise
        self.leave()
        return False

    async def enter_async(self, kind: str) -> None:
        """`enter` for a task: every look runs in `_IO`, the loop waits between looks."""
        try:
            locks = await self._off_loop(self._opened)
            pause = FIRST_POLL_SECONDS
            for role, mode in _TAKE[kind]:
                while not await self._off_loop(functools.partial(locks.try_set, role, mode)):
                    await asyncio.sleep(pause)
                    pause = min(pause * 1.5, MAX_POLL_SECONDS)
        except BaseException:
            if self._in_flight is None:
                self.leave()
            else:  # the look in flight may still take a lock: let go once it has returned
                self._in_flight.add_done_callback(lambda _: self.leave())
            raise

    _in_flight: concurrent.futures.Future[object] | None = None

    async def _off_loop(self, call: Callable[[], object]) -> object:
        future = _executor().submit(call)
        self._in_flight = future  # type: ignore[assignment]
        result = await asyncio.wrap_future(future)  # cancelled: the look runs on (or never starts)
        self._in_flight = None
        return result

    def step_aside(self) -> None:
        """An erase inside this run: this run's `runs` let go, before the erase waits for the process's other
        runs (one of them may wait at the door behind another process's erase, which waits for this lock)."""
        if self._locks is not None:
            self._walk(self._locks, _ASIDE)

    def inside(self) -> None:
        """That erase, once the process's other runs are done: the door and `runs` taken as any erase does."""
        if self._locks is None:
            return
        try:
            self._walk(self._locks, _INSIDE)
        except BaseException:
            with suppress(Exception):  # the run goes on as it was (a database gone says so below)
                self._walk(self._locks, _BACK)
            raise

    def back(self) -> None:
        """That erase done: this run's `runs` back (shared), the door let go."""
        if self._locks is not None:
            self._walk(self._locks, _BACK)

    def remove_files(self) -> None:
        """A drop holding its namespace's locks, done: their files go where they are files (`FileLocks.remove`;
        a PostgreSQL ledger's advisory locks leave nothing behind)."""
        if isinstance(self._locks, FileLocks):
            self._locks.remove()

    def leave(self) -> None:
        """Let go of everything, once (from any thread; quick: never a wait)."""
        with self._guard:
            if self._left:
                return
            self._left = True
            locks, self._locks = self._locks, None
        if locks is not None:
            locks.close()

    def _opened(self) -> Locks:
        locks = self._open()
        with self._guard:
            if not self._left:
                self._locks = locks
                return locks
        locks.close()  # left meanwhile (a cancelled task)
        raise asyncio.CancelledError

    @staticmethod
    def _walk(locks: Locks, steps: Iterable[Step]) -> None:
        pause = FIRST_POLL_SECONDS
        for role, mode in steps:
            while not locks.try_set(role, mode):
                time.sleep(pause)
                pause = min(pause * 1.5, MAX_POLL_SECONDS)


def writer_place(settings: StoreSettings) -> Path | None:
    """Where the writers of a namespace take turns across processes beyond the ledger's own lock: the data
    folder's `run_gates/` for a SQLite ledger beside a Chroma server; None otherwise (PostgreSQL's advisory
    lock does it there, and an embedded folder is one process's)."""
    if not settings.chroma_host or settings.ledger_url:
        return None
    return Path(settings.data_dir) / FOLDER


@contextmanager
def writer_turn(folder: Path, namespace: str) -> Iterator[None]:
    """Hold `namespace`'s `writer` lock in `folder` (an exclusive flock, waited for) for the block. The caller
    holds its process's lock of the namespace. A thread already holding it here goes on (`_HELD`): two store
    objects of one namespace in one thread (the registry reopened one it had closed as idle) each took it, and
    the second, on a file of its own, waited for ever for the first."""
    path = _lock_path(folder, _stem(namespace), "writer")
    held: dict[str, int] = _HELD.__dict__.setdefault("depth", {})
    key = os.path.abspath(path)
    if held.get(key):
        held[key] += 1
        try:
            yield
        finally:
            held[key] -= 1
        return
    while True:
        descriptor = _lock_file(folder, path.name)
        if descriptor is None:  # a folder this process may not write: it writes nothing there
            yield
            return
        hold = object()
        with _WRITERS_GUARD:
            _WRITERS[descriptor] = hold
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            if _still_there(descriptor, path):
                break
        except BaseException:
            _close_writer(descriptor, hold)
            raise
        _close_writer(descriptor, hold)  # a drop unlinked it while this waited: the file at the path now
    held[key] = 1
    try:
        yield
    finally:
        held.pop(key, None)
        _close_writer(descriptor, hold)


def _close_writer(descriptor: int, hold: object) -> None:
    """Close `descriptor` if it is still `hold`'s: a forked child closed its copy already (`forget_after_fork`),
    and may have opened another file under the same number since, which a block it inherited must not close."""
    with _WRITERS_GUARD:
        if _WRITERS.get(descriptor) is hold:
            del _WRITERS[descriptor]
            os.close(descriptor)  # the kernel lets go of its lock with it


def lock_paths(folder: Path, namespace: str) -> list[Path]:
    """The paths of `namespace`'s four lock files in `folder` (whether they exist or not)."""
    return [_lock_path(folder, _stem(namespace), role) for role in (*ROLES, "writer")]


def _still_there(descriptor: int, path: Path) -> bool:
    """Whether the open file `descriptor` is still the file at `path` (a drop may have unlinked it: see the
    module's docstring). A path this process cannot look at counts as the same file, as before drops removed
    them."""
    try:
        at_path = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    held = os.fstat(descriptor)
    return (held.st_dev, held.st_ino) == (at_path.st_dev, at_path.st_ino)


def _remove_if_free(path: Path) -> None:
    """Unlink the lock file at `path` if no process holds its lock: taken here without waiting (and checked
    to be the file at the path), else left where it is."""
    try:
        descriptor = os.open(path, os.O_RDONLY)  # (flock needs no write access)
    except OSError:
        return  # not there (or not this process's to open): nothing to remove
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _still_there(descriptor, path):
            path.unlink()
    except OSError:
        pass  # held (BlockingIOError), or not this process's to unlink: it stays
    finally:
        os.close(descriptor)


def _lock_path(folder: Path, stem: str, role: str) -> Path:
    """The lock file of a namespace's `role` (`input`, `door`, `runs` or `writer`): `<stem>.<role>` in `folder`."""
    return folder / f"{stem}.{role}"


def _stem(namespace: str) -> str:
    """A namespace's lock files' stem: a digest (its name never becomes a path)."""
    return hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:32]


class FileLocks:
    """The locks as `fcntl.flock` on three files per namespace in a data folder (`<digest>.<role>`, private,
    empty; a namespace's name never becomes a path). Each run opens its own: flock locks of two open files
    exclude each other even in one process."""

    def __init__(self, folder: Path, namespace: str) -> None:
        self._folder = folder
        self._stem = _stem(namespace)
        self._files: dict[Role, int | None] = {}
        self._modes: dict[Role, Mode] = {}
        self._guard = threading.Lock()
        _OPEN_FILES.add(self)

    def try_set(self, role: Role, mode: Mode) -> bool:
        how = fcntl.LOCK_UN if mode is None else fcntl.LOCK_SH if mode == "SH" else fcntl.LOCK_EX
        while True:
            descriptor = self._file(role, opening=mode is not None)
            if descriptor is None:  # a folder this process may not write (or nothing to let go of)
                return True
            try:
                fcntl.flock(descriptor, how | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            if mode is None or _still_there(descriptor, self._path(role)):
                self._modes[role] = mode
                return True
            if not self._reopen(role, descriptor):  # a drop unlinked it: lock the file at the path now
                return False  # (closed meanwhile: let go of)

    def remove(self) -> None:
        """A drop, done, holding `door` and `runs` exclusive through these files: the namespace's lock files
        go (see the module's docstring), `input` and `writer` only where no other process holds them. The
        files held stay open until `close`: anyone else waiting on them finds them gone once locked."""
        _remove_if_free(_lock_path(self._folder, self._stem, "writer"))
        for role in ROLES:  # `input` first: the door and `runs` keep everyone else out until the last
            descriptor = self._files.get(role)
            path = self._path(role)
            if descriptor is None or self._modes.get(role) != "EX":
                if role == "input":
                    _remove_if_free(path)
            elif _still_there(descriptor, path):
                with suppress(OSError):  # (not this process's to unlink: it stays, as before)
                    path.unlink()

    def close(self) -> None:
        with self._guard:
            files, self._files, self._modes = self._files, {}, {}
        for descriptor in files.values():
            if descriptor is not None:
                os.close(descriptor)  # the kernel lets go of its lock with it

    def forget(self) -> None:
        """Close the files without a word to their locks (a forked child's copies: see `forget_after_fork`)."""
        self._guard = threading.Lock()  # another thread may have held it at the fork
        self.close()

    def _file(self, role: Role, opening: bool = True) -> int | None:
        with self._guard:
            if role not in self._files:
                if not opening:
                    return None
                self._files[role] = _lock_file(self._folder, self._path(role).name)
            return self._files[role]

    def _path(self, role: Role) -> Path:
        return _lock_path(self._folder, self._stem, role)

    def _reopen(self, role: Role, descriptor: int) -> bool:
        """Close `descriptor` (`role`'s file, found unlinked once locked): the next look opens the path. False
        if these files were closed meanwhile (`close`, from another thread)."""
        with self._guard:
            if self._files.get(role) != descriptor:
                return False
            del self._files[role]
        os.close(descriptor)
        return True


def _lock_file(folder: Path, name: str) -> int | None:
    """An open lock file in `folder` (made private), or None where this process can neither make nor read it
    (a read-only folder). A full disk is one line."""
    path = folder / name
    try:
        make_private_folder(folder)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as error:
        try:
            return os.open(path, os.O_RDONLY)  # flock needs no write access
        except OSError:
            if disk_full(error):
                raise DiskFullError(disk_full_message(folder.parent)) from None
            return None


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _IO
    with _IO_GUARD:
        if _IO is None:
            _IO = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="strata-gate")
        return _IO


def forget_after_fork() -> None:
    """In a forked child: the parent's threads are not the child's, nor its runs' lock files. A child keeping
    one open kept its lock after the parent let go of it (a flock belongs to the open file, which the child's
    copy shares), for as long as the child lived; closing the copy leaves the parent's lock as it is."""
    global _IO, _IO_GUARD, _WRITERS_GUARD, _HELD
    _IO, _IO_GUARD = None, threading.Lock()
    _HELD = threading.local()  # the child holds none of them (its copies are closed below)
    for locks in list(_OPEN_FILES):
        locks.forget()
    _OPEN_FILES.clear()
    _WRITERS_GUARD = threading.Lock()
    for descriptor in list(_WRITERS):
        with suppress(OSError):
            os.close(descriptor)
    _WRITERS.clear()


os.register_at_fork(after_in_child=forget_after_fork)  # (a child that never imports the registry has them too)
