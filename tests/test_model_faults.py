"""A chat model's server failing the way real providers fail, against the real `langchain-openai` client.

The loopback server of `tests/openai_stub.py`, with faults that each got past the wire once; each test says
what went wrong before. Streamed calls are made as a chat UI makes them: the graph streamed with
`stream_mode="messages"`, which streams every role's model call.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_stub import OpenAIStub, status
from strata.graph.graph import graph
from test_model_wire import QUESTION, TURNS, labels, wired

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
