"""Feeding a loaded conversation to a memory, session by session.

One `Memory.add` per session, so a session's turns are embedded in one batch
(the next session's on the embedder's background thread while this one is
stored), with `end_session=True`, so the open episode closes where the session ends.
Every turn is written as the graph reaches it: an interrupted import keeps what
it stored, and running it again skips the turns already there. The CLI, the
demo and the benchmark all ingest through here, so they measure the same thing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from strata.api import Memory
from strata.conversations import LoadedConversation, Session
from strata.graph.state import validate_turns
from strata.memory.errors import InputError
from strata.memory.records import KINDS
from strata.memory.turn_ids import check_turn_ids


class IngestSummary(BaseModel):
    """What one conversation's import did, for the CLI's summary and the benchmark."""

    namespace: str
    conversation_id: str
    sessions: int
    turns: int = Field(..., description="Turns processed, including those already stored.")
    new_turns: int = Field(..., description="Turns stored by this run (the rest were already there).")
    seconds: float
    turns_per_second: float
    stats: dict[str, Any] = Field(default_factory=dict, description="Memory.stats() after the import.")

    def records(self) -> dict[str, int]:
        """Active records per store (raw, fact, episode, persona)."""
        return {kind: int(self.stats.get(kind, {}).get("active", 0)) for kind in KINDS}

    def links(self) -> int:
        value = self.stats.get("links", 0)
        return int(sum(value.values())) if isinstance(value, dict) else int(value)

    def line(self) -> str:
        """The summary as two lines of text."""
        records = ", ".join(f"{kind} {count}" for kind, count in self.records().items())
        skipped = self.turns - self.new_turns
        again = f", {skipped} already stored" if skipped else ""
        return (
            f"ingested {self.conversation_id} into namespace {self.namespace!r}: {self.turns} turns in "
            f"{self.sessions} sessions ({self.new_turns} new{again}) in {self.seconds:.1f} s, "
            f"{self.turns_per_second:.1f} turns/s\n"
            f"records: {records}; links {self.links()}; history {self.stats.get('history', 0)}"
        )


def select_sessions(conversation: LoadedConversation, limit: int | None = None) -> list[Session]:
    """The first `limit` sessions (all when None), in order."""
    if limit is not None and limit < 1:
        raise InputError(f"--limit-sessions must be at least 1, got {limit}")
    return conversation.sessions if limit is None else conversation.sessions[:limit]


def check_limits(
    memory: Memory, conversation: LoadedConversation, limit_sessions: int | None = None, where: str | None = None
) -> None:
    """Refuse, in one line naming `where` (the conversation, by default) and the session, a conversation whose
    turns break the memory's size limits (max_turn_chars, 200-character names), before any of it is written:
    `add` checks one session at a time, so a later session's (or sample's) turn over a limit was refused only
    after the earlier ones were stored."""
    limit = memory.context("ingest").max_turn_chars
    for session in select_sessions(conversation, limit_sessions):
        try:
            validate_turns(session.turns, max_chars=limit)
        except InputError as error:
            shown = where or f"conversation {conversation.conversation_id!r}"
            raise InputError(f"{shown}, session {session.label}: {error}; nothing was stored") from None


def ingest_conversation(
    memory: Memory, conversation: LoadedConversation, limit_sessions: int | None = None,
    on_turn: Callable[[], None] | None = None,
) -> IngestSummary:
    """Store a conversation's sessions in order; `on_turn()` is called once per finished turn."""
    sessions = select_sessions(conversation, limit_sessions)
    check_limits(memory, conversation, limit_sessions)
    check_turn_ids(memory.store, [turn for session in sessions for turn in session.turns])  # before any session
    turns = new_turns = 0
    started = time.perf_counter()
    embedder = memory.store.embedder
    for number, session in enumerate(sessions):
        if number + 1 < len(sessions):  # the next session's turns are embedded while this one is stored
            embedder.prefetch([turn.text for turn in sessions[number + 1].turns], background=True, later=True)
        done = 0

        def finished(count: int) -> None:
            nonlocal done
            for _ in range(max(0, count - done)):
                if on_turn is not None:
                    on_turn()
            done = max(done, count)

        report = memory.add(session.turns, on_turn=finished, end_session=True)
        finished(report.turns)
        turns += report.turns
        new_turns += sum(1 for record_id in report.stored_ids if record_id.startswith("raw:"))
    seconds = time.perf_counter() - started
    return IngestSummary(
        namespace=memory.context("ingest").namespace, conversation_id=conversation.conversation_id,
        sessions=len(sessions),
        turns=turns, new_turns=new_turns, seconds=seconds, turns_per_second=turns / seconds if seconds > 0 else 0.0,
        stats=memory.stats(),
    )
