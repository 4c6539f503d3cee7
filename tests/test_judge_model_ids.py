"""The model Judge names items as its prompt shows them, and its Retry says what to look for.

The Judge's prompt shows an item by the label in its line's brackets ("[D1:1]" a
turn, "[D1:1 fact]" a fact drawn from it), never by its record id. A model that
answers with those labels must reach the Refresher and the filter just as a
record id does; a name that stands for nothing shown is said in the trace. On
Retry, the model's "missing" (or, without it, its reason) is what the next
round's sub-question is written for. Models are LangChain fake chat models
whose replies are written only from what their prompt shows.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import strata.graph  # noqa: F401  (loads the graph package before the role modules it wires)
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langgraph.runtime import Runtime
from strata.agents.common import evidence_of, format_evidence
from strata.agents.judge import ModelVerdict, judge, resolve_names
from strata.graph.context import Context
from strata.graph.state import Evidence, State
from strata.memory.records import Record, Turn
from test_graph_fake_models import DEFAULTS, RoleModel, turn

from strata.api import Memory

MAY_8 = datetime(2023, 5, 8, 10)


def label_of(prompt: str, words: str) -> str:
    """The bracketed label of the first context line holding `words`, as a model reading the prompt sees it."""
    found = re.search(rf"^\[([^\]]+)\][^\n]*{re.escape(words)}", prompt, re.MULTILINE)
    assert found, f"no line with {words!r} in the prompt:\n{prompt}"
    return found.group(1)


def id_shown(prompt: str, kind: str, words: str) -> str:
    """The record id of the Refresher's prompt line of `kind` holding `words` (its lines read "fact:D1:1:0 | ...")."""
    found = re.search(rf"^({kind}:\S+) \|[^\n]*{re.escape(words)}", prompt, re.MULTILINE)
    assert found, prompt
    return found.group(1)


@pytest.fixture
def nurse(data_dir: Path, embedder: Any) -> Path:
    """Ann's memory, stored offline: she works as a nurse at City Hospital (and Ben is a teacher)."""
    Memory("ann", data_dir=str(data_dir)).add([
        turn("I work as a nurse at City Hospital.", "D1:1", "2023-05-08T10:00"),
        turn("Cool! I'm a teacher.", "D1:2", "2023-05-08T10:01", "Ben", "Ann"),
    ])
    return data_dir


# --- conflicts named as shown reach the Refresher ------------------------------------------------
def test_a_conflict_named_by_the_turns_label_updates_its_fact(nurse: Path) -> None:
    """The model names the stored turn as it saw it ("D1:1"); the Refresher gets that turn and the fact
    drawn from it, and the fact is updated (it used to be dropped as an unknown id, silently)."""
    def judge_reply(prompt: str) -> str:
        return json.dumps({"Action": "Refresh", "reason": "Ann no longer works at the hospital", "confidence": 0.9,
                           "conflicts": [[label_of(prompt, "nurse"), "new"]], "irrelevant": [], "missing": []})

    def refresh_reply(prompt: str) -> str:
        return json.dumps({"Action": "Update", "memory_type": "fact", "reason": "Ann flies planes now", "dataList": [
            {"id": id_shown(prompt, "fact", "nurse"), "new_content": "Ann works as a pilot for Delta."}]})

    model = RoleModel(scripts={"judge": [judge_reply], "refresh": [refresh_reply]})
    memory = Memory("ann", data_dir=str(nurse), chat_model=model)
    result = memory.chat("Big news: I quit the hospital and I'm flying planes for Delta these days.", speaker="Ann")
    [shown] = model.calls("judge")
    assert "[D1:1] Ann: I work as a nurse at City Hospital." in shown and "raw:D1:1" not in shown
    [judged] = [n for n in result.trace if n.role == "judge"]
    assert "conflicts: raw:D1:1, fact:D1:1:0, new" in judged.summary and "ignored" not in judged.summary
    assert len(model.calls("refresh")) == 1
    assert memory.store.get_one("fact:D1:1:0").text == "Ann works as a pilot for Delta."
    assert memory.store.get_one("raw:D1:1").text == "I work as a nurse at City Hospital."  # a turn stays verbatim


def test_a_request_to_forget_named_by_the_turns_label_deletes_the_turn(nurse: Path) -> None:
    """On a request to forget, "D1:1" is the turn alone: a forgotten turn takes its facts along."""
    def judge_reply(prompt: str) -> str:
        return json.dumps({"Action": "Refresh", "reason": "Ann asks to forget her job", "confidence": 0.9,
                           "conflicts": [[label_of(prompt, "nurse"), "new"]]})

    def delete_reply(prompt: str) -> str:
        return json.dumps({"Action": "Delete", "memory_type": "raw", "reason": "Ann asked to forget it",
                           "dataList": [{"id": id_shown(prompt, "raw", "nurse"), "new_content": ""}]})

    model = RoleModel(scripts={"judge": [judge_reply], "refresh": [delete_reply]})
    memory = Memory("ann", data_dir=str(nurse), chat_model=model)
    result = memory.chat("Please forget that I work as a nurse at City Hospital.", speaker="Ann")
    [judged] = [n for n in result.trace if n.role == "judge"]
    assert "conflicts: raw:D1:1, new" in judged.summary
    deleted = [c.record_id for c in result.changes if c.action == "delete"]
    assert deleted[:2] == ["raw:D1:1", "fact:D1:1:0"]


def shown_evidence(memory_dir: Path) -> list[Evidence]:
    """The turn D1:1 and both facts drawn from it, as the Judge's context shows them."""
    store = Memory("ann", data_dir=str(memory_dir)).store
    if store.get(["fact:D1:1:1"]) == []:  # a second fact of the turn, beside the one the offline ingest drew
        store.add([Record(id="fact:D1:1:1", kind="fact", text="Ann loves jazz.", namespace="ann", dialogue_id="D1:1",
                          speaker="Ann", time=MAY_8, source_ids=["D1:1"])])
    ids = ["raw:D1:1", "fact:D1:1:0", "fact:D1:1:1", "raw:D1:2"]
    return [evidence_of(store.get_one(i)) for i in ids]


def judged(memory_dir: Path, reply: dict[str, Any], evidence: list[Evidence], **settings: Any) -> dict[str, Any]:
    """The Judge on a question, or with mode="chat" on a turn of Ann's that states a newer job ("new" in a
    group stands for a turn that states: a question outdates nothing)."""
    model = FakeListChatModel(responses=[json.dumps(reply)])
    context = Context(data_dir=str(memory_dir), namespace="ann", chat_model=model, **settings)
    state = State(question="What job does Ann have?", evidence=evidence)
    if context.mode == "chat":
        said = Turn(speaker="Ann", text="I fly planes for Delta now.", time=MAY_8, dia_id="D2:1")
        state = State(turns=[said], evidence=evidence, stage="intake")
    return judge(state, Runtime(context=context))


@pytest.mark.parametrize(
    ("names", "group"),
    [
        (["D1:1 fact", "new"], ["fact:D1:1:0", "fact:D1:1:1", "new"]),  # a label facts share names them all
        (["[D1:1]", "new"], ["raw:D1:1", "fact:D1:1:0", "fact:D1:1:1", "new"]),  # a turn brings its facts
        (["fact:D1:1:1", "new"], ["fact:D1:1:1", "new"]),  # a record id still counts
        (["D1:1  FACT", "new"], ["fact:D1:1:0", "fact:D1:1:1", "new"]),  # case and spacing are not names
    ],
)
def test_conflict_names_are_read_as_the_prompt_shows_them(
    nurse: Path, names: list[str], group: list[str]
) -> None:
    evidence = shown_evidence(nurse)
    assert "[D1:1 fact] Ann loves jazz." in format_evidence(evidence)
    reply = {"Action": "Refresh", "reason": "the job changed", "confidence": 0.8, "conflicts": [names]}
    out = judged(nurse, reply, evidence, mode="chat")
    assert out["verdict"].conflicts == [group]
    assert "ignored" not in out["trace"][-1].summary


def test_names_that_stand_for_nothing_shown_are_said_in_the_trace(nurse: Path) -> None:
    reply = {"Action": "Refresh", "reason": "the job changed", "confidence": 0.8,
             "conflicts": [["D1:1 fact", "D7:7", "D1:2"], ["D9:9 fact", "new"]], "irrelevant": ["Z3:3"]}
    out = judged(nurse, reply, shown_evidence(nurse), mode="retrieve")
    # the group of nothing shown is gone; a turn brings its facts
    assert out["verdict"].conflicts == [["fact:D1:1:0", "fact:D1:1:1", "raw:D1:2", "fact:D1:2:0"]]
    assert out["trace"][-1].summary.endswith("| ignored ids the evidence does not hold: D7:7, D9:9 fact, Z3:3")


# --- the filter drops what the label stands for, no more ------------------------------------------
@pytest.mark.parametrize(
    ("irrelevant", "dropped"),
    [
        (["D1:1"], ["raw:D1:1"]),  # the turn shown as [D1:1], not a fact that shares its dialogue id
        (["D1:1 fact"], ["fact:D1:1:0", "fact:D1:1:1"]),  # every item shown as [D1:1 fact]
        (["fact:D1:1:1", "[D1:2]"], ["fact:D1:1:1", "raw:D1:2"]),
    ],
)
def test_the_filter_reads_labels_as_shown(nurse: Path, irrelevant: list[str], dropped: list[str]) -> None:
    reply = {"Action": "Pass", "reason": "the items state it", "confidence": 0.9, "irrelevant": irrelevant}
    evidence = shown_evidence(nurse)
    out = judged(nurse, reply, evidence, mode="ask")
    assert [e.id for e in out["evidence"]] == [e.id for e in evidence if e.id not in dropped]
    assert resolve_names(irrelevant, evidence) == (dropped, [])


def test_a_bare_dialogue_id_with_no_turn_shown_names_the_items_of_that_turn(nurse: Path) -> None:
    """Only "[D1:1 fact]" lines are shown: "D1:1" is read as those items (the model left the kind out)."""
    facts = shown_evidence(nurse)[1:3]
    assert resolve_names(["D1:1", "D2:2"], facts) == (["fact:D1:1:0", "fact:D1:1:1"], ["D2:2"])


# --- a model's Retry says what the sub-question looks for -----------------------------------------
@pytest.fixture
def pottery(data_dir: Path, embedder: Any) -> Path:
    Memory("ann", data_dir=str(data_dir)).add([
        turn("I went to the pottery workshop with my sister.", "D1:1", "2023-05-08T10:00"),
        turn("It was on a Sunday, the 14th of May.", "D1:2", "2023-05-20T10:00"),
    ])
    return data_dir


@pytest.mark.parametrize(
    ("said", "missing"),
    [
        ({"missing": ["the sister's name"]}, "the sister's name"),
        ({"missing": "the name of Ann's sister"}, "the name of Ann's sister"),  # one phrase as a string
        ({"missing": None}, "no item names the sister; her name is missing"),  # none said: the reason stands in
        ({}, "no item names the sister; her name is missing"),
    ],
)
def test_a_model_retry_reaches_the_sub_question(pottery: Path, said: dict[str, Any], missing: str) -> None:
    """The offline rule would Pass here (an item names "my sister"), so its `missing` is empty; the model's
    Retry used to carry that, and the retry searched the same words again without a sub-question."""
    retry = json.dumps({"Action": "Retry", "reason": "no item names the sister; her name is missing",
                        "confidence": 0.8, "conflicts": [], **said})
    sub = json.dumps({"question": "What is the name of Ann's sister?"})
    model = RoleModel(scripts={"judge": [retry, DEFAULTS["judge"]], "subquestion": [sub]})
    answer = Memory("ann", data_dir=str(pottery), chat_model=model).ask("Who went to the pottery workshop with Ann?")
    [asked] = model.calls("subquestion")
    assert f"Missing: {missing}\n" in asked
    research = [n.summary for n in answer.trace if n.role == "research"]
    assert len(research) == 2 and "sub-question \"What is the name of Ann's sister?\"" in research[1]


def test_missing_is_read_leniently() -> None:
    def read(value: object) -> list[str]:
        return ModelVerdict.model_validate({"Action": "Retry", "missing": value}).missing

    assert read(None) == [] and read("") == [] and read({"what": "a date"}) == [] and read(True) == []
    assert read("  the   date ") == ["the date"]
    assert read(["the date", None, 3, "", "the date", "the place"]) == ["the date", "3", "the place"]
    assert read([f"thing {i}" for i in range(9)]) == [f"thing {i}" for i in range(5)]
    assert ModelVerdict.model_validate({"Action": "Pass"}).missing == []
