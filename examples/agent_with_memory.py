"""An app's own LangGraph graph with the memory graph inside it as a subgraph.

The app keeps a chat (`messages`) per conversation, on a thread of its own, and a
memory per user, in a namespace of its own (`users/<user>`). For every user message:

    listen   -> the last user message becomes the memory's `question`
    recall   -> the compiled memory graph itself, added as a node (a subgraph):
                research, judge (with its Retry rounds) and working run inside it
                and hand back validated `evidence`, `cited_ids` and an `answer`
    respond  -> the app's chat model answers from that evidence, citing its ids
                (with no model, the memory's own answer is the reply)
    remember -> a message that tells something ("I moved to Lisbon last week.") is
                stored as the user's turn, dated now, through the memory graph's
                ingest mode. A message that only asks (a question to the assistant)
                is not stored: it says nothing about the user, and stored it would
                come back as evidence for later questions.

The app's runtime context is the memory's `Context` (namespace, data folder,
budgets), so the subgraph reads the same settings; `mode` must be "ask" for the
recall step. With a SQLite checkpointer a conversation continues after a restart.

What goes wrong is a `StrataError` of one line (an empty or too long message, a
memory folder that cannot be opened): `main` shows it instead of a traceback.

An async app awaits the same graph: `await app.ainvoke(...)`, with `remember` as an
`async def` node that awaits `memory_graph.ainvoke(...)`, so its event loop keeps
serving while the memory stores the turn.

Run it (offline: the memory's offline policies, or a scripted fake chat model):

    .venv/bin/python examples/agent_with_memory.py --data-dir app-memory
    .venv/bin/python examples/agent_with_memory.py --data-dir app-memory --message "I moved to Lisbon last week."
    .venv/bin/python examples/agent_with_memory.py --data-dir app-memory --message "Where do I live?" --fake-model
    .venv/bin/python examples/agent_with_memory.py --data-dir app-memory --user ann --thread ann-2
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from importlib.resources import as_file
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from strata.graph import Context, Evidence, build_graph
from strata.graph.state import RoleNote
from strata.memory.errors import InputError
from strata.memory.facts import asks, only_asks
from strata.memory.records import Turn

ANSWER_PROMPT = """You are a helpful assistant with a long-term memory.
Answer the user's last message from the memory evidence below. Cite the ids
you rely on in square brackets, e.g. [D1:3]. If the evidence does not hold the
answer, say that you do not remember.

Memory evidence:
{evidence}"""


class AppState(TypedDict, total=False):
    """The app's state; the keys it shares with the memory graph pass in and out of the subgraph."""

    messages: Annotated[list[AnyMessage], add_messages]
    user: str
    question: str  # memory graph input
    answer: str | None  # memory graph outputs
    evidence: list[Evidence]
    cited_ids: list[str]
    trace: list[RoleNote]
    remembered: list[str]  # the app's own: the turn `remember` stored for this message, if any


def namespace_of(user: str) -> str:
    """Each user's memory is a namespace of its own: one user's questions never read another's turns."""
    return f"users/{user}"


def build_app(chat_model: BaseChatModel | None = None, **compile_kwargs: Any) -> Any:
    """The app graph; pass `checkpointer=` (see `strata.checkpoint`) to keep threads across restarts."""
    memory_graph = build_graph()

    def listen(state: AppState) -> dict[str, Any]:
        last = next((m for m in reversed(state.get("messages", [])) if isinstance(m, HumanMessage)), None)
        if last is None:
            raise InputError("the app needs a user message: invoke it with {'messages': [('user', '...')]}")
        if not str(last.content).strip():
            raise InputError("the message is empty: ask something, or tell something to remember")
        return {"question": str(last.content), "remembered": []}

    def respond(state: AppState) -> dict[str, Any]:
        evidence = state.get("evidence") or []
        if chat_model is None:
            if not asks(state["question"]):  # told, not asked: the memory's answer would be "Not in memory."
                return {"messages": [AIMessage(content="Noted: I will remember that.")]}
            reply = state.get("answer") or "I don't remember anything about that."
            return {"messages": [AIMessage(content=reply)]}
        lines = "\n".join(item.label or f"[{item.id}] {item.text}" for item in evidence) or "(nothing found)"
        prompt = [SystemMessage(content=ANSWER_PROMPT.format(evidence=lines)), *state.get("messages", [])]
        return {"messages": [chat_model.invoke(prompt)]}

    def remember(state: AppState, runtime: Runtime[Context]) -> dict[str, Any]:
        if only_asks(state["question"]):  # the memory's own rule for a turn that asks and states nothing
            return {}
        turn = Turn(speaker=state.get("user") or "user", text=state["question"], time=datetime.now(UTC))
        stored = memory_graph.invoke({"turns": [turn]}, context=replace(runtime.context, mode="ingest"))
        return {"remembered": [i for i in stored.get("stored_ids", []) if i.startswith("raw:")]}

    app = StateGraph(AppState, context_schema=Context)
    app.add_node("listen", listen)
    app.add_node("recall", memory_graph)  # the compiled memory graph as a subgraph
    app.add_node("respond", respond)
    app.add_node("remember", remember)
    app.add_edge(START, "listen")
    app.add_edge("listen", "recall")
    app.add_edge("recall", "respond")
    app.add_edge("respond", "remember")
    app.add_edge("remember", END)
    compiled = app.compile(**compile_kwargs)
    compiled.name = "agent_with_memory"
    return compiled


def main(argv: list[str] | None = None) -> int:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    from strata import Memory, StrataError
    from strata.checkpoint import sqlite_checkpointer
    from strata.conversations import load_turns
    from strata.demo import SAMPLE_CONVERSATION

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default="", help="memory folder (default: a temporary one)")
    parser.add_argument("--user", default="Lena", help="who is talking; their memory is the namespace users/<user>")
    parser.add_argument("--thread", help="the conversation: its messages are kept on this thread (default <user>-1)")
    parser.add_argument("--message", default="Who is Marco giving the blue bowl to?", help="what the user says")
    parser.add_argument("--fake-model", action="store_true",
                        help="reply with a scripted fake chat model (default: the memory's own offline answer)")
    parser.add_argument("--sessions", type=int, default=2, help="how many sessions of the sample to store first")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="strata-app-")
    namespace = namespace_of(args.user)
    thread_id = args.thread or f"{args.user}-1"

    try:
        # the user's earlier chats: the sample's first sessions (stored once; a re-run skips them)
        with as_file(SAMPLE_CONVERSATION) as sample:  # the conversation shipped inside the package
            conversation = load_turns(sample)
        report = Memory(namespace, data_dir=data_dir).add(
            [t for s in conversation.sessions[: args.sessions] for t in s.turns])
        new = [i for i in report.stored_ids if i.startswith("raw:")]
        print(f"memory of {args.user}: namespace {namespace!r} in {data_dir}")
        print(f"stored {len(new)} new turns of {SAMPLE_CONVERSATION.name} "
              f"({report.turns - len(new)} of its {report.turns} were stored before)")

        model = GenericFakeChatModel(messages=iter([AIMessage(content="(a scripted fake model reply) See the "
                                                                      "evidence.")])) if args.fake_model else None
        context = Context(namespace=namespace, mode="ask", data_dir=data_dir)
        thread = {"configurable": {"thread_id": thread_id}}
        with sqlite_checkpointer(data_dir) as saver:
            app = build_app(chat_model=model, checkpointer=saver)
            result = app.invoke({"messages": [("user", args.message)], "user": args.user}, thread, context=context)
    except StrataError as error:  # one line, as every error of the memory is
        print(f"error: {error}")
        return 2
    print(f"\n== {args.user}: {args.message}")
    print(f"== reply from {'a fake chat model' if args.fake_model else 'the memory (offline answer)'} ==")
    print(result["messages"][-1].content)
    print("evidence:", ", ".join(item.id for item in result["evidence"]) or "(none)")
    print("roles:", " -> ".join(note.role for note in result["trace"]))
    print("remembered:", ", ".join(result.get("remembered") or []) or "nothing (the message only asks)")
    print(f"messages on thread {thread_id!r} so far:", len(result["messages"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
