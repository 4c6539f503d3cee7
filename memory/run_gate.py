"""Which runs of a namespace may go on at once, and what waits for all of them.

Runs that read go on together. Runs that store input (ingest, chat) take turns, whole: the open episode
and the end of the chain of turns are one per namespace, and two inputs stored turn about closed each
other's episode. An erase or a drop waits until no run of the namespace is going on, and runs wait while
it works: a run saving its thread meanwhile wrote back what was being deleted.

A run holds the gate, not a thread: its steps move from worker thread to worker thread, and on a server
it is a task on an event loop, which must never block. So the gate is a counter behind a plain lock (any
thread may let go of what another took); a thread waits on a condition, a task polls (`enter_async`).
What a call holds is kept in a context variable, which follows it into its steps' worker threads and its
own calls: a call inside one that holds the gate (an `on_turn` callback adding to the same memory, the
graph run of `Memory.add`) goes on without waiting for itself, and an erase inside a run of its namespace
(an `on_turn` callback erasing) waits only for the other runs.

This gate keeps the runs of one process. Where other processes share the namespace's memory (replicas on
a Chroma server and a PostgreSQL ledger, or processes on a Chroma server and one data folder's SQLite
ledger), a run then takes the same turns with theirs (memory/run_locks.py): after this gate, held for the
same span, let go before it. Threads of one process never each hold a connection waiting for another's,
and a call that skips this gate (it holds it already) skips those too: an erase inside a run of its own
waits only for the other runs, whichever process runs them.

The calls that write a namespace outside a run of the graph take it as runs do (strata/api.py,
strata/langgraph_store.py): an undo, an end of session, an import and a question that may refresh memory
as a run that stores input; a consolidation and a store's put as a run that reads (never beside an erase).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from types import MappingProxyType
from typing import Literal

from strata.memory import run_locks
from strata.memory.errors import InputError
from strata.memory.locks import location_of
from strata.memory.run_locks import CrossHold, Locks
from strata.memory.settings import StoreSettings

Kind = Literal["read", "store", "close"]  # a run that reads, a run that stores input, an erase or a drop
POLL_SECONDS = 0.05  # how often a waiting task looks again
Key = tuple[str, str, str]  # where the records are, the namespace, where other processes' runs take turns
_GATES: dict[Key, RunGate] = {}
_GUARD = threading.Lock()


class _Note:
    """A call holding a gate, as noted in its context (`_held`): live until it lets go, from whatever thread.
    A generator's body (`graph.stream`) closed by another thread lets go there, and its note stayed in the
    context it ran in: the caller's later runs of the namespace took it for theirs and skipped the gate."""

    __slots__ = ("hold", "kind", "live", "owns")

    def __init__(self, kind: Kind, hold: CrossHold | None, owns: bool = True) -> None:
        self.kind, self.hold, self.live = kind, hold, True
        self.owns = owns  # `hold` is this call's own, not that of the run an erase is inside


_HELD: ContextVar[Mapping[Key, tuple[_Note, ...]]] = ContextVar("strata_run_gates_held", default=MappingProxyType({}))


class RunGate:
    """The runs of one namespace going on in this process (see the module's docstring), and how each opens
    its locks across processes (`shared`; None where no other process shares the memory)."""

    def __init__(self, key: Key, shared: Callable[[], Locks] | None = None) -> None:
        self.key = key
        self.shared = shared
        self._changed = threading.Condition(threading.Lock())
        self._runs = 0  # runs going on
        self._storing = False  # one of them stores input
        self._closed = False  # an erase or a drop works
        self._closers: set[object] = set()  # erases and drops waiting: runs that come after them wait too
        self._inside = 0  # erases waiting inside a run of their own (`holding`)

    def _take(self, kind: Kind, own: int = 0) -> bool:
        """Enter if the gate lets `kind` in now, `own` of the runs going on being the caller's (the caller
        holds `_changed`)."""
        if self._closed:
            return False
        if kind == "close":
            self._closed = self._runs == own
            return self._closed
        if self._closers or (kind == "store" and self._storing):
            return False
        self._storing = self._storing or kind == "store"
        self._runs += 1
        return True

    def enter(self, kind: Kind, own: int = 0) -> None:
        """Wait in this thread until the gate lets `kind` in (an erase: until no run but the caller's `own`)."""
        waiting = object()
        with self._changed:
            if kind == "close":
                self._closers.add(waiting)
            try:
                while not self._take(kind, own):
                    self._changed.wait(POLL_SECONDS)  # (a task's erase that stopped waiting does not notify)
            finally:
                self._closers.discard(waiting)

    async def enter_async(self, kind: Kind, own: int = 0) -> None:
        """Wait on an event loop, without blocking it, until the gate lets `kind` in. A cancelled wait holds
        nothing: the gate is taken only by a `_take` that returned True, with no await after it."""
        waiting = object()
        if kind == "close":
            self._closers.add(waiting)  # (a set's add and discard need no lock)
        try:
            while True:
                if self._changed.acquire(blocking=False):  # never a blocking wait on the loop
                    try:
                        if self._take(kind, own):
                            return
                    finally:
                        self._changed.release()
                await asyncio.sleep(POLL_SECONDS)
        finally:
            self._closers.discard(waiting)

    def leave(self, kind: Kind) -> None:
        """Let go of what `enter` took (from any thread)."""
        with self._changed:
            if kind == "close":
                self._closed = False
            else:
                self._runs -= 1
                self._storing = self._storing and kind != "store"
            self._changed.notify_all()

    @contextmanager
    def dropping(self) -> Iterator[None]:
        """`holding("close")` for a drop: once its block is done, the namespace's lock files across processes
        go, before the gate is let go (memory/run_locks.py `FileLocks.remove`; they stayed for every namespace
        ever dropped). Not for a drop inside a call holding the gate already, which goes on with them."""
        before = _notes(self.key)
        with self.holding("close"):
            yield
            taken = [note for note in _notes(self.key) if note not in before]
            if taken and taken[-1].owns and taken[-1].hold is not None:
                taken[-1].hold.remove_files()

    @contextmanager
    def holding(self, kind: Kind) -> Iterator[None]:
        """The gate for a call in this thread; a call inside one that holds it goes on at once, but for an
        erase inside a run, which waits for the other runs (two such would wait for each other: one line)."""
        own = _own_runs(self.key, kind)
        if own is None:
            yield
            return
        # an erase inside a run shares its run's locks across processes (None where there are none)
        outer = next((n.hold for n in _notes(self.key) if n.kind != "close" and n.hold is not None), None)
        if own:
            with self._changed:
                if self._inside:
                    raise InputError(f"the namespace {self.key[1]!r} is being erased or dropped from inside another "
                                     "of its runs, which waits for this one: do it once this run has ended")
                self._inside += 1
        try:
            if outer is not None:
                # its run's `runs` let go before waiting here: a run of this process may wait at the door
                # behind another process's erase, which waits for that lock (each waited for the next)
                outer.step_aside()
            try:
                self.enter(kind, own)
            except BaseException:
                if outer is not None:
                    outer.back()
                raise
        finally:
            if own:
                with self._changed:
                    self._inside -= 1
        try:
            with self._across(kind, own, outer) as hold, _held(self.key, kind, hold, owns=hold is not outer):
                yield
        finally:
            self.leave(kind)

    @contextmanager
    def holding_now(self, kind: Kind, busy: str) -> Iterator[None]:
        """`holding` for a sync call on an event loop's thread, which must never wait there: what it waits for
        (a run on that loop, an erase waiting for one) could then never end. Taken at once, or `InputError`
        with `busy`, holding nothing. Not for an erase or a drop (a call inside a holder goes on, as in `holding`).
        """
        own = _own_runs(self.key, kind)
        if own is None:
            yield
            return
        if kind == "close":
            raise InputError(busy)
        with self._changed:
            if not self._take(kind):
                raise InputError(busy)
        try:
            hold = None if self.shared is None else CrossHold(self.shared)
            if hold is not None and not hold.try_enter(kind):
                raise InputError(busy)
            try:
                with _held(self.key, kind, hold):
                    yield
            finally:
                if hold is not None:
                    hold.leave()
        finally:
            self.leave(kind)

    @contextmanager
    def _across(self, kind: Kind, own: int, outer: CrossHold | None) -> Iterator[CrossHold | None]:
        """The run's turn with other processes' runs, in this thread (an erase inside a run: with its run's
        locks, `outer`)."""
        if self.shared is None or (own and outer is None):
            yield None
            return
        if outer is not None:
            outer.inside()
            try:
                yield outer
            finally:
                outer.back()
            return
        hold = CrossHold(self.shared)
        hold.enter(kind)
        try:
            yield hold
        finally:
            hold.leave()

    @asynccontextmanager
    async def holding_async(self, kind: Kind) -> AsyncIterator[None]:
        """`holding` for a task on an event loop (an erase there is never one inside a run of its own)."""
        own = _own_runs(self.key, kind)
        if own is None:
            yield
            return
        if own:
            raise InputError(f"the namespace {self.key[1]!r} cannot be erased or dropped from inside one of its "
                             "own runs on an event loop: do it once the run has ended")
        await self.enter_async(kind)
        try:
            hold = None if self.shared is None else CrossHold(self.shared)
            if hold is not None:
                await hold.enter_async(kind)  # cancelled, it lets go of what it took
            try:
                with _held(self.key, kind, hold):
                    yield
            finally:
                if hold is not None:
                    hold.leave()  # quick, on the loop too: a file closed, a connection handed to its pool
        finally:
            # let go here, on the loop: the lock is held only for a moment (a waiting thread lets go of it while
            # it waits). Handed to a worker thread, the release waited for a free worker, which the sync calls
            # waiting for this gate could all be (a deadlock), and a second cancellation dropped it.
            self.leave(kind)


def run_gate(settings: StoreSettings, namespace: str) -> RunGate:
    """The gate of `namespace` at this location, one per process."""
    key = (location_of(settings), namespace, run_locks.shared_place(settings) or "")
    with _GUARD:
        gate = _GATES.get(key)
        if gate is None:
            gate = _GATES[key] = RunGate(key, run_locks.opener(settings, namespace))
        return gate


def _own_runs(key: Key, kind: Kind) -> int | None:
    """How many of the gate's runs are this call's own (0 or 1), or None when it goes on without taking the
    gate: its context holds it already, and it is no erase inside a run."""
    notes = _notes(key)
    if not notes:
        return 0
    return 1 if kind == "close" and all(note.kind != "close" for note in notes) else None


def _notes(key: Key) -> list[_Note]:
    """What this context holds of the gate `key` (its calls still going on)."""
    return [note for note in _HELD.get().get(key, ()) if note.live]


@contextmanager
def _held(key: Key, kind: Kind, hold: CrossHold | None, owns: bool = True) -> Iterator[None]:
    """Note in this context that it holds the gate `key` (and `hold`, its locks across processes, which an
    erase inside the run shares). Taken back by value, not by token: a generator's body (`graph.stream`) may
    be closed from another context than the one it started in, where the note is then dead (`_Note`)."""
    note = _Note(kind, hold, owns)
    _HELD.set({**_HELD.get(), key: (*_HELD.get().get(key, ()), note)})
    try:
        yield
    finally:
        note.live = False
        others = {k: v for k, v in _HELD.get().items() if k != key}
        left = tuple(n for n in _HELD.get().get(key, ()) if n.live)
        _HELD.set(others | {key: left} if left else others)


def forget_after_fork() -> None:
    """In a forked child: the parent's runs are not the child's to wait for."""
    global _GUARD
    _GUARD = threading.Lock()
    _GATES.clear()
