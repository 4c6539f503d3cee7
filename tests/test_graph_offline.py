"""The compiled graph end to end with the offline policies: its four modes and their paths.

Every run goes through `graph.invoke(input, context=Context(...))`, as Studio,
the server and the Python API do, on a real Chroma memory in a temporary
folder. Covered: ingest then ask, retrieve, chat; the Retry loop bounded by
K_r; the Refresh path that updates a fact (and its undo); the forget path that
tombstones (and its undo); bad input that fails with a one-line error without
losing stored data; and a thread reused under a checkpointer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from strata.graph.context import Context
from strata.graph.graph import build_graph, graph
from strata.graph.state import RoleNote
from strata.memory.errors import InputError
from strata.memory.forgetting import request_told
from strata.memory.records import Action, Status
from strata.memory.registry import close_all

from strata.api import Memory
from strata.conversations import load_turns

LOCOMO = "conv-26"
SUPPORT_GROUP = "When did Caroline go to the LGBTQ support group?"
NOT_SAID = "What is the name of Caroline's cat?"


def roles(trace: list[RoleNote]) -> list[str]:
    return [note.role for note in trace]


def turn(text: str, dia_id: str, time: str, speaker: str = "Ann", listener: str = "Ben") -> dict[str, str]:
    return {"speaker": speaker, "text": text, "dia_id": dia_id, "time": time, "listener": listener}


BOSTON = turn("I live in Boston.", "D1:1", "2023-05-08T10:00")
SPRING = turn("Boston is lovely in spring!", "D1:2", "2023-05-08T10:01", "Ben", "Ann")
DENVER = turn("I moved to Denver last month.", "D2:1", "2023-07-03T10:00")
FORGET = turn("Please forget that I live in Denver.", "D2:2", "2023-07-04T10:00")


@pytest.fixture(scope="module")
def locomo_memory(tmp_path_factory: pytest.TempPathFactory, locomo_dir: Path, embedder: Any) -> Iterator[str]:
    """The first twelve turns of conv-26 ingested through the graph once; yields the data folder."""
    data_dir = str(tmp_path_factory.mktemp("graph_offline"))
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("STRATA_MODEL", raising=False)
        turns = list(load_turns(locomo_dir / f"{LOCOMO}.json").sessions[0].turns)[:12]
        result = graph.invoke({"turns": turns}, context=Context(namespace=LOCOMO, mode="ingest", data_dir=data_dir))
        assert [i for i in result["stored_ids"] if i.startswith("raw:")] == [f"raw:{t.dia_id}" for t in turns]
        yield data_dir
    close_all()


def context(data_dir: str | Path, mode: str, namespace: str = LOCOMO, **settings: Any) -> Context:
    return Context(namespace=namespace, mode=mode, data_dir=str(data_dir), **settings)  # type: ignore[arg-type]


# --- the four modes --------------------------------------------------------------------------------
def test_ingest_then_ask_answers_with_citations_and_evidence(locomo_memory: str) -> None:
    result = graph.invoke({"question": SUPPORT_GROUP}, context=context(locomo_memory, "ask"))
    assert result["answer"] == "7 May 2023"  # "yesterday" in a turn dated 8 May 2023
    assert result["cited_ids"] == ["D1:3"]
    assert "raw:D1:3" in [e.id for e in result["evidence"]]
    assert result["verdict"].action == "Pass" and result["rounds"] == 1
    assert roles(result["trace"]) == ["research", "judge", "working"]
    assert all(note.policy == "offline" for note in result["trace"])
    assert result["stored_ids"] == []  # asking stores nothing


def test_retrieve_returns_the_evidence_without_an_answer(locomo_memory: str) -> None:
    before = Memory(LOCOMO, data_dir=locomo_memory).stats()
    result = graph.invoke({"question": SUPPORT_GROUP}, context=context(locomo_memory, "retrieve"))
    assert result["answer"] is None and result["cited_ids"] == []
    evidence = {e.id: e for e in result["evidence"]}
    assert "raw:D1:3" in evidence
    assert evidence["raw:D1:3"].label == (
        "[D1:3 | 2023-05-08 | raw] Caroline: I went to a LGBTQ support group yesterday and it was so powerful."
    )
    assert roles(result["trace"]) == ["research", "judge"]
    assert Memory(LOCOMO, data_dir=locomo_memory).stats() == before


@pytest.mark.parametrize("k_r", [0, 1, 2])
def test_retry_stops_after_k_r_rounds(locomo_memory: str, k_r: int) -> None:
    result = graph.invoke({"question": NOT_SAID}, context=context(locomo_memory, "ask", k_r=k_r))
    trace = result["trace"]
    assert roles(trace) == ["research", "judge"] * (k_r + 1) + ["working"]
    assert result["rounds"] == k_r + 1
    assert all(n.summary.startswith("Retry") for n in trace if n.role == "judge")
    retries = [n.summary for n in trace if n.role == "research"][1:]
    assert all("retry:" in s for s in retries) and len(retries) == k_r
    assert result["notes"] == [f"Retry budget K_r={k_r} used up: answering from what was found"]
    assert result["answer"] == "Not in memory." and result["cited_ids"] == []


def test_ask_through_the_api_matches_the_graph(locomo_memory: str) -> None:
    answer = Memory(LOCOMO, data_dir=locomo_memory).ask(SUPPORT_GROUP)
    assert answer.answer == "7 May 2023" and answer.cited_ids == ["D1:3"]
    assert "D1:3" in answer.evidence_ids()


def test_chat_stores_the_turn_and_answers_it(locomo_memory: str) -> None:
    text = "When did you go to the LGBTQ support group again?"
    said = {"speaker": "Melanie", "text": text, "listener": "Caroline"}
    result = graph.invoke({"turns": [said]}, context=context(locomo_memory, "chat"))
    assert roles(result["trace"]) == ["memory", "research", "judge", "memory", "working"]
    assert result["answer"] == "7 May 2023" and result["cited_ids"] == ["D1:3"]
    raw_id = result["stored_ids"][0]
    assert raw_id.startswith("raw:T")  # a turn without an id gets the next one of the namespace
    stored = Memory(LOCOMO, data_dir=locomo_memory).get([raw_id])[0]
    assert stored.text == text and stored.speaker == "Melanie" and stored.time is not None


# --- Refresh: update, history, undo ----------------------------------------------------------------
def test_a_newer_statement_updates_the_older_fact_and_undo_restores_it(data_dir: Path, embedder: Any) -> None:
    graph.invoke({"turns": [BOSTON, SPRING]}, context=context(data_dir, "ingest", "ann"))
    result = graph.invoke({"turns": [DENVER]}, context=context(data_dir, "ingest", "ann"))
    assert roles(result["trace"]) == ["memory", "research", "judge", "refresher", "memory"]
    assert result["verdict"].action == "Refresh" and result["verdict"].conflicts == [["fact:D1:1:0", "new"]]
    change, trait = result["changes"]  # the fact, and the persona trait distilled from it
    assert (change.action, change.record_id) == ("update", "fact:D1:1:0")
    assert trait.action == "update" and trait.record_id.startswith("persona:Ann:home:")
    assert (change.old_text, change.new_text) == ("Ann lives in Boston.", "Ann lives in Boston.")  # kept, superseded
    assert change.new_status == Status.SUPERSEDED and change.superseded_by == "raw:D2:1"

    memory = Memory("ann", data_dir=str(data_dir))
    fact = memory.get(["fact:D1:1:0"])[0]  # superseded, still saying what D1:1 said
    assert fact.text == "Ann lives in Boston." and fact.version == 2 and fact.status == Status.SUPERSEDED
    assert memory.get(["raw:D1:1"])[0].text == "I live in Boston."  # the verbatim turn is never rewritten
    [entry] = memory.history("fact:D1:1:0")
    assert entry.action == Action.UPDATE and entry.new_status == Status.SUPERSEDED and entry.id == change.change_id

    undo = memory.undo()
    assert undo.undoes == change.change_id
    fact = memory.get(["fact:D1:1:0"])[0]
    assert fact.text == "Ann lives in Boston." and fact.status == Status.ACTIVE and fact.version == 3
    assert memory.history("fact:D1:1:0")[1].undone


def test_the_newer_value_is_the_one_current_fact(data_dir: Path, embedder: Any) -> None:
    graph.invoke({"turns": [BOSTON, SPRING, DENVER]}, context=context(data_dir, "ingest", "ann"))
    homes = Memory("ann", data_dir=str(data_dir)).store.all("fact")
    assert [(f.id, f.value) for f in homes if f.attribute == "lives_in"] == [("fact:D2:1:0", "Denver")]


def test_after_the_update_ask_gives_the_new_value(data_dir: Path, embedder: Any) -> None:
    graph.invoke({"turns": [BOSTON, SPRING, DENVER]}, context=context(data_dir, "ingest", "ann"))
    answer = Memory("ann", data_dir=str(data_dir)).ask("Where does Ann live?")
    assert answer.answer == "Denver"


def test_actually_i_live_in_boulder_now_updates_the_home_and_undo_goes_back(data_dir: Path, embedder: Any) -> None:
    """Issue 9: the Boulder turn's fact had no attribute, so the older home stayed active beside it."""
    boulder = turn("Actually I live in Boulder now.", "D3:1", "2023-08-01T10:00")
    graph.invoke({"turns": [BOSTON, SPRING, DENVER, boulder]}, context=context(data_dir, "ingest", "ann"))
    memory = Memory("ann", data_dir=str(data_dir))
    homes = [f for f in memory.store.all("fact") if f.subject == "Ann" and f.attribute == "lives_in"]
    assert homes and all("Boulder" in f.text for f in homes), [f.text for f in homes]
    assert memory.get(["fact:D1:1:0"])[0].status == Status.SUPERSEDED  # Boston, by the move to Denver
    [latest] = memory.history("fact:D2:1:0")[:1]  # Denver, by Boulder
    assert latest.new_status == Status.SUPERSEDED and "'Denver' -> 'Boulder'" in latest.reason
    memory.undo(latest.id)
    assert memory.get(["fact:D2:1:0"])[0].status == Status.ACTIVE


# --- forget: tombstone, undo -------------------------------------------------------------------------
def test_a_request_to_forget_tombstones_and_undo_restores(data_dir: Path, embedder: Any) -> None:
    graph.invoke({"turns": [BOSTON, SPRING, DENVER]}, context=context(data_dir, "ingest", "ann"))
    result = graph.invoke({"turns": [FORGET]}, context=context(data_dir, "ingest", "ann"))
    assert result["verdict"].action == "Refresh"
    assert roles(result["trace"]) == ["memory", "research", "judge", "refresher", "memory"]
    deleted = {c.record_id: c for c in result["changes"] if c.action == "delete"}
    # "Ann moved to Denver in June 2023." (its attribute is lives_in); the Boston fact the move superseded says
    # Boston, not the Denver the request names
    assert "fact:D2:1:0" in deleted and "fact:D1:1:0" not in deleted
    assert "raw:D1:1" not in deleted  # what was said about Boston is not what the request names
    assert "raw:D2:1" not in deleted  # "I moved to Denver last month." does not say "live": a precise match only

    memory = Memory("ann", data_dir=str(data_dir))
    store = memory.store
    tombstone = store.get_one("fact:D2:1:0")
    assert tombstone.status == Status.DELETED and tombstone.text == "Ann moved to Denver in June 2023."
    assert "fact:D2:1:0" not in {r.id for r in store.all("fact")}  # hidden from search, kept in the store
    assert store.get_one("raw:D2:2").text == request_told(len(deleted))  # kept, told without its words
    assert store.history("raw:D2:2")[0].old_text == FORGET["text"]  # which an undo gives back
    assert not [f for f in store.all("fact") if f.source_ids == ["D2:2"]]  # but it is not a fact to remember

    # a trait retired with its fact follows the fact's change
    fact = deleted["fact:D2:1:0"]
    traits = [c.record_id for c in result["changes"] if c.record_id.startswith("persona:")
              and store.ledger.get_change("ann", c.change_id).follows == fact.change_id]
    assert traits
    undo = memory.undo()  # one request to forget is one edit: its other changes follow the first delete
    assert undo.undoes == min(c.change_id for c in deleted.values())
    assert {store.get_one(record_id).status for record_id in deleted} == {Status.ACTIVE}
    assert {h.action for h in memory.history("fact:D2:1:0")} == {Action.DELETE, Action.UNDO}


# --- bad input ----------------------------------------------------------------------------------------
def one_line(error: pytest.ExceptionInfo[InputError]) -> str:
    message = str(error.value)
    assert "\n" not in message and 0 < len(message) < 200 and "Traceback" not in message
    return message


@pytest.mark.parametrize(
    ("mode", "payload", "expected"),
    [
        ("ingest", {"turns": [{"speaker": "Ann", "text": "   "}]}, "turn 1: text: "),
        ("ingest", {"turns": [BOSTON, {"speaker": "Ann"}]}, "turn 2: text: missing: give each turn a 'text'"),
        ("ingest", {}, "mode 'ingest' needs turns"),
        ("ingest", {"turns": [DENVER, {**DENVER, "text": "Or was it June?"}]}, "turns 1 and 2 share the id 'D2:1'"),
        ("chat", {"question": "Where does Ann live?"}, "mode 'chat' needs turns"),
        ("ask", {"question": ""}, "needs a question"),
        ("ask", {"question": "   "}, "needs a question"),
        ("retrieve", {}, "needs a question"),
    ],
)
def test_bad_input_is_a_one_line_error_and_loses_nothing(
    data_dir: Path, embedder: Any, mode: str, payload: dict[str, Any], expected: str
) -> None:
    graph.invoke({"turns": [BOSTON, SPRING]}, context=context(data_dir, "ingest", "ann"))
    memory = Memory("ann", data_dir=str(data_dir))
    before = memory.stats()
    kept = [(r.id, r.text, r.status) for r in memory.store.all("raw")]
    with pytest.raises(InputError) as error:
        graph.invoke(payload, context=context(data_dir, mode, "ann"))
    assert expected in one_line(error)
    assert memory.stats() == before
    assert [(r.id, r.text, r.status) for r in memory.store.all("raw")] == kept


def test_unknown_mode_and_empty_question_through_the_api(data_dir: Path) -> None:
    with pytest.raises(InputError) as error:
        Context(namespace="ann", mode="summarise", data_dir=str(data_dir))  # type: ignore[arg-type]
    assert one_line(error) == "unknown mode 'summarise': use one of ingest, ask, chat, retrieve"
    memory = Memory("ann", data_dir=str(data_dir))
    with pytest.raises(InputError) as error:
        memory.ask("  ")
    assert "the question is empty" in one_line(error)
    with pytest.raises(InputError) as error:
        memory.add([])
    assert "no turns given" in one_line(error)
    assert isinstance(error.value, ValueError)


# --- a thread reused under a checkpointer --------------------------------------------------------------
@pytest.fixture
def threaded(data_dir: Path, embedder: Any) -> tuple[Any, dict[str, Any], str]:
    """A checkpointed graph, one thread, and a small memory to read from."""
    graph.invoke({"turns": [BOSTON, SPRING]}, context=context(data_dir, "ingest", "ann"))
    return build_graph(checkpointer=InMemorySaver()), {"configurable": {"thread_id": "one"}}, str(data_dir)


def test_a_second_ask_on_a_thread_starts_afresh(threaded: tuple[Any, dict[str, Any], str]) -> None:
    app, config, data_dir = threaded
    first = app.invoke({"question": "What is the name of Ann's dog?"}, config, context=context(data_dir, "ask", "ann"))
    assert first["rounds"] == 3 and first["notes"]
    second = app.invoke({"question": "Where does Ann live?"}, config, context=context(data_dir, "ask", "ann"))
    assert roles(second["trace"]) == ["research", "judge", "working"]
    assert second["rounds"] == 1 and second["notes"] == [] and second["changes"] == []
    assert second["answer"] == "Boston" and second["cited_ids"] == ["D1:1"]
    assert app.get_state(config).values["stage"] == "done"


def test_a_second_ingest_on_a_thread_starts_at_its_first_turn(threaded: tuple[Any, dict[str, Any], str]) -> None:
    app, config, data_dir = threaded
    again = app.invoke({"turns": [SPRING]}, config, context=context(data_dir, "ingest", "ann"))
    assert again["stored_ids"] == [] and again["notes"] == ["D1:2 is already stored: skipped"]
    assert app.get_state(config).values["stage"] == "done"  # a skipped last turn still ends the run
    work = turn("I work as a nurse.", "D1:3", "2023-05-08T10:02")
    result = app.invoke({"turns": [work]}, config, context=context(data_dir, "ingest", "ann"))
    assert result["stored_ids"][0] == "raw:D1:3" and result["notes"] == []
    assert roles(result["trace"]) == ["memory", "research", "judge", "memory"]
    assert app.get_state(config).values["cursor"] == 1


def test_a_runs_tallies_are_returned_and_not_saved_at_each_step(threaded: tuple[Any, dict[str, Any], str]) -> None:
    """Saved, each step of an ingest saved the run's whole list of stored ids again: 3.5 MB of a 300-turn
    ingest's checkpoints. The run returns them; the thread's checkpoints hold none."""
    app, config, data_dir = threaded
    three = [turn("I work as a nurse.", "D1:3", "2023-05-08T10:02"),
             turn("I have two cats.", "D1:4", "2023-05-08T10:03"),
             turn("I play the cello.", "D1:5", "2023-05-08T10:04")]
    result = app.invoke({"turns": [SPRING, *three]}, config, context=context(data_dir, "ingest", "ann"))
    assert {"raw:D1:3", "raw:D1:4", "raw:D1:5"} <= set(result["stored_ids"])
    assert result["notes"] == ["D1:2 is already stored: skipped"]
    saved = {channel for (_, _, channel, _), (kind, _) in app.checkpointer.blobs.items() if kind != "empty"}
    assert "turns" in saved and not {"stored_ids", "changes", "notes"} & saved, sorted(saved)
    assert "stored_ids" not in app.get_state(config).values
    # a run stopped and resumed reports what it stored after resuming
    two = [turn("I live near the sea.", "D1:6", "2023-05-08T10:05"), turn("I drive a van.", "D1:7", "2023-05-08T10:06")]
    app.invoke({"turns": two}, config, context=context(data_dir, "ingest", "ann"), interrupt_after=["judge"])
    resumed = app.invoke(None, config, context=context(data_dir, "ingest", "ann"))
    assert "raw:D1:7" in resumed["stored_ids"] and "raw:D1:6" not in resumed["stored_ids"]
    assert Memory("ann", data_dir=data_dir).get(["raw:D1:6"])  # stored all the same


def test_a_run_stopped_and_never_resumed_does_not_leak_into_the_next(
    threaded: tuple[Any, dict[str, Any], str],
) -> None:
    """A run stopped mid-way (a crash of the server, an interrupt the app dropped) left its cursor, stage
    and rounds on the thread: the next run with new input read them against its own turns (an
    IndexError, or an AttributeError on every later call) or carried on the old question's rounds."""
    app, config, data_dir = threaded
    two = [turn("I work as a nurse.", "D1:3", "2023-05-08T10:02"), turn("I have two cats.", "D1:4", "2023-05-08T10:03")]
    app.invoke({"turns": two}, config, context=context(data_dir, "ingest", "ann"), interrupt_after=["memory"])
    assert app.get_state(config).next  # stopped inside the run
    cello = turn("I play the cello.", "D1:5", "2023-05-08T10:04")
    stored = app.invoke({"turns": [cello]}, config, context=context(data_dir, "ingest", "ann"))
    assert stored["stored_ids"][0] == "raw:D1:5" and not {"raw:D1:3", "raw:D1:4"} & set(stored["stored_ids"])
    assert roles(stored["trace"]) == ["memory", "research", "judge", "memory"]
    app.invoke({"question": "What is the name of Ann's dog?"}, config, context=context(data_dir, "ask", "ann"),
               interrupt_before=["judge"])
    asked = app.invoke({"question": "Where does Ann live?"}, config, context=context(data_dir, "ask", "ann"))
    assert roles(asked["trace"]) == ["research", "judge", "working"] and asked["rounds"] == 1
    assert asked["answer"] == "Boston"


def test_a_read_refuses_its_own_turns_not_those_a_stopped_run_left(threaded: tuple[Any, dict[str, Any], str]) -> None:
    """A read stores nothing: turns sent to it are refused in one line. A stopped ingest's turns, left on the
    thread, are not the read's own, nor are the refused read's: the question after them is answered."""
    app, config, data_dir = threaded
    nurse = turn("I work as a nurse.", "D1:3", "2023-05-08T10:02")
    app.invoke({"turns": [nurse]}, config, context=context(data_dir, "ingest", "ann"), interrupt_after=["memory"])
    assert app.get_state(config).values["turns"]
    cats = {"turns": [turn("I have two cats.", "D1:4", "2023-05-08T10:03")], "question": "Does Ann have pets?"}
    for _ in range(2):  # sent again unchanged (Submit pressed twice): refused again, not answered without them
        with pytest.raises(InputError, match="mode 'retrieve' answers a question and stores nothing"):
            app.invoke(cats, config, context=context(data_dir, "retrieve", "ann"))
    asked = app.invoke({"question": "Where does Ann live?"}, config, context=context(data_dir, "ask", "ann"))
    assert asked["answer"] == "Boston"


def test_a_runs_input_leaves_the_thread_with_it(threaded: tuple[Any, dict[str, Any], str]) -> None:
    """A thread keeps every field between runs and a run's input sets only the fields it names: a chat run
    for another namespace given only a question stored the last run's turn again, in its own namespace."""
    app, config, data_dir = threaded
    code = turn("My door code is 8841.", "D1:3", "2023-05-08T10:02")
    app.invoke({"turns": [code]}, config, context=context(data_dir, "chat", "ann"))
    assert app.get_state(config).values["turns"] == [] and app.get_state(config).values["question"] == ""
    with pytest.raises(InputError, match="needs turns"):
        app.invoke({"question": "Hi, what's new?"}, config, context=context(data_dir, "chat", "bob"))
    assert Memory("bob", data_dir=data_dir).stats()["raw"]["active"] == 0
    app.invoke({"question": "Where does Ann live?"}, config, context=context(data_dir, "ask", "ann"))
    assert app.get_state(config).values["question"] == ""
    # a run stopped before finish_run (an interrupt here, an error alike) leaves its input on the thread
    pin = turn("My PIN is 4417.", "D1:4", "2023-05-08T10:03")
    app.invoke({"turns": [pin]}, config, context=context(data_dir, "chat", "ann"), interrupt_after=["memory"])
    assert app.get_state(config).values["turns"]
    with pytest.raises(InputError, match="needs turns"):
        app.invoke({"question": "Hi, what's new?"}, config, context=context(data_dir, "chat", "bob"))
    assert Memory("bob", data_dir=data_dir).stats()["raw"]["active"] == 0
    resumed = app.invoke({"turns": [pin]}, config, context=context(data_dir, "chat", "ann"))  # its own input: kept
    assert resumed["answer"] is not None


def test_the_same_input_sent_for_another_namespace_after_a_stopped_run(
    threaded: tuple[Any, dict[str, Any], str],
) -> None:
    """A run that stopped leaves its input on the thread. Sent again as it was, for another namespace, the
    turns are that run's input (they come as dicts, the thread holds Turns); the same question cannot be
    told from the one left, and is refused in one line rather than answered as "needs a question"."""
    app, config, data_dir = threaded
    other = turn("I live in Paris.", "D1:1", "2023-05-08T10:00")  # ann's D1:1 has other words: refused there
    with pytest.raises(InputError, match="D1:1"):
        app.invoke({"turns": [other]}, config, context=context(data_dir, "ingest", "ann"))
    app.invoke({"turns": [other]}, config, context=context(data_dir, "ingest", "bob"))
    assert [r.text for r in Memory("bob", data_dir=data_dir).store.all("raw")] == ["I live in Paris."]
    asked = {"question": "Where does Ann live?"}
    app.invoke(asked, config, context=context(data_dir, "ask", "ann"), interrupt_after=["research"])
    with pytest.raises(InputError, match=r"stopped with this same input.*new thread"):
        app.invoke(asked, config, context=context(data_dir, "ask", "bob"))


def test_retrieve_then_ask_on_a_thread(threaded: tuple[Any, dict[str, Any], str]) -> None:
    app, config, data_dir = threaded
    found = app.invoke({"question": "Where does Ann live?"}, config, context=context(data_dir, "retrieve", "ann"))
    assert found["answer"] is None and app.get_state(config).values["stage"] == "done"
    asked = app.invoke({"question": "Where does Ann live?"}, config, context=context(data_dir, "ask", "ann"))
    assert roles(asked["trace"]) == ["research", "judge", "working"] and asked["answer"] == "Boston"


def test_ask_after_ingest_on_a_thread_answers_the_question(threaded: tuple[Any, dict[str, Any], str]) -> None:
    app, config, data_dir = threaded
    app.invoke({"turns": [turn("I work as a nurse.", "D1:3", "2023-05-08T10:02")]}, config,
               context=context(data_dir, "ingest", "ann"))
    asked = app.invoke({"question": "Where does Ann live?"}, config, context=context(data_dir, "ask", "ann"))
    assert asked["answer"] == "Boston"


def test_chat_after_ask_on_a_thread_answers_the_new_turn(threaded: tuple[Any, dict[str, Any], str]) -> None:
    app, config, data_dir = threaded
    app.invoke({"question": "Where does Ann live?"}, config, context=context(data_dir, "ask", "ann"))
    said = {"speaker": "Ben", "text": "What did Ann say about spring?", "listener": "Ann"}
    chatted = app.invoke({"turns": [said]}, config, context=context(data_dir, "chat", "ann"))
    assert chatted["answer"] != "Boston"


@pytest.mark.parametrize(("later", "backfilled"), [
    # said in July about June, then May's talk backfilled: the fact's own time (June) is not when it was said
    (DENVER, BOSTON),
    # one session time for every turn (as LoCoMo stamps them): D1:9 was said before D1:10
    (turn("Actually I live in Denver now.", "D1:10", "2023-05-08T10:00"),
     turn("I live in Boulder.", "D1:9", "2023-05-08T10:00")),
])
def test_a_backfilled_older_turn_does_not_rewrite_what_was_said_after_it(
    data_dir: Path, embedder: Any, later: dict[str, Any], backfilled: dict[str, Any]
) -> None:
    graph.invoke({"turns": [later]}, context=context(data_dir, "ingest", "ann"))
    [newer] = Memory("ann", data_dir=str(data_dir)).store.all("fact")
    graph.invoke({"turns": [backfilled]}, context=context(data_dir, "ingest", "ann"))
    store = Memory("ann", data_dir=str(data_dir)).store
    assert store.get_one(newer.id).text == newer.text and "Denver" in newer.text
    assert not [c for c in store.history(newer.id) if c.action in (Action.UPDATE, Action.DELETE)]
