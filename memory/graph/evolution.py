"""Memory evolution (A-MEM 3.3): a new note refines the notes it links to.

When a new note links to an earlier one, what they share says something about
the earlier note that its own words alone did not: that it is part of a theme
the conversation returns to. Offline, the shared keywords become tags of the
earlier note (so a keyword search for the theme finds it through its tags) and
its context line is rewritten around its tags; with a chat model, the model
proposes the new tags and context. Every change goes through
`MemoryStore.evolve`: one history entry each, undoable by id.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field
from strata.memory.graph.notes import LinkDecision, context_line
from strata.memory.records import Change, Record
from strata.memory.store import MemoryStore

MAX_TAGS = 8  # a note keeps at most this many tags: the earliest themes it joined


class Evolution(BaseModel):
    """New tags and context for one earlier note."""

    target: str
    tags: list[str] = Field(default_factory=list)
    context: str = ""
    reason: str = ""


def evolve_offline(decisions: Sequence[LinkDecision], neighbours: dict[str, Record], source: str) -> list[Evolution]:
    """Shared keywords join the linked note's tags; its context names its themes. Nothing when nothing is new."""
    changes: list[Evolution] = []
    for decision in decisions:
        record = neighbours.get(decision.target)
        if record is None:
            continue
        added = [w for w in decision.shared if w not in record.tags]
        if not added or len(record.tags) >= MAX_TAGS:
            continue
        tags = [*record.tags, *added][:MAX_TAGS]
        words = list(dict.fromkeys([*tags, *record.keywords]))
        changes.append(
            Evolution(target=record.id, tags=tags, context=context_line(record, words),
                      reason=f"evolved by {source}: shares {', '.join(added)}")
        )
    return changes


def apply(store: MemoryStore, evolutions: Sequence[Evolution], policy: str) -> list[Change]:
    """Write each evolution as an undoable history entry (skipping records that are gone or unchanged)."""
    applied: list[Change] = []
    for evolution in evolutions:
        if not store.has(evolution.target):
            continue
        record = store.get_one(evolution.target)
        # what an evolution leaves out stays as it was: a model that only rewrites the context keeps the tags
        tags = list(dict.fromkeys(t.strip().lower() for t in evolution.tags if t.strip()))[:MAX_TAGS] or record.tags
        context = evolution.context.strip() or record.context
        if tags == record.tags and context == record.context:
            continue
        applied.append(store.evolve(record.id, tags, context, evolution.reason or "memory evolution", policy))
    return applied
