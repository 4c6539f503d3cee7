"""The gate of a namespace's runs (memory/run_gate.py), held by threads and by tasks on an event loop.

Inputs stored one at a time, questions together, an erase or a drop alone; a wait on the loop never
blocks it and, cancelled, holds nothing; a call inside one that holds the gate goes on at once, but an
erase inside a run of its own namespace is one line, not a wait for ever.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from gate_worker import Worker
from servers import LOOPBACK, free_port, postgres_run
from strata.memory import run_locks
from strata.memory.errors import InputError
from strata.memory.run_gate import RunGate, run_gate
from strata.memory.run_locks import CrossHold, FileLocks, lock_paths, writer_turn
from strata.memory.settings import StoreSettings


class SharedMemory(NamedTuple):
    folder: Path
    chroma_port: int
    ledger_url: str  # "" for the folder's SQLite ledger


def gate(tmp_path: Path, namespace: str = "ann") -> RunGate:
    return run_gate(StoreSettings(data_dir=str(tmp_path)), namespace)


def test_one_namespace_one_gate_in_a_process(tmp_path: Path) -> None:
    assert gate(tmp_path) is gate(tmp_path) is not gate(tmp_path, "bob")
    assert gate(tmp_path) is not gate(tmp_path / "other")


def test_inputs_take_turns_questions_go_together_and_a_close_waits_for_all(tmp_path: Path) -> None:
    runs = gate(tmp_path)
    order: list[str] = []

    def hold(kind: str, name: str, seconds: float) -> threading.Thread:
        def body() -> None:
            with runs.holding(kind):  # type: ignore[arg-type]
                order.append(f"{name} in")
                time.sleep(seconds)
                order.append(f"{name} out")
        worker = threading.Thread(target=body)
        worker.start()
        time.sleep(0.15)  # in this order
        return worker

    workers = [hold("store", "ingest 1", 1.0), hold("read", "ask", 0.05), hold("store", "ingest 2", 0.05),
               hold("close", "erase", 0.05), hold("read", "ask after", 0.0)]
    for worker in workers:
        worker.join(10)
    # the question went on beside the first ingest; the erase waited for the runs going on, and the runs
    # still waiting (the second ingest, and a question sent after it) went after it
    assert order[:6] == ["ingest 1 in", "ask in", "ask out", "ingest 1 out", "erase in", "erase out"]
    assert sorted(order[6:]) == ["ask after in", "ask after out", "ingest 2 in", "ingest 2 out"]


def test_a_task_waits_without_blocking_the_loop_and_holds_nothing_once_cancelled(tmp_path: Path) -> None:
    runs = gate(tmp_path)

    async def scenario() -> int:
        ticks = 0
        runs.enter("store")  # another run stores input
        waiting = asyncio.create_task(runs.enter_async("store"))
        for _ in range(5):
            await asyncio.sleep(0.02)
            ticks += 1  # the loop went on meanwhile
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        runs.leave("store")
        async with runs.holding_async("store"):  # the cancelled wait took nothing: this one goes in at once
            pass
        await asyncio.wait_for(runs.enter_async("close"), 1)
        await asyncio.to_thread(runs.leave, "close")
        return ticks

    assert asyncio.run(scenario()) == 5


def test_a_call_inside_a_holder_goes_on_and_an_erase_inside_a_run_waits_for_the_others(tmp_path: Path) -> None:
    runs = gate(tmp_path)
    with runs.holding("close"), runs.holding("close"), runs.holding("store"):  # an erase's own calls
        pass
    order: list[str] = []
    other_in, other_may_go = threading.Event(), threading.Event()

    def other_run() -> None:
        with runs.holding("read"):
            other_in.set()
            other_may_go.wait(10)
            time.sleep(0.2)
            order.append("other run out")
            try:  # a second erase inside a run would wait for the first's run, which waits for it: one line
                with runs.holding("close"):
                    order.append("second erase in")
            except InputError as refused:
                order.append(str(refused))

    with runs.holding("store"), runs.holding("store"), runs.holding("read"):  # an on_turn callback's add
        worker = threading.Thread(target=other_run)
        worker.start()
        other_in.wait(10)
        other_may_go.set()
        with runs.holding("close"):  # an on_turn callback's erase: waits for the other run, not for its own
            order.append("erase in")
        worker.join(10)
    assert order[0] == "other run out" and order[2] == "erase in", order
    assert "from inside another of its runs" in order[1] and "\n" not in order[1]
    with runs.holding("close"):  # everything was let go
        pass


def test_a_task_cancelled_twice_while_the_threads_are_busy_lets_go_of_the_gate(tmp_path: Path) -> None:
    """Found by review: a task let go of the gate in a worker thread; cancelled a second time while every
    worker was busy, the queued release was cancelled with it, and the gate stayed closed for good."""
    runs = gate(tmp_path)
    release = threading.Event()

    async def scenario() -> None:
        busy = [asyncio.create_task(asyncio.to_thread(release.wait, 2)) for _ in range(40)]

        async def erase_route() -> None:
            async with runs.holding_async("close"):
                await asyncio.sleep(10)

        task = asyncio.create_task(erase_route())
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        release.set()
        await asyncio.gather(*busy)
        await asyncio.wait_for(runs.enter_async("read"), 5)
        runs.leave("read")

    asyncio.run(scenario())




def test_a_run_closed_by_another_thread_leaves_its_callers_later_runs_to_the_gate(tmp_path: Path) -> None:
    """A `graph.stream` read in part, then closed by another thread, let go of the gate there; its note that
    the gate was held stayed in the caller's context, so the caller's next input skipped the gate and went
    on beside another thread's."""
    runs = gate(tmp_path)

    def streamed() -> Iterator[int]:
        with runs.holding("store"):
            yield 1
            yield 2

    parts = streamed()
    next(parts)
    closing = threading.Thread(target=parts.close)
    closing.start()
    closing.join(10)
    other_in, order = threading.Event(), []

    def other_input() -> None:
        with runs.holding("store"):
            other_in.set()
            time.sleep(0.5)
            order.append("other out")

    worker = threading.Thread(target=other_input)
    worker.start()
    assert other_in.wait(10)
    with runs.holding("store"):
        order.append("this in")
    worker.join(10)
    assert order == ["other out", "this in"]

# Across processes ------------------------------------------------------------------------------------------
# Processes sharing a namespace's memory take turns through locks: file locks in a data folder they share
# (records on a Chroma server, a SQLite ledger), or a PostgreSQL ledger's advisory locks (memory/run_locks.py).
# The gate alone is tried here, in processes of their own (tests/gate_worker.py), and no Chroma server is
# reached; tests/test_gate_across_processes.py runs whole ingests and erases. PostgreSQL's cases start a
# server: they are slow, as the other PostgreSQL tests.


@pytest.fixture(scope="module", params=["folder", pytest.param("postgres", marks=pytest.mark.slow)])
def shared_memory(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedMemory]:
    """Where the processes' memory is: a data folder beside a Chroma server (never started: the gate needs
    none), with a PostgreSQL ledger or the folder's own."""
    folder = tmp_path_factory.mktemp("shared") / "mem"
    if request.param == "folder":
        yield SharedMemory(folder, free_port(), "")
        return
    with postgres_run(tmp_path_factory.mktemp("postgres") / "postgres.log") as server:
        yield SharedMemory(folder, free_port(), server.create_database("gates"))


def worker(shared: SharedMemory) -> Worker:
    return Worker(shared.folder, os.environ, LOOPBACK, shared.chroma_port, shared.ledger_url)


@pytest.fixture(scope="module")
def two_processes(shared_memory: SharedMemory) -> Iterator[tuple[Worker, Worker]]:
    first, second = worker(shared_memory), worker(shared_memory)
    yield first, second
    first.close()
    second.close()


def take(process: Worker, run: str, kind: str, namespace: str, **how: object) -> None:
    process.send("take", run=run, kind=kind, namespace=namespace, **how)
    process.expect("waiting", run)


def test_a_storing_run_waits_for_another_processs_and_questions_go_on(
    two_processes: tuple[Worker, Worker], shared_memory: SharedMemory
) -> None:
    """Processes sharing a memory each let their own storing run in: two inputs of one namespace sent to two
    replicas went step about, each closing the other's open episode."""
    first, second = two_processes
    take(first, "a", "store", "ann")
    first.expect("in", "a")
    take(second, "b", "store", "ann")
    second.quiet(0.5)  # the other process stores input
    take(second, "c", "read", "ann")  # a question goes on beside it
    second.expect("in", "c", 10)
    take(second, "d", "store", "bob")  # and another namespace's input
    second.expect("in", "d", 10)
    for run in ("c", "d"):
        second.send("let_go", run=run)
        second.expect("out", run)
    first.send("let_go", run="a")
    first.expect("out", "a")
    second.expect("in", "b", 10)  # the waiting input, now
    second.send("let_go", run="b")
    second.expect("out", "b")
    files = list((shared_memory.folder / "run_gates").glob("*"))
    if shared_memory.ledger_url:
        assert files == []  # the locks are the database's
    else:
        assert files and all(f.stat().st_mode & 0o777 == 0o600 for f in files)  # private, as the folder's files
    embedded = run_gate(StoreSettings(data_dir=str(shared_memory.folder.parent / "embedded")), "ann")
    assert embedded.shared is None  # an embedded Chroma folder is one process's: no lock across processes


def test_an_erase_waits_for_another_processs_runs_and_runs_sent_after_it_wait_for_it(
    two_processes: tuple[Worker, Worker]
) -> None:
    """An erase in one process went on beside another process's run, which then saved its thread with the
    erased words. It waits for them now; a question sent after it waits behind it, though another question
    goes on (one process's questions overlapping would keep it out for as long as they came)."""
    first, second = two_processes
    take(first, "a", "read", "cy")
    first.expect("in", "a")
    take(second, "e", "close", "cy")
    second.quiet(0.5)  # the erase waits for the other process's question
    take(first, "b", "read", "cy")  # asked once the erase waits: behind it
    first.quiet(0.5)
    first.send("let_go", run="a")
    first.expect("out", "a")
    second.expect("in", "e", 10)
    first.quiet(0.5)  # the erase works: runs wait
    second.send("let_go", run="e")
    second.expect("out", "e")
    first.expect("in", "b", 10)
    first.send("let_go", run="b")
    first.expect("out", "b")


def test_an_erase_inside_a_run_waits_for_another_processs_runs_only(two_processes: tuple[Worker, Worker]) -> None:
    """An `on_turn` callback erasing waits for the other runs of its namespace, in this process or another,
    and not for its own (which would wait for ever)."""
    first, second = two_processes
    take(first, "a", "read", "dee")
    first.expect("in", "a")
    take(second, "s", "store", "dee")
    second.expect("in", "s")
    second.send("erase_inside", run="s")
    second.quiet(0.5)  # it waits for the other process's question
    first.send("let_go", run="a")
    first.expect("out", "a")
    second.expect("inside in", "s", 10)
    take(first, "b", "read", "dee")
    first.quiet(0.5)  # while the erase works, the other process's runs wait
    second.send("let_go", run="s")
    second.expect("inside out", "s")
    first.expect("in", "b", 10)  # a question goes on beside the storing run again
    take(first, "c", "store", "dee")
    first.quiet(0.5)  # which still stores
    for process, run in ((second, "s"), (first, "b")):
        process.send("let_go", run=run)
        process.expect("out", run)
    first.expect("in", "c", 10)
    first.send("let_go", run="c")
    first.expect("out", "c")



def test_an_erase_inside_a_run_lets_its_runs_lock_go_before_waiting_for_this_processs_other_runs(
    two_processes: tuple[Worker, Worker]
) -> None:
    """Found by review: an erase inside a run waited here for a question of its process that waited at the
    door behind another process's erase, which waited for the run's `runs` lock: each waited for the next,
    for ever. The run lets its `runs` go before waiting."""
    first, second = two_processes
    take(first, "a", "read", "gus")
    first.expect("in", "a")
    take(second, "e", "close", "gus")
    second.quiet(0.5)  # the other process's erase waits for the question, at the door
    take(first, "b", "read", "gus")
    first.quiet(0.5)  # a question sent after it waits behind it
    first.send("erase_inside", run="a")
    second.expect("in", "e", 10)  # the run's erase let its lock go: the other erase goes first
    second.send("let_go", run="e")
    second.expect("out", "e")
    first.expect("in", "b", 10)  # then the question behind it, which the run's erase waits for
    first.send("let_go", run="b")
    first.expect("out", "b")
    first.expect("inside in", "a", 10)
    first.send("let_go", run="a")
    first.expect("inside out", "a")
    first.send("let_go", run="a")
    first.expect("out", "a")

def test_a_process_killed_holding_the_gate_lets_go_of_it(
    two_processes: tuple[Worker, Worker], shared_memory: SharedMemory
) -> None:
    """The kernel closes a killed process's files, PostgreSQL ends its sessions: their locks go with them."""
    doomed = worker(shared_memory)
    try:
        take(doomed, "a", "store", "eve")
        doomed.expect("in", "a")
        _, second = two_processes
        take(second, "b", "store", "eve")
        second.quiet(0.5)
        doomed.kill()
        second.expect("in", "b", 10)
        second.send("let_go", run="b")
        second.expect("out", "b")
    finally:
        doomed.close()


def test_an_async_run_waits_for_another_process_without_blocking_its_loop(
    two_processes: tuple[Worker, Worker]
) -> None:
    first, second = two_processes
    take(first, "a", "store", "flo")
    first.expect("in", "a")
    take(second, "b", "store", "flo", **{"async": True})
    second.quiet(1.0)
    first.send("let_go", run="a")
    first.expect("out", "a")
    ticks = second.expect("in", "b", 10)["ticks"]
    assert ticks > 30  # the loop ran every 10 ms or so while the run waited (a second and more)
    second.send("let_go", run="b")
    second.expect("out", "b")


def file_gate(tmp_path: Path, namespace: str = "ann") -> RunGate:
    """A gate whose runs take turns with other processes' through file locks in `tmp_path`."""
    return run_gate(StoreSettings(data_dir=str(tmp_path), chroma_host=LOOPBACK, chroma_port=free_port()), namespace)


def free_for_others(tmp_path: Path, namespace: str = "ann") -> bool:
    """Whether another process could erase `namespace` now: the lock files opened afresh take them (flock
    locks of two open files exclude each other, in one process too)."""
    other = FileLocks(tmp_path / "run_gates", namespace)
    try:
        return all(other.try_set(role, "EX") for role in ("input", "door", "runs"))
    finally:
        other.close()


def test_a_run_lets_go_of_its_locks_across_processes_however_it_ends(tmp_path: Path) -> None:
    runs = file_gate(tmp_path)
    with pytest.raises(ValueError), runs.holding("store"):  # a failed run
        assert not free_for_others(tmp_path)
        raise ValueError("the model failed")
    assert free_for_others(tmp_path)

    def streamed() -> Iterator[int]:  # `graph.stream`, read in part and closed by another thread
        with runs.holding("store"):
            yield 1
            yield 2

    parts = streamed()
    next(parts)
    assert not free_for_others(tmp_path)
    closing = threading.Thread(target=parts.close)
    closing.start()
    closing.join(10)
    assert free_for_others(tmp_path)

    async def cancelled() -> None:
        async def storing() -> None:
            async with runs.holding_async("store"):
                await asyncio.sleep(10)

        task = asyncio.create_task(storing())
        await asyncio.sleep(0.3)
        assert not await asyncio.to_thread(free_for_others, tmp_path)
        task.cancel()  # while it holds the gate
        await asyncio.gather(task, return_exceptions=True)
        assert await asyncio.to_thread(free_for_others, tmp_path)
        other = FileLocks(tmp_path / "run_gates", "ann")
        assert other.try_set("input", "EX")  # another process stores input
        task = asyncio.create_task(storing())
        await asyncio.sleep(0.3)
        task.cancel()  # while it waits for the other process
        await asyncio.gather(task, return_exceptions=True)
        other.close()
        assert await asyncio.to_thread(free_for_others, tmp_path)

    asyncio.run(cancelled())
    with runs.holding("close"):  # nor does this process's gate keep anything
        pass


def test_a_look_in_flight_when_its_task_is_cancelled_lets_go_of_what_it_took() -> None:
    """A task's look at a lock runs in a thread and may take the lock after the task was cancelled: the
    locks are let go of once the look returns, not left held by a run that is gone."""
    class SlowLocks:
        def __init__(self) -> None:
            self.answer, self.closed = threading.Event(), threading.Event()

        def try_set(self, role: str, mode: str | None) -> bool:
            self.answer.wait(10)
            return True  # taken, after the cancel

        def close(self) -> None:
            self.closed.set()

    locks = SlowLocks()
    hold = CrossHold(lambda: locks)  # type: ignore[arg-type, return-value]

    async def scenario() -> bool:
        waiting = asyncio.create_task(hold.enter_async("store"))
        await asyncio.sleep(0.2)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not locks.closed.is_set()  # the look still runs
        locks.answer.set()
        return await asyncio.to_thread(locks.closed.wait, 10)

    assert asyncio.run(scenario())


def test_a_forked_child_keeps_none_of_the_lock_files_of_its_parents_run(tmp_path: Path) -> None:
    """A child forked while a run went on (multiprocessing's fork, a server's workers) shares the run's open
    lock files: holding them, it kept their locks after the parent let go of them, as long as it lived."""
    runs = file_gate(tmp_path)
    started, told = os.pipe()
    with runs.holding("store"):
        child = os.fork()
        if child == 0:  # pragma: no cover (the child, its fork handlers run)
            os.write(told, b"1")
            time.sleep(5)
            os._exit(0)
    try:
        assert os.read(started, 1) == b"1"
        assert free_for_others(tmp_path)  # the child still lives
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(started)
        os.close(told)


def test_a_lock_file_a_drop_removed_is_locked_afresh_by_whoever_had_it_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drop removes its namespace's lock files while it holds them (memory/run_locks.py): a run that opened
    one before and locks it after finds it gone and locks the file at the path, which a third then waits for.
    Files another process holds stay (tests/test_gate_across_processes.py does it with real drops)."""
    folder = tmp_path / "run_gates"
    dropping, waiting, storing = (FileLocks(folder, "ann") for _ in range(3))
    assert storing.try_set("input", "EX")  # a storing run waiting at the door behind the drop
    assert dropping.try_set("door", "EX") and dropping.try_set("runs", "EX")
    assert not waiting.try_set("runs", "SH")  # opened, and waited on
    with writer_turn(folder, "ann"):
        dropping.remove()
        assert sorted(p.suffix for p in lock_paths(folder, "ann") if p.exists()) == [".input", ".writer"]
    dropping.close()
    dropping.remove()  # (again, nothing held: the free writer file goes, the held input file stays)
    assert [p.suffix for p in lock_paths(folder, "ann") if p.exists()] == [".input"]
    assert waiting.try_set("runs", "EX")
    third = FileLocks(folder, "ann")
    assert not third.try_set("runs", "SH")  # the waiting run holds the file at the path
    waiting.close()
    assert third.try_set("runs", "SH")
    for locks in (third, storing):
        locks.close()

    real_open = run_locks._lock_file
    def unlinked_after_opening(where: Path, name: str) -> int | None:  # a drop between open and flock
        descriptor = real_open(where, name)
        monkeypatch.setattr(run_locks, "_lock_file", real_open)
        (where / name).unlink()
        return descriptor

    monkeypatch.setattr(run_locks, "_lock_file", unlinked_after_opening)
    with writer_turn(folder, "ann"):  # the writer's lock, on the file at the path
        writer = lock_paths(folder, "ann")[-1]
        other = os.open(writer, os.O_RDONLY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(other)


def test_a_thread_holding_a_namespaces_writer_file_takes_it_again_at_once_and_others_still_wait(
    tmp_path: Path,
) -> None:
    """Two store objects of one namespace in one thread (the registry reopened one it closed as idle inside
    the other's step) each take the writer file: the second went on a file of its own and waited for ever for
    the first. Another thread still waits for both (tests/test_gate_across_processes.py does it with stores)."""
    folder = tmp_path / "run_gates"
    entered = threading.Event()
    order: list[str] = []

    def other() -> None:
        entered.wait()
        with writer_turn(folder, "ann"):
            order.append("other")

    thread = threading.Thread(target=other)
    thread.start()
    nested = threading.Thread(target=lambda: nested_turns(folder, order, entered), daemon=True)
    nested.start()
    nested.join(10)
    assert not nested.is_alive(), "the nested writer turn waited for its own thread"
    thread.join(10)
    assert order == ["inner", "outer", "other"]


def nested_turns(folder: Path, order: list[str], entered: threading.Event) -> None:
    with writer_turn(folder, "ann"):
        entered.set()
        time.sleep(0.3)  # the other thread waits in flock meanwhile
        with writer_turn(folder, "ann"):
            order.append("inner")
        order.append("outer")


def test_a_writer_block_a_forked_child_inherited_closes_none_of_the_childs_own_files(tmp_path: Path) -> None:
    """A child forked inside a writer step goes on inside that block, its copy of the file closed at the fork.
    A writer file the child opened meanwhile could get the same descriptor number, and the inherited block's
    end closed it, letting go of the child's own lock."""
    folder = tmp_path / "run_gates"
    inherited = writer_turn(folder, "ann")
    inherited.__enter__()
    child = os.fork()
    if child == 0:  # (the child: one outcome in its exit code, nothing else)
        code = 1
        try:
            own = writer_turn(folder, "bob")
            own.__enter__()
            inherited.__exit__(None, None, None)
            other = os.open(lock_paths(folder, "bob")[-1], os.O_RDONLY)
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                code = 0  # the child's own lock is still held
        finally:
            os._exit(code)
    try:
        _, status = os.waitpid(child, 0)
        assert os.WEXITSTATUS(status) == 0, "the inherited block closed the child's own writer file"
    finally:
        inherited.__exit__(None, None, None)
