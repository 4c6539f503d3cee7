"""Whole runs of one namespace in two processes sharing its memory, on a real Chroma server with a real
PostgreSQL ledger, or with one data folder's SQLite ledger: they take turns as in one process
(memory/run_locks.py; tests/test_run_gate.py tries the gate alone).

- two ingests of one namespace sent at once to two processes store the same episodes as one after the
  other (they went step about, each closing the other's open episode), on two `langgraph dev` replicas too;
- an erase in one process waits for a question's run in the other, whose saved thread then holds none of
  the erased words (it saved them back after the erase);
- a PostgreSQL that stops while a run waits is one line;
- more runs at once than the gate pool has connections wait for one.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from gate_worker import Worker
from servers import (
    LOOPBACK,
    PostgresServer,
    ServerProcess,
    free_port,
    langgraph_dev,
    log_tail,
    postgres_run,
    repo_mirror,
)
from strata.memory.registry import close_all
from strata.memory.run_locks import FOLDER, lock_paths
from test_async_api import episodes, two_sessions

from strata.api import Memory
from strata.checkpoint import checkpoint_path

pytestmark = pytest.mark.slow
PIN = "quokkamarmalade"
WAIT = 3.0  # how long a process must be seen waiting


def shared(data_dir: Path, chroma: ServerProcess, ledger_url: str) -> dict[str, Any]:
    """The settings every process of a test uses (a namespace of its own on the module's Chroma server)."""
    return {"data_dir": data_dir, "chroma_host": LOOPBACK, "chroma_port": chroma.port,
            **({"ledger_url": ledger_url} if ledger_url else {})}

def one_process_orders(settings: dict[str, Any], first: list[Any], second: list[Any]) -> tuple[list[Any], str]:
    """The episodes one process stores for the two inputs in either order, each in a namespace of its own,
    and the tag that names them (the Chroma server outlives the test: names are new each time)."""
    tag = uuid.uuid4().hex[:8]
    orders = []
    for name, inputs in (("ab", (first, second)), ("ba", (second, first))):
        alone = Memory(f"{name}-{tag}", **settings)
        for part in inputs:
            alone.add(part)
        orders.append(episodes(alone))
    close_all()
    return orders, tag



def test_two_processes_ingesting_one_namespace_at_once_store_one_input_after_the_other(
    locomo_dir: Path, data_dir: Path, chroma: ServerProcess, ledger_url: str, offline_env: dict[str, str]
) -> None:
    first, second = two_sessions(locomo_dir)
    settings = shared(data_dir, chroma, ledger_url)
    orders, tag = one_process_orders(settings, first, second)
    workers = [Worker(data_dir, offline_env, LOOPBACK, chroma.port, ledger_url) for _ in range(2)]
    try:
        for worker, turns in zip(workers, (first, second), strict=True):
            worker.send("add", namespace=f"together-{tag}", turns=[t.model_dump(mode="json") for t in turns])
        for worker in workers:
            assert worker.expect("added", timeout=600)["stored"] >= 8
    finally:
        for worker in workers:
            worker.close()
    together = episodes(Memory(f"together-{tag}", **settings))
    assert together in orders, f"episodes of the two at once: {sorted(together)}"


def test_an_erase_waits_for_another_processs_question_whose_saved_thread_keeps_no_erased_words(
    data_dir: Path, chroma: ServerProcess, ledger_url: str, offline_env: dict[str, str]
) -> None:
    """Two processes on one data folder (its threads file included): an erase in one deleted the threads
    holding the record while a question's run in the other was midway, which then saved its thread with the
    record's words. The erase now waits for that run to end, and then finds its thread."""
    namespace = f"alice-{uuid.uuid4().hex[:8]}"
    asker, eraser = (Worker(data_dir, offline_env, LOOPBACK, chroma.port, ledger_url) for _ in range(2))
    try:
        eraser.send("add", namespace=namespace, turns=[
            {"speaker": "Alice", "text": f"My bank PIN is {PIN}.", "dia_id": "D1:1"}])
        eraser.expect("added", timeout=300)
        asker.send("ask_on_thread", namespace=namespace, thread="alice-asks", question="What is Alice's bank PIN?")
        asker.expect("midway", timeout=300)  # its research step is saved: the PIN is in the thread
        eraser.send("erase", namespace=namespace, ids=["raw:D1:1"])
        eraser.quiet(3.0)  # the erase waits for the question's run
        asker.send("go")
        asker.expect("asked", timeout=300)
        assert eraser.expect("erased", timeout=300)["threads"] == ["alice-asks"]
    finally:
        asker.close()
        eraser.close()
    with sqlite3.connect(checkpoint_path(data_dir)) as threads:
        assert threads.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = 'alice-asks'").fetchone() == (0,)
    assert PIN.encode() not in checkpoint_path(data_dir).read_bytes()


def test_a_postgresql_that_stops_while_a_run_waits_is_one_line(
    tmp_path: Path, offline_env: dict[str, str]
) -> None:
    """The waiting run looks at its lock again and again: the database gone, it says so in one line."""
    with postgres_run(tmp_path / "postgres.log") as server:
        url = server.create_database("gone")
        holder, waiter = (Worker(tmp_path / "mem", offline_env, LOOPBACK, free_port(), url) for _ in range(2))
        try:
            holder.send("take", run="a", kind="store", namespace="ann")
            holder.expect("waiting", "a")
            holder.expect("in", "a")
            waiter.send("take", run="b", kind="store", namespace="ann")
            waiter.expect("waiting", "b")
            waiter.quiet(1.0)
            server.stop()
            said = waiter.expect("error", "b", timeout=30)
        finally:
            holder.close()
            waiter.close()
    assert said["type"] == "UnavailableError" and "\n" not in said["error"], said
    assert said["error"].startswith(f"the PostgreSQL ledger at {LOOPBACK}:{server.port}/gone is unavailable")


def test_more_runs_at_once_than_the_gate_pools_connections_wait_for_one(
    postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each run going on holds a connection of the gate pool: one more waits for one to come back (past the
    pool's own timeout), and does not say that the database is down."""
    from strata.memory import ledger_postgres

    monkeypatch.setattr(ledger_postgres, "GATE_POOL_SIZE", 2)
    monkeypatch.setattr(ledger_postgres, "CONNECT_TIMEOUT", 1)
    backend = ledger_postgres.PostgresBackend(postgres.create_database(f"t_{uuid.uuid4().hex[:12]}"))
    try:
        going_on = [backend.run_locks(f"ns{n}") for n in range(2)]
        third: list[Any] = []
        waiting = threading.Thread(target=lambda: third.append(backend.run_locks("ns2")))
        waiting.start()
        waiting.join(2.5)  # the pool's timeout, twice over
        assert waiting.is_alive() and not third
        going_on[0].close()
        waiting.join(10)
        assert len(third) == 1 and third[0].try_set("input", "EX")
        for locks in (going_on[1], third[0]):
            locks.close()
    finally:
        backend.close()


def test_two_replicas_of_a_langgraph_server_store_one_conversation_after_the_other(
    locomo_dir: Path, tmp_path: Path, chroma: ServerProcess, postgres: PostgresServer
) -> None:
    """The deployment the gate's docstring spoke of: two `langgraph dev` replicas on one Chroma server and one
    PostgreSQL ledger, each running the graph's runs as tasks on its event loop (whose blocking calls the
    server refuses). Two conversations of one namespace sent at once, one to each, are stored one after the
    other: they went step about, each closing the other's open episode."""
    from langgraph_sdk import get_client

    first, second = two_sessions(locomo_dir)
    ledger_url = postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")
    settings = shared(tmp_path / "check", chroma, ledger_url)
    orders, tag = one_process_orders(settings, first, second)
    env = {"STRATA_CHROMA_HOST": LOOPBACK, "STRATA_CHROMA_PORT": str(chroma.port), "STRATA_LEDGER_URL": ledger_url}
    with ExitStack() as running:
        replicas = [running.enter_context(langgraph_dev(tmp_path / f"r{n}" / "mem", repo_mirror(tmp_path / f"r{n}"),
                                                        tmp_path / f"langgraph-{n}.log", env=env, jobs=2))
                    for n in range(2)]

        async def ingest(url: str, turns: list[Any]) -> Any:
            client = get_client(url=url, timeout=300)
            thread = await client.threads.create()
            return await client.runs.wait(thread["thread_id"], "strata",
                                          input={"turns": [t.model_dump(mode="json") for t in turns]},
                                          context={"namespace": f"together-{tag}", "mode": "ingest"})

        async def at_once() -> list[Any]:
            return await asyncio.wait_for(asyncio.gather(
                ingest(replicas[0].url, first), ingest(replicas[1].url, second)), 600)

        results = asyncio.run(at_once())
        assert all(result.get("stored_ids") for result in results), (
            results, [log_tail(replica.log_path) for replica in replicas])
    together = episodes(Memory(f"together-{tag}", **settings))
    assert together in orders, f"episodes of the two at once: {sorted(together)}"


def test_a_drop_removes_its_namespaces_lock_files_and_a_process_waiting_on_them_still_keeps_others_out(
    data_dir: Path, chroma: ServerProcess, offline_env: dict[str, str]
) -> None:
    """A drop left its namespace's four lock files in `<data_dir>/run_gates/`, for every namespace ever dropped.
    It removes them now, and safely: a process that had opened one before the drop and locks it after finds it
    gone and locks the file at the path, so a third process is kept out as before. Without that check the two
    each held a lock of their own file, and went on together (an erase beside another)."""
    namespace = f"gone-{uuid.uuid4().hex[:8]}"
    folder = data_dir / FOLDER
    runner, dropper, third = (Worker(data_dir, offline_env, LOOPBACK, chroma.port) for _ in range(3))
    try:
        dropper.send("add", namespace=namespace, turns=[  # an input, its steps, a drop: all four files
            {"speaker": "Ann", "text": "I live in Boston.", "dia_id": "D1:1"}])
        dropper.expect("added", timeout=300)
        assert all(path.exists() for path in lock_paths(folder, namespace))
        dropper.send("drop", namespace=namespace)
        dropper.expect("dropped", timeout=300)
        assert [path.name for path in lock_paths(folder, namespace) if path.exists()] == []

        # a question of the runner's, then a drop waiting for it, then an erase inside the question: the
        # question lets its `runs` go, the drop goes first, and the erase waits at the door meanwhile, on the
        # files it opened before the drop
        runner.send("take", run="a", kind="read", namespace=namespace)
        runner.expect("waiting", "a")
        runner.expect("in", "a", timeout=120)
        dropper.send("drop", namespace=namespace)
        dropper.quiet(WAIT)  # the drop waits for the question
        runner.send("erase_inside", run="a")
        dropper.expect("dropped", timeout=300)
        runner.expect("inside in", "a", timeout=60)  # the erase holds the namespace's door and `runs`
        third.send("take", run="e", kind="close", namespace=namespace)
        third.expect("waiting", "e")
        third.quiet(WAIT)  # so another process's erase waits
        runner.send("let_go", run="a")
        runner.expect("inside out", "a")
        third.quiet(WAIT)  # and still, for the question the erase was inside
        runner.send("let_go", run="a")
        runner.expect("out", "a")
        third.expect("in", "e", timeout=60)
        third.send("let_go", run="e")
        third.expect("out", "e")
    finally:
        for worker in (runner, dropper, third):
            worker.close()


def test_a_step_that_reopens_its_namespace_after_the_registry_closed_it_writes_through_the_new_store(
    data_dir: Path, chroma: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Memory node opens its store again inside its step (`_derive`); with more namespaces in use than
    `STRATA_MAX_OPEN_STORES` the registry may have closed the first as idle meanwhile. The new store's writes
    took the data folder's writer file again, on a file of their own, and waited for ever for their own thread
    (holding every writer of the namespace, in every process, out). They go on now."""
    from strata.memory.registry import open_store
    from strata.memory.settings import StoreSettings

    monkeypatch.setenv("STRATA_MAX_OPEN_STORES", "1")
    settings = StoreSettings(data_dir=str(data_dir), chroma_host=LOOPBACK, chroma_port=chroma.port)
    namespace = f"twice-{uuid.uuid4().hex[:8]}"
    first = open_store(settings, namespace)
    first.push_working("Ann", "D1:1", "hello", None, 10)
    done = threading.Event()

    def step() -> None:
        with first.writing():  # a step of the namespace, as the Memory node's `edits()`
            open_store(settings, f"{namespace}-other")  # another user's request: the first closed as idle
            second = open_store(settings, namespace)
            assert second is not first
            with second.writing():
                done.set()

    thread = threading.Thread(target=step, daemon=True)
    thread.start()
    thread.join(60)
    assert done.is_set(), "the reopened store waited for its own thread's writer lock"
    close_all()
