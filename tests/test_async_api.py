"""The API's async calls (`aadd`, `aask`, `aretrieve`, `achat`, `aconsolidate`) on real LoCoMo turns.

They must do exactly what their synchronous twins do, keep the event loop free while the
graph runs, fail with the same one-line errors, and leave stored memory as it was when
they fail or when several run at once.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from strata.memory.errors import InputError

from strata import Memory
from strata.conversations import load_turns

T = TypeVar("T")
QUESTIONS = [
    "When did Caroline go to the LGBTQ support group?",
    "What is Caroline's identity?",
    "What did Melanie paint recently?",
]


def turns_of(locomo_dir: Path, count: int) -> list[Any]:
    """conv-26's first `count` real turns (session 1)."""
    return load_turns(locomo_dir / "conv-26.json").sessions[0].turns[:count]


async def while_ticking(call: Awaitable[T]) -> tuple[T, int]:
    """The call's result, and how often another task ran on the loop while it was awaited."""
    done = asyncio.Event()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    async def awaited() -> T:
        try:
            return await call
        finally:
            done.set()

    result, _ = await asyncio.gather(awaited(), ticker())
    return result, ticks


def test_async_calls_store_and_answer_as_the_sync_ones_do(
    locomo_dir: Path, tmp_path: Path, embedder: object
) -> None:
    turns = turns_of(locomo_dir, 14)
    sync = Memory("conv-26", data_dir=str(tmp_path / "sync"))
    expected_report = sync.add(turns, end_session=True)
    later = Memory("conv-26", data_dir=str(tmp_path / "async"))

    async def scenario() -> tuple[Any, int, list[Any], Any]:
        report, ticks = await while_ticking(later.aadd(turns, end_session=True))
        answers = await asyncio.gather(*(later.aretrieve(q) for q in QUESTIONS))
        asked = await later.aask(QUESTIONS[0])
        return report, ticks, answers, asked

    report, ticks, answers, asked = asyncio.run(scenario())
    assert report.turns == 14 and report.stored_ids == expected_report.stored_ids  # turns and their facts
    assert ticks > 0, "the event loop was blocked while turns were stored"
    assert sorted(r.id for r in later.store.all("raw")) == sorted(r.id for r in sync.store.all("raw"))
    assert len(later.store.all("episode")) == len(sync.store.all("episode")) == 1
    for question, answer in zip(QUESTIONS, answers, strict=True):
        assert answer.evidence_ids() == sync.retrieve(question).evidence_ids(), question
    expected = sync.ask(QUESTIONS[0])
    assert asked.answer == expected.answer and asked.cited_ids == expected.cited_ids
    assert "D1:3" in asked.evidence_ids()  # "I went to a LGBTQ support group yesterday and it was so powerful."
    assert "2023" in asked.answer


def test_async_chat_stores_the_turn_and_consolidate_runs(locomo_dir: Path, data_dir: Path, embedder: object) -> None:
    memory = Memory("conv-26", data_dir=str(data_dir))
    memory.add(turns_of(locomo_dir, 8))

    async def scenario() -> tuple[Any, Any]:
        reply = await memory.achat("I started pottery classes last week, it calms me down.", speaker="Melanie")
        return reply, await memory.aconsolidate()

    reply, report = asyncio.run(scenario())
    raws = memory.store.all("raw")
    assert len(raws) == 9 and any("pottery" in r.text for r in raws)
    assert reply.answer
    assert report.turns == 9
    assert memory.consolidate().turns == 0  # nothing left for the slow path


def test_async_errors_are_the_same_one_line_errors_and_change_nothing(
    locomo_dir: Path, data_dir: Path, embedder: object
) -> None:
    memory = Memory("conv-26", data_dir=str(data_dir))
    memory.add(turns_of(locomo_dir, 4))
    before = sorted((r.id, r.text) for r in memory.store.all("raw", True))

    async def failing() -> list[BaseException]:
        calls = [memory.aask("  "), memory.aadd([{"speaker": "Ann"}]), memory.achat(123),  # type: ignore[arg-type]
                 memory.aconsolidate(0)]
        return [r for r in await asyncio.gather(*calls, return_exceptions=True) if isinstance(r, BaseException)]

    errors = asyncio.run(failing())
    assert [type(e) for e in errors] == [InputError] * 4
    assert all(len(str(e).splitlines()) == 1 for e in errors)
    assert "the question is empty" in str(errors[0])
    assert "turn 1: text: missing" in str(errors[1])
    assert sorted((r.id, r.text) for r in memory.store.all("raw", True)) == before


def test_concurrent_async_adds_lose_nothing(locomo_dir: Path, data_dir: Path, embedder: object) -> None:
    turns = turns_of(locomo_dir, 12)
    writers = 3
    memory = Memory("conv-26", data_dir=str(data_dir))

    async def scenario() -> None:
        share = [turns[i::writers] for i in range(writers)]
        await asyncio.gather(*(memory.aadd(part) for part in share))

    asyncio.run(scenario())
    stored = sorted(r.dialogue_id for r in memory.store.all("raw"))
    assert stored == sorted(t.dia_id for t in turns)


def test_two_inputs_added_at_once_are_stored_one_after_the_other(
    locomo_dir: Path, data_dir: Path, embedder: object,
) -> None:
    """Two sessions added at once took turns turn by turn: each turn closed the other session's open episode,
    so one ingest of 60 turns wrote 48 episodes, 38 of a single turn. Adds of one namespace now take turns
    whole: the episodes are those of the two inputs added one after the other, in one order or the other."""
    first, second = two_sessions(locomo_dir)
    orders = orders_alone(data_dir, first, second)
    together = Memory("together", data_dir=str(data_dir))

    async def scenario() -> None:
        await asyncio.gather(together.aadd(first), together.aadd(second))

    asyncio.run(scenario())
    assert episodes(together) in orders


def test_two_graph_runs_storing_at_once_on_one_loop_take_turns(
    locomo_dir: Path, data_dir: Path, embedder: object,
) -> None:
    """A LangGraph server runs the graph's `astream` as tasks on one event loop, each step in a worker
    thread: two ingests of one namespace sent at once on two threads went step about, and closed each
    other's open episodes (Memory.add's lock held only its own adds back). The graph's runs that store
    input now take turns whoever starts them, and a question asked meanwhile is not held back."""
    from strata.graph.context import Context
    from strata.graph.graph import graph

    first, second = two_sessions(locomo_dir)
    orders = orders_alone(data_dir, first, second)

    def run(turns: list[Any]) -> Awaitable[Any]:
        context = Context(namespace="together", mode="ingest", data_dir=str(data_dir))
        return graph.ainvoke({"turns": [t.model_dump(mode="json") for t in turns]}, context=context)

    async def scenario() -> tuple[float, float]:
        started = asyncio.get_running_loop().time()
        storing = asyncio.gather(run(first), run(second))
        await asyncio.sleep(0.2)  # both ingests under way
        await graph.ainvoke({"question": "Who went to a support group?"},
                            context=Context(namespace="together", mode="ask", data_dir=str(data_dir)))
        asked = asyncio.get_running_loop().time()
        await storing
        return asked - started, asyncio.get_running_loop().time() - started

    asked, stored = asyncio.run(scenario())
    assert episodes(Memory("together", data_dir=str(data_dir))) in orders
    assert asked < stored  # the question was answered while the ingests were still storing


def two_sessions(locomo_dir: Path) -> tuple[list[Any], list[Any]]:
    """The first 8 turns of conv-26's sessions 1 and 2."""
    sessions = load_turns(locomo_dir / "conv-26.json").sessions
    return sessions[0].turns[:8], sessions[1].turns[:8]


def episodes(memory: Memory) -> set[tuple[str, ...]]:
    """The turns of each episode, the open one's included."""
    return {tuple(e.source_ids) for e in memory.store.all("episode")} | {
        tuple(memory.store.state("open_episode", {}).get("turn_ids", []))}


def orders_alone(data_dir: Path, first: list[Any], second: list[Any]) -> list[set[tuple[str, ...]]]:
    """The episodes of the two inputs added one after the other, in each order."""
    orders = []
    for name, inputs in (("ab", (first, second)), ("ba", (second, first))):
        alone = Memory(name, data_dir=str(data_dir))
        for part in inputs:
            alone.add(part)
        orders.append(episodes(alone))
    return orders


def test_a_cancelled_add_still_stores_every_turn_it_was_given(
    locomo_dir: Path, data_dir: Path, embedder: object
) -> None:
    turns = turns_of(locomo_dir, 18)  # long enough a batch that the cancel lands while it is stored
    memory = Memory("conv-26", data_dir=str(data_dir))

    async def scenario() -> bool:
        loop = asyncio.get_running_loop()
        first_stored = asyncio.Event()
        task = asyncio.create_task(memory.aadd(turns, on_turn=lambda n: loop.call_soon_threadsafe(first_stored.set)))
        await first_stored.wait()  # the graph is working on the batch: cancel now, mid-way
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(scenario()), "the await was not cancelled"
    # asyncio.run waits for the worker thread: the batch was finished, not cut short
    assert sorted(r.dialogue_id for r in memory.store.all("raw")) == sorted(t.dia_id for t in turns)


def test_an_async_run_holding_the_gate_ends_beside_more_waiting_async_calls_than_the_loop_has_threads(
    data_dir: Path, embedder: object,
) -> None:
    """Found by review: the async calls ran in the loop's default thread pool, where each waiting `aadd`
    blocked a worker on the namespace's gate, and the `ainvoke` run holding the gate needed a worker for
    its steps and for letting go of the gate: with as many waiting calls as workers, nothing ever ended."""
    from strata.graph.context import Context
    from strata.graph.graph import graph

    memory = Memory("ann", data_dir=str(data_dir))
    memory.add([{"speaker": "Ann", "text": "Hello.", "dia_id": "D0:1"}])
    workers = min(32, (os.cpu_count() or 1) + 4)  # the loop's default pool

    async def scenario() -> None:
        context = Context(namespace="ann", mode="ingest", data_dir=str(data_dir))
        turns = [{"speaker": "Ann", "text": f"I went to Paris on day {i}.", "dia_id": f"D1:{i}"} for i in range(1, 5)]
        run = asyncio.create_task(graph.ainvoke({"turns": turns}, context=context))
        await asyncio.sleep(0.3)  # the run holds the gate
        adds = [memory.aadd([{"speaker": "Bob", "text": f"Note {i}.", "dia_id": f"D2:{i}"}])
                for i in range(workers + 1)]
        await asyncio.wait_for(asyncio.gather(run, *adds), 120)

    asyncio.run(scenario())
    assert len(memory.store.all("raw")) == 1 + 4 + workers + 1


def test_an_astream_left_early_lets_its_task_store_and_erase_later(data_dir: Path, embedder: object) -> None:
    """Found by review: the gate noted in the caller's context that it was held, from inside `astream`'s
    body; a caller that stopped reading early had the run closed later from another task, and the note
    stayed in its own context, so its next erase waited for ever for a run of its own that had ended."""
    from strata.graph.context import Context
    from strata.graph.graph import graph

    memory = Memory("ann", data_dir=str(data_dir))
    memory.add([{"speaker": "Ann", "text": "My PIN is 4321.", "dia_id": "D1:1"}])

    async def scenario() -> Any:
        context = Context(namespace="ann", mode="ingest", data_dir=str(data_dir))
        turns = [{"speaker": "Ann", "text": f"I went to Paris on day {i}.", "dia_id": f"D2:{i}"} for i in range(1, 4)]
        async for _ in graph.astream({"turns": turns}, context=context):
            break  # the app only wanted to know the run started
        await asyncio.sleep(1)  # the abandoned run is closed meanwhile
        return await asyncio.wait_for(memory.aerase(ids=["raw:D1:1"]), 60)

    report = asyncio.run(scenario())
    assert "raw:D1:1" in report.erased
    assert memory.gate()._runs == 0
