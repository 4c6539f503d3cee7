"""The compiled graph, whose runs of one namespace take turns where they must (memory/run_gate.py).

Every run passes here, whoever starts it: `Memory`, an app's `invoke` or `astream`, a LangGraph server
(`langgraph dev` and Platform run the graph's `astream`). A run that stores input (ingest, chat) waits for
the namespace's other storing run to end, and every run waits while an erase or a drop works. A server
ran them step about: two conversations sent at once on two threads closed each other's open episodes.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langgraph.graph.state import CompiledStateGraph
from strata.graph.context import Context
from strata.memory.errors import StrataError
from strata.memory.run_gate import Kind, RunGate, run_gate

STORING_MODES = ("ingest", "chat")


def gate_of(context: object) -> tuple[RunGate, Kind] | None:
    """The gate a run with this context takes, and how; None when the context is not one (the run then
    refuses it in its own words)."""
    try:
        if isinstance(context, dict):
            context = Context(**context)  # as LangGraph turns a dict into the context schema
    except StrataError:
        return None
    if not isinstance(context, Context):
        return None
    return run_gate(context.store_settings(), context.namespace), "store" if context.mode in STORING_MODES else "read"


class TurnTakingGraph(CompiledStateGraph):  # type: ignore[type-arg]
    """LangGraph's compiled graph, each run inside its namespace's gate (`invoke` and `ainvoke` run these)."""

    def stream(self, input: Any, config: Any = None, *, context: Any = None, **kwargs: Any) -> Iterator[Any]:
        gate = gate_of(context)
        if gate is None:
            yield from super().stream(input, config, context=context, **kwargs)
            return
        with gate[0].holding(gate[1]):
            yield from super().stream(input, config, context=context, **kwargs)

    async def astream(self, input: Any, config: Any = None, *, context: Any = None,
                      **kwargs: Any) -> AsyncIterator[Any]:
        gate = await asyncio.to_thread(gate_of, context)  # it reads the folder's path: not on the loop
        if gate is None:
            async for part in super().astream(input, config, context=context, **kwargs):
                yield part
            return
        # The run goes on in a context of its own, each step a task in it: what the gate notes in a context
        # (that it is held, for the run's own nested calls) stays out of the caller's. A caller that stops
        # early closes this generator later, from another task; noted in the caller's context, the note
        # stayed there, so its later storing runs skipped the gate and its erase waited for itself.
        runs_in = contextvars.copy_context()
        inner = self._astream_gated(gate, input, config, context, kwargs)
        try:
            while True:
                try:
                    part = await asyncio.create_task(anext(inner), context=runs_in)
                except StopAsyncIteration:
                    return
                yield part
        finally:
            await asyncio.create_task(inner.aclose(), context=runs_in)

    async def _astream_gated(self, gate: tuple[RunGate, Kind], input: Any, config: Any, context: Any,
                             kwargs: dict[str, Any]) -> AsyncIterator[Any]:
        async with gate[0].holding_async(gate[1]):
            async for part in super().astream(input, config, context=context, **kwargs):
                yield part


def taking_turns(compiled: CompiledStateGraph) -> TurnTakingGraph:  # type: ignore[type-arg]
    """The compiled graph as a `TurnTakingGraph` (as LangGraph's own `copy` rebuilds one)."""
    return TurnTakingGraph(**{k: v for k, v in compiled.__dict__.items() if k != "__orig_class__"})
