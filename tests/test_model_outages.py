"""A chat model's server failing the way real providers fail, against the real `langchain-openai` client.

The loopback server is `tests/openai_stub.py`, as in `test_model_wire.py` (whose helpers these tests share).
Covered: a model that stays down is kept out for the rest of an `add` (not waited for again on every turn); a
used-up quota (429 `insufficient_quota`) is one line of error, not retried; the waits on Retry-After are
bounded per call; a provider's message never brings a key into an error, a label or a checkpoint; a key set
after a 401 is the one sent; a 404 that goes away does not make the model text-only; a 403's hint, a refusal,
and a reply cut off at the length limit are each said in one clean line.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
import test_model_wire
from openai_stub import OpenAIStub, Scripted, broken, status
from strata.agents.llm import chat_model
from strata.graph.graph import build_graph, graph
from strata.memory.errors import ConfigError
from test_model_wire import QUESTION, TURNS, formats, labels, wired

from strata.api import Memory

KEY = "sk-fake-AUDIT-4f9c2b7e1d3a5c8e0b6f9a2d-wxyz"
MASKED_KEY = f"{KEY[:8]}{'*' * (len(KEY) - 12)}{KEY[-4:]}"  # as OpenAI's 401 message shows a key
memory_dir = test_model_wire.memory_dir  # the wire tests' fixtures: Ann's memory (two turns stored offline),
stub = test_model_wire.stub  # and the server, one per module
MORE = [
    {"speaker": "Ann", "listener": "Ben", "text": "I adopted a puppy named Coco last week.", "dia_id": "D1:3",
     "time": "2023-06-01 10:02"},
    {"speaker": "Ben", "listener": "Ann", "text": "Coco is a lovely name. I started pottery classes.",
     "dia_id": "D1:4", "time": "2023-06-01 10:03"},
]


@pytest.fixture(autouse=True)
def fresh_stub(stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty script and log per test, and a key shaped like a real one (this test's environment only)."""
    stub.reset()
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def completion_of(message: dict[str, Any], finish: str = "stop") -> Scripted:
    """A 200 whose one choice is `message` (a refusal, a reply cut off)."""
    return broken({"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "m",
                   "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})


def test_a_model_down_during_an_add_is_kept_out_for_the_rest_of_it(stub: OpenAIStub, data_dir: Path) -> None:
    """Every turn used to start with the model given another chance: each waited through the first role's
    retries again (7 s a turn at the defaults while a server answers 503: 36 min over 300 turns)."""
    stub.script(*[status(503)] * 40)
    memory = Memory("ann", data_dir=str(data_dir), model="openai:down-model", base_url=stub.url,
                    model_backoff=0.01, model_retries=1)
    memory.add([*TURNS, *MORE], end_session=True)
    assert stub.served == [503, 503]  # the first role of the first turn (its Judge) and its retry; nothing after
    policies = {f.id: f.policy for f in memory.store.all("fact")}
    assert {turn.split(":")[1] + ":" + turn.split(":")[2] for turn in policies} == {"D1:1", "D1:2", "D1:3", "D1:4"}
    assert set(policies.values()) == {
        "offline (model unavailable earlier in this run (HTTP 503; gave up after 1 retries))"}
    assert memory.store.state("pending_derive", []) == []
    # the next call gives the model another chance
    stub.reset()
    memory.add([{"speaker": "Ann", "listener": "Ben", "text": "I started a new job at the library.",
                 "dia_id": "D2:1", "time": "2023-06-02 10:00"}])
    assert stub.served and set(stub.served) == {200}
    assert memory.get(["fact:D2:1:0"])[0].policy == "model:openai:down-model (json_schema)"


def test_a_used_up_quota_is_one_line_and_not_retried(stub: OpenAIStub, memory_dir: Path) -> None:
    """A 429 `insufficient_quota` is a billing problem no wait fixes: like a 401, not like a rate limit."""
    stub.script(Scripted(status=429, content="You exceeded your current quota, please check your plan and billing "
                         "details.", error_code="insufficient_quota", headers={"Retry-After": "1"}))
    with pytest.raises(ConfigError) as error:
        graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir, name="quota-model"))
    message = str(error.value)
    assert "\n" not in message and "quota is used up" in message and "insufficient_quota" in message
    assert len(stub.requests) == 1  # not retried
    # a plain rate limit is still waited for and retried
    stub.reset()
    stub.script(Scripted(status=429, content="Rate limit reached", error_code="rate_limit_exceeded"))
    result = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir, name="quota-model"))
    assert stub.served[:2] == [429, 200] and labels(result["trace"])["judge"].endswith("(json_schema)")


def test_the_waits_on_retry_after_are_bounded_per_call(
    stub: OpenAIStub, memory_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each Retry-After under the ceiling used to be honoured on every retry: Retry-After 60 held one question
    (one stored turn) 3 minutes. Past `RETRY_AFTER_TOTAL` in all, the call falls back like one that is down."""
    from strata.agents import llm, wire

    monkeypatch.setattr(wire, "RETRY_AFTER_TOTAL", 1.0, raising=False)  # a second in all, for the test's sake
    monkeypatch.setattr(llm, "RETRY_AFTER_TOTAL", 1.0, raising=False)
    stub.script(*[status(429, {"Retry-After": "0.6"})] * 4)
    result = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir, model_retries=3))
    assert stub.served == [429, 429]  # waited 0.6 s once; a second wait would pass 1 s in all
    got = labels(result["trace"])
    assert got["judge"] == ("offline (model unavailable (HTTP 429; its Retry-After waits would pass 1 s in all "
                            "(waited 1 s)))")
    assert got["working"].startswith("offline (model unavailable earlier in this run")
    monkeypatch.undo()
    assert wire.backoff(0, 1.0, 30.0, waited=30.0) == 30.0
    assert wire.backoff(0, 1.0, 30.0, waited=wire.RETRY_AFTER_TOTAL - 29.0) is None


def test_no_key_reaches_an_error_a_label_or_a_checkpoint(stub: OpenAIStub, memory_dir: Path) -> None:
    """A provider's 401 message shows the key (OpenAI masked, a gateway whole): the error is printed, saved by a
    checkpointer as the run's error, and returned by a server, so it says what to do without quoting it."""
    from strata.checkpoint import sqlite_checkpointer

    for message in (f"Incorrect API key provided: {MASKED_KEY}. You can find your API key at https://x",
                    f"Invalid API key: {KEY}"):
        stub.reset()
        stub.script(Scripted(status=401, content=message, error_code="invalid_api_key"))
        with pytest.raises(ConfigError) as error:
            graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir))
        said = str(error.value)
        assert "OPENAI_API_KEY" in said and "AuthenticationError" in said and "HTTP 401" in said
        assert KEY not in said and "****" not in said and "wxyz" not in said and "Incorrect API key" not in said

    stub.reset()
    stub.script(Scripted(status=401, content=f"Invalid API key: {KEY}", error_code="invalid_api_key"))
    folder = memory_dir.parent / "checkpointed"
    folder.mkdir(exist_ok=True)
    with sqlite_checkpointer(str(folder)) as saver, pytest.raises(ConfigError):
        build_graph(checkpointer=saver).invoke({"question": QUESTION}, {"configurable": {"thread_id": "t1"}},
                                               context=wired(stub, memory_dir))
    saved = b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())
    assert b"refused the API key" in saved  # the run's error is saved, without the key
    assert KEY.encode() not in saved and KEY[-20:].encode() not in saved

    # a message quoted elsewhere (a label, another error) has its key-like tokens left out whole
    from strata.agents.llm import masked

    hidden = "denied for [hidden], header Bearer [hidden]"
    assert masked(f"denied for {MASKED_KEY}, header Bearer abc.def-123") == hidden
    assert masked("request 0f3c9a7e5b1d2f4a8c6e0b9d failed") == "request [hidden] failed"
    assert masked("key AKIAIOSFODNN7EXAMPLEKEY/abc+d= leaked") == "key [hidden] leaked"
    kept = "model gpt-4o-mini-2024-07-18 at /v1/chat/completions: context_length_exceeded (8192 tokens)"
    assert masked(kept) == kept
    os.environ["SOME_GATEWAY_TOKEN"] = "gw-token-that-is-plain"  # a key of the environment, whatever its shape
    try:
        assert masked("sent gw-token-that-is-plain") == "sent [hidden]"
    finally:
        del os.environ["SOME_GATEWAY_TOKEN"]


def test_a_key_changed_after_a_401_is_the_one_sent(
    stub: OpenAIStub, memory_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clients were cached per process with the key read when each was built: the key set after the 401's
    "set the provider's API key" was not sent until the process restarted."""
    context = wired(stub, memory_dir, name="rotated-model")
    first = chat_model(context)
    assert first is chat_model(context)  # cached while nothing changes
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-the-new-key-new1")
    second = chat_model(context)
    assert second is not first and second.openai_api_key.get_secret_value() == "sk-test-the-new-key-new1"

    stub.script(status(401))  # a 401 drops the client: the next call builds it again, whatever the key
    with pytest.raises(ConfigError):
        graph.invoke({"question": QUESTION}, context=context)
    third = chat_model(context)
    assert third is not second
    result = graph.invoke({"question": QUESTION}, context=context)
    assert labels(result["trace"])["judge"] == "model:openai:rotated-model (json_schema)"


def test_a_404_that_goes_away_leaves_structured_output_on(stub: OpenAIStub, memory_dir: Path) -> None:
    """A 404 on a structured request (a router's blip, a model still loading) used to make the model text-only
    for the life of the process once the same prompt in text was answered."""
    stub.script(Scripted(status=404, content="The model `blip-model` does not exist or you do not have access to it.",
                         error_code="model_not_found"))
    context = wired(stub, memory_dir, name="blip-model")
    first = graph.invoke({"question": QUESTION}, context=context)
    assert labels(first["trace"])["judge"] == "model:openai:blip-model (text; json_schema refused (HTTP 404))"
    stub.reset()
    later = graph.invoke({"question": QUESTION}, context=context)
    assert [kind for _, kind, _ in formats(stub)] == ["json_schema", "json_schema"]
    assert set(labels(later["trace"]).values()) >= {"model:openai:blip-model (json_schema)"}

    # a server that says it has no structured output is still asked in text from then on
    stub.reset()
    stub.script(Scripted(status=404, content="response_format is not supported on this route"))
    graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir, name="no-structured-model"))
    stub.reset()
    graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir, name="no-structured-model"))
    assert [kind for _, kind, _ in formats(stub)] == ["text", "text"]


def test_a_403_is_about_access_to_the_model(stub: OpenAIStub, memory_dir: Path) -> None:
    """The key was accepted: setting it again does not help, giving it access to the model does."""
    stub.script(Scripted(status=403, content="You are not allowed to sample from this model"))
    with pytest.raises(ConfigError) as error:
        graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir))
    said = str(error.value)
    assert "HTTP 403" in said and "access to the model" in said and "API key (e.g." not in said


def test_a_refusal_is_labelled_a_refusal(stub: OpenAIStub, memory_dir: Path) -> None:
    stub.script(completion_of({"role": "assistant", "content": None, "refusal": "I can't help with that."}))
    result = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir))
    assert labels(result["trace"])["judge"] == "offline (model output unusable: the model refused to answer)"


def test_a_reply_cut_off_is_one_clean_label_and_one_log_line(
    stub: OpenAIStub, memory_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The label was the client's error text, a usage repr cut at 160 characters, stored as the policy of facts
    and history rows; and each such reply logged a whole traceback."""
    stub.script(completion_of({"role": "assistant", "content": '{"Action": "Pass", "confidence": 0.9, "conf'},
                              finish="length"))
    with caplog.at_level(logging.DEBUG, logger="strata.agents.llm"):
        result = graph.invoke({"question": QUESTION}, context=wired(stub, memory_dir))
    assert labels(result["trace"])["judge"] == (
        "offline (model output unusable: the reply was cut off at the length limit)")  # not a usage repr
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "strata.agents.llm"]
    assert len(warnings) == 1 and warnings[0].exc_info is None and "\n" not in warnings[0].getMessage()
