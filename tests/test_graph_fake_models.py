"""The graph with a chat model: LangChain's fake chat model scripted per role.

`RoleModel` answers each role from its own script, chosen by the system prompt
the role sends (facts, episode boundary, episode narrative, research plan,
judge verdict, refresher action, answer), so one run exercises every role's
model policy through `Context(chat_model=...)`. Covered: a Pass path on LoCoMo
turns, a Retry loop bounded by K_r, Refresh paths that update and delete,
malformed replies for every role (each output labelled with the policy that
produced it: the model, or the offline fallback and why), and a model server
that cannot be reached: the offline policies after its retries, said in the trace.
No connection leaves the machine: every socket connect is checked.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from openai_stub import ROLE_OF_SYSTEM_PROMPT, current_input
from pydantic import Field
from strata.graph.context import Context
from strata.graph.graph import graph
from strata.graph.state import RoleNote
from strata.memory.records import Status
from strata.memory.registry import close_all

from strata.api import Memory
from strata.conversations import load_turns

MODEL = "model:RoleModel"
FALLBACK = "offline (model output unusable: "
PLAN_NOT_ASKED = "offline (model not asked: the question leaves no one to resolve)"
PLAN_NOT_ASKED_INGEST = "offline (model not asked: a stored turn is searched by its own words)"
Reply = str | Callable[[str], str]


# --- the scripted model ------------------------------------------------------------------------------

def leads(changes: list[Any]) -> list[Any]:
    """The changes the Refresher decided, without the persona traits retired along with their facts."""
    return [c for c in changes if not c.record_id.startswith("persona:")]

def plan_for(prompt: str) -> str:
    return json.dumps({
        "rewrite_query": current_input(prompt),
        "intent_vector": {"b_fine": 0, "b_abs": 0, "b_event": 0, "b_atomic": 1},
        "memory_type": "fact", "K_dyn": 4,
    })


DEFAULTS: dict[str, Reply] = {
    "facts": json.dumps({"facts": [], "related_id": [], "timestamp": "empty"}),
    "boundary": json.dumps({"T_t": 0, "reason": "same topic", "confidence": 0.8, "topic_summary": "catching up"}),
    "episode": json.dumps({"title": "Catching up", "content": "Two friends caught up.", "timestamp": "empty"}),
    "plan": plan_for,
    "subquestion": json.dumps({"question": "What is the name of Ann's dog?"}),
    "judge": json.dumps({"Action": "Pass", "reason": "the items state it", "confidence": 0.9, "conflicts": []}),
    "refresh": json.dumps({"Action": "No-Op", "memory_type": "fact", "dataList": [], "reason": "nothing to change"}),
    "answer": json.dumps({"answer": "Not in memory.", "cited_ids": []}),
    "note": json.dumps({"entities": [], "keywords": [], "tags": [], "context": "a turn", "links": [], "evolve": []}),
    "causal": json.dumps({"links": []}),
    "summary": json.dumps({"title": "A topic", "content": "What the turns say."}),
}


class RoleModel(GenericFakeChatModel):
    """A fake chat model that answers each role from its own script (the last reply repeats)."""

    messages: Iterator[AIMessage | str] = Field(default_factory=lambda: iter(()))
    scripts: dict[str, list[Reply]] = Field(default_factory=dict)
    prompts: list[tuple[str, str]] = Field(default_factory=list, description="(role, user prompt) of every call")

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        system = next(str(m.content) for m in messages if isinstance(m, SystemMessage))
        role = ROLE_OF_SYSTEM_PROMPT[system]
        user = str(messages[-1].content)
        self.prompts.append((role, user))
        script = self.scripts.get(role) or [DEFAULTS[role]]
        reply = script.pop(0) if len(script) > 1 else script[0]
        text = reply(user) if callable(reply) else reply
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    def calls(self, role: str) -> list[str]:
        return [user for r, user in self.prompts if r == role]


def facts_by_turn(facts: dict[str, list[dict[str, str]]]) -> Callable[[str], str]:
    """The facts reply for whichever turn the prompt names ("Current turn [D1:3]: ...")."""
    def reply(prompt: str) -> str:
        found = re.search(r"Current turn \[([^\]]+)\]", prompt)
        listed = facts.get(found.group(1) if found else "", [])
        return json.dumps({"facts": listed, "related_id": [], "timestamp": "empty"})
    return reply


# --- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Refuse (and record) every socket connect to an address that is not this machine."""
    refused: list[object] = []
    real_connect = socket.socket.connect

    def guarded(sock: socket.socket, address: Any) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0]
            try:
                local = ipaddress.ip_address(host).is_loopback
            except ValueError:
                local = host == "localhost"
            if not local:
                refused.append(address)
                raise OSError(f"test forbids network access to {address!r}")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    yield refused
    assert refused == [], f"tried to reach the network: {refused}"


def ctx(data_dir: Path, mode: str, model: RoleModel | None = None, namespace: str = "ann", **kw: Any) -> Context:
    return Context(namespace=namespace, mode=mode, data_dir=str(data_dir), chat_model=model, **kw)  # type: ignore[arg-type]


def policies(trace: list[RoleNote], role: str) -> list[str]:
    return [n.policy for n in trace if n.role == role]


def turn(text: str, dia_id: str, time: str, speaker: str = "Ann", listener: str = "Ben") -> dict[str, str]:
    return {"speaker": speaker, "text": text, "dia_id": dia_id, "time": time, "listener": listener}


BOSTON = turn("I live in Boston.", "D1:1", "2023-05-08T10:00")
SPRING = turn("Boston is lovely in spring!", "D1:2", "2023-05-08T10:01", "Ben", "Ann")
DENVER = turn("I moved to Denver last month.", "D1:3", "2023-07-03T10:00")
# "By the way" closes the open episode offline too (an explicit transition), so the episode writer is always asked
MOVED = turn("By the way, I moved to Denver last month.", "D1:3", "2023-07-03T10:00")
BOSTON_FACT = {"content": "Ann lives in Boston.", "subject": "Ann", "attribute": "lives_in", "value": "Boston"}
DENVER_FACT = {"content": "Ann moved to Denver in June 2023.", "subject": "Ann", "attribute": "lives_in",
               "value": "Denver"}


@pytest.fixture
def boston(data_dir: Path, embedder: Any) -> Path:
    """Ann's memory with "I live in Boston." (and Ben's reply) stored by the offline policies."""
    graph.invoke({"turns": [BOSTON, SPRING]}, context=ctx(data_dir, "ingest"))
    return data_dir


# --- Pass on LoCoMo turns ------------------------------------------------------------------------------
def test_pass_path_with_the_model_for_every_role(data_dir: Path, embedder: Any, locomo_dir: Path) -> None:
    turns = list(load_turns(locomo_dir / "conv-26.json").sessions[0].turns)[:5]
    went = {"content": "Caroline went to an LGBTQ support group on 7 May 2023.", "subject": "Caroline",
            "attribute": "attended", "value": "LGBTQ support group"}
    model = RoleModel(scripts={
        "facts": [facts_by_turn({"D1:3": [went]})],
        "answer": [json.dumps({"answer": "On 7 May 2023", "cited_ids": ["D1:3"]})],
    })
    stored: dict[str, Any] = {}
    every: list[RoleNote] = []  # an ingest's trace is its turn's: each derive's update holds the turn's whole
    for kind, data in graph.stream({"turns": turns}, context=ctx(data_dir, "ingest", model, "conv-26"),
                                   stream_mode=["updates", "values"]):
        if kind == "values":
            stored = data
        elif "memory" in data and data["memory"].get("stage") in ("stored", "done"):
            every += data["memory"]["trace"]
    assert stored["stored_ids"] == ["raw:D1:1", "raw:D1:2", "raw:D1:3", "fact:D1:3:0", "raw:D1:4", "raw:D1:5"]
    assert set(policies(every, "judge")) == {MODEL}
    assert set(policies(every, "research")) == {PLAN_NOT_ASKED_INGEST}  # a turn is searched by its words
    assert policies(every, "memory").count(MODEL) == 5  # one derive per turn; intake is always offline
    assert policies(stored["trace"], "memory") == ["offline", MODEL]  # the run ends with its last turn's trace
    graph_notes = [n.summary for n in every if "; graph by " in n.summary]
    assert len(graph_notes) == 5 and all(f"; graph by {MODEL}: " in s for s in graph_notes)  # one note call per turn
    # the facts prompt carried the session date, the speakers and the turn itself
    prompt = next(p for p in model.calls("facts") if "[D1:3]" in p)
    assert "Session date: 2023-05-08 13:56" in prompt
    assert "Speaker: Caroline" in prompt and "Listener: Melanie" in prompt
    assert prompt.endswith("Current turn [D1:3]: I went to a LGBTQ support group yesterday and it was so powerful.")
    assert len(model.calls("boundary")) == 4  # every turn after the first of the open episode

    memory = Memory("conv-26", data_dir=str(data_dir))
    fact = memory.get(["fact:D1:3:0"])[0]
    assert fact.text == went["content"] and fact.policy == MODEL and fact.source_ids == ["D1:3"]
    result = graph.invoke({"question": "When did Caroline go to the LGBTQ support group?"},
                          context=ctx(data_dir, "ask", model, "conv-26"))
    assert result["answer"] == "On 7 May 2023" and result["cited_ids"] == ["D1:3"]
    assert [(n.role, n.policy) for n in result["trace"]] == [
        ("research", PLAN_NOT_ASKED), ("judge", MODEL), ("working", MODEL)]  # the question names Caroline
    assert model.calls("plan") == []
    assert result["verdict"].action == "Pass" and result["rounds"] == 1
    assert "(8 May 2023)\n[D1:1] Caroline:" in model.calls("answer")[-1]  # a date heading, then its lines
    assert "\n[D1:3] Caroline: I went to a LGBTQ support group" in model.calls("answer")[-1]


# --- Retry bounded by K_r ------------------------------------------------------------------------------
@pytest.mark.parametrize("k_r", [0, 2])
def test_retry_stops_at_k_r_when_the_judge_keeps_asking(boston: Path, k_r: int) -> None:
    retry = json.dumps({"Action": "Retry", "reason": "no pet is named", "confidence": 0.7, "conflicts": []})
    model = RoleModel(scripts={"judge": [retry]})
    result = graph.invoke({"question": "What is the name of Ann's dog?"}, context=ctx(boston, "ask", model, k_r=k_r))
    assert [n.role for n in result["trace"]] == ["research", "judge"] * (k_r + 1) + ["working"]
    assert result["rounds"] == k_r + 1 and result["verdict"].action == "Retry"
    assert result["notes"] == [f"Retry budget K_r={k_r} used up: answering from what was found"]
    # the last round's Judge could only let the answer go ahead: the offline verdict stands, no model call
    assert len(model.calls("plan")) == 0 and len(model.calls("judge")) == k_r and len(model.calls("answer")) == 1
    assert policies(result["trace"], "judge") == [MODEL] * k_r + ["offline (model not asked: no Retry round left)"]
    assert result["answer"] == "Not in memory."


# --- Refresh: update and delete -------------------------------------------------------------------------
def test_refresh_path_updates_through_the_model(data_dir: Path, embedder: Any) -> None:
    refresh = {"Action": "Refresh", "reason": "Ann moved", "confidence": 0.9, "conflicts": [["fact:D1:1:0", "new"]]}
    update = {"Action": "Update", "memory_type": "fact", "timestamp": "2023-07-03 10:00", "reason": "Ann moved",
              "dataList": [{"id": "fact:D1:1:0", "new_content": "Ann lives in Denver."}]}
    model = RoleModel(scripts={
        "facts": [facts_by_turn({"D1:1": [BOSTON_FACT], "D1:3": [DENVER_FACT]})],
        "judge": [DEFAULTS["judge"], DEFAULTS["judge"], json.dumps(refresh)],
        "refresh": [json.dumps(update)],
    })
    graph.invoke({"turns": [BOSTON, SPRING]}, context=ctx(data_dir, "ingest", model))
    result = graph.invoke({"turns": [DENVER]}, context=ctx(data_dir, "ingest", model))
    assert [n.role for n in result["trace"]] == ["memory", "research", "judge", "refresher", "memory"]
    assert policies(result["trace"], "refresher") == [MODEL]
    [change] = leads(result["changes"])
    assert (change.action, change.record_id, change.policy) == ("update", "fact:D1:1:0", MODEL)
    assert (change.old_text, change.new_text) == ("Ann lives in Boston.", "Ann lives in Denver.")
    memory = Memory("ann", data_dir=str(data_dir))
    assert memory.get(["fact:D1:1:0"])[0].text == "Ann lives in Denver."
    [entry] = memory.history("fact:D1:1:0")
    assert entry.policy == MODEL and entry.old_text == "Ann lives in Boston."
    memory.undo(entry.id)
    assert memory.get(["fact:D1:1:0"])[0].text == "Ann lives in Boston."
    # the refresher was shown the conflict group and the new turn
    assert "fact:D1:1:0 | 2023-05-08 | fact | Ann lives in Boston." in model.calls("refresh")[0]


def test_the_judge_names_only_records_it_was_shown(data_dir: Path, embedder: Any, locomo_dir: Path) -> None:
    """A conflict group naming a record the Judge never saw is dropped: text the model read could otherwise
    have the Refresher rewrite any record of the namespace (another person's fact, by id)."""
    turns = [t.model_dump() for s in load_turns(locomo_dir / "conv-26.json").sessions[:3] for t in s.turns]
    graph.invoke({"turns": turns}, context=ctx(data_dir, "ingest", namespace="conv-26"))
    store = Memory("conv-26", data_dir=str(data_dir)).store
    facts = [f.id for f in store.all("fact")]
    named: list[str] = []  # by each judge call: a fact of a turn its prompt did not show

    def refresh_an_unseen_fact(prompt: str) -> str:
        shown = set(re.findall(r"\bD\d+:\d+\b", prompt))
        named.append(next(i for i in facts if i.split(":")[1] + ":" + i.split(":")[2] not in shown))
        return json.dumps({"Action": "Refresh", "reason": "a note says so", "confidence": 1.0,
                           "conflicts": [[named[-1], "new"]]})

    update = {"Action": "Update", "memory_type": "fact", "reason": "a note says so",
              "dataList": [{"id": i, "new_content": "Nothing is true."} for i in facts]}
    model = RoleModel(scripts={"judge": [refresh_an_unseen_fact], "refresh": [json.dumps(update)]})
    said = {"speaker": "Melanie", "text": "I'm making a peanut curry tonight.", "dia_id": "D9:1"}
    result = graph.invoke({"turns": [said]}, context=ctx(data_dir, "chat", model, namespace="conv-26"))
    assert named and all(store.get_one(i).text != "Nothing is true." for i in named)
    assert model.calls("refresh") == [] and not [c for c in result["changes"] if c.action == "update"]


def test_refresh_path_deletes_on_an_explicit_request(boston: Path) -> None:
    forget = turn("Please forget that I live in Boston.", "D2:1", "2023-07-04T10:00")
    refresh = {"Action": "Refresh", "reason": "asked to forget", "confidence": 0.95,
               "conflicts": [["fact:D1:1:0", "new"]]}
    delete = {"Action": "Delete", "memory_type": "fact", "reason": "Ann asked to forget it",
              "dataList": [{"id": "fact:D1:1:0", "new_content": ""}]}
    model = RoleModel(scripts={"judge": [json.dumps(refresh)], "refresh": [json.dumps(delete)]})
    result = graph.invoke({"turns": [forget]}, context=ctx(boston, "ingest", model))
    assert [(c.action, c.record_id, c.policy) for c in leads(result["changes"])] == [
        ("delete", "fact:D1:1:0", MODEL), ("update", "raw:D2:1", "offline")]  # the request, told without its words
    memory = Memory("ann", data_dir=str(boston))
    store = memory.store
    assert store.get_one("fact:D1:1:0").status == Status.DELETED
    assert "Boston" not in store.get_one("raw:D2:1").text
    assert model.calls("facts") == [] and model.calls("note") == []  # a request to forget is not something to remember
    memory.undo()
    assert store.get_one("fact:D1:1:0").status == Status.ACTIVE
    assert store.get_one("raw:D2:1").text == forget["text"]


def test_a_model_delete_without_a_request_falls_back(boston: Path) -> None:
    refresh = {"Action": "Refresh", "reason": "moved", "confidence": 0.9, "conflicts": [["fact:D1:1:0", "new"]]}
    delete = {"Action": "Delete", "dataList": [{"id": "fact:D1:1:0", "new_content": ""}], "reason": "outdated"}
    model = RoleModel(scripts={"judge": [json.dumps(refresh)], "refresh": [json.dumps(delete)]})
    result = graph.invoke({"turns": [DENVER]}, context=ctx(boston, "ingest", model))
    [label] = policies(result["trace"], "refresher")
    assert label == f"{FALLBACK}Delete without an explicit request to forget in the input)"
    assert [(c.action, c.record_id) for c in leads(result["changes"])] == [("update", "fact:D1:1:0")]  # offline: update
    # the offline update supersedes the older fact (its words kept): nothing is deleted
    assert Memory("ann", data_dir=str(boston)).get(["fact:D1:1:0"])[0].status == Status.SUPERSEDED


# --- malformed replies ------------------------------------------------------------------------------------
GOOD: dict[str, dict[str, Any]] = {
    "facts": {"facts": [DENVER_FACT], "related_id": ["D1:1"], "timestamp": "2023-06-01 00:00"},
    "boundary": {"T_t": 1, "reason": "a new topic: moving", "confidence": 0.8, "topic_summary": "moving"},
    "episode": {"title": "Ann's home", "content": "On 8 May 2023 Ann said she lived in Boston.", "timestamp": "empty"},
    "plan": {"rewrite_query": "Ann moved to Denver last month.", "memory_type": "fact", "K_dyn": 4,
             "intent_vector": {"b_fine": 0, "b_abs": 0, "b_event": 0, "b_atomic": 1}},
    "judge": {"Action": "Refresh", "reason": "Ann moved", "confidence": 0.9, "conflicts": [["fact:D1:1:0", "new"]]},
    "refresh": {"Action": "Update", "memory_type": "fact", "reason": "Ann moved", "timestamp": "empty",
                "dataList": [{"id": "fact:D1:1:0", "new_content": "Ann lives in Denver."}]},
    "answer": {"answer": "Ann lives in Denver now.", "cited_ids": ["fact:D1:1:0"]},
    "note": {"entities": [{"name": "Denver", "type": "place"}], "keywords": ["denver", "move"], "tags": ["home"],
             "context": "Ann says she moved to Denver", "links": [], "evolve": []},
}
MISSING_FIELD: dict[str, dict[str, Any]] = {
    "facts": {"facts": [{"subject": "Ann", "attribute": "lives_in"}]},
    "boundary": {"reason": "new topic"},
    "episode": {"content": "Ann moved."},
    "plan": {"intent_vector": {"b_fine": 0, "b_abs": 0, "b_event": 0, "b_atomic": 1}},
    "judge": {"reason": "Ann moved", "confidence": 0.9},
    "refresh": {"dataList": [{"id": "fact:D1:1:0", "new_content": "Ann lives in Denver."}]},
    "answer": {"cited_ids": ["D1:3"]},
    "note": {"keywords": ["denver"]},
}
WRONG_TYPES: dict[str, dict[str, Any]] = {
    "facts": {"facts": "Ann lives in Denver"},
    "boundary": {"T_t": "maybe"},
    "episode": {"title": ["Ann"], "content": 5},
    "plan": {"rewrite_query": "Ann moved", "intent_vector": [0, 0, 0, 1], "K_dyn": "many"},
    "judge": {"Action": 3, "conflicts": [["fact:D1:1:0", "new"]]},
    "refresh": {"Action": "Update", "dataList": "fact:D1:1:0"},
    "answer": {"answer": {"text": "Denver"}, "cited_ids": 7},
    "note": {"context": "Ann moved", "links": "raw:D1:1"},
}
ROLES = tuple(GOOD)
# Where a reply's text is spoilt: a required text field (blank), and any text field (a lone surrogate,
# which JSON can escape as \ud800 and no store can hold, or a NUL, which PostgreSQL cannot hold).
REQUIRED_TEXT: dict[str, tuple[str | int, ...]] = {
    "facts": ("facts", 0, "content"), "boundary": ("T_t",), "episode": ("title",), "plan": ("rewrite_query",),
    "judge": ("Action",), "refresh": ("Action",), "answer": ("answer",), "note": ("context",),
}
BLANK_FILLED_IN = {"note"}  # a blank note context is written by the offline rule; the rest of the note stands
ANY_TEXT: dict[str, tuple[str | int, ...]] = {
    **REQUIRED_TEXT, "boundary": ("reason",), "judge": ("reason",), "refresh": ("dataList", 0, "new_content"),
}


def spoilt(role: str, path: tuple[str | int, ...], value: str) -> str:
    """The good reply of a role with the text at `path` replaced."""
    reply = json.loads(json.dumps(GOOD[role]))
    holder = reply
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    return json.dumps(reply)


def malformed(kind: str, role: str) -> str:
    good = json.dumps(GOOD[role])
    return {
        "prose": f"Sure! Here is my decision:\n{good}\nLet me know if you need anything else.",
        "braces_in_prose": f"My reply to {{your question}}, as {{JSON}}:\n{good}",
        "fenced": f"```json\n{json.dumps(GOOD[role], indent=2)}\n```",
        "missing_field": json.dumps(MISSING_FIELD[role]),
        "wrong_types": json.dumps(WRONG_TYPES[role]),
        "blank_text": spoilt(role, REQUIRED_TEXT[role], "   "),
        "lone_surrogate": spoilt(role, ANY_TEXT[role], "Ann \ud800 moved"),
        "nul": spoilt(role, ANY_TEXT[role], "Ann \x00 moved"),  # JSON's \u0000: PostgreSQL cannot hold it
        "empty": "",
        "not_json": "I think Ann lives in Denver now, but I am not sure what you want me to do.",
    }[kind]


USABLE = ("prose", "braces_in_prose", "fenced")
PROBLEM = {
    "empty": "empty reply",
    "not_json": "no JSON object in the reply",
    "missing_field": "field ",
    "wrong_types": "field ",
    "blank_text": "field ",
    "lone_surrogate": "the reply holds text no store can hold",
    "nul": "the reply holds text no store can hold",
}


def run_all_roles(data_dir: Path, replies: dict[str, str]) -> tuple[dict[str, Any], RoleModel]:
    """One chat turn that makes every role call the model: Ann, who lived in Boston, says she moved."""
    model = RoleModel(scripts={role: [reply] for role, reply in replies.items()})
    result = graph.invoke({"turns": [MOVED]}, context=ctx(data_dir, "chat", model))
    return result, model


def labels(result: dict[str, Any], data_dir: Path) -> dict[str, str]:
    """The policy label of each role's output in one run."""
    trace = result["trace"]
    store = Memory("ann", data_dir=str(data_dir)).store
    derive = next(n for n in reversed(trace) if n.role == "memory")
    boundary = re.search(r"episode boundary by (.+?)(?:; graph by |$)", derive.summary)
    note = re.search(r"; graph by (.+?): \d+ entity mentions", derive.summary)
    episodes = store.all("episode")
    return {
        "facts": derive.policy,
        "boundary": boundary.group(1) if boundary else "offline",
        "episode": episodes[-1].policy if episodes else "",
        "plan": policies(trace, "research")[0],
        "judge": policies(trace, "judge")[0],
        "refresh": (policies(trace, "refresher") or [""])[0],
        "answer": policies(trace, "working")[0],
        "note": note.group(1) if note else "",
    }


@pytest.mark.parametrize("kind", [*USABLE, *PROBLEM])
def test_every_role_survives_a_malformed_reply(boston: Path, kind: str) -> None:
    result, model = run_all_roles(boston, {role: malformed(kind, role) for role in ROLES})
    assert {role for role, _ in model.prompts} == set(ROLES)  # every role asked the model
    store = Memory("ann", data_dir=str(boston)).store
    assert store.get_one("raw:D1:3").text == MOVED["text"]  # the turn is never lost
    assert result["answer"]  # the run finished with an answer
    got = labels(result, boston)
    for role in ROLES:
        if kind in USABLE or (kind == "blank_text" and role in BLANK_FILLED_IN):
            assert got[role] == MODEL, (role, got[role])
        else:
            assert got[role].startswith(FALLBACK + PROBLEM[kind]), (role, got[role])
    if kind in USABLE:
        assert [(c.action, c.record_id) for c in leads(result["changes"])] == [("update", "fact:D1:1:0")]
        assert result["answer"] == "Ann lives in Denver now." and result["cited_ids"] == ["D1:1"]
        assert store.get_one("fact:D1:3:0").text == DENVER_FACT["content"]
        assert store.all("episode")[-1].title == "Ann's home"
    else:
        # the offline policies stood in: offline facts of the turn, the offline judge's conflict, a fallback answer
        assert [f.text for f in store.all("fact") if f.source_ids == ["D1:3"]] == ["Ann moved to Denver in June 2023."]
        assert result["verdict"].conflicts == [["fact:D1:1:0", "new"]]


@pytest.mark.parametrize("role", ROLES)
def test_one_role_falling_back_leaves_the_others_on_the_model(boston: Path, role: str) -> None:
    replies = {r: json.dumps(GOOD[r]) for r in ROLES}
    replies[role] = "no idea, sorry"
    result, _ = run_all_roles(boston, replies)
    got = labels(result, boston)
    assert got[role] == f"{FALLBACK}no JSON object in the reply)"
    for other in set(ROLES) - {role}:
        assert got[other] == MODEL, (role, other, got[other])
    assert Memory("ann", data_dir=str(boston)).get(["raw:D1:3"])[0].text == MOVED["text"]


# --- a model server that cannot be reached ---------------------------------------------------------------
def test_an_unreachable_model_falls_back_to_the_offline_policies_after_its_retries(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    context = Context(namespace="ann", mode="ingest", data_dir=str(data_dir), model="openai:gpt-4o-mini",
                      base_url="http://127.0.0.1:9", model_retries=1, model_backoff=0.01)  # port 9 is closed
    result = graph.invoke({"turns": [BOSTON]}, context=context)
    derived = [n for n in result["trace"] if n.role != "memory" or "deriving" not in n.summary]
    assert derived and all(n.policy.startswith("offline") for n in derived)
    judge = policies(result["trace"], "judge")[0]  # the first role to ask the model (research searches offline)
    assert judge.startswith("offline (model unavailable (") and "ConnectionError" in judge
    assert "gave up after 1 retries" in judge
    # once the model gave out, the turn's later roles do not wait for it again
    assert any("model unavailable earlier in this run" in p for p in policies(result["trace"], "memory"))
    store = Memory("ann", data_dir=str(data_dir)).store
    kept = store.get_one("raw:D1:1")
    assert kept.text == BOSTON["text"] and kept.status == Status.ACTIVE
    assert store.get_one("fact:D1:0".replace("D1:0", "D1:1:0")).policy.startswith("offline (model unavailable")
    close_all()


def test_blank_text_is_refused_field_by_field_not_reply_by_reply() -> None:
    """Only spaces is no fact, title or answer: such a field is refused. But a reply is not thrown away
    for one blank part the role fills in itself (a note's context) or can leave out (one of its facts)."""
    from strata.agents.llm import parse_json
    from strata.agents.memory import ModelEpisode, ModelFacts
    from strata.memory.graph.replies import ModelNote

    note, problem = parse_json('{"entities": [{"name": "Denver", "type": "place"}], "context": "   "}', ModelNote)
    assert note is not None and problem == "" and note.entities[0].name == "Denver"
    facts, _ = parse_json('{"facts": [{"content": "Ann moved to Denver."}, {"content": "  "}]}', ModelFacts)
    assert facts is not None and [f.content for f in facts.facts] == ["Ann moved to Denver."]
    assert parse_json('{"facts": [{"content": "  "}]}', ModelFacts)[0] is None
    episode, problem = parse_json('{"title": "  ", "content": "Ann moved."}', ModelEpisode)
    assert episode is None and problem.startswith("field title")


def test_a_chat_statement_the_model_finds_no_answer_to_is_acknowledged(boston: Path) -> None:
    """A statement was answered as a question: the model said "Not in memory." to what it had just been told."""
    model = RoleModel()  # its answer to everything: "Not in memory."
    told = graph.invoke({"turns": [DENVER]}, context=ctx(boston, "chat", model))
    assert told["answer"] == "Noted: I will remember that."
    mixed = graph.invoke({"turns": [turn("I adopted a cat, did you know?", "D1:4", "2023-07-04T10:00")]},
                         context=ctx(boston, "chat", model))
    assert mixed["answer"] == "Noted: I will remember that."  # what it asks has no answer, what it tells was stored
    asked = graph.invoke({"turns": [turn("What is my dog called?", "D1:5", "2023-07-05T10:00")]},
                         context=ctx(boston, "chat", model))
    assert asked["answer"] == "Not in memory." and len(model.calls("answer")) == 3
    model = RoleModel(scripts={"answer": [json.dumps({"answer": "Congratulations on the move!", "cited_ids": []})]})
    replied = graph.invoke({"turns": [turn("I moved again.", "D1:6", "2023-07-06T10:00")]},
                           context=ctx(boston, "chat", model))
    assert replied["answer"] == "Congratulations on the move!"  # a model's own reply to a statement stands


@pytest.mark.parametrize("with_model", [False, True])
def test_a_participant_opening_a_fact_is_among_its_entities(data_dir: Path, embedder: Any, with_model: bool) -> None:
    """Bob's "Ann told me her gym locker code is 5521." (Ann a participant, not the listener) stored the turn
    and its fact "Ann told Bob ..." without Ann among their entities: a capital opening a sentence counted as a
    name only for the speaker and listener (for a model's fact, for no one), so a name leading a fact was lost."""
    said = "Ann told Bob her gym locker code is 5521."
    model = RoleModel(scripts={"facts": [facts_by_turn({"D1:2": [
        {"content": said, "subject": "Bob", "attribute": "knows", "value": "Ann's locker code"}]})]})
    turns = [BOSTON, turn("Ann told me her gym locker code is 5521.", "D1:2", "2023-05-08T10:01", "Bob", "Cat")]
    graph.invoke({"turns": turns}, context=ctx(data_dir, "ingest", model if with_model else None))
    store = Memory("ann", data_dir=str(data_dir)).store
    [fact] = [f for f in store.all("fact") if f.dialogue_id == "D1:2"]
    assert fact.text == said and fact.entities[:2] == ["Ann", "Bob"]
    assert "Ann" in store.get_one("raw:D1:2").entities
