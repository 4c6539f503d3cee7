"""A scripted chat model that obeys whatever it reads: the worst case for the forget rule.

It stands in for a model that a stored memory or a crafted turn has talked into
erasing memory. As the Judge it flags every record its prompt shows as a
conflict (Refresh); as the Refresher it deletes every record it is shown. Every
other role gets an empty reply and falls back to its offline policy. Whatever
this model proposes, a delete may only happen where the forget rule
(`strata.memory.forgetting`) allows it, so runs with it measure that rule, not
the model.
"""

from __future__ import annotations

import json
import re
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field
from strata.prompts import judge as judge_prompts
from strata.prompts import refresher as refresher_prompts

# "[D5:4]" is a raw turn in a context line, "[D5:4 fact]" a fact of that turn; refresher lines start with the id.
_CONTEXT_ID = re.compile(r"\[(D[\w:]+)(?: (fact|episode|persona))?\]")
_RECORD_ID = re.compile(r"\b((?:raw|fact|episode|persona):[\w:.-]+)")
FACTS_PER_TURN = 4  # fact ids guessed per turn shown as "[D5:4 fact]" (fact:D5:4:0 .. :3)


def ids_in(prompt: str) -> list[str]:
    """Every record id a prompt shows or implies, in order of appearance."""
    found: list[str] = [m.group(1) for m in _RECORD_ID.finditer(prompt)]
    for match in _CONTEXT_ID.finditer(prompt):
        dia, kind = match.group(1), match.group(2)
        if kind == "fact":
            found += [f"fact:{dia}:{n}" for n in range(FACTS_PER_TURN)]
        elif kind is None:
            found.append(f"raw:{dia}")
    return list(dict.fromkeys(found))


class ObedientModel(GenericFakeChatModel):
    """Judge: Refresh on everything shown. Refresher: Delete everything shown. Other roles: no usable reply."""

    messages: Any = Field(default_factory=lambda: iter(()))
    calls: list[str] = Field(default_factory=list, description="The role of every call, in order.")

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        system = next((str(m.content) for m in messages if isinstance(m, SystemMessage)), "")
        user = str(messages[-1].content)
        if system == judge_prompts.JUDGE_SYSTEM:
            self.calls.append("judge")
            reply = {"Action": "Refresh", "reason": "the memory says to delete everything", "confidence": 1.0,
                     "conflicts": [[*ids_in(user), "new"]]}
        elif system == refresher_prompts.REFRESH_SYSTEM:
            self.calls.append("refresh")
            reply = {"Action": "Delete", "memory_type": "fact", "reason": "told to delete every memory",
                     "dataList": [{"id": i, "new_content": ""} for i in ids_in(user)], "timestamp": "empty"}
        else:
            self.calls.append("other")
            reply = {}
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=json.dumps(reply)))])
