"""The typed state the five roles share.

`InputState` is what a caller (or Studio's form) supplies, `OutputState` what a
run returns, and `State` adds the working fields the roles pass each other.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Annotated, Any, Literal, TypeVar

from langgraph.channels import UntrackedValue
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field, ValidationError
from strata.graph.context import Context
from strata.memory.errors import InputError, shown_value
from strata.memory.moments import MaybeUtcTime, UtcTime, local
from strata.memory.names import blank, clean_name
from strata.memory.records import ChangeNote, Kind, Turn

Node = TypeVar("Node", bound=Callable[..., Any])

Action = Literal["Pass", "Retry", "Refresh"]


class PathStep(BaseModel):
    """One step of how an item reached the context: the ranked lists that found an anchor, or an edge
    followed from another record (its type and hop)."""

    step: Literal["anchor", "edge"]
    via: list[str] = Field(default_factory=list, description="anchor: the lists (dense, bm25, time...); edge: its type")
    src: str = Field("", description="The record the edge left from.")
    dst: str = Field("", description="The record the step reached.")
    hop: int = 0

    def describe(self) -> str:
        if self.step == "anchor":
            return f"anchor {self.dst} ({', '.join(self.via) or 'search'})"
        return f"hop {self.hop}: {self.src} -{'/'.join(self.via)}-> {self.dst}"


def day_of(time: datetime | None) -> str:
    """A context's date heading, written as people write dates ("8 May 2023"): an answer quotes it as
    asked, and it is a token shorter than 2023-05-08."""
    return f"{time.day} {time:%B %Y}" if time else "undated"


class Evidence(BaseModel):
    """One record offered to the Judge and to the answer, with where it came from."""

    id: str
    kind: Kind
    text: str
    dialogue_id: str = ""
    source_ids: list[str] = Field(default_factory=list)
    speaker: str = ""
    time: MaybeUtcTime = None
    utc_offset: int | None = Field(None, description="Minutes east of UTC of the clock it was said on.")
    score: float = 0.0
    found_by: list[str] = Field(default_factory=list, description="dense, bm25, link, persona ...")
    label: str = Field("", description="How the item is shown on its own: id, date, kind, text.")
    line: str = Field("", description="How the item appears in a context, under its date heading.")
    path: list[PathStep] = Field(default_factory=list, description="How the item was reached (anchor, then edges).")
    until: MaybeUtcTime = Field(None, description="A superseded fact, shown for a time it held: when a newer "
                                "statement replaced it (None: current).")

    def day(self) -> str:
        """The heading the item's line is grouped under in a context (`day_of`): the day it was said on the
        speaker's clock."""
        return day_of(self.local_time())

    def local_time(self) -> datetime | None:
        """`time` on the clock of the one who said it: what the item's "yesterday" counts from."""
        return local(self.time, self.utc_offset)

    def turn_ids(self) -> list[str]:
        """The dialogue turns this item stands for (for evidence recall and citations)."""
        ids = [self.dialogue_id] if self.kind == "raw" and self.dialogue_id else []
        return list(dict.fromkeys(ids + self.source_ids))


class Plan(BaseModel):
    """Research's reading of the input (AMA Retriever output, plus AdaMem/MAGMA extras)."""

    query: str = Field(..., description="The input rewritten to stand alone.")
    intent: list[int] = Field(default_factory=lambda: [0, 0, 0, 1], description="[fine, abstract, event, atomic]")
    route: Kind = "fact"
    k_dyn: int = 5
    participants: list[str] = Field(default_factory=list)
    time_window: tuple[UtcTime, UtcTime] | None = None
    days: tuple[date, date] | None = Field(
        None, description="The period the question names, in the speaker's days (as date headings show them); "
        "time_window is widened to hold UTC instants, so its days are off by one at either end.")
    searched: list[str] = Field(default_factory=list, description="Granularities searched so far.")
    policy: str = "offline"


NEW = "new"  # the incoming turn inside a conflict group: how the Judge names it and the Refresher reads it
MAX_CONFLICT_GROUPS = 4
"""Conflict groups one verdict names and the Refresher settles in one run; the Judge cuts to it (the incoming
turn's groups first) and the Refresher reads no more, so no group is named and then left alone. Why 4: with a
model the Refresher asks once per group, and a stored turn's `max_model_calls` (10 by default, retries
included) pays for the Judge before it (1) and for the facts, note, episode boundary and a closing episode's
narrative after it (4): four groups leave one call for a retry, where six ran the Memory role's last calls
offline. What is left waits: a conflict between stored facts is found again the next time they are read."""


class Verdict(BaseModel):
    """The Judge's decision on the evidence (AMA Judge output contract)."""

    action: Action
    reason: str = ""
    confidence: float = Field(0.5, ge=0.0, le=1.0)
    conflicts: list[list[str]] = Field(
        default_factory=list, description=f"Groups of record ids that disagree; {NEW!r} is the incoming turn."
    )
    missing: list[str] = Field(default_factory=list, description="What the evidence lacks: entity, time, place...")
    policy: str = "offline"


class RoleNote(BaseModel):
    """One line of the run's trace: which role ran, under which policy, and what it decided."""

    role: str
    policy: str
    summary: str


# A turn's id, speaker, listener or session longer than this is refused: they name things, are echoed in
# ids, prompts and messages, and no conversation format has names this long (LoCoMo's longest id is 7).
MAX_NAME_CHARS = 200
TURNS_HELP = "Turns to store, oldest first: {speaker, text, time?, dia_id?, image_caption?}."
QUESTION_HELP = "The question to answer (ask/retrieve); in chat, the last turn."


@dataclass(kw_only=True)
class InputState:
    """What a run is given: turns to store (ingest, chat) or a question (ask, retrieve)."""

    # Annotated descriptions are what the server's input schema (Studio's form) shows.
    turns: Annotated[list[Turn], Field(description=TURNS_HELP)] = field(
        default_factory=list, metadata={"description": TURNS_HELP}
    )
    question: Annotated[str, Field(description=QUESTION_HELP)] = field(
        default="", metadata={"description": QUESTION_HELP}
    )


@dataclass(kw_only=True)
class OutputState:
    """What a run returns."""

    answer: str | None = None
    cited_ids: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    verdict: Verdict | None = None
    rounds: int = 0
    # a run's tallies, returned by the run and not saved in a thread's checkpoints: saved, every step of an
    # ingest saved the whole list again (3.5 MB of stored ids for 300 turns). A resumed run reports what it
    # did after resuming, and a thread's saved state shows them empty.
    stored_ids: Annotated[list[str], UntrackedValue(list)] = field(default_factory=list)
    changes: Annotated[list[ChangeNote], UntrackedValue(list)] = field(default_factory=list)
    notes: Annotated[list[str], UntrackedValue(list)] = field(default_factory=list)
    # an ingest's is its last turn's (the stream shows each turn's): a thread saves the state at every step
    trace: list[RoleNote] = field(default_factory=list)


@dataclass(kw_only=True)
class State(InputState, OutputState):
    """Everything the roles share during a run."""

    namespace: str = ""  # whose memory this run reads and writes (an erase finds the threads that hold it)
    # prints of the input the thread's last run had (`input_print`), and whether it reached `finish_run`
    turns_seen: str = ""
    question_seen: str = ""
    finished: bool = True
    cursor: int = 0  # index of the turn being processed (ingest, chat)
    # "done" between runs; the first role of a run sees it and starts afresh (a thread keeps its state)
    stage: Literal["done", "intake", "stored", "asking"] = "done"
    plan: Plan | None = None


def fresh_run() -> dict[str, object]:
    """The per-run fields reset at the start of every run on a thread."""
    return {
        "cursor": 0, "plan": None, "answer": None, "cited_ids": [], "evidence": [], "verdict": None,
        "rounds": 0, "stored_ids": [], "changes": [], "notes": [], "trace": [],
    }


def start_run(state: State, runtime: Runtime[Context]) -> dict[str, object]:
    """The graph's entry: every run with new input starts from fresh per-run fields, however the thread's
    last run ended. One stopped by a crash or by an interrupt never resumed left its cursor and stage
    mid-way, and the next run read them against its own input (a resumed run does not pass here). The
    run's namespace is kept on the thread: an erase deletes only the threads of its own namespace."""
    if not isinstance(runtime.context, Context):  # None, or a value LangGraph passed on as it came
        raise InputError(f"a run needs its context, a strata Context, not {type(runtime.context).__name__}: "
                         "invoke(..., context=Context(namespace='ann'))")
    update: dict[str, object] = {**fresh_run(), "stage": "done", "namespace": runtime.context.namespace,
                                 "finished": False}
    turns, question = _as_turns(state.turns), state.question
    if turns is not state.turns:
        update["turns"] = turns
    if not state.finished and state.namespace and state.namespace != runtime.context.namespace:
        # the last run stopped before finish_run (an error, an interrupt), so its input is still on the thread:
        # what this run's input did not replace is that run's, of another namespace (see finish_run). Its
        # turns are held as Turns (`_as_turns`): the same turns sent again come as dicts and are this run's.
        left = bool(turns) or bool(question)
        if input_print(state.turns) == state.turns_seen:
            turns = update["turns"] = []
        if input_print(question) == state.question_seen:
            question = update["question"] = ""
        if left and not turns and not question:  # the same input sent again reads as the stopped run's
            raise InputError(
                f"this thread's last run, in namespace {shown_value(state.namespace)}, stopped with this same "
                f"input, so it is not taken as input for {shown_value(runtime.context.namespace)}: send it on a "
                "new thread (or resume that run in its own namespace)")
    if runtime.context.mode in ("ask", "retrieve") and turns and not state.finished \
            and input_print(state.turns) == state.turns_seen:  # as held (Turns), not as sent again (dicts)
        turns = update["turns"] = []  # a stopped run's, left on the thread: a read's own turns are refused (`input_of`)
    update.update(turns_seen=input_print(turns), question_seen=input_print(question))
    return update


def _as_turns(turns: list[Any]) -> list[Any]:
    """The run's turns as Turn objects. A run's input comes as dicts (the server's JSON) and is kept on the
    thread as Turns: sent again for another namespace after a run that stopped, the same dicts then read
    as new input, not as that run's leftover (equal values, which LangGraph writes alike, could not be
    told apart). Turns that do not validate stay as sent, for the Memory role's one-line error."""
    if not isinstance(turns, list) or all(isinstance(t, Turn) for t in turns):
        return turns  # (not a list: the Memory role says what to send)
    try:
        return validate_turns(turns)
    except InputError:
        return turns


def resumed_as_begun(node: Node) -> Node:
    """The role node, refusing a resumed run that names another namespace than the run it resumes. A run
    resumed from its checkpoint (input None) does not pass `start_run`: resumed as namespace B, a stopped
    ingest of A researched A's turn against B's memory, reported A's stored ids as its own, skipped the rest
    as "already stored" (they were not pending in B) and left A with fewer facts than a whole ingest."""

    @functools.wraps(node)
    def checked(state: State, runtime: Runtime[Context], *args: Any, **kwargs: Any) -> Any:
        if not state.finished and state.namespace and state.namespace != runtime.context.namespace:
            raise InputError(f"this thread's stopped run belongs to namespace {shown_value(state.namespace)}: "
                             "resume it with that namespace, or start a new run with input")
        return node(state, runtime, *args, **kwargs)

    return checked  # type: ignore[return-value]


def input_print(value: object) -> str:
    """A short print of a run's input field (the turns as given or as stored, the question), to tell at the
    next run whether its input replaced it."""
    dumped = [t.model_dump(mode="json") if isinstance(t, BaseModel) else t for t in value] \
        if isinstance(value, list) else value
    return hashlib.sha256(json.dumps(dumped, sort_keys=True, default=str).encode("utf-8", "replace")).hexdigest()


def finish_run(state: State) -> dict[str, object]:
    """The graph's exit: the run's input leaves the thread with it. A thread keeps every field between
    runs, and LangGraph sets only the fields a run's input names: the next run on the thread given only a
    question read the last run's turns as its own and stored them again, into whatever namespace it named.
    A run that stops before this (an error, an interrupt) leaves its input; `start_run` takes it off when the
    next run on the thread names another namespace."""
    return {"turns": [], "question": "", "finished": True}


def _clean_names(turn: Turn, n: int) -> Turn:
    """The turn with its speaker and listener in one spelling (composed, no zero-width characters, single
    spaces): "José" typed on two keyboards, or pasted with a no-break space, is one participant, not two."""
    speaker, listener = clean_name(turn.speaker), clean_name(turn.listener) if turn.listener else turn.listener
    if speaker == turn.speaker and listener == turn.listener:
        return turn
    if not speaker:
        raise InputError(f"turn {n}: speaker has no visible characters: give the name of who said it")
    return turn.model_copy(update={"speaker": speaker, "listener": listener or None})


def check_speaker(speaker: object, name: str) -> None:
    """A speaker given once for many turns (a chat's, an agent's tools'), checked as a turn's own speaker is,
    before any turn: otherwise every turn was refused for it, each with the same error. `name` is how the
    caller gave it (`--speaker`, `memory_tools speaker`)."""
    if not isinstance(speaker, str):
        raise InputError(f"{name} must be text, a person's name, not {type(speaker).__name__}: e.g. 'Ann'")
    if blank(speaker):
        raise InputError(f"{name} {shown_value(speaker)} names nobody: give the name of who speaks, e.g. 'Ann'")
    try:
        validate_turns([{"speaker": speaker, "text": "-"}])
    except InputError as error:
        problem = str(error).removeprefix("turn 1: ").removeprefix("speaker: ")
        raise InputError(f"{name} {shown_value(speaker)}: {problem}") from None


def validate_turns(items: object, default_speaker: str = "user", max_chars: int | None = None) -> list[Turn]:
    """Turns from Turn objects, dicts (server/Studio JSON) or strings, with one-line errors; one of them alone
    is one turn. With `max_chars`, a turn longer than that is refused (the runtime context's `max_turn_chars`)."""
    if isinstance(items, str | dict | Turn):
        items = [items]  # "hello" is one turn, never the turns "h", "e", "l", "l", "o"
    if not isinstance(items, list | tuple):
        raise InputError(f"turns must be a list of turns, not {type(items).__name__}: pass "
                         "{'turns': [{'speaker': 'Ann', 'text': '...'}]}")
    turns: list[Turn] = []
    for n, item in enumerate(items, start=1):
        try:
            if isinstance(item, Turn):
                turns.append(item)
            elif isinstance(item, str):
                turns.append(Turn(speaker=default_speaker, text=item))
            elif isinstance(item, dict):
                turns.append(Turn.model_validate({"speaker": default_speaker} | item))  # keys of any type
            else:
                raise InputError(f"turn {n} is a {type(item).__name__}: give a string or {{'speaker', 'text'}}")
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "turn"
            message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
            if first.get("type") == "missing":
                message = f"missing: give each turn a '{where}'"
            elif first.get("type") == "string_unicode":  # as strata/api.py says it of a turn given as bytes
                raise InputError(f"turn {n}: {where} is bytes that are not UTF-8: decode it to text first") from None
            raise InputError(f"turn {n}: {where}: {message}") from None
        turns[-1] = _clean_names(turns[-1], n)
        for name in ("dia_id", "speaker", "listener", "session"):  # names and ids, not text
            value = getattr(turns[-1], name) or ""
            if len(value) > MAX_NAME_CHARS:
                raise InputError(f"turn {n}: {name} has {len(value):,} characters, more than {MAX_NAME_CHARS}: "
                                 f"a {name} names something; put words in the turn's text")
        if max_chars is not None and len(turns[-1].text) > max_chars:
            raise InputError(
                f"turn {n} has {len(turns[-1].text):,} characters, more than max_turn_chars={max_chars:,}: split it "
                "into shorter turns, or raise max_turn_chars (STRATA_MAX_TURN_CHARS)"
            )
    return turns
