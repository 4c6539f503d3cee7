"""Small pieces every role node uses: its store, its trace line, its evidence.

Kept in one place so that the role modules only hold what makes each role
different.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from langgraph.runtime import Runtime
from strata.agents.wire import WIRE_PROBLEMS
from strata.graph.context import Context
from strata.graph.state import Evidence, RoleNote, State, validate_turns
from strata.memory.errors import InputError, check_text
from strata.memory.facts import without_small_talk
from strata.memory.names import blank
from strata.memory.records import OFFLINE, Record
from strata.memory.registry import open_store
from strata.memory.speakers import listener_of
from strata.memory.store import MemoryStore


def store_of(runtime: Runtime[Context]) -> MemoryStore:
    """The namespace's memory for this run (refused in one line while an import has not finished)."""
    context = runtime.context
    store = open_store(context.store_settings(), context.namespace.strip())
    store.check_whole()
    return store


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


def evidence_of(
    record: Record, score: float = 0.0, found_by: Sequence[str] = (), people: Sequence[str] = (),
    line: str | None = None, until: datetime | None = None,
) -> Evidence:
    """A record as evidence. Built without validating again: every field comes from a validated record
    (a question at 100,000 records ranks over a thousand units, and validation was a fifth of its time).
    Given the conversation's `people`, a turn is shown without its small talk (`brief_line`), unless the
    `line` it is shown by was already made (a ranked candidate's)."""
    return Evidence.model_construct(
        id=record.id,
        kind=record.kind,
        text=record.text,
        dialogue_id=record.dialogue_id,
        source_ids=list(record.source_ids),
        speaker=record.speaker,
        time=record.time,
        utc_offset=record.utc_offset,
        score=float(score),
        found_by=list(found_by),
        label=record.label(),
        line=brief_line(record, people, until) if line is None else line,
        path=[],
        until=until,
    )


def shown_people(participants: Sequence[str], context: Context) -> tuple[str, ...]:
    """Whose turns are shown without small talk: the namespace's `participants`, or nobody when the
    `brief_turns` switch is off (every role that builds evidence asks here)."""
    return tuple(participants) if context.brief_turns else ()


def brief_line(record: Record, people: Sequence[str], until: datetime | None = None) -> str:
    """A turn's context line without its greetings, thanks and praise (`memory.facts.without_small_talk`);
    other records, and every record when no `people` are given (`brief_turns` off), as they are. The
    listener, whose name a greeting addresses, is the one other person of a two-person conversation."""
    if not people or record.kind != "raw" or not record.speaker:
        return record.line(until=until)
    brief = without_small_talk(record.text, record.speaker, listener_of(record.speaker, tuple(people)))
    return record.line(brief if brief != record.text else None)


def current_turn_text(state: State, mode: str) -> str:
    """The text the run is about, as research reads it (`input_of`): the turn being stored (ingest, chat),
    else the question, else a storing run's last turn (a read given turns is refused: `input_of`)."""
    turns = validate_turns(state.turns)  # Turns pass through it as they are
    if mode in ("ingest", "chat") and turns and state.cursor < len(turns):
        return turns[state.cursor].text
    if not blank(state.question):
        return state.question
    return turns[-1].text if turns and mode in ("ingest", "chat") else ""


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


# --- what several roles read from their input -----------------------------------------------------
QuestionType = Literal["when", "where", "who", "how_many", "why", "yes_no", "how", "what"]


def classify(question: str) -> QuestionType:
    """The kind of answer a question wants, from its wording."""
    q = " ".join(question.lower().split())
    q = re.sub(r"^(?:and|so|but|also|then|ok|okay)\b[\s,]*", "", q)
    if re.match(r"(when\b|since when|what (year|month|date|day|time)\b|which (year|month|date|day)\b|"
                r"(in|on|during) (what|which) (year|month|date|day)|how long ago)", q):
        return "when"
    if re.match(r"how (many|much|often|long|old|far)\b", q):
        return "how_many"
    if re.match(r"(where\b|(what|which) (city|cities|country|countries|states?|towns?|places?|part of)\b)", q):
        return "where"
    if re.match(r"(who\b|whom\b|whose\b|with whom|which (person|friend|family member))", q):
        return "who"
    if re.match(r"(why\b|what (made|caused|motivated|inspired|led)|for what reason)", q):
        return "why"
    if re.match(r"(is|are|was|were|do|does|did|has|have|had|can|could|would|will|should|am)\b", q):
        return "yes_no"
    if q.startswith("how"):
        return "how"
    return "what"


def input_of(state: State, context: Context) -> tuple[str, str, set[str]]:
    """The text researched, who said it, and the ids to leave out (the turn's own write-ahead record). A read
    (ask, retrieve) given turns is refused in one line: it stores nothing, and they were dropped in silence,
    the last one answered as the question (Studio's form has turns first, and mode ask by default), so the
    caller believed them stored. Refused here, after `start_run`, so the next run on the thread is not: it
    reads them as a stopped run's input, which `start_run` takes off a read."""
    if context.mode in ("ask", "retrieve") and state.turns:
        raise InputError(f"mode {context.mode!r} answers a question and stores nothing, so the turns given would be "
                         "dropped: send the question alone ({'question': '...'}), or store the turns with mode "
                         "'ingest' or 'chat'")
    if context.mode in ("ingest", "chat") and state.turns and state.cursor < len(state.turns):
        turn = state.turns[state.cursor]
        return turn.text, turn.speaker, {f"raw:{turn.dia_id}"} if turn.dia_id else set()
    if not isinstance(state.question, str):  # the server's JSON input is not checked against the state's types
        raise InputError(f"the question must be text, not {type(state.question).__name__}: pass {{'question': '...'}}")
    if not blank(state.question):
        if len(state.question) > context.max_question_chars:
            raise InputError(
                f"the question has {len(state.question):,} characters, more than max_question_chars="
                f"{context.max_question_chars:,}: ask something shorter, or raise max_question_chars "
                "(STRATA_MAX_QUESTION_CHARS)"
            )
        return check_text(state.question, "the question").strip(), "", set()
    if state.turns:
        last = validate_turns(state.turns)[-1]  # as the server sent them: checked as the Memory role checks them
        return last.text, last.speaker, set()
    raise InputError(f"{context.mode} needs a question: pass {{'question': '...'}}")
