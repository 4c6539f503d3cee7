"""The conditional edges: where each role hands over, per mode.

```
ingest:   memory(raw) -> research -> judge -> [refresher] -> memory(derive) -> next turn | finish
ask:      research -> judge -> [Retry: research, at most K_r times] -> [refresher] -> working -> finish
chat:     memory(raw) -> research -> judge -> [retry] -> [refresher] -> memory(derive) -> working -> finish
retrieve: research -> judge -> [retry] -> [refresher] -> finish (the evidence, no answer)
```
Every run with new input enters through `start_run` (graph/state.py), which resets the per-run
fields, then `route_start` picks its first role; every run leaves through `finish_run`, which takes its
input off the thread. The raw turn is written before anything else
(write-ahead), so no later failure can lose it; AMA's order (Retriever, Judge, Refresher,
Constructor) follows.
"""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from strata.graph.context import Context
from strata.graph.state import State

FINISH: Literal["finish_run"] = "finish_run"  # the node every run leaves by (graph/state.py::finish_run)


def step_limit(turns: int, k_r: int) -> int:
    """The most steps a run of `turns` turns can take, as above: start_run and finish_run, five a turn
    (memory, research, judge, refresher, memory), two a search round of a question (research, judge; the
    first and K_r retries), its refresher and working. LangGraph stops a run at 10,000 steps unless told
    otherwise, which left an ingest of 2,600 turns with 99 of them never derived."""
    return 2 + 5 * turns + 2 * (k_r + 1) + 2


def route_start(state: State, runtime: Runtime[Context]) -> Literal["memory", "research"]:
    """Turns are stored before they are researched; questions go straight to research."""
    return "memory" if runtime.context.mode in ("ingest", "chat") else "research"


def route_after_judge(
    state: State, runtime: Runtime[Context]
) -> Literal["research", "refresher", "memory", "working", "finish_run"]:
    """Refresh on a conflict, Retry while rounds remain, else carry on with what was found."""
    verdict = state.verdict
    if verdict is not None and verdict.action == "Refresh" and refresh_allowed(runtime.context):
        return "refresher"
    if verdict is not None and verdict.action == "Retry" and retry_allowed(state, runtime.context):
        return "research"
    return route_onward(state, runtime)


def refresh_allowed(context: Context) -> bool:
    """Storing (ingest, chat) refreshes memory on a conflict; reading (ask, retrieve) only reports it,
    unless the caller opts in with `refresh_on_read`."""
    if not context.refresher:
        return False
    return context.mode in ("ingest", "chat") or context.refresh_on_read


def retry_allowed(state: State, context: Context) -> bool:
    """At most K_r Retry rounds after the first search (AMA), and never while ingesting."""
    return context.mode != "ingest" and state.rounds <= context.k_r


def route_onward(
    state: State, runtime: Runtime[Context]
) -> Literal["memory", "working", "finish_run"]:
    """After the evidence is settled: store (ingest, chat), answer (ask) or stop (retrieve)."""
    mode = runtime.context.mode
    if mode in ("ingest", "chat"):
        return "memory"
    if mode == "ask":
        return "working"
    return FINISH


def route_after_memory(
    state: State, runtime: Runtime[Context]
) -> Literal["research", "memory", "working", "finish_run"]:
    """After the raw write, research it; after deriving, take the next turn or finish."""
    if state.stage == "intake":
        return "research"
    if state.cursor < len(state.turns):
        return "memory"
    return "working" if runtime.context.mode == "chat" else FINISH
