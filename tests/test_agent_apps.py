"""Where an app meets the memory: as a subgraph, as tools, with thread checkpoints.

Real LoCoMo turns (conv-26, the start of session 1) are ingested through the graph; the
only fake is the chat model (LangChain's GenericFakeChatModel, scripted with
tool calls where an agent is driven).
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from strata.graph import Context, build_graph
from strata.memory.errors import InputError
from strata.memory.records import Status
from strata.memory.registry import close_all

from strata import Memory
from strata.checkpoint import async_sqlite_checkpointer, checkpoint_path, sqlite_checkpointer, state_types
from strata.conversations import load_turns
from strata.tools import forget_request, memory_tools

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "conv-26"


def load_example() -> ModuleType:
    """examples/ is not a package: load the example app as a module, as `python examples/...` would."""
    name = "agent_with_memory"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "examples" / "agent_with_memory.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # LangGraph reads the state's type hints from the module
        spec.loader.exec_module(module)
    return sys.modules[name]


class ToolCallingFake(GenericFakeChatModel):
    """The scripted fake, accepting `bind_tools` as a real tool-calling model does."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFake:  # type: ignore[override]
        return self


class PromptRecorder(BaseCallbackHandler):
    """Keeps every message list the chat model was called with."""

    def __init__(self) -> None:
        self.prompts: list[list[BaseMessage]] = []

    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], **kwargs: Any) -> None:
        self.prompts.extend(messages)


def call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory, embedder: Any, locomo_dir: Path) -> Path:
    """conv-26's first 14 real turns (to Melanie's lake sunrise painting), ingested once for the module."""
    folder = tmp_path_factory.mktemp("conv-26") / "mem"
    conversation = load_turns(locomo_dir / "conv-26.json")
    Memory(NAMESPACE, data_dir=str(folder)).add(conversation.sessions[0].turns[:14])
    close_all()  # everything on disk, nothing held open: the folder can be copied
    return folder


@pytest.fixture
def memory(ingested: Path, data_dir: Path) -> Iterator[Memory]:
    """A private copy of the ingested memory, so each test may change it."""
    shutil.copytree(ingested, data_dir)
    yield Memory(NAMESPACE, data_dir=str(data_dir))


def tool_replies(messages: list[BaseMessage]) -> dict[str, str]:
    return {m.tool_call_id: str(m.content) for m in messages if isinstance(m, ToolMessage)}


# the memory graph inside an app's graph ------------------------------------------------------
def test_app_runs_the_memory_graph_as_a_subgraph(memory: Memory, data_dir: Path) -> None:
    example = load_example()
    recorder = PromptRecorder()
    model = GenericFakeChatModel(messages=iter([AIMessage(content="She painted a lake sunrise [D1:14].")]))
    app = example.build_app(chat_model=model)
    context = Context(namespace=NAMESPACE, mode="ask", data_dir=str(data_dir))
    payload = {"messages": [HumanMessage("What did Melanie paint last year?")], "user": "Caroline"}

    chunks = list(app.stream(payload, {"callbacks": [recorder]}, context=context, subgraphs=True,
                             stream_mode=["updates", "values"]))
    inner = [node for namespace, mode, data in chunks if mode == "updates" and namespace
             and namespace[0].startswith("recall:") for node in data]
    assert {"research", "judge", "working"} <= set(inner)  # the memory graph's roles ran inside the app
    result = [data for namespace, mode, data in chunks if mode == "values" and not namespace][-1]
    ids = [i for item in result["evidence"] for i in item.turn_ids()]
    assert "D1:14" in ids
    assert result["messages"][-1].content == "She painted a lake sunrise [D1:14]."
    system = recorder.prompts[-1][0].content
    assert "D1:14" in system and "lake sunrise" in system  # the app's model answered from memory's evidence

    # a question to the assistant is not stored: it says nothing about the user, and would come back as evidence
    assert memory.stats()["raw"]["active"] == 14 and result["remembered"] == []


def test_app_remembers_what_the_user_tells_as_their_dated_turn(memory: Memory, data_dir: Path) -> None:
    app = load_example().build_app()
    context = Context(namespace=NAMESPACE, mode="ask", data_dir=str(data_dir))
    told = app.invoke({"messages": [HumanMessage("I adopted a grey cat called Pixel yesterday.")], "user": "Caroline"},
                      context=context)
    [turn_id] = told["remembered"]
    [turn] = memory.get([turn_id])
    assert (turn.speaker, turn.text) == ("Caroline", "I adopted a grey cat called Pixel yesterday.") and turn.time
    assert told["messages"][-1].content == "Noted: I will remember that."
    asked = app.invoke({"messages": [HumanMessage("What is the name of my cat?")], "user": "Caroline"},
                       context=context)
    assert "Pixel" in str(asked["messages"][-1].content) and asked["remembered"] == []


def test_example_script_runs_offline(data_dir: Path, embedder: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by audit (runs/audit_docs, item 9): the script said "stored 21 turns" on a re-run that stored none,
    used one fixed namespace and thread, stored every question as a memory turn, and an empty message ended in
    a traceback."""
    main = load_example().main
    argv = ["--data-dir", str(data_dir), "--sessions", "1", "--message", "What class did Marco join?"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "memory of Lena: namespace 'users/Lena'" in printed and "stored 11 new turns" in printed
    assert "evidence: raw:D" in printed and "roles: research -> judge" in printed
    assert "remembered: nothing (the message only asks)" in printed
    assert "messages on thread 'Lena-1' so far: 2" in printed
    assert main([*argv, "--fake-model"]) == 0
    printed = capsys.readouterr().out
    assert "stored 0 new turns" in printed and "(11 of its 11 were stored before)" in printed  # honest on a re-run
    assert "(a scripted fake model reply)" in printed
    assert "messages on thread 'Lena-1' so far: 4" in printed  # the same conversation, continued
    assert main([*argv[:-1], "   "]) == 2  # an empty message: one line, no traceback
    assert capsys.readouterr().out.splitlines()[-1] == (
        "error: the message is empty: ask something, or tell something to remember")
    assert main(["--data-dir", str(data_dir), "--sessions", "1", "--user", "Ann"]) == 0
    assert "namespace 'users/Ann'" in capsys.readouterr().out  # another user, another memory


# tools -----------------------------------------------------------------------------------------
def test_tools_with_a_tool_calling_agent(memory: Memory) -> None:
    script = iter([
        call("remember", {"text": "I adopted a grey cat called Pixel yesterday.", "speaker": "Melanie"}, "c1"),
        call("search_memory", {"query": "What is the name of Caroline's cat?"}, "c2"),
        call("search_memory", {"query": "What did Melanie paint?"}, "c3"),
        AIMessage(content="Caroline's cat is Pixel; Melanie painted a lake sunrise."),
    ])
    agent = create_agent(ToolCallingFake(messages=script), tools=memory_tools(memory, speaker="Caroline"))
    result = agent.invoke({"messages": [HumanMessage("Remember my cat, then tell me about paintings.")]})
    replies = tool_replies(result["messages"])

    assert replies["c1"].startswith("Stored ") and "raw:" in replies["c1"]
    [pixel] = [r for r in memory.store.all("raw") if "Pixel" in r.text]
    assert pixel.speaker == "Caroline"  # the tools' speaker: a model never names who said it
    assert "Pixel" in replies["c2"] and "(id raw:" in replies["c2"]
    assert "lake sunrise" in replies["c3"] and "D1:14" in replies["c3"]
    assert result["messages"][-1].content.startswith("Caroline's cat is Pixel")


def test_tool_errors_go_back_to_the_model(memory: Memory) -> None:
    search = {t.name: t for t in memory_tools(memory)}["search_memory"]
    reply = search.invoke({"name": "search_memory", "args": {"query": ""}, "id": "x", "type": "tool_call"})
    assert isinstance(reply, ToolMessage) and "query" in str(reply.content)


@pytest.mark.parametrize(("arguments", "says"), [
    (("ann",), "memory_tools takes a strata Memory, not str: e.g. memory_tools(Memory('ann'), speaker='Ann')"),
    ((None,), "memory_tools takes a strata Memory, not NoneType"),
    (("memory", ""), "memory_tools speaker '' names nobody: give the name of who speaks, e.g. 'Ann'"),
    (("memory", " \u200b"), "memory_tools speaker ' \\u200b' names nobody"),
    (("memory", None), "memory_tools speaker must be text, a person's name, not NoneType"),
    (("memory", "x" * 201), "speaker has 201 characters, more than 200"),
    (("memory", "A\x00nn"), "memory_tools speaker 'A\\x00nn': holds a NUL character (\\x00) at character 2"),
])
def test_tools_built_for_no_memory_or_no_speaker_are_refused_when_built(
    memory: Memory, arguments: tuple[Any, ...], says: str
) -> None:
    """Found by audit: `memory_tools("ann")` built and raised AttributeError at the first call, and a speaker
    of '' (or None, or a NUL) built tools whose every remember and forget told the model of a speaker it
    cannot change. Each is one line now, where the app builds them."""
    given = [memory if value == "memory" else value for value in arguments]
    with pytest.raises(InputError) as error:
        memory_tools(*given)
    assert says in str(error.value) and "\n" not in str(error.value)


def test_forget_goes_through_the_refresher_and_undo_restores(memory: Memory) -> None:
    before = memory.retrieve("What did Melanie paint last year?")
    assert "D1:14" in before.evidence_ids()

    script = iter([
        call("forget", {"description": "the lake sunrise painting"}, "f1"),
        AIMessage(content="Done, I no longer remember the painting."),
    ])
    agent = create_agent(ToolCallingFake(messages=script), tools=memory_tools(memory, speaker="Melanie"))
    result = agent.invoke({"messages": [HumanMessage("Please forget the lake sunrise painting.")]})
    reply = tool_replies(result["messages"])["f1"]
    assert reply.startswith("Forgot ")

    deleted = [c for c in memory.history() if c.action.value == "delete"]
    assert deleted, reply
    assert all(f"change {c.id}:" in reply for c in deleted)
    assert reply.startswith(f"Forgot {len(deleted)} record(s)") and "update" not in reply  # the request's rewrite
    assert all(c.policy == "offline" and "forgotten on request" in c.reason for c in deleted)
    gone = {c.record_id for c in deleted}
    assert "raw:D1:14" in gone or any(r.startswith("fact:D1:14") for r in gone)
    assert all(r.status == Status.DELETED for r in memory.get(gone))
    after = memory.retrieve("What did Melanie paint last year?")
    assert not gone & {item.id for item in after.evidence}

    for change in deleted:
        memory.undo(change.id)
    assert all(r.status == Status.ACTIVE for r in memory.get(gone))
    assert "D1:14" in memory.retrieve("What did Melanie paint last year?").evidence_ids()


def test_the_forget_tool_acts_only_for_its_speaker(memory: Memory) -> None:
    """The painting is Melanie's memory: an agent acting for Caroline cannot make the memory forget it."""
    forget = {t.name: t for t in memory_tools(memory, speaker="Caroline")}["forget"]
    reply = forget.invoke({"description": "the lake sunrise painting"})
    assert reply.startswith("Nothing was forgotten: no record about Caroline matches")
    assert not [c for c in memory.history() if c.action.value == "delete"]


@pytest.mark.parametrize("description", ["\u200b\u200b\u200b", "please forget \u200b\u200b", "   \u2060 "])
def test_the_forget_tool_refuses_a_description_that_shows_nothing(memory: Memory, description: str) -> None:
    """Zero-width spaces passed the length check: the request was stored as a turn and deleted nothing."""
    forget = {t.name: t for t in memory_tools(memory, speaker="Melanie")}["forget"]
    before = memory.stats()
    reply = forget.invoke({"description": description})
    assert reply.startswith("Bad tool arguments: description: ") and "shows nothing to forget" in reply
    assert "\n" not in reply and memory.stats() == before  # nothing was written


def test_forget_request_wording() -> None:
    assert forget_request("that I live in Boston") == "Please forget that I live in Boston."
    assert forget_request("Delete my old phone number!") == "Delete my old phone number."


# thread checkpoints -------------------------------------------------------------------------------
def test_a_thread_continues_after_the_checkpointer_is_reopened(memory: Memory, data_dir: Path) -> None:
    example = load_example()
    context = Context(namespace=NAMESPACE, mode="ask", data_dir=str(data_dir))
    thread = {"configurable": {"thread_id": "caroline"}}
    with sqlite_checkpointer(data_dir) as saver:
        app = example.build_app(checkpointer=saver)
        app.invoke({"messages": [HumanMessage("What did Melanie paint last year?")]}, thread, context=context)
    assert checkpoint_path(data_dir).is_file()
    close_all()  # as after a restart

    with sqlite_checkpointer(data_dir) as saver:
        app = example.build_app(checkpointer=saver)
        kept = app.get_state(thread).values
        assert len(kept["messages"]) == 2 and kept["messages"][0].content == "What did Melanie paint last year?"
        assert any("D1:14" in item.turn_ids() for item in kept["evidence"])
        second = "When did Caroline go to the LGBTQ support group?"
        result = app.invoke({"messages": [HumanMessage(second)]}, thread, context=context)
    assert len(result["messages"]) == 4
    assert result["messages"][0].content == "What did Melanie paint last year?"
    assert result["question"] == second  # the new message is what memory was asked
    assert "D1:3" in result["cited_ids"]


def test_memory_graph_thread_state_survives_a_reopen(memory: Memory, data_dir: Path) -> None:
    thread = {"configurable": {"thread_id": "t-1"}}
    context = Context(namespace=NAMESPACE, mode="ask", data_dir=str(data_dir))
    with sqlite_checkpointer(data_dir) as saver:
        first = build_graph(checkpointer=saver).invoke({"question": "What did Melanie paint?"}, thread,
                                                       context=context)
    with sqlite_checkpointer(data_dir) as saver:
        app = build_graph(checkpointer=saver)
        state = app.get_state(thread)
        asked = [s.values.get("question") for s in app.get_state_history(thread)]
    assert state.values["question"] == "" and "What did Melanie paint?" in asked  # the input left with its run
    assert state.values["answer"] == first["answer"]
    assert [e.id for e in state.values["evidence"]] == [e.id for e in first["evidence"]]
    assert ("strata.graph.state", "Evidence") in state_types()


def test_async_checkpointer_keeps_a_thread(memory: Memory, data_dir: Path) -> None:
    thread = {"configurable": {"thread_id": "t-async"}}
    context = Context(namespace=NAMESPACE, mode="retrieve", data_dir=str(data_dir))

    async def scenario() -> tuple[list[str], list[str]]:
        async with async_sqlite_checkpointer(data_dir) as saver:
            first = await build_graph(checkpointer=saver).ainvoke({"question": "What did Melanie paint?"}, thread,
                                                                  context=context)
        async with async_sqlite_checkpointer(data_dir) as saver:
            state = await build_graph(checkpointer=saver).aget_state(thread)
        return [e.id for e in first["evidence"]], [e.id for e in state.values["evidence"]]

    before, after = asyncio.run(scenario())
    assert before and after == before
