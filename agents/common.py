"""Small pieces every role node uses: its store, its trace line, its evidence.

Kept in one place so that the role modules only hold what makes each role
different.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from langgraph.runtime import Runtime
from strata.agents.wire import WIRE_PROBLEMS
from strata.graph.context import Context
from strata.graph.state import Evidence, RoleNote, State
from strata.memory.records import Record
from strata.memory.registry import open_store
from strata.memory.store import Hit, MemoryStore

OFFLINE = "offline"


def store_of(runtime: Runtime[Context]) -> MemoryStore:
    """The namespace's memory for this run."""
    context = runtime.context
    return open_store(context.store_settings(), context.namespace.strip())


def model_policy_name(context: Context) -> str:
    """The label of the configured model's outputs (`agents.llm.ask_json` adds how the output came back)."""
    return model_label(context.chat_model) if context.chat_model is not None else f"model:{context.model}"


def model_label(model: object) -> str:
    """model:<name> of a chat model object."""
    return f"model:{getattr(model, 'model_name', None) or type(model).__name__}"


def fallback_policy(problem: str) -> str:
    """The policy label of an output the offline policy produced because the model gave none that was usable:
    its reply did not validate, or the call was never answered (the call cap, a model that stayed down)."""
    if problem.startswith(WIRE_PROBLEMS):
        return f"{OFFLINE} ({problem})"
    return f"{OFFLINE} (model output unusable: {problem})"


def decided_offline(why: str) -> str:
    """The policy label of an output the offline policy settled without asking the model (it could change nothing)."""
    return f"{OFFLINE} (model not asked: {why})"


def traced(state: State, role: str, policy: str, summary: str) -> list[RoleNote]:
    """The run's trace with one more line."""
    return [*state.trace, RoleNote(role=role, policy=policy, summary=summary)]


def evidence_of(record: Record, score: float = 0.0, found_by: Sequence[str] = ()) -> Evidence:
    return Evidence(
        id=record.id,
        kind=record.kind,
        text=record.text,
        dialogue_id=record.dialogue_id,
        source_ids=list(record.source_ids),
        speaker=record.speaker,
        time=record.time,
        score=score,
        found_by=list(found_by),
        label=record.label(),
        line=record.line(),
    )


def evidence_from_hits(hits: Iterable[Hit]) -> list[Evidence]:
    return [evidence_of(hit.record, hit.score, hit.found_by) for hit in hits]


def current_turn_text(state: State) -> str:
    """The text the run is about: the turn being processed, else the question."""
    if state.turns and state.cursor < len(state.turns):
        return state.turns[state.cursor].text
    if state.question.strip():
        return state.question
    return state.turns[-1].text if state.turns else ""


def context_lines(items: Sequence[Evidence]) -> list[str]:
    """The evidence as the roles read it: a date heading, then one line per record said that day.

    A date is written once for the lines under it rather than on every line: in
    a chronological context that leaves more of the token budget for memories.
    """
    lines: list[str] = []
    heading = None
    for item in items:
        if item.day() != heading:
            heading = item.day()
            lines.append(date_heading(heading))
        lines.append(item.line or item.label or item.text)
    return lines


def date_heading(day: str) -> str:
    return f"({day})"


def format_evidence(items: Sequence[Evidence]) -> str:
    """The evidence as the roles' prompts show it (see `context_lines`)."""
    return "\n".join(context_lines(items)) or "(none)"


def format_window(store: MemoryStore) -> str:
    """Working memory (the recent turns) as the roles' prompts show it."""
    lines = [f"[{t['dia_id']}] {t['speaker']}: {t['text']}" for t in store.working()]
    return "\n".join(lines) or "(empty)"
