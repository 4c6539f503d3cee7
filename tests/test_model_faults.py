"""A chat model's server failing the way real providers fail, against the real `langchain-openai` client.

The loopback server of `tests/openai_stub.py`, with faults that each got past the wire once; each test says
what went wrong before. Streamed calls are made as a chat UI makes them: the graph streamed with
`stream_mode="messages"`, which streams every role's model call.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_stub import OpenAIStub, Scripted, broken, cut, status, trickle
from strata.graph.context import Context
from strata.graph.graph import graph
from strata.memory.errors import ConfigError
from test_model_wire import QUESTION, TURNS, Raising, labels, wired

from strata.api import Memory

PUPPY = {"speaker": "Ann", "listener": "Ben", "text": "I adopted a puppy named Coco last week.", "dia_id": "D1:3",
         "time": "2023-06-01 10:02"}


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


def test_a_stream_cut_short_is_not_taken_for_a_whole_reply(stub: OpenAIStub, memory_dir: Path,
                                                           data_dir: Path) -> None:
    """A stream that ends without a finish reason (the connection closed, or `[DONE]` came early) hands over
    half an object the client parsed in partial mode: `{"Action": "Pass", "` validated as a Pass. The role
    falls back and says why; a whole stream is read as before."""
    whole = streamed({"question": QUESTION}, wired(stub, memory_dir))
    assert all(body.get("stream") for body in stub.requests) and len(stub.requests) == 2
    assert labels(whole["trace"])["judge"] == "model:openai:stub-model (json_schema)"

    cut_label = "offline (model output unusable: the reply ended without a finish reason (a stream cut short))"
    for method in ("json_schema", "function_calling"):
        stub.reset()
        stub.script(cut(20))
        result = streamed({"question": QUESTION}, wired(stub, memory_dir, structured_output=method))
        got = labels(result["trace"])
        assert got["judge"] == cut_label
        assert got["working"] == f"model:openai:stub-model ({method})"  # the next role still asks the model
        assert "Boston" in result["answer"]

    # the facts of a turn being stored, cut mid-fact: the offline facts are stored, not the half one
    stub.reset()
    Memory("ann", data_dir=str(data_dir)).add(TURNS)
    stub.by_role["facts"] = cut(40)
    streamed({"turns": [PUPPY]}, wired(stub, data_dir, mode="ingest"))
    memory = Memory("ann", data_dir=str(data_dir))
    facts = [f for f in memory.store.all("fact") if f.id.startswith("fact:D1:3:")]
    assert facts and all(f.policy == cut_label for f in facts)
    assert all(f.text != "Ann said: I adopted a" for f in facts) and memory.store.state("pending_derive", []) == []


def test_a_server_that_never_sends_a_finish_reason_is_read_when_its_reply_is_whole(stub: OpenAIStub,
                                                                                   memory_dir: Path) -> None:
    """Some OpenAI-compatible servers send no finish reason at all. Every reply of theirs was taken for a stream
    cut short and every role fell back. A reply whose text is one whole JSON object is read, streamed or not; a
    cut one still is not, and neither is a tool call, whose arguments arrive parsed in partial mode."""
    reply = json.dumps({"Action": "Pass", "reason": "D1:1 says it", "confidence": 0.9})
    for run in (graph.invoke, lambda payload, context: streamed(payload, context)):
        for text in (reply, f"```json\n{reply}\n```"):
            stub.reset()
            stub.by_role["judge"] = Scripted(content=text, no_finish=True)
            result = run({"question": QUESTION}, context=wired(stub, memory_dir))
            assert labels(result["trace"])["judge"] == "model:openai:stub-model (json_schema)"

    stub.reset()
    stub.by_role["judge"] = Scripted(content=reply[:30], no_finish=True)  # [DONE] after half the object
    result = streamed({"question": QUESTION}, wired(stub, memory_dir))
    assert labels(result["trace"])["judge"].endswith("(a stream cut short))")

    stub.reset()
    stub.by_role["judge"] = Scripted(tool_args=reply, no_finish=True)
    result = streamed({"question": QUESTION}, wired(stub, memory_dir, structured_output="function_calling"))
    assert labels(result["trace"])["judge"].endswith("(a stream cut short))")


def test_a_reply_that_hit_its_length_limit_is_not_read(stub: OpenAIStub, memory_dir: Path) -> None:
    """`finish_reason: "length"` on a text reply: the draft before the cut validated and was taken."""
    stub.script(Scripted(content='Draft: {"Action": "Pass", "reason": "D1:1"}. Final: {"Action": "Retry", "rea',
                         finish="length"))
    result = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir, structured_output="text"))
    assert labels(result["trace"])["judge"] == ("offline (model output unusable: the reply was cut short "
                                                "(stop reason length))")


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


def test_a_chat_turn_the_model_fails_on_is_derived_before_the_error(stub: OpenAIStub, data_dir: Path) -> None:
    """A 401 during `chat` raised its one line after the turn was written ahead, and the turn stayed pending for
    good: a chat turn is not sent again. It is derived offline first, whichever role met the error; the next
    turns ask the model again."""
    memory = Memory("ann", data_dir=str(data_dir), model="openai:chat-model", base_url=stub.url, model_backoff=0.01)
    memory.chat("Hi, I'm Ann.", speaker="Ann")
    failed = "offline (model unavailable earlier in this run (HTTP 401))"
    for turn, text, role in (("T2", "I adopted a puppy named Coco last week.", None),
                             ("T3", "My sister Jane lives in Lisbon.", "facts")):
        stub.reset()
        if role is None:
            stub.script(status(401))  # the turn's first call
        else:
            stub.by_role[role] = status(401)  # the derive's own call
        with pytest.raises(ConfigError) as error:
            memory.chat(text, speaker="Ann")
        assert "\n" not in str(error.value) and 401 in stub.served
        store = memory.store
        assert store.state("pending_derive", []) == []
        facts = [f for f in store.all("fact") if f.id.startswith(f"fact:{turn}:")]
        assert facts and all(f.policy == failed for f in facts)
        assert store.get_one(f"raw:{turn}").context  # its note
    stub.reset()
    memory.chat("I started pottery classes on Monday.", speaker="Ann")
    assert {f.policy for f in memory.store.all("fact") if f.id.startswith("fact:T4:")} == {
        "model:openai:chat-model (json_schema)"}
    assert memory.consolidate().turns == 4  # none left out as still being derived


def test_the_reply_parser_takes_time_in_proportion_to_the_reply() -> None:
    """Unclosed braces (a model stuck in a loop), unclosed `<think>` tags and fences never closed took time in
    the square of the reply's length: 126 KB of `{"ids": [` over two minutes. A stray brace and a quote in
    the prose before the answer still leave the answer found."""
    from strata.agents import llm
    from strata.agents.judge import ModelVerdict
    from strata.agents.llm import parse_json
    from strata.agents.working import ModelAnswer

    looping = '{"Action": "Pass", "conflicts": [' + '{"ids": ['
    for reply in (looping * 4_500, "{" * 40_000, "<think>" * 6_000, "```json\n{" * 4_000, '{"' * 20_000,
                  looping * 100_000):  # 40 KB each (the first took 10 s), then 900 KB
        started = time.perf_counter()
        parsed, _ = parse_json(reply, ModelVerdict)
        assert parsed is None and time.perf_counter() - started < 2.0
    answer, _ = parse_json('I write {" to begin an object. Final: {"answer": "Boston", "cited_ids": ["D1:1"]}',
                           ModelAnswer)
    assert answer is not None and answer.answer == "Boston"
    nested, _ = parse_json('{"answer": "cut off", "draft": {"answer": "Denver"}', ModelAnswer)
    assert nested is not None and nested.answer == "Denver"  # the object closed inside one never closed
    most = llm.MAX_REPLY_CHARS  # past it, a reply is a model stuck in a loop
    assert parse_json(" " * most + '{"answer": "x"}', ModelAnswer) == (
        None, f"the reply is too long ({most + 15:,} characters; {most:,} at most are read)")


def test_model_timeout_limits_the_whole_call(stub: OpenAIStub, memory_dir: Path) -> None:
    """A server that sends its headers and then a byte every 0.2 s never let a read time out: the call lasted
    as long as it trickled. The call ends at `model_timeout` and is retried like any timeout."""
    stub.script(trickle(0.2))
    started = time.perf_counter()
    result = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir, name="trickled", model_timeout=1.0,
                                                               model_retries=0))
    assert time.perf_counter() - started < 4.0  # the server trickles for 6 s
    judge = labels(result["trace"])["judge"]
    assert judge.startswith("offline (model unavailable (") and "Timeout" in judge
