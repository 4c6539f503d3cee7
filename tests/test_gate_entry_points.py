"""The writing entry points of a namespace that are no run of the graph (undo, end_session, consolidate,
import, a `StrataStore` put) and a question that may change memory take the namespace's gate as runs do,
across processes too, on a real Chroma server with a real PostgreSQL ledger or one data folder's SQLite
ledger (tests/test_gate_across_processes.py tries the runs themselves); and the per-step write lock of a
SQLite ledger shared through a data folder holds across processes (it held in one process only).

Each call is sent to one process while another holds the namespace's gate the way that must keep it out:
an input being stored (`store`) keeps out what takes turns with inputs, an erase (`close`) keeps out
everything; it waits until that run lets go, then goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest
from gate_worker import Worker
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import PutOp
from servers import LOOPBACK, ServerProcess
from strata.graph import Context, build_graph, builder
from strata.memory.errors import InputError, NotFoundError

from strata.api import Memory
from strata.langgraph_store import StrataStore

WAIT = 3.0  # how long a call must be seen waiting


def finished(worker: Worker, call: str) -> dict[str, Any]:
    """The call's end: returned, or refused in its own words for want of something to do (nothing to undo)."""
    line = worker._lines.get(timeout=300)
    assert line, worker.log.read_text()[-3000:]
    said = json.loads(line)
    assert said["event"] == "called" or (said["event"] == "error" and said["type"] == "NotFoundError"), said
    assert said.get("call", said.get("run")) == call, said
    return dict(said)


@pytest.mark.slow
@pytest.mark.parametrize(("call", "kept_out_by"), [
    ("undo", "store"), ("end_session", "store"), ("import", "store"), ("ask_refreshing", "store"),
    ("consolidate", "close"), ("put", "close"),
])
def test_a_writing_call_waits_for_another_processs_run_that_must_keep_it_out(
    call: str, kept_out_by: str, data_dir: Path, chroma: ServerProcess, ledger_url: str,
    offline_env: dict[str, str],
) -> None:
    namespace = f"gate-{uuid.uuid4().hex[:8]}"
    holder, caller = (Worker(data_dir, offline_env, LOOPBACK, chroma.port, ledger_url) for _ in range(2))
    try:
        # (the caller's first call opens the ledger, the embedder and the server's client: slow enough on a busy
        # machine to pass for a wait, so it is made first; and "import" copies this namespace)
        caller.send("add", namespace=f"{namespace}-source", turns=[
            {"speaker": "Ann", "text": "I live in Boston.", "dia_id": "D1:1"}])
        caller.expect("added", timeout=300)
        if kept_out_by == "close":
            # consolidation leaves the turns an ingest is still deriving to its next run, and a put is one step:
            # they go on beside another process's input
            holder.send("take", run="input", kind="store", namespace=namespace)
            holder.expect("waiting", "input")
            holder.expect("in", "input", timeout=120)
            caller.send("call", call=call, namespace=namespace)
            finished(caller, call)
            holder.send("let_go", run="input", namespace=namespace)
            holder.expect("out", "input")
        holder.send("take", run="a", kind=kept_out_by, namespace=namespace)
        holder.expect("waiting", "a")
        holder.expect("in", "a", timeout=120)
        caller.send("call", call=call, namespace=namespace, source=f"{namespace}-source")
        caller.quiet(WAIT)  # it waits for the other process's run
        let_go = time.time()
        holder.send("let_go", run="a", namespace=namespace)
        holder.expect("out", "a")
        assert finished(caller, call)["at"] >= let_go, "it ended before the run it waited for"
    finally:
        holder.close()
        caller.close()


@pytest.mark.slow
def test_the_write_lock_of_a_sqlite_ledger_on_a_chroma_server_holds_across_processes(
    data_dir: Path, chroma: ServerProcess, offline_env: dict[str, str]
) -> None:
    """Two processes on one data folder and one Chroma server: a step of one held the namespace's write lock
    of its own process only, so the other's step went on beside it (two turns could take one id)."""
    namespace = f"steps-{uuid.uuid4().hex[:8]}"
    first, second = (Worker(data_dir, offline_env, LOOPBACK, chroma.port) for _ in range(2))
    try:
        first.send("write", run="w1", namespace=namespace)
        first.expect("in", "w1", timeout=120)
        second.send("write", run="w2", namespace=namespace)
        second.quiet(WAIT)  # the other process's step holds it
        first.send("let_go", run="w1", namespace=namespace)
        first.expect("out", "w1")
        second.expect("in", "w2", timeout=60)
        second.send("let_go", run="w2", namespace=namespace)
        second.expect("out", "w2")
    finally:
        first.close()
        second.close()


class Call(threading.Event):
    """A call in a thread of its own (a context of its own: it holds nothing of the caller's), set once it ends
    (nothing to undo counts as an end; another error is kept in `error`)."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__()
        self.error: BaseException | None = None
        threading.Thread(target=self._body, args=(call,), daemon=True).start()

    def _body(self, call: Callable[[], Any]) -> None:
        try:
            with contextlib.suppress(NotFoundError):
                call()
        except BaseException as error:
            self.error = error
        finally:
            self.set()


def in_thread(call: Callable[[], Any]) -> Call:
    return Call(call)


class AppState(TypedDict, total=False):
    question: str
    answer: str | None


def app_around(memory_graph: Any) -> Any:
    """An app's graph with the memory graph as a node (a subgraph), under the memory's `Context`."""
    app = StateGraph(AppState, context_schema=Context)
    app.add_node("recall", memory_graph)
    app.add_edge(START, "recall")
    app.add_edge("recall", END)
    return app.compile()


def test_in_one_process_the_calls_and_a_graph_compiled_from_builder_wait_for_an_erase(
    data_dir: Path, offline_env: dict[str, str]
) -> None:
    """What a run waits for in one process, these calls wait for too (an app compiling `builder()` itself, or
    running the compiled graph as a node of its own, got no gate at all), and none waits for the run it is
    called from."""
    memory = Memory("ann", data_dir=data_dir)
    memory.add({"speaker": "Ann", "text": "I live in Boston.", "dia_id": "D1:1"})
    calls: dict[str, Callable[[], Any]] = {
        "undo": memory.undo, "end_session": memory.end_session, "consolidate": memory.consolidate,
        "put": lambda: StrataStore.from_memory(memory).put(("ann",), "note", {"text": "tea at four"}),
        "ask refreshing": lambda: memory.ask("Where does Ann live?", refresh=True),
        "compiled builder": lambda: builder().compile().invoke({"question": "Where does Ann live?"},
                                                                context=memory.context("ask")),
        "subgraph": lambda: app_around(build_graph()).invoke({"question": "Where does Ann live?"},
                                                              context=memory.context("ask")),
    }
    for name, call in calls.items():
        with memory.gate().holding("close"):  # an erase of the namespace works
            done = in_thread(call)
            assert not done.wait(1.0), f"{name} went on while the namespace was erased"
        assert done.wait(120) and done.error is None, f"{name} never ended, or failed: {done.error!r}"
    bob = Memory("bob", data_dir=data_dir)
    with bob.gate().holding("store"):  # an input of bob's is stored: an import into bob waits for it
        done = in_thread(lambda: bob.import_from(memory.export()))
        assert not done.wait(1.0)
    assert done.wait(120) and done.error is None and bob.stats()["raw"] == memory.stats()["raw"]

    # made from inside a run of their namespace (an `on_turn` callback of an add, a storing run holding the
    # gate), each goes on at once: the gate lets a call inside its holder in, where waiting for the run it is
    # part of would be for ever
    made: list[str] = []

    def on_turn(_: int) -> None:
        for call in calls.values():
            with contextlib.suppress(NotFoundError):
                call()
        made.append("all")

    done = in_thread(lambda: memory.add({"speaker": "Ann", "text": "I moved to Denver.", "dia_id": "D1:2"},
                                        on_turn=on_turn))
    assert done.wait(120) and done.error is None and made == ["all"], done.error


def test_a_sync_put_on_an_event_loop_never_waits_there_for_an_erase_and_aput_does(
    data_dir: Path, offline_env: dict[str, str]
) -> None:
    """An async node calling the store's sync `put` while an erase of the namespace waits for a run: the put
    waited at the gate on the loop's thread, so a run on that loop, and the erase behind it, never ended. It is
    refused in one line now (nothing written), `aput` waits off the loop, and with no erase a sync put goes on."""
    memory = Memory("ann", data_dir=data_dir)
    memory.add({"speaker": "Ann", "text": "I live in Boston.", "dia_id": "D1:1"})
    store = StrataStore.from_memory(memory)
    gate = memory.gate()

    async def sync_put() -> None:
        store.put(("ann",), "note", {"text": "tea at four"})

    asyncio.run(sync_put())  # nothing in the way: it goes on
    assert store.get(("ann",), "note") is not None
    run = threading.Event()
    with gate.holding("read"):  # a run of ann's
        erase = in_thread(lambda: memory.erase(about="Ann"))
        end = time.monotonic() + 10
        while not gate._closers and time.monotonic() < end:
            time.sleep(0.01)
        assert gate._closers, "the erase never waited"
        put = in_thread(lambda: asyncio.run(sync_put()))
        assert put.wait(10), "a sync put on the loop waited at the gate"
        assert isinstance(put.error, InputError) and "aput" in str(put.error) and "\n" not in str(put.error)

        async def async_put() -> None:
            await store.aput(("ann",), "later", {"text": "coffee at five"})
            run.set()

        later = in_thread(lambda: asyncio.run(async_put()))
        assert not later.wait(1.0)  # it waits for the erase, off the loop
    assert erase.wait(120) and erase.error is None, erase.error
    assert later.wait(120) and later.error is None and run.is_set(), later.error
    assert store.get(("ann",), "later") is not None


def test_a_batch_over_two_namespaces_holds_neither_gate_while_it_waits_for_the_other(
    data_dir: Path, offline_env: dict[str, str]
) -> None:
    """A batch putting into n1 and n2 held n1's gate while it waited for n2's behind an erase; a run of n2
    putting into n1 waited behind an erase of n1, which waited for the batch: nothing ended. Each namespace's
    gate is held around its own writes only now."""
    m1, m2 = Memory("n1", data_dir=data_dir), Memory("n2", data_dir=data_dir)
    m1.add({"speaker": "Ann", "text": "I live in Boston.", "dia_id": "D1:1"})
    m2.add({"speaker": "Bob", "text": "I live in Denver.", "dia_id": "D1:1"})
    store = StrataStore.from_memory(m1)
    g1, g2 = m1.gate(), m2.gate()
    go_put = threading.Event()

    def run_of_n2() -> None:
        with g2.holding("read"):  # a run of n2, whose node puts into n1
            go_put.wait()
            store.put(("n1",), "note", {"text": "Bob mentioned Ann"})

    def until(condition: Callable[[], bool]) -> None:
        end = time.monotonic() + 30
        while not condition():
            assert time.monotonic() < end
            time.sleep(0.01)

    run = in_thread(run_of_n2)
    until(lambda: g2._runs == 1)
    erase2 = in_thread(lambda: m2.erase(about="Bob"))
    until(lambda: bool(g2._closers))
    batch = in_thread(lambda: store.batch([PutOp(("n1",), "a", {"text": "one"}), PutOp(("n2",), "b", {"text": "two"})]))
    until(lambda: g1._runs == 1 or store.get(("n1",), "a") is not None)  # the batch at n1, or past it
    erase1 = in_thread(lambda: m1.erase(about="Ann"))
    until(lambda: bool(g1._closers) or erase1.is_set())
    go_put.set()
    for name, call in (("run", run), ("erase of n2", erase2), ("batch", batch), ("erase of n1", erase1)):
        assert call.wait(120), f"the {name} never ended"
        assert call.error is None, call.error
    assert store.get(("n2",), "b") is not None


def test_a_nested_run_finds_its_parents_context_through_langgraphs_public_runtime(
    data_dir: Path, offline_env: dict[str, str]
) -> None:
    """graph/turns.py read the parent's runtime under a key of `langgraph._internal` (private: it may move
    within the versions allowed); `langgraph.runtime.get_runtime()` gives the same, sync and async, and no
    module of the package imports LangGraph's private modules."""
    from strata.graph import turns

    memory = Memory("ann", data_dir=data_dir)
    memory.add({"speaker": "Ann", "text": "I live in Boston.", "dia_id": "D1:1"})
    given = memory.context("ask")
    seen: list[object] = []

    def node(_: AppState) -> AppState:
        seen.append(turns.inherited_context())
        return {}

    async def anode(_: AppState) -> AppState:
        seen.append(await asyncio.to_thread(turns.inherited_context))  # as `astream` checks its gate
        return {}

    for body in (node, anode):
        app = StateGraph(AppState, context_schema=Context)
        app.add_node("look", body)
        app.add_edge(START, "look")
        app.add_edge("look", END)
        compiled = app.compile()
        if body is node:
            compiled.invoke({"question": "?"}, context=given)
        else:
            asyncio.run(compiled.ainvoke({"question": "?"}, context=given))
    assert seen == [given, given] and turns.inherited_context() is None
    root = Path(turns.__file__).parents[1]
    private = [str(path.relative_to(root)) for folder in ("agents", "graph", "memory", "strata", "prompts")
               for path in (root / folder).rglob("*.py") if "langgraph._internal" in path.read_text()]
    assert private == []


class Count(TypedDict, total=False):
    n: int


def test_async_nodes_of_an_async_app_ending_sessions_during_an_ingest_never_starve_its_run(
    data_dir: Path, offline_env: dict[str, str]
) -> None:
    """More app runs than the loop's default pool has threads, each an async node awaiting `aend_session` or
    `aundo` while a strata ingest on the same loop holds the gate: they wait on strata's threads, so the run
    keeps the default pool for its steps and everything ends (sync nodes calling `end_session`, `undo` or `add`
    there fill that pool waiting, and nothing ends: the README says to use these forms)."""
    memory = Memory("ann", data_dir=data_dir)
    memory.add({"speaker": "Ann", "text": "I live in Boston.", "dia_id": "D1:1"})
    calls = [memory.aend_session, memory.aundo]

    async def node(state: Count) -> Count:
        with contextlib.suppress(NotFoundError):
            await calls[state["n"] % 2]()
        return {"n": 1}

    app = StateGraph(Count)
    app.add_node("work", node)
    app.add_edge(START, "work")
    app.add_edge("work", END)
    compiled = app.compile()
    size = min(32, (os.cpu_count() or 1) + 4) + 2  # the default executor's threads, and more

    async def main() -> tuple[bool, int]:
        turns = [{"speaker": "Ann", "text": f"Fact {i}: I like colour {i}.", "dia_id": f"D2:{i}"} for i in range(6)]
        run = asyncio.create_task(build_graph().ainvoke({"turns": turns}, context=memory.context("ingest"),
                                                        config={"recursion_limit": 500}))
        gate = memory.gate()
        while not gate._storing and not run.done():
            await asyncio.sleep(0.005)
        apps = [asyncio.create_task(compiled.ainvoke({"n": i})) for i in range(size)]
        done, _ = await asyncio.wait([run, *apps], timeout=60)
        return run in done, sum(task in done for task in apps)

    assert asyncio.run(main()) == (True, size)
