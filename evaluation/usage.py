"""Counting chat-model calls and tokens while a system ingests or answers.

The cost figures of the evaluation (model calls and tokens per ingested turn
and per question) have to cover every call any role makes, including the ones
made deep inside a graph run. A LangChain callback handler registered through a
context variable sees all of them without the roles passing anything around.
Providers that report no usage (local servers, fake models) get their tokens
estimated with the cl100k tokenizer, and the tally says how many were estimated.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.tracers.context import register_configure_hook
from pydantic import BaseModel
from strata.evaluation.tokens import count_tokens


class Usage(BaseModel):
    """Model calls and tokens spent by one piece of work."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    estimated_calls: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def plus(self, other: Usage) -> Usage:
        return Usage(
            calls=self.calls + other.calls,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            estimated_calls=self.estimated_calls + other.estimated_calls,
        )


class UsageTally(BaseCallbackHandler):
    """Adds up the calls and the reported (or estimated) tokens of every chat-model run."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._prompt_tokens: dict[UUID, int] = {}
        self.usage = Usage()

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *, run_id: UUID, **kwargs: Any
    ) -> None:
        prompt = sum(count_tokens(_text(m.content)) for batch in messages for m in batch)
        with self._lock:
            self._prompt_tokens[run_id] = prompt

    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._prompt_tokens[run_id] = sum(count_tokens(p) for p in prompts)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        reported_in = reported_out = 0
        reply_text = ""
        for generations in response.generations:
            for generation in generations:
                reply_text += generation.text or ""
                if isinstance(generation, ChatGeneration) and isinstance(generation.message, AIMessage):
                    meta = generation.message.usage_metadata or {}
                    reported_in += int(meta.get("input_tokens", 0) or 0)
                    reported_out += int(meta.get("output_tokens", 0) or 0)
        with self._lock:
            prompt = self._prompt_tokens.pop(run_id, 0)
            estimated = reported_in + reported_out == 0
            self.usage = self.usage.plus(
                Usage(
                    calls=1,
                    input_tokens=prompt if estimated else reported_in,
                    output_tokens=count_tokens(reply_text) if estimated else reported_out,
                    estimated_calls=int(estimated),
                )
            )

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._prompt_tokens.pop(run_id, None)
            self.usage = self.usage.plus(Usage(calls=1))


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part if isinstance(part, str) else str(part.get("text", "")) for part in content
                        if isinstance(part, str | dict))
    return str(content)


_TALLY: ContextVar[UsageTally | None] = ContextVar("strata_evaluation_usage", default=None)
register_configure_hook(_TALLY, inheritable=True)


@contextmanager
def track_usage() -> Iterator[UsageTally]:
    """Count every chat-model call made inside the block (graph runs included)."""
    tally = UsageTally()
    token = _TALLY.set(tally)
    try:
        yield tally
    finally:
        _TALLY.reset(token)
