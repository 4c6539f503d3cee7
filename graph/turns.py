"""The compiled graph, whose runs of one namespace take turns where they must (memory/run_gate.py).

Every run passes here, whoever starts it: `Memory`, an app's `invoke` or `astream`, a LangGraph server
(`langgraph dev` and Platform run the graph's `astream`). A run that stores input (ingest, chat) waits for
the namespace's other storing run to end, and every run waits while an erase or a drop works. A server
ran them step about: two conversations sent at once on two threads closed each other's open episodes.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import fields
from typing import Any

from langgraph.errors import EmptyInputError, GraphRecursionError
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import get_runtime
from strata.graph.context import Context
from strata.graph.routing import step_limit
from strata.memory.errors import InputError, StrataError, shown_value
from strata.memory.run_gate import Kind, RunGate, run_gate

STORING_MODES = ("ingest", "chat")
_INPUT = ("give a dict: {'question': '...'} to ask or retrieve, {'turns': [{'speaker': 'Ann', 'text': '...'}]} to "
          "ingest or chat")
_SETTINGS = frozenset(spec.name for spec in fields(Context))


def context_of(context: object) -> Context | None:
    """The run's context as LangGraph will read it, or None when it is not one (the run then refuses it in its
    own words)."""
    try:
        if isinstance(context, dict):
            context = Context(**context)  # as LangGraph turns a dict into the context schema
    except StrataError:
        return None
    return context if isinstance(context, Context) else None


def gate_of(context: object) -> tuple[RunGate, Kind] | None:
    """The gate a run with this context takes, and how; None when the context is not one."""
    settings = context_of(context)
    if settings is None:
        return None
    # a question that may change memory (refresh_on_read) takes turns with the runs and calls that do: its
    # Refresher decides slots from records read before its step, which another's change made stale
    return run_gate(settings.store_settings(), settings.namespace), (
        "store" if settings.mode in STORING_MODES or settings.refresh_on_read else "read")


def checked_gate(input: Any, config: Any, context: Any) -> tuple[RunGate, Kind] | None:
    """The run checked (`check_run`), then its gate (`gate_of`): it reads the folder's path, so an async run
    calls it off the loop. A run given no context of its own runs with its parent's, if any (a compiled graph
    added as a node of an app's graph: LangGraph hands it the parent's runtime): that one names the gate. Such
    runs took no turns, whatever the parent's context said."""
    check_run(input, config, context)
    return gate_of(context if context is not None else inherited_context())


def inherited_context() -> object:
    """The context of the run this one is nested in (None: not nested, or none given), through LangGraph's public
    `get_runtime` (its config's key is private): it reads the run's config from this thread's context, which
    `asyncio.to_thread` copies into the thread an async run checks its gate in."""
    try:
        runtime = get_runtime()
    except RuntimeError:  # outside any run
        return None
    return getattr(runtime, "context", None)


def check_run(input: Any, config: Any, context: Any) -> None:
    """What a run is given, in one line when LangGraph would say it in its own words or not at all: input
    that is no state (text, a number, a list: InvalidUpdateError with a docs link), and settings given both
    in `context` and in `config['configurable']` that disagree. A run reads its context only (LangGraph's
    rule), so the configurable one was dropped without a word. Agreeing ones pass: a LangGraph server
    mirrors its runs' context there. A run nested in an app's node inherits its config, which is not checked."""
    if isinstance(input, str | bytes | bytearray | int | float | list | tuple | set | frozenset):
        raise InputError(f"the graph's input is {type(input).__name__}, not a state: {_INPUT}")
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    named = sorted(_SETTINGS & configurable.keys()) if isinstance(configurable, Mapping) else []
    settings = context_of(context) if named else None
    if settings is None:
        return
    raw = context if isinstance(context, Mapping) else {}
    for name in named:
        theirs, ours = configurable[name], getattr(settings, name)
        if theirs in (ours, raw.get(name, ours)) or str(theirs) == str(ours):
            continue
        raise InputError(f"config['configurable'] sets {name} to {shown_value(theirs)} and the run's context to "
                         f"{shown_value(ours)}: a run reads its context only, so give {name} there and leave it out "
                         "of configurable")


def _no_input() -> InputError:
    return InputError(f"the graph got no input (None resumes a run stopped on a thread, and none was): {_INPUT}")


class StepLimitError(InputError, GraphRecursionError):
    """LangGraph's step limit (`recursion_limit`) stopped a run, said in one line with what to do. Still a
    GraphRecursionError, for an app that catches LangGraph's own."""


def _step_limit(input: Any, config: Any, context: Any) -> StepLimitError:
    """The one line for a run stopped by LangGraph's step limit. Its own (two lines and a link, naming a
    config key) reached a server's run error for an ingest of a few thousand turns, which said nothing of
    the turns already stored nor of how many steps they take."""
    settings = context_of(context)
    turns = input.get("turns") if isinstance(input, Mapping) else None
    limit = config.get("recursion_limit") if isinstance(config, Mapping) else None
    stopped = f"the run stopped at LangGraph's step limit (recursion_limit {limit})" if isinstance(limit, int) \
        else "the run stopped at LangGraph's step limit (recursion_limit)"
    if isinstance(turns, list) and turns:
        need = step_limit(len(turns), settings.k_r if settings else 2)
        fix = (f"{len(turns):,} turns take up to {need:,} steps (five a turn): set the run's config "
               f"recursion_limit to {need:,}, or send the turns in smaller batches")
    else:
        fix = "a stored turn takes five steps, a question two a search round: raise the run's config recursion_limit"
    return StepLimitError(f"{stopped} before it finished: {fix}. What it stored is kept: send the same turns again "
                          "(or resume the run on its thread) to derive the rest")


@contextmanager
def _run_errors(input: Any, config: Any, context: Any) -> Iterator[None]:
    """LangGraph's errors of a run as strata's one-line ones: no input, or the step limit reached."""
    try:
        yield
    except EmptyInputError:
        raise _no_input() from None
    except StepLimitError:
        raise
    except GraphRecursionError:
        raise _step_limit(input, config, context) from None


class TurnTakingGraph(CompiledStateGraph):  # type: ignore[type-arg]
    """LangGraph's compiled graph, each run inside its namespace's gate (`invoke` and `ainvoke` run these)."""

    def stream(self, input: Any, config: Any = None, *, context: Any = None, **kwargs: Any) -> Iterator[Any]:
        gate = checked_gate(input, config, context)
        with _run_errors(input, config, context):
            if gate is None:
                yield from super().stream(input, config, context=context, **kwargs)
                return
            with gate[0].holding(gate[1]):
                yield from super().stream(input, config, context=context, **kwargs)

    async def astream(self, input: Any, config: Any = None, *, context: Any = None,
                      **kwargs: Any) -> AsyncIterator[Any]:
        gate = await asyncio.to_thread(checked_gate, input, config, context)  # it reads the folder's path
        if gate is None:
            with _run_errors(input, config, context):
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
            with _run_errors(input, config, context):
                async for part in super().astream(input, config, context=context, **kwargs):
                    yield part


def taking_turns(compiled: CompiledStateGraph) -> TurnTakingGraph:  # type: ignore[type-arg]
    """The compiled graph as a `TurnTakingGraph` (as LangGraph's own `copy` rebuilds one)."""
    return TurnTakingGraph(**{k: v for k, v in compiled.__dict__.items() if k != "__orig_class__"})
