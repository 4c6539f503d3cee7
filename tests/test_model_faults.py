"""A chat model's server failing the way real providers fail, against the real `langchain-openai` client.

The loopback server of `tests/openai_stub.py`, with faults that each got past the wire once; each test says
what went wrong before. Streamed calls are made as a chat UI makes them: the graph streamed with
`stream_mode="messages"`, which streams every role's model call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_stub import OpenAIStub, Scripted, broken, status
from strata.graph.context import Context
from strata.graph.graph import graph
from test_model_wire import QUESTION, TURNS, Raising, labels, wired

from strata.api import Memory


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIStub]:
    with OpenAIStub() as running:
        yield running


@pytest.fixture
def stub(server: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> OpenAIStub:
    """The module's server with an empty script and log, and a dummy key for the client (this test only)."""
    server.reset()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    return server


@pytest.fixture(scope="module")
def memory_dir(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    """Ann's two turns, stored offline, for the tests that only ask."""
    folder = tmp_path_factory.mktemp("faults") / "mem"
    Memory("ann", data_dir=str(folder)).add(TURNS)
    return folder


def streamed(payload: dict[str, Any], context: Context) -> dict[str, Any]:
    """The run's final state, the graph streamed as a chat UI streams it: every role's call is streamed."""
    final: dict[str, Any] = {}
    for kind, data in graph.stream(payload, context=context, stream_mode=["values", "messages"]):
        if kind == "values":
            final = data
    return final


def test_an_empty_stream_or_a_json_body_is_the_models_failure_not_a_bug(stub: OpenAIStub, memory_dir: Path) -> None:
    """A stream with no event, or a server that ignores `stream: true` and sends one JSON body: openai's stream
    helper asserts it holds a completion. That AssertionError is about the reply: the role falls back."""
    whole = {"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "stub-model",
             "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": json.dumps(
                 {"Action": "Pass", "reason": "D1:1 says it", "confidence": 0.9})}}]}
    for reply in (Scripted(events=False), broken(whole)):
        stub.reset()
        stub.script(reply)
        result = streamed({"question": QUESTION}, wired(stub, memory_dir))
        got = labels(result["trace"])
        assert got["judge"].startswith("offline (model output unusable: the client could not read the reply "
                                       "(AssertionError")
        assert got["working"] == "model:openai:stub-model (json_schema)" and "Boston" in result["answer"]

    # raised in a client's code, not strata's, an AssertionError is the reply's
    model = Raising(error=AssertionError())
    result = graph.invoke({"question": QUESTION}, context=Context(
        namespace="ann", mode="ask", data_dir=str(memory_dir), chat_model=model))
    assert labels(result["trace"])["judge"].startswith("offline (model output unusable: the client could not read")


def test_a_retry_after_that_is_neither_seconds_nor_a_date_is_ignored(stub: OpenAIStub, memory_dir: Path) -> None:
    import httpx
    from strata.agents.wire import retry_after

    def error(value: str) -> Exception:
        exc = Exception("rate limited")
        exc.response = httpx.Response(429, headers={"Retry-After": value})  # type: ignore[attr-defined]
        return exc

    for value in ("soon", "120s", "Wed, 99 Foo 2015", "Wed, 21 Oct 2015 99:99:99 GMT"):
        assert retry_after(error(value)) is None
    stub.script(status(429, {"Retry-After": "soon"}))
    result = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir))
    assert stub.served == [429, 200, 200]  # retried after the backoff, then answered
    assert labels(result["trace"])["judge"] == "model:openai:stub-model (json_schema)"
