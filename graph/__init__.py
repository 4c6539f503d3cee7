"""The LangGraph wiring of the memory: state, runtime context, nodes and edges."""

from strata.graph.context import Context
from strata.graph.graph import build_graph, builder, graph
from strata.graph.state import Evidence, InputState, OutputState, State

__all__ = ["Context", "Evidence", "InputState", "OutputState", "State", "build_graph", "builder", "graph"]
