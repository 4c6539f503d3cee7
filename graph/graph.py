"""The compiled memory graph: five role nodes over one shared state.

`graph` is what `langgraph.json` serves and what apps import
(`from graph import graph`); `build_graph` lets an app compile its own copy
with a checkpointer or a store.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import START, StateGraph
from strata.agents.judge import judge
from strata.agents.memory import memory
from strata.agents.model_failure import derived_on_model_failure
from strata.agents.refresher import refresher
from strata.agents.research import research
from strata.agents.working import working
from strata.graph.context import Context
from strata.graph.routing import route_after_judge, route_after_memory, route_onward, route_start
from strata.graph.state import InputState, OutputState, State, finish_run, resumed_as_begun, start_run
from strata.graph.tracing import with_run_metadata
from strata.graph.turns import TurnTakingGraph, taking_turns


class _TurnTakingBuilder(StateGraph):  # type: ignore[type-arg]
    """A `StateGraph` whose `compile` gives a `TurnTakingGraph`: an app that compiles `builder()` itself (with its
    checkpointer, or after adding nodes) gets the runs of a namespace taking turns, as `build_graph` does. Its
    runs went on without the gate: two inputs of one namespace at once closed each other's open episodes, and
    a run saved its thread back while an erase deleted it."""

    def compile(self, *args: Any, **kwargs: Any) -> TurnTakingGraph:  # type: ignore[override]
        return taking_turns(super().compile(*args, **kwargs))


def builder() -> StateGraph:
    """The uncompiled graph, for apps that add it as a subgraph or compile it themselves (its `compile` keeps the
    runs of a namespace taking turns: graph/turns.py)."""
    graph_builder = _TurnTakingBuilder(State, context_schema=Context, input_schema=InputState,
                                       output_schema=OutputState)
    # a chat turn whose model fails on a setting is derived offline before the error is raised
    graph_builder.add_node("memory", with_run_metadata("memory", resumed_as_begun(derived_on_model_failure(memory))))
    graph_builder.add_node("research", with_run_metadata("research", resumed_as_begun(
        derived_on_model_failure(research))))
    graph_builder.add_node("judge", with_run_metadata("judge", resumed_as_begun(derived_on_model_failure(judge))))
    graph_builder.add_node("refresher", with_run_metadata("refresher", resumed_as_begun(
        derived_on_model_failure(refresher))))
    graph_builder.add_node("working", with_run_metadata("working", resumed_as_begun(working)))
    graph_builder.add_node("start_run", start_run)
    graph_builder.add_node("finish_run", finish_run)
    graph_builder.add_edge(START, "start_run")
    graph_builder.add_conditional_edges("start_run", route_start)
    graph_builder.add_edge("research", "judge")
    graph_builder.add_conditional_edges("judge", route_after_judge)
    graph_builder.add_conditional_edges("refresher", route_onward)
    graph_builder.add_conditional_edges("memory", route_after_memory)
    graph_builder.add_edge("working", "finish_run")
    graph_builder.add_edge("finish_run", "__end__")
    return graph_builder


def build_graph(**compile_kwargs: Any) -> Any:
    """Compile the memory graph (pass `checkpointer=` or `store=` as for any LangGraph graph), its runs of one
    namespace taking turns where they must (graph/turns.py), as `builder().compile(...)` does."""
    compiled = builder().compile(**compile_kwargs)
    compiled.name = "strata"
    return compiled


graph = build_graph()
