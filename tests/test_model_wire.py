"""The model's wire, end to end: the real `langchain-openai` client against a scripted loopback server.

Each test runs the graph with `model="openai:<name>"` and `base_url` pointing at
`tests/openai_stub.py`, and checks both sides: what the server received (how many
calls, the response_format or tools each carried) and what the graph produced
(answers, stored facts, and the policy label that says which path produced each
output). Covered: JSON-schema structured output, tool-call replies, malformed
replies (read by the text parser, or the offline fallback), a server without
structured output, 429 then success (Retry-After honoured), 500 until the
retries run out, a hang past the timeout, the per-question call cap, an
authentication error (one line, no traceback), a prompt the server refuses (a
content filter: that role falls back, the ingest goes on), a client that cannot
read a reply, replies of content blocks, and a draft inside a `<think>` block.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from openai_stub import OpenAIStub, broken, content, hang, refused, status, tool_call
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
    assert got["working"].startswith("offline (model unavailable earlier in this run")
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


def test_wire_settings_past_their_use_are_one_line_and_the_largest_still_asks_the_model(
    stub: OpenAIStub, memory_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by audit: `model_retries` had no upper bound, and the 1,024th retry's backoff overflowed
    (`OverflowError` out of the graph run); `model_timeout=1e10` (a way to write "no timeout") overflowed the
    HTTP client's clock, so no call reached the server and every role answered offline, blaming the reply."""
    from strata.agents.wire import BACKOFF_CEILING, backoff

    for bad, says in (({"model_retries": 101}, "model_retries must be from 0 to 100, got 101"),
                      ({"model_timeout": 1e10}, "model_timeout must be at most 86400 seconds (a day), got 1e+10")):
        with pytest.raises(InputError) as error:
            Context(**bad)  # type: ignore[arg-type]
        assert says in str(error.value) and "\n" not in str(error.value)
    monkeypatch.setenv("STRATA_MODEL_TIMEOUT", "1e300")
    with pytest.raises(InputError, match="model_timeout must be at most 86400 seconds"):
        Context()
    monkeypatch.delenv("STRATA_MODEL_TIMEOUT")
    assert all(0.5 * BACKOFF_CEILING <= (backoff(n, 1.0, None) or 0) <= BACKOFF_CEILING for n in (1024, 10**6))
    assert backoff(10**6, 0.0, None) == 0.0 and backoff(10**6, 1e300, None) == pytest.approx(BACKOFF_CEILING, 0.5)
    result = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir, model_timeout=86_400,
                                                               model_retries=100))
    assert labels(result["trace"])["working"] == "model:openai:stub-model (json_schema)"
    assert stub.roles() == ["judge", "answer"]


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


def test_a_prompt_the_server_refuses_falls_back_and_the_ingest_goes_on(stub: OpenAIStub, data_dir: Path) -> None:
    """A content filter (or a prompt too long) refuses one turn's prompts, on every try: that turn's roles use
    their offline policies, the next turns still ask the model, and the model keeps its structured output."""
    stub.filtered = "BLOCKED-WORD"
    turns = [*TURNS, {"speaker": "Ann", "listener": "Ben", "text": "My neighbour said BLOCKED-WORD yesterday.",
                      "dia_id": "D1:3", "time": "2023-06-01 10:02"},
             {"speaker": "Ann", "listener": "Ben", "text": "I adopted a puppy named Coco.", "dia_id": "D1:4",
              "time": "2023-06-01 10:03"}]
    memory = Memory("ann", data_dir=str(data_dir), model="openai:filtered-model", base_url=stub.url,
                    model_backoff=0.01)
    memory.add(turns)
    assert 400 in stub.served and memory.store.state("pending_derive", []) == []
    policy = {f.id: f.policy for f in memory.store.all("fact")}
    assert policy["fact:D1:3:0"] == "offline (model output unusable: refused (400 content_filter))"
    assert policy["fact:D1:4:0"] == "model:openai:filtered-model (json_schema)"  # the turn after it
    refusals = [body for body, code in zip(stub.requests, stub.served, strict=True) if code == 400]
    assert all("response_format" in body for body in refusals)  # refused once per role: not asked again in text
    assert all("response_format" in body for body in stub.requests)  # and never marked text-only


def test_a_refusal_before_any_structured_reply_is_tried_in_text_once(stub: OpenAIStub, memory_dir: Path) -> None:
    """A 400 on a model that never answered a structured request may mean it has none: the same prompt is
    sent as text. When the text is refused too, on a server that never answered, the 400 may be a setting (a
    proxy's unknown model): one line of ConfigError. Once it has answered, a refused prompt is that prompt's:
    that one role falls back, and the model is not marked text-only (that takes a text reply after the
    refusal)."""
    stub.script(status(400), status(400))
    with pytest.raises(ConfigError) as error:
        graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir, name="never-answered"))
    assert "\n" not in str(error.value)
    stub.reset()
    answered = wired(stub, memory_dir, name="refusing-model", structured_output="text")
    graph.invoke({"question": QUESTION}, context=answered)  # it answers in text: a server that works
    stub.reset()
    stub.script(status(400))
    result = graph.invoke({"question": QUESTION}, context=answered)
    got = labels(result["trace"])
    assert got["judge"] == "offline (model output unusable: refused (HTTP 400))"
    assert got["working"] == "model:openai:refusing-model"
    assert "Boston" in result["answer"]


def test_errors_no_prompt_causes_stay_configuration_errors(stub: OpenAIStub, memory_dir: Path) -> None:
    """401/403/404 and a 400 naming a setting (`unsupported_parameter`) fail the same on every prompt."""
    for reply in (status(403), status(404), refused("unsupported_parameter"), refused("model_not_found", 404)):
        stub.reset()
        stub.script(reply)
        with pytest.raises(ConfigError) as error:
            graph.invoke({"question": QUESTION},
                         context=wired(stub, memory_dir, name="text-model", structured_output="text"))
        assert "\n" not in str(error.value) and len(stub.requests) == 1


class Raising(BaseChatModel):
    """A chat model whose every call raises `error` (a client failing on a response it cannot read); without
    one, it calls strata's code wrongly, as a callback of ours with a bug would."""

    error: Exception | None = None
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "raising"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.calls += 1
        if self.error is None:
            from strata.agents.llm import parse_json

            parse_json("{}", None)  # type: ignore[arg-type]
        raise self.error or AssertionError("unreachable")


def test_a_client_that_cannot_read_a_reply_falls_back_but_a_bug_is_raised(
    stub: OpenAIStub, memory_dir: Path
) -> None:
    """KeyError('choices'), a ValueError or a TypeError the client hits on a broken response is one unusable
    reply; an error raised in strata's own code, or a NameError, is a bug that would fail every call, so it is
    raised as it is, not hidden behind offline fallbacks."""
    for error in (KeyError("choices"), ValueError("unexpected end of response"), RuntimeError("stream closed"),
                  TypeError("'NoneType' object is not iterable")):
        model = Raising(error=error)
        result = graph.invoke({"question": QUESTION}, context=Context(
            namespace="ann", mode="ask", data_dir=str(memory_dir), chat_model=model))
        got = labels(result["trace"])
        assert got["judge"] == ("offline (model output unusable: the client could not read the reply "
                                f"({type(error).__name__}: {str(error).splitlines()[0]}))")
        assert got["working"].startswith("offline (model output unusable") and model.calls == 2
        assert "Boston" in result["answer"]  # the offline answer

    for bug, kind in ((None, AttributeError), (NameError("name 'choice' is not defined"), NameError)):
        with pytest.raises(kind):
            graph.invoke({"question": QUESTION}, context=Context(
                namespace="ann", mode="ask", data_dir=str(memory_dir), chat_model=Raising(error=bug)))

    # the real client on a 200 whose body is not a completion
    stub.script(broken({"id": "chatcmpl-x", "object": "chat.completion"}))
    result = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir))
    got = labels(result["trace"])
    assert got["judge"].startswith("offline (model output unusable: the client could not read the reply (")
    assert got["working"] == "model:openai:stub-model (json_schema)"


def test_a_reply_of_content_blocks_is_read_from_its_text_blocks(memory_dir: Path) -> None:
    """Anthropic with thinking, the OpenAI Responses API and Gemini reply with a list of blocks: the answer
    is in the text blocks, the reasoning and signature blocks are not part of it."""
    verdict = json.dumps({"Action": "Pass", "reason": "D1:1 says where Ann lives", "confidence": 0.9})
    answer = json.dumps({"answer": "Ann lives in Boston.", "cited_ids": ["D1:1"]})
    model = GenericFakeChatModel(messages=iter([
        AIMessage(content=[{"type": "thinking", "thinking": "Ann said {\"Action\": \"Retry\"}?", "signature": "s"},
                           {"type": "text", "text": verdict}]),
        AIMessage(content=[{"type": "reasoning", "summary": []},
                           {"type": "text", "text": answer, "annotations": []}]),
    ]))
    result = graph.invoke({"question": QUESTION}, context=Context(
        namespace="ann", mode="ask", data_dir=str(memory_dir), chat_model=model))
    got = labels(result["trace"])
    assert got["judge"] == got["working"] == "model:GenericFakeChatModel"
    assert result["verdict"].action == "Pass"
    assert result["answer"] == "Ann lives in Boston." and result["cited_ids"] == ["D1:1"]


def test_the_final_json_wins_over_a_draft_in_the_reasoning(memory_dir: Path) -> None:
    """A reasoning model (DeepSeek-R1 or QwQ behind vLLM or Ollama) writes `<think>` into the content: a draft
    there is not the answer, and of several objects the last (the final answer) is taken."""
    judge = ('<think>Maybe {"Action": "Retry", "reason": "unclear"}? No: D1:1 states it.</think>\n'
             '{"Action": "Pass", "reason": "D1:1 states where Ann lives", "confidence": 0.9}')
    answer = ('<thinking>First draft: {"answer": "Denver", "cited_ids": ["D1:2"]}. But D1:2 is Ben.</thinking>\n'
              '{"answer": "Boston", "cited_ids": ["D1:1"]}')
    model = GenericFakeChatModel(messages=iter([AIMessage(content=judge), AIMessage(content=answer)]))
    result = graph.invoke({"question": QUESTION}, context=Context(
        namespace="ann", mode="ask", data_dir=str(memory_dir), chat_model=model))
    assert labels(result["trace"])["judge"] == "model:GenericFakeChatModel"
    assert result["verdict"].action == "Pass" and result["answer"] == "Boston" and result["cited_ids"] == ["D1:1"]

    from strata.agents.llm import parse_json
    from strata.agents.memory import ModelFacts
    from strata.agents.working import ModelAnswer

    def said(text: str) -> str | None:
        parsed, _ = parse_json(text, ModelAnswer)
        return parsed.answer if parsed is not None else None

    assert said('Draft: {"answer": "a"}. Final: {"answer": "b"}') == "b"  # no tags: still the last one
    assert said('{"answer": "a"}</think>{"answer": "b"}') == "b"  # the template put the opening tag in the prompt
    assert said('<think>{"answer": "a"} and then the reply was cut off') is None
    quoted = '{"answer": "She said the model printed </think> before its answer."}'  # a tag inside the answer
    assert said(quoted) == "She said the model printed </think> before its answer."
    assert said('```json\n{"answer": "a"}\n```\nas in {"answer": "example"}') == "a"  # a fenced one first
    # an object that sets none of the schema's fields (every field has a default) is not the answer
    facts, _ = parse_json('{"facts": [{"content": "Ann moved."}]} (each fact like {"content": "..."})', ModelFacts)
    assert facts is not None and [f.content for f in facts.facts] == ["Ann moved."]
