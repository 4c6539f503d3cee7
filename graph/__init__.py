"""The LangGraph wiring of the memory: state, runtime context, nodes and edges."""

from graph.context import Context
from graph.graph import build_graph, builder, graph
from graph.state import Evidence, InputState, OutputState, State

__all__ = ["Context", "Evidence", "InputState", "OutputState", "State", "build_graph", "builder", "graph"]
