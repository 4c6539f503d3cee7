"""The Research role's Retry policy: a sub-question for what the Judge found missing.

AdaMem's research loop (AdaMem, section 3.3: plan, search, integrate, reflect)
does not repeat a search that came up short; it asks a narrower question about
the part still missing. The Judge's verdict names that part (`missing`: a kind
of value such as time or place, or the question's words no item holds; from a
model Judge, its own few words, or its reason when it gave none), and
this module turns it into the text the next round searches with. Offline, the
sub-question is the question's uncovered words, with the asked-for kind of
value spelled out; with a chat model, the model writes it (prompt in
`prompts/research.py`) and the offline one stands in when its reply is unusable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import AliasChoices, ConfigDict, Field, field_validator
from strata.agents.common import OFFLINE, format_evidence
from strata.agents.llm import ask_json, chat_model
from strata.graph.context import Context
from strata.graph.state import Evidence
from strata.memory.graph.replies import MAX_LINE_CHARS, Reply, clipped
from strata.prompts import research as prompts

NEEDS: dict[str, str] = {  # the kind of value a question asks for, as words a turn stating it tends to hold
    "time": "when date day",
    "place": "where place",
    "number": "how many times",
    "name": "who name",
}
MAX_SHOWN = 12  # evidence items the model sees when it writes the sub-question


class SubQuestion(Reply):
    """One narrower question for the next search round (cut to a statement's length: it becomes the query)."""

    model_config = ConfigDict(extra="ignore")

    question: Annotated[str, clipped(MAX_LINE_CHARS)] = Field(
        ..., min_length=3, validation_alias=AliasChoices("question", "sub_question", "query"))

    @field_validator("question", mode="before")
    @classmethod
    def _text(cls, value: object) -> object:
        return " ".join(value.split()) if isinstance(value, str) else value


def offline_subquestion(query: str, missing: Sequence[str], participants: Sequence[str]) -> str:
    """The words no item held and the asked-for kind of value; empty when the verdict names nothing to
    look for. Participants' names stay out of it: they match every turn a person said (the search favours
    the person the question is about on its own)."""
    words = [m for m in missing if m not in ("content", "evidence", *NEEDS)]
    needs = [NEEDS[m] for m in missing if m in NEEDS]
    if not words and not needs:
        return ""
    if not words:  # the value is missing, not the topic: the question again, with what it asks for
        return " ".join([query, *needs])
    return " ".join([*words, *needs])


def subquestion(
    query: str, missing: Sequence[str], participants: Sequence[str], found: Sequence[Evidence], context: Context
) -> tuple[str, str]:
    """(sub-question, policy): the model's when one is configured and its reply is usable, else the rule's."""
    offline = offline_subquestion(query, missing, participants)
    model = chat_model(context)
    if model is None or not missing:
        return offline, OFFLINE
    user = prompts.SUBQUESTION_USER.format(
        question=query, missing=", ".join(missing), evidence=format_evidence(list(found)[:MAX_SHOWN]),
    )
    parsed, _, policy = ask_json(model, prompts.SUBQUESTION_SYSTEM, user, SubQuestion, context)
    return (offline if parsed is None else parsed.question), policy
