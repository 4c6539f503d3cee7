"""LangSmith metadata for every run: whose memory and which mode.

LangSmith already records each node as a run named after its role (memory,
research, judge, refresher, working) once the user sets `LANGSMITH_TRACING=true`.
What it cannot know is the runtime context, so a trace could not be filtered
by user or mode. Two pieces add it:

- `run_config` is the config the Python API passes with every graph run: the
  top run is named "strata" and carries namespace and mode, and every role's
  run inherits them.
- `with_run_metadata` wraps each role node so that its own run carries them
  even when the graph is run by someone else (the LangGraph server, Studio, an
  app that embeds the graph) and no metadata was given.

With tracing off there is no current run and both are no-ops: nothing is sent.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime
from langsmith.run_helpers import get_current_run_tree
from strata.graph.context import Context

RUN_NAME = "strata"

Node = TypeVar("Node", bound=Callable[..., Any])


def run_metadata(context: Context) -> dict[str, str]:
    """What each traced run says about its memory: the namespace and the mode."""
    return {"namespace": context.namespace, "mode": context.mode}


def run_config(context: Context) -> RunnableConfig:
    """The config of one API call: a run named "strata", tagged, with the context as metadata."""
    return RunnableConfig(
        run_name=RUN_NAME,
        metadata=run_metadata(context),
        tags=[RUN_NAME, f"mode:{context.mode}"],
    )


def tag_current_run(role: str, context: Context) -> None:
    """Add namespace and mode to the role's traced run, if tracing is on and this is that run."""
    run = get_current_run_tree()
    if run is not None and run.name == role:
        run.metadata.update(run_metadata(context))


def with_run_metadata(role: str, node: Node) -> Node:
    """The node, with its traced run carrying namespace and mode (same signature, same result)."""
    if inspect.iscoroutinefunction(node):

        @functools.wraps(node)
        async def async_wrapper(state: Any, runtime: Runtime[Context], *args: Any, **kwargs: Any) -> Any:
            tag_current_run(role, runtime.context)
            return await node(state, runtime, *args, **kwargs)

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(node)
    def wrapper(state: Any, runtime: Runtime[Context], *args: Any, **kwargs: Any) -> Any:
        tag_current_run(role, runtime.context)
        return node(state, runtime, *args, **kwargs)

    return wrapper  # type: ignore[return-value]
