"""The gate of a namespace's runs (memory/run_gate.py), held by threads and by tasks on an event loop.

Inputs stored one at a time, questions together, an erase or a drop alone; a wait on the loop never
blocks it and, cancelled, holds nothing; a call inside one that holds the gate goes on at once, but an
erase inside a run of its own namespace is one line, not a wait for ever.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from strata.memory.errors import InputError
from strata.memory.run_gate import RunGate, run_gate
from strata.memory.settings import StoreSettings


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
