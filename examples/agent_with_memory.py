"""An app's own LangGraph graph with the memory graph inside it as a subgraph.

The app keeps a chat (`messages`) and, for every user message:

    listen   -> the last user message becomes the memory's `question`
    recall   -> the compiled memory graph itself, added as a node (a subgraph):
                research, judge (with its Retry rounds) and working run inside it
                and hand back validated `evidence`, `cited_ids` and an `answer`
    respond  -> the app's chat model answers from that evidence, citing its ids
                (with no model, the memory's own answer is the reply)
    remember -> the user's message is stored through the memory graph's ingest mode

The app's runtime context is the memory's `Context` (namespace, data folder,
budgets), so the subgraph reads the same settings; `mode` must be "ask" for
the recall step. With a SQLite checkpointer the chat continues after a restart.

Run it (offline: the memory's offline policies and a scripted fake chat model):

    .venv/bin/python examples/agent_with_memory.py
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from importlib.resources import as_file
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from strata.graph import Context, Evidence, build_graph
from strata.graph.state import RoleNote
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


def build_app(chat_model: BaseChatModel | None = None, **compile_kwargs: Any) -> Any:
    """The app graph; pass `checkpointer=` (see `strata.checkpoint`) to keep threads across restarts."""
    memory_graph = build_graph()

    def listen(state: AppState) -> dict[str, Any]:
        last = next((m for m in reversed(state.get("messages", [])) if isinstance(m, HumanMessage)), None)
        if last is None:
            raise ValueError("the app needs a user message: invoke it with {'messages': [('user', '...')]}")
        return {"question": str(last.content)}

    def respond(state: AppState) -> dict[str, Any]:
        evidence = state.get("evidence") or []
        if chat_model is None:
            reply = state.get("answer") or "I don't remember anything about that."
            return {"messages": [AIMessage(content=reply)]}
        lines = "\n".join(item.label or f"[{item.id}] {item.text}" for item in evidence) or "(nothing found)"
        prompt = [SystemMessage(content=ANSWER_PROMPT.format(evidence=lines)), *state.get("messages", [])]
        return {"messages": [chat_model.invoke(prompt)]}

    def remember(state: AppState, runtime: Runtime[Context]) -> dict[str, Any]:
        turn = Turn(speaker=state.get("user") or "user", text=state["question"])
        memory_graph.invoke({"turns": [turn]}, context=replace(runtime.context, mode="ingest"))
        return {}

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


def main(argv: list[str] | None = None) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    from strata import Memory
    from strata.checkpoint import sqlite_checkpointer
    from strata.conversations import load_turns
    from strata.demo import SAMPLE_CONVERSATION

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default="", help="memory folder (default: a temporary one)")
    parser.add_argument("--question", default="Who is Marco giving the blue bowl to?")
    parser.add_argument("--sessions", type=int, default=2, help="how many sessions of the sample to ingest first")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="strata-app-")

    memory = Memory("lena-and-marco", data_dir=data_dir)
    with as_file(SAMPLE_CONVERSATION) as sample:  # the conversation shipped inside the package
        conversation = load_turns(sample)
    report = memory.add([t for s in conversation.sessions[: args.sessions] for t in s.turns])
    print(f"stored {report.turns} turns of {SAMPLE_CONVERSATION.name} in {data_dir}")

    fake = GenericFakeChatModel(messages=iter([AIMessage(content="(a scripted fake model reply) See the evidence.")]))
    context = Context(namespace="lena-and-marco", mode="ask", data_dir=data_dir)
    thread = {"configurable": {"thread_id": "demo"}}
    for model, label in ((None, "memory's own offline answer"), (fake, "a fake chat model")):
        with sqlite_checkpointer(data_dir) as saver:
            app = build_app(chat_model=model, checkpointer=saver)
            result = app.invoke({"messages": [("user", args.question)], "user": "Lena"}, thread, context=context)
        print(f"\n== reply from {label} ==")
        print(result["messages"][-1].content)
        print("evidence:", ", ".join(item.id for item in result["evidence"]) or "(none)")
        print("roles:", " -> ".join(note.role for note in result["trace"]))
        print("messages on this thread so far:", len(result["messages"]))


if __name__ == "__main__":
    main()
