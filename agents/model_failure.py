"""A chat turn the model fails on is still derived: nothing of it is left pending.

A model that fails on a setting (a key refused with 401, a 403, a model the server does not know) raises a
one-line `ConfigError` out of the role that called it. By then a turn being stored is written ahead and
marked pending (agents/memory.py). An `add` is sent again once the setting is fixed, and that derives what it
left pending, with the model. A chat turn is not: its user goes on chatting, and the turn stayed pending for
good (no facts, no note, no place in an episode; the slow path skipped it as still being derived). So when a
role of a chat turn meets such an error, the turn is derived at once by the offline policies, the model
counted as down for the rest of the turn (`CallBudget.down`, which each output's policy label names), and
the error is raised after that.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime
from strata.agents.memory import memory
from strata.agents.wire import budget_of, status_of
from strata.graph.context import Context
from strata.graph.state import State
from strata.memory.errors import ConfigError

Node = Callable[..., dict[str, Any]]
_LOG = logging.getLogger(__name__)


def derived_on_model_failure(node: Node) -> Node:
    """The role node; in a chat turn written ahead and not yet derived, a ConfigError it raises is raised
    after the turn is derived offline."""

    @functools.wraps(node)
    def guarded(state: State, runtime: Runtime[Context], *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return node(state, runtime, *args, **kwargs)
        except ConfigError as error:
            if runtime.context.mode == "chat" and state.stage == "intake":
                _derive_offline(state, runtime, error)
            raise

    return guarded


def _derive_offline(state: State, runtime: Runtime[Context], error: ConfigError) -> None:
    """Derive the turn with the model counted as down. The failed role's edits were taken back whole
    (`MemoryStore.edits`), so the derive starts from the turn as written ahead. Should it fail too (the store
    is down), the turn stays pending as before and the model's error is the one raised."""
    code = status_of(error)
    budget_of(runtime.context).down = f"HTTP {code}" if code is not None else type(error.__cause__ or error).__name__
    try:
        memory(state, runtime)
    except Exception:
        _LOG.warning("a chat turn the model failed on could not be derived offline: it stays pending", exc_info=True)
