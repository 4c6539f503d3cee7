"""LangChain tools that give an agent this memory: search it, add to it, make it forget.

Each tool is one run of the memory graph, so a tool call does exactly what a
Studio or API run does:

- `search_memory(query)`: retrieval-only mode (research, judge, its Retry
  rounds), returning one evidence line per record with its id;
- `remember(text)`: ingest mode, the text stored as a turn at every granularity;
- `forget(description)`: an explicit request to forget, stored as a turn of
  `speaker` (the person the app acts for) so the Judge flags the matching
  records and the Refresher tombstones them, under the forget rule of
  `strata.memory.forgetting`: only that person's own memories (all of them when
  `speaker` is the namespace's `owner`), only records that match precisely, and
  a confirmation ("yes, forget them") past a few records. Every change is in
  the history with a change id that `Memory.undo` reverses.

```python
from langgraph.prebuilt import create_react_agent
agent = create_react_agent(model, memory_tools(Memory("ann"), speaker="Ann"))
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import AfterValidator, BaseModel, Field, ValidationError

from strata.api import Answer, Memory
from strata.graph.state import ChangeNote, Evidence, check_speaker
from strata.memory.errors import InputError, StrataError
from strata.memory.forgetting import is_confirmation
from strata.memory.names import blank

MAX_LINES = 12


class SearchArgs(BaseModel):
    query: str = Field(..., min_length=1, description="What to look up, as a question or keywords.")


class RememberArgs(BaseModel):
    text: str = Field(..., min_length=1, description="The statement to store, in the speaker's words.")


_REQUEST_VERBS = ("forget ", "please forget ", "delete ", "please delete ", "remove ", "erase ")


def _says_what(description: str) -> str:
    """A description that shows what to forget, beyond a request verb ("please forget ..."): one of zero-width
    spaces passed the length check, and its request was stored as a turn that deleted nothing."""
    lowered = description.strip().lower()
    verb = next((v for v in _REQUEST_VERBS if lowered.startswith(v)), "")
    if blank(description.strip()[len(verb) :]):
        raise ValueError("it shows nothing to forget (only spaces or invisible characters): say what, e.g. "
                         "'that I live in Boston'; nothing was stored")
    return description


class ForgetArgs(BaseModel):
    description: Annotated[str, AfterValidator(_says_what)] = Field(
        ..., min_length=3, description="What to forget, e.g. 'that I live in Boston' or 'my old phone number'."
    )


def forget_request(description: str) -> str:
    """The explicit request the Judge and the Refresher recognise ("please forget ...")."""
    text = description.strip().rstrip(".!?")
    lowered = text.lower()
    if lowered.startswith(_REQUEST_VERBS):
        return text[0].upper() + text[1:] + "."
    return f"Please forget {text}."


def evidence_lines(items: list[Evidence], limit: int = MAX_LINES) -> list[str]:
    """One line per record: its label (dialogue id, date, kind, text) and the record id to act on.

    Over the limit, the best-scored records are kept, still in the evidence's (time) order.
    """
    best = {item.id for item in sorted(items, key=lambda e: e.score, reverse=True)[:limit]}
    return [f"- {item.label or item.text} (id {item.id})" for item in items if item.id in best]


def describe_search(query: str, answer: Answer) -> str:
    if not answer.evidence:
        return f"Nothing in memory matches {query!r}."
    verdict = answer.verdict.action if answer.verdict else "no verdict"
    head = f"Memory evidence for {query!r} ({len(answer.evidence)} items, judge: {verdict}, rounds: {answer.rounds}):"
    return "\n".join([head, *evidence_lines(answer.evidence)])


def describe_changes(changes: list[ChangeNote], notes: Sequence[str] = ()) -> str:
    # the deletes alone: the request's own turn, rewritten to say it was carried out, is not a record forgotten
    done = [c for c in changes if c.action == "delete"]
    if not done:
        why = next((n for n in reversed(notes) if "forget" in n), "no stored record matched the request")
        return f"Nothing was forgotten: {why}."
    lines = [f"Forgot {len(done)} record(s); the application can restore them by change id (Memory.undo):"]
    for change in done:
        lines.append(f"- change {change.change_id}: {change.action} {change.record_id}: {change.old_text!r}")
    return "\n".join(lines)


def bad_arguments(error: ValidationError | Exception) -> str:
    """A one-line message the model can act on, instead of a traceback."""
    if isinstance(error, ValidationError) and error.errors():
        first = error.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "input"
        return f"Bad tool arguments: {where}: {first.get('msg', 'invalid')}. Fix the arguments and call again."
    return f"Bad tool arguments: {error}. Fix the arguments and call again."


def memory_tools(memory: Memory, speaker: str = "user") -> list[BaseTool]:
    """search_memory, remember and forget, bound to one namespace's memory and to `speaker`: `remember`
    stores as them and `forget` asks as them. The model never names the speaker, or text it read could
    have it store words in anyone's name, and a request to forget as the person the records are about.

    Both are checked here, in one line each: a wrong memory raised AttributeError at the first call, and a
    wrong speaker was told to the model at every remember and forget, which it cannot fix."""
    if not isinstance(memory, Memory):
        raise InputError(f"memory_tools takes a strata Memory, not {type(memory).__name__}: e.g. "
                         "memory_tools(Memory('ann'), speaker='Ann')")
    check_speaker(speaker, "memory_tools speaker")

    def search_memory(query: str) -> str:
        try:
            return describe_search(query, memory.retrieve(query))
        except StrataError as exc:
            raise ToolException(str(exc)) from exc

    def remember(text: str) -> str:
        try:
            report = memory.add(text, speaker=speaker)
        except StrataError as exc:
            raise ToolException(str(exc)) from exc
        if not report.stored_ids:
            return "Already in memory: " + ("; ".join(report.notes) or "nothing new stored")
        return f"Stored {len(report.stored_ids)} record(s): {', '.join(report.stored_ids)}"

    def forget(description: str) -> str:
        try:
            text = description if is_confirmation(description) else forget_request(description)
            report = memory.add(text, speaker=speaker)
        except StrataError as exc:
            raise ToolException(str(exc)) from exc
        return describe_changes(report.changes, report.notes)

    common: dict[str, Any] = {"handle_tool_error": True, "handle_validation_error": bad_arguments}
    return [
        StructuredTool.from_function(
            search_memory, name="search_memory", args_schema=SearchArgs, **common,
            description="Search long-term memory. Returns evidence lines with dialogue id, date and record id.",
        ),
        StructuredTool.from_function(
            remember, name="remember", args_schema=RememberArgs, **common,
            description="Store a statement in long-term memory (facts, episodes and links are derived from it).",
        ),
        StructuredTool.from_function(
            forget, name="forget", args_schema=ForgetArgs, **common,
            description="Forget what matches the description. Versioned: the reply lists change ids that undo it. "
            "When the reply asks for a confirmation, ask the user, then call forget with 'yes, forget them'.",
        ),
    ]
