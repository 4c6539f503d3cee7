"""The model's wire, end to end: the real `langchain-openai` client against a scripted loopback server.

Each test runs the graph with `model="openai:<name>"` and `base_url` pointing at
`tests/openai_stub.py`, and checks both sides: what the server received (how many
calls, the response_format or tools each carried) and what the graph produced
(answers, stored facts, and the policy label that says which path produced each
output). Covered: JSON-schema structured output, tool-call replies, malformed
replies (read by the text parser, or the offline fallback), a server without
structured output, 429 then success (Retry-After honoured), 500 until the
retries run out, a hang past the timeout, the per-question call cap, and an
authentication error (one line, no traceback).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_stub import OpenAIStub, content, hang, status, tool_call
from strata.graph.context import Context
from strata.graph.graph import graph
from strata.graph.state import RoleNote
from strata.memory.errors import ConfigError, InputError, StrataError

from strata.api import Memory

QUESTION = "Where does Ann live now?"  # names Ann: the plan is read offline, the Judge and the answer ask the model
TURNS = [
    {"speaker": "Ann", "listener": "Ben", "text": "I moved to Boston last May for my new job.", "dia_id": "D1:1",
     "time": "2023-06-01 10:00"},
    {"speaker": "Ben", "listener": "Ann", "text": "Boston is lovely! I still live in Denver.", "dia_id": "D1:2",
     "time": "2023-06-01 10:01"},
]


@pytest.fixture(scope="module")
def memory_dir(tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Path:
    """Ann's memory with two turns stored offline, shared by the tests that only ask."""
    folder = tmp_path_factory.mktemp("wire") / "mem"
    Memory("ann", data_dir=str(folder)).add(TURNS)
    return folder


@pytest.fixture(scope="module")
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


@pytest.fixture(autouse=True)
def fresh_stub(stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty script and log per test, and a dummy key for the client (this test's environment only)."""
    stub.reset()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")


def wired(stub: OpenAIStub, folder: Path, mode: str = "ask", name: str = "stub-model", **settings: Any) -> Context:
    settings.setdefault("model_backoff", 0.01)
    return Context(namespace="ann", mode=mode, data_dir=str(folder), model=f"openai:{name}", base_url=stub.url,
                   **settings)  # type: ignore[arg-type]


def labels(trace: list[RoleNote]) -> dict[str, str]:
    return {note.role: note.policy for note in trace if note.role != "memory"}


def formats(stub: OpenAIStub) -> list[tuple[str, str, str]]:
    """(role, response_format type, schema or tool name) of every request the server received."""
    out = []
    for body in stub.requests:
        fmt = body.get("response_format") or {}
        tools = body.get("tools") or []
        name = (fmt.get("json_schema") or {}).get("name") or (tools[0]["function"]["name"] if tools else "")
        out.append((stub.roles()[len(out)], fmt.get("type", "tools" if tools else "text"), name))
    return out


def test_json_schema_structured_output_for_every_role(stub: OpenAIStub, memory_dir: Path, data_dir: Path) -> None:
    result = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir))
    assert formats(stub) == [("judge", "json_schema", "ModelVerdict"), ("answer", "json_schema", "ModelAnswer")]
    schema = stub.requests[0]["response_format"]["json_schema"]["schema"]
    assert set(schema["required"]) == {"Action"} and "conflicts" in schema["properties"]  # the role's contract
    assert all(body["model"] == "stub-model" for body in stub.requests)
    assert "Boston" in result["answer"] and result["cited_ids"] == ["D1:1"]
    assert labels(result["trace"]) == {
        "research": "offline (model not asked: the question leaves no one to resolve)",
        "judge": "model:openai:stub-model (json_schema)", "working": "model:openai:stub-model (json_schema)"}

    # a chat turn asks every role that writes: plan (a live turn), judge, facts, episode boundary, the turn's
    # graph note (entities, links), answer
    Memory("ann", data_dir=str(data_dir)).add(TURNS)
    stub.reset()
    chat = {"speaker": "Ann", "listener": "Ben", "text": "She said I should visit him in Denver.", "dia_id": "D1:3",
            "time": "2023-06-01 10:02"}
    result = graph.invoke({"turns": [chat]}, context=wired(stub, data_dir, "chat"))
    asked = {role: kind for role, kind, _ in formats(stub)}
    assert asked == {"plan": "json_schema", "judge": "json_schema", "facts": "json_schema",
                     "boundary": "json_schema", "note": "json_schema", "answer": "json_schema"}
    fact = Memory("ann", data_dir=str(data_dir)).get(["fact:D1:3:0"])[0]
    assert fact.text == f"Ann said: {chat['text']}" and fact.policy == "model:openai:stub-model (json_schema)"
    assert labels(result["trace"])["research"] == "model:openai:stub-model (json_schema)"


def test_tool_call_replies_through_function_calling(stub: OpenAIStub, memory_dir: Path) -> None:
    result = graph.invoke({"question": QUESTION},
                          context=wired(stub, memory_dir, structured_output="function_calling"))
    assert formats(stub) == [("judge", "tools", "ModelVerdict"), ("answer", "tools", "ModelAnswer")]
    assert stub.requests[0]["tool_choice"]["function"]["name"] == "ModelVerdict"
    assert "Boston" in result["answer"]
    assert set(labels(result["trace"]).values()) >= {"model:openai:stub-model (function_calling)"}


def test_malformed_replies_are_read_by_the_text_parser_or_fall_back(stub: OpenAIStub, memory_dir: Path) -> None:
    stub.script(
        content("{'Action': 'Pass', 'reason': 'Ann said so', 'confidence': 0.9, 'conflicts': [],}"),  # Python-ish
        content("Boston, I believe."),  # no JSON at all
    )
    result = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir))
    got = labels(result["trace"])
    assert got["judge"] == "model:openai:stub-model (text; json_schema output unusable)"
    assert got["working"] == "offline (model output unusable: no JSON object in the reply)"
    assert result["verdict"].action == "Pass" and result["answer"]  # the offline answer stood in
    assert len(stub.requests) == 2  # a malformed reply is not asked again

    stub.reset()
    stub.script(tool_call('{"Action": "Pass", "reason": "stated", "confidence": 0.8, "conflicts": [],}'))
    result = graph.invoke({"question": QUESTION},
                          context=wired(stub, memory_dir, structured_output="function_calling"))
    assert labels(result["trace"])["judge"] == "model:openai:stub-model (text; function_calling output unusable)"


def test_a_server_without_structured_output_is_asked_in_text_from_then_on(
    stub: OpenAIStub, memory_dir: Path
) -> None:
    stub.reject_structured = True
    context = wired(stub, memory_dir, name="text-only-model")
    result = graph.invoke({"question": QUESTION}, context=context)
    assert stub.served == [400, 200, 200]
    assert [kind for _, kind, _ in formats(stub)] == ["json_schema", "text", "text"]
    got = labels(result["trace"])
    assert got["judge"] == "model:openai:text-only-model (text; json_schema refused (HTTP 400))"
    assert got["working"] == "model:openai:text-only-model"
    assert "Boston" in result["answer"]


def test_a_rate_limit_is_retried_after_the_servers_retry_after(stub: OpenAIStub, memory_dir: Path) -> None:
    stub.script(status(429, {"Retry-After": "1"}))
    started = time.perf_counter()
    result = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir))
    assert time.perf_counter() - started >= 1.0  # the backoff alone would be 0.01 s
    assert stub.served == [429, 200, 200] and stub.roles() == ["judge", "judge", "answer"]
    assert labels(result["trace"])["judge"] == "model:openai:stub-model (json_schema)"
    assert "Boston" in result["answer"]


def test_server_errors_past_the_retries_fall_back_to_the_offline_policies(
    stub: OpenAIStub, memory_dir: Path
) -> None:
    stub.script(status(500), status(503), status(500))
    result = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir, model_retries=2))
    assert stub.served == [500, 503, 500]  # the first try and two retries, then the answer is not even asked
    got = labels(result["trace"])
    assert got["judge"].startswith("offline (model unavailable (HTTP 500")
    assert got["judge"].endswith("gave up after 2 retries))")
    assert got["working"].startswith("offline (model unavailable earlier in this question")
    assert "Boston" in result["answer"]  # the offline answer
    # the next question gives the model another chance
    stub.reset()
    again = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir, model_retries=2))
    assert stub.served == [200, 200] and labels(again["trace"])["working"].endswith("(json_schema)")


def test_a_hung_call_is_abandoned_at_the_timeout(stub: OpenAIStub, memory_dir: Path) -> None:
    stub.script(hang(4.0))
    started = time.perf_counter()
    result = graph.invoke({"question": QUESTION},
                          context=wired(stub, memory_dir, name="impatient", model_timeout=0.5, model_retries=0))
    assert time.perf_counter() - started < 3.5
    judge = labels(result["trace"])["judge"]
    assert judge.startswith("offline (model unavailable (") and "Timeout" in judge
    assert len(stub.requests) == 1 and result["answer"]


def test_the_call_cap_holds_per_question(stub: OpenAIStub, memory_dir: Path) -> None:
    context = wired(stub, memory_dir, max_model_calls=1)
    for _ in range(2):  # one Context for two questions: each question gets its own budget
        result = graph.invoke({"question": QUESTION}, context=context)
        got = labels(result["trace"])
        assert got["judge"] == "model:openai:stub-model (json_schema)"
        assert got["working"] == "offline (model call cap reached (1 calls for this question))"
    assert stub.roles() == ["judge", "judge"]


def test_an_authentication_error_is_one_line(stub: OpenAIStub, memory_dir: Path) -> None:
    stub.script(status(401))
    with pytest.raises(ConfigError) as error:
        graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir))
    message = str(error.value)
    assert "\n" not in message and "AuthenticationError" in message and "OPENAI_API_KEY" in message
    assert len(stub.requests) == 1  # not retried


def test_wire_settings_come_from_the_context_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATA_MAX_MODEL_CALLS", "4")
    monkeypatch.setenv("STRATA_MODEL_TIMEOUT", "2.5")
    monkeypatch.setenv("STRATA_STRUCTURED_OUTPUT", "function_calling")
    context = Context()
    assert (context.max_model_calls, context.model_timeout, context.structured_output) == (4, 2.5, "function_calling")
    monkeypatch.setenv("STRATA_STRUCTURED_OUTPUT", "xml")
    with pytest.raises(InputError, match="structured_output 'xml': use one of auto"):
        Context()
    monkeypatch.delenv("STRATA_STRUCTURED_OUTPUT")
    for bad in ({"model_retries": -1}, {"model_timeout": 0}, {"max_model_calls": 0}, {"model_backoff": "soon"}):
        with pytest.raises(StrataError) as error:  # "soon" is a ConfigError (wrong type), the rest InputErrors
            Context(**bad)  # type: ignore[arg-type]
        assert "\n" not in str(error.value) and next(iter(bad)) in str(error.value)


def test_backoff_grows_with_jitter_and_honours_retry_after() -> None:
    import httpx
    from strata.agents.wire import RETRY_AFTER_CEILING, backoff, retry_after

    waits = [backoff(attempt, 0.5, None) for attempt in range(4)]
    for attempt, wait in enumerate(waits):
        assert wait is not None and 0.25 * 2**attempt <= wait <= 0.5 * 2**attempt
    assert backoff(0, 0.5, 2.0) == 2.0 and backoff(0, 0.5, RETRY_AFTER_CEILING + 1) is None

    def error(headers: dict[str, str]) -> Exception:
        exc = Exception("rate limited")
        exc.response = httpx.Response(429, headers=headers)  # type: ignore[attr-defined]
        return exc

    assert retry_after(error({"retry-after-ms": "250"})) == 0.25
    assert retry_after(error({"Retry-After": "3"})) == 3.0
    assert 0.0 <= retry_after(error({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) <= 0.0  # a date in the past
    assert retry_after(error({})) is None
