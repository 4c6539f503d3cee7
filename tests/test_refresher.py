"""The Refresher edits memory only inside a conflict, reversibly, and deletes only on request.

Records live in a real Chroma memory with its SQLite ledger; each test builds
the State the Judge would hand over (evidence read back from the store and a
Refresh verdict naming the conflicting ids, "new" for the incoming turn) and
calls the node directly. The model policy runs on LangChain's fake chat models.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import strata.graph  # noqa: F401  (loads the graph package before the role modules it wires)
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime
from strata.agents.common import evidence_of
from strata.agents.judge import judge
from strata.agents.refresher import refresher
from strata.graph.context import Context, Mode
from strata.graph.state import MAX_CONFLICT_GROUPS, PathStep, State, Verdict
from strata.memory.entities import stem
from strata.memory.facts import single_valued
from strata.memory.forgetting import read_forget_request
from strata.memory.records import Action, Record, Status, Turn
from strata.memory.registry import close_all, open_store
from strata.memory.settings import StoreSettings
from strata.memory.slots import UNDONE
from strata.memory.store import MemoryStore

from strata.conversations import load_turns

NAMESPACE = "ns"
MAY = datetime(2023, 5, 8, 13, 56)
JULY = datetime(2023, 7, 3, 10, 0)


@pytest.fixture
def store(data_dir: Path, embedder: object) -> Iterator[MemoryStore]:
    yield open_store(StoreSettings(data_dir=str(data_dir)), NAMESPACE)
    close_all()


def fact(record_id: str, text: str, subject: str, attribute: str, value: str, when: datetime) -> Record:
    turn = record_id.split(":", 1)[1].rsplit(":", 1)[0]
    return Record(
        id=record_id, kind="fact", text=text, namespace=NAMESPACE, dialogue_id=turn, speaker=subject, time=when,
        source_ids=[turn], subject=subject, attribute=attribute, value=value,
    )


BOSTON = fact("fact:D1:4:0", "Caroline lives in Boston with her two cats.", "Caroline", "lives_in", "Boston", MAY)
DENVER = fact("fact:D5:2:0", "Caroline lives in Denver.", "Caroline", "lives_in", "Denver", JULY)
PAINTS = fact("fact:D1:6:0", "Caroline likes painting.", "Caroline", "likes", "painting", MAY)
POTTERY = fact("fact:D5:4:0", "Melanie likes pottery.", "Melanie", "likes", "pottery", JULY)
UNRELATED = fact("fact:D1:9:0", "Caroline works as a counselor.", "Caroline", "works_as", "counselor", MAY)


def turn(text: str, dia_id: str = "D5:3", speaker: str = "Caroline") -> Turn:
    return Turn(speaker=speaker, text=text, time=JULY, dia_id=dia_id, listener="Melanie")


def raw_of(incoming: Turn) -> Record:
    """The incoming turn as the Memory role writes it ahead of the Refresher (write-ahead)."""
    return Record(id=f"raw:{incoming.dia_id}", kind="raw", text=incoming.text, namespace=NAMESPACE,
                  dialogue_id=incoming.dia_id or "", speaker=incoming.speaker, time=incoming.time,
                  source_ids=[incoming.dia_id or ""])


def run(
    store: MemoryStore, data_dir: Path, records: list[Record], conflicts: list[list[str]], incoming: Turn | None = None,
    question: str = "", mode: Mode = "ingest", chat_model: Any = None,
) -> dict[str, Any]:
    """Store the records, hand the node the Judge's Refresh verdict, return its update."""
    store.add(records)
    evidence = [evidence_of(r, 1.0, ["dense"]) for r in store.get(r.id for r in records)]
    for item in evidence:
        item.path = [PathStep(step="anchor", via=["dense"], dst=item.id)]
    state = State(
        turns=[incoming] if incoming else [], question=question, evidence=evidence, stage="intake",
        verdict=Verdict(action="Refresh", reason="incompatible values", conflicts=conflicts),
    )
    context = Context(namespace=NAMESPACE, data_dir=str(data_dir), mode=mode, chat_model=chat_model)
    return refresher(state, Runtime(context=context))


def fake(*replies: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(content=reply) for reply in replies]))


# --- Update -------------------------------------------------------------------------------------


def test_newer_turn_supersedes_the_value_and_the_old_fact_keeps_its_words(
    store: MemoryStore, data_dir: Path
) -> None:
    """Found by audit: the update rewrote May's fact to the new value, keeping May's time and source, so "where
    did she live in May?" was answered with the new city, citing the turn that said the old one."""
    moved = turn("I live in Denver now.")
    out = run(store, data_dir, [BOSTON, UNRELATED, raw_of(moved)], [["new", BOSTON.id]], moved)
    old = store.get_one(BOSTON.id)
    assert old.text == BOSTON.text and old.status == Status.SUPERSEDED and old.version == 2  # still what D1:4 said
    assert "raw:D5:3" in store.neighbours([BOSTON.id])  # superseded by the turn (its facts come after)
    assert store.valid_until([old]) == {BOSTON.id: JULY}  # it held until the newer turn was said
    assert store.get_one(UNRELATED.id).text == UNRELATED.text  # outside the conflict: untouched

    [note] = out["changes"]
    assert note.action == "update" and note.old_text == BOSTON.text and note.change_id is not None
    # what the record now holds, as its history row says: its own words, superseded by the newer turn
    assert (note.new_text, note.new_status, note.superseded_by) == (BOSTON.text, Status.SUPERSEDED, "raw:D5:3")
    assert "D5:3" in note.reason and "'Boston' -> 'Denver'" in note.reason
    [change] = store.history(BOSTON.id)
    assert change.action == Action.UPDATE and change.new_status == Status.SUPERSEDED
    assert BOSTON.id not in [e.id for e in out["evidence"]]  # the outdated value no longer reaches the answer
    assert out["trace"][-1].role == "refresher" and out["trace"][-1].policy == "offline"
    assert "stage" not in out  # ingest carries on to the memory role

    store.undo(note.change_id)  # current again, with no end: the supersedes link goes with the change
    assert store.get_one(BOSTON.id).status == Status.ACTIVE and store.get_one(BOSTON.id).text == BOSTON.text
    assert "raw:D5:3" not in store.neighbours([BOSTON.id])
    assert store.valid_until([store.get_one(BOSTON.id)]) == {}


def test_the_turns_own_fact_supersedes_when_it_is_stored(store: MemoryStore, data_dir: Path) -> None:
    moved = turn("I live in Denver now.")
    own = fact("fact:D5:3:0", "Caroline lives in Denver now.", "Caroline", "lives_in", "Denver", JULY)
    run(store, data_dir, [BOSTON, own, raw_of(moved)], [["new", BOSTON.id]], moved)
    assert store.get_one(BOSTON.id).status == Status.SUPERSEDED
    assert own.id in store.neighbours([BOSTON.id])


def test_two_stored_values_the_older_is_superseded_by_the_newer(store: MemoryStore, data_dir: Path) -> None:
    out = run(store, data_dir, [BOSTON, DENVER], [[BOSTON.id, DENVER.id]], question="Where does Caroline live?",
              mode="retrieve")
    assert store.get_one(BOSTON.id).status == Status.SUPERSEDED
    assert store.get_one(DENVER.id).status == Status.ACTIVE
    assert DENVER.id in store.neighbours([BOSTON.id])  # the supersedes link
    [note] = out["changes"]  # the newer record is kept as it is: the superseded one's history says why
    assert note.action == "update" and note.record_id == BOSTON.id and DENVER.id in note.reason
    assert [e.id for e in out["evidence"]] == [DENVER.id]  # the outdated value no longer reaches the answer
    assert out["stage"] == "done"  # retrieve ends after the refresher

    store.undo(note.change_id)
    assert store.get_one(BOSTON.id).status == Status.ACTIVE


def test_every_group_the_judge_names_the_refresher_settles(store: MemoryStore, data_dir: Path) -> None:
    """Found by review: the Judge named up to six conflict groups and the Refresher settled four, so a Refresh
    verdict could name conflicts that no run then acted on. One bound (`MAX_CONFLICT_GROUPS`) now serves both."""
    people = ["Ann", "Ben", "Cid", "Dee", "Eva", "Fay"]
    older = [fact(f"fact:D1:{i}:0", f"{p} lives in Austin.", p, "lives_in", "Austin", MAY)
             for i, p in enumerate(people)]
    newer = [fact(f"fact:D5:{i}:0", f"{p} lives in Denver.", p, "lives_in", "Denver", JULY)
             for i, p in enumerate(people)]
    store.add([*older, *newer])
    question = "Where do they live?"
    state = State(question=question, evidence=[evidence_of(r, 1.0, ["dense"]) for r in store.get(
        r.id for r in [*older, *newer])])
    context = Context(namespace=NAMESPACE, data_dir=str(data_dir), mode="ask", refresh_on_read=True)
    verdict = judge(state, Runtime(context=context))["verdict"]
    assert verdict.action == "Refresh" and len(verdict.conflicts) == MAX_CONFLICT_GROUPS < len(people)
    assert f"({len(people) - MAX_CONFLICT_GROUPS} more group(s) wait for a later run)" in verdict.reason
    out = refresher(replace(state, verdict=verdict), Runtime(context=context))
    named = [i for group in verdict.conflicts for i in group if i.startswith("fact:D1:")]
    assert len(named) == MAX_CONFLICT_GROUPS
    assert all(store.get_one(i).status == Status.SUPERSEDED for i in named)  # none named and then left alone
    assert "more group(s) wait" not in out["trace"][-1].summary


@pytest.mark.parametrize("mode", ["ask", "chat"])
def test_a_group_the_model_judge_sets_against_a_question_is_not_named(
    mode: Mode, store: MemoryStore, data_dir: Path
) -> None:
    """Found by review: a model Judge could set a stored fact against the incoming question ("new"), and the
    Refresher, which takes a question for no newer value, left the group as it was. The Judge now leaves "new"
    out for a question, and a group then needs records of two stored turns; a real conflict still goes."""
    asked = turn("Do you still live in Boston?")
    store.add([BOSTON, DENVER, raw_of(asked)])
    reply = json.dumps({"Action": "Refresh", "reason": "asked about", "conflicts": [
        [BOSTON.id, "new"], [DENVER.id, "new"], [BOSTON.id, DENVER.id]]})
    model = GenericFakeChatModel(messages=iter([AIMessage(content=reply)]))
    evidence = [evidence_of(r, 1.0, ["dense"]) for r in store.get([BOSTON.id, DENVER.id])]
    state = State(question=asked.text if mode == "ask" else "", turns=[asked] if mode == "chat" else [],
                  evidence=evidence, stage="intake")
    context = Context(namespace=NAMESPACE, data_dir=str(data_dir), mode=mode, refresh_on_read=True,
                      chat_model=model)
    verdict = judge(state, Runtime(context=context))["verdict"]
    assert verdict.conflicts == [[BOSTON.id, DENVER.id]]
    assert verdict.reason.endswith("('new' left out: a question states no newer value)")
    out = refresher(replace(state, verdict=verdict), Runtime(context=replace(context, chat_model=None)))
    acted = {n.record_id for n in out["changes"] if n.action != "noop"}
    assert {i for group in verdict.conflicts for i in group} - {DENVER.id} <= acted  # the newest stays as it is
    assert store.get_one(BOSTON.id).status == Status.SUPERSEDED


def test_an_undone_change_is_not_made_again(store: MemoryStore, data_dir: Path) -> None:
    """Found by audit: a rewrite the user undid was made again (by supersession) on the next turn that brought
    both facts into evidence."""
    moved = turn("I live in Denver now.")
    out = run(store, data_dir, [BOSTON, raw_of(moved)], [["new", BOSTON.id]], moved)
    store.undo(out["changes"][0].change_id)
    out = run(store, data_dir, [DENVER], [[BOSTON.id, DENVER.id]], question="Where does Caroline live?",
              mode="retrieve")
    assert store.get_one(BOSTON.id).status == Status.ACTIVE and store.get_one(BOSTON.id).text == BOSTON.text
    [note] = [n for n in out["changes"] if n.record_id == BOSTON.id]
    assert note.action == "noop" and note.reason.startswith(UNDONE)


def test_an_undone_change_is_not_made_again_by_the_same_words(store: MemoryStore, data_dir: Path) -> None:
    moved = turn("I live in Denver now.")
    out = run(store, data_dir, [BOSTON, raw_of(moved)], [["new", BOSTON.id]], moved)
    store.undo(out["changes"][0].change_id)
    again = turn("I live in Denver now.", "D5:5")
    out = run(store, data_dir, [raw_of(again)], [["new", BOSTON.id]], again)
    assert store.get_one(BOSTON.id).text == BOSTON.text
    [note] = out["changes"]
    assert note.action == "noop" and note.reason.startswith(UNDONE)


def test_a_value_only_asked_or_told_by_another_does_not_supersede_ones_own(
    store: MemoryStore, data_dir: Path
) -> None:
    """Found by audit: Melanie's "You live in Denver now, right?" superseded Caroline's own "I live in Boston"."""
    guess = fact("fact:D5:2:0", "Caroline lives in Denver now.", "Caroline", "lives_in", "Denver", JULY)
    guess = guess.model_copy(update={"speaker": "Melanie"})
    asked = Record(id="raw:D5:2", kind="raw", text="You live in Denver now, right?", namespace=NAMESPACE,
                   dialogue_id="D5:2", speaker="Melanie", time=JULY, source_ids=["D5:2"])
    out = run(store, data_dir, [BOSTON, guess, asked], [[BOSTON.id, guess.id]], question="Where does Caroline live?",
              mode="retrieve")
    assert store.get_one(BOSTON.id).status == Status.ACTIVE
    assert {n.action for n in out["changes"]} == {"noop"}
    assert "said it of themselves" in next(n.reason for n in out["changes"] if n.record_id == BOSTON.id)


def test_a_past_event_does_not_replace_a_value_said_later(store: MemoryStore, data_dir: Path) -> None:
    """Found by audit: "I moved to Denver in 2015 for college." rewrote "lives in Boston", said in 2023."""
    past = turn("I moved to Denver in 2015 for college.")
    out = run(store, data_dir, [BOSTON, raw_of(past)], [["new", BOSTON.id]], past)
    assert store.get_one(BOSTON.id).text == BOSTON.text and store.get_one(BOSTON.id).status == Status.ACTIVE
    [note] = out["changes"]
    assert note.action == "noop" and "before the older was said" in note.reason
    # "last month" places a move only roughly: said after "I live in Boston", it is a move (found by make test:
    # a guard that compared the dates strictly kept Boston)
    moved = turn("I moved to Denver last month.", "D5:4")
    run(store, data_dir, [raw_of(moved)], [["new", BOSTON.id]], moved)
    assert store.get_one(BOSTON.id).status == Status.SUPERSEDED


def test_a_fact_already_brought_up_to_date_is_not_a_conflict(store: MemoryStore, data_dir: Path) -> None:
    """An update rewrites the text, not the stored value: the next run must see that they agree."""
    updated = BOSTON.model_copy(update={"text": "Caroline lives in Denver with her two cats.", "version": 2})
    out = run(store, data_dir, [updated, DENVER], [[updated.id, DENVER.id]], question="Where does Caroline live?",
              mode="ask")
    assert out["changes"] == []
    assert store.history(updated.id) == [] and store.history(DENVER.id) == []
    assert "2 already consistent" in out["trace"][-1].summary


def test_real_turns_and_a_real_update(store: MemoryStore, data_dir: Path, locomo_dir: Path) -> None:
    """conv-26's raw turns stay verbatim; only the fact in the conflict is brought up to date."""
    turns = {t.dia_id: t for t in load_turns(locomo_dir / "conv-26.json").turns()}
    d1_11 = turns["D1:11"]  # "I'm keen on counseling or working in mental health ..."
    raw = Record(id="raw:D1:11", kind="raw", text=d1_11.text, namespace=NAMESPACE, dialogue_id="D1:11",
                 speaker=d1_11.speaker, time=d1_11.time, source_ids=["D1:11"])
    job = fact("fact:D1:11:0", "Caroline works as a volunteer.", "Caroline", "works_as", "volunteer", MAY)
    now = turn("I work as a counselor now.")
    run(store, data_dir, [raw, job, raw_of(now)], [["new", raw.id, job.id]], now)
    assert store.get_one(raw.id).text == d1_11.text and store.get_one(raw.id).status == Status.ACTIVE
    assert store.get_one(job.id).text == job.text and store.get_one(job.id).status == Status.SUPERSEDED


def trait_of(record: Record) -> Record:
    """The persona trait the Memory role distils from a fact (same id scheme and fields)."""
    from strata.memory.persona import aspect_of, persona_id

    aspect = aspect_of(record.attribute) or "home"
    return record.model_copy(update={
        "id": persona_id(record.subject, aspect, record.value), "kind": "persona", "participant": record.subject,
        "aspect": aspect,
    })


def test_a_trait_is_retired_with_the_fact_it_came_from(store: MemoryStore, data_dir: Path) -> None:
    home = trait_of(BOSTON)
    likes = trait_of(PAINTS)
    moved = turn("I live in Denver now.")
    out = run(store, data_dir, [BOSTON, home, PAINTS, likes, raw_of(moved)], [["new", BOSTON.id]], moved)
    assert store.get_one(home.id).status == Status.SUPERSEDED  # "lives in Boston" is no longer a trait
    assert store.get_one(likes.id).status == Status.ACTIVE  # another fact's trait: untouched
    assert [(n.action, n.record_id) for n in out["changes"]] == [("update", BOSTON.id), ("update", home.id)]
    [change] = store.history(home.id)
    assert "fact:D1:4:0" in change.reason and change.follows == out["changes"][0].change_id
    store.undo()  # the latest lead change is the fact's: undoing it restores the trait too
    assert store.get_one(BOSTON.id).status == Status.ACTIVE
    assert store.get_one(home.id).status == Status.ACTIVE


def test_a_deleted_fact_takes_its_trait_with_it(store: MemoryStore, data_dir: Path) -> None:
    home = trait_of(BOSTON)
    run(store, data_dir, [BOSTON, home], [[BOSTON.id, "new"]], turn("Please forget that I live in Boston."))
    assert store.get_one(BOSTON.id).status == Status.DELETED
    assert store.get_one(home.id).status == Status.DELETED


# --- Delete -------------------------------------------------------------------------------------


def test_explicit_request_to_forget_tombstones_the_record(store: MemoryStore, data_dir: Path) -> None:
    out = run(store, data_dir, [BOSTON, PAINTS], [["new", BOSTON.id, PAINTS.id]],
              turn("Please forget that I live in Boston."))
    assert store.get_one(BOSTON.id).status == Status.DELETED
    assert store.get_one(PAINTS.id).status == Status.ACTIVE  # in the conflict, but not what was asked
    assert {n.record_id: n.action for n in out["changes"]} == {BOSTON.id: "delete", PAINTS.id: "noop"}
    assert BOSTON.id not in [e.id for e in out["evidence"]]
    assert BOSTON.id not in [h.record.id for h in store.search("fact", "Caroline lives in Boston", 5)]

    change_id = next(n.change_id for n in out["changes"] if n.action == "delete")
    store.undo(change_id)
    assert store.get_one(BOSTON.id).status == Status.ACTIVE


@pytest.mark.parametrize("mode", ["ask", "retrieve"])
def test_a_question_asking_to_forget_deletes_nothing(mode: Mode, store: MemoryStore, data_dir: Path) -> None:
    """Issue 9: an `ask` whose question was a request to forget deleted a record. Questions never delete."""
    out = run(store, data_dir, [BOSTON], [[BOSTON.id]], question="Could you delete where I live, Boston?", mode=mode)
    assert store.get_one(BOSTON.id).status == Status.ACTIVE
    [note] = out["changes"]
    assert note.action == "noop" and f"'{mode}' never deletes" in note.reason


@pytest.mark.parametrize(
    "text",
    [
        "I really love Boston in the fall.",  # same conflict, no request
        "Don't forget that I live in Boston!",
        "I forgot my keys in Boston yesterday.",
        "I had to cancel my trip to Boston.",
    ],
)
def test_no_delete_without_an_explicit_request(text: str, store: MemoryStore, data_dir: Path) -> None:
    out = run(store, data_dir, [BOSTON], [["new", BOSTON.id]], turn(text))
    assert store.get_one(BOSTON.id).status == Status.ACTIVE
    assert store.get_one(BOSTON.id).text == BOSTON.text
    assert [n.action for n in out["changes"]] == ["noop"]


@pytest.mark.parametrize(
    ("text", "words", "names"),
    [
        ("Please forget that I live in Boston.", {"live", "boston"}, {"boston"}),
        ("Please forget that Caroline lives in Boston.", {"live", "boston"}, {"boston"}),  # a person is whom, not what
        ("Can you remove the dentist appointment?", {"dentist", "appointment"}, set()),
        ("Thanks, and delete what I said about Boston", {"boston"}, {"boston"}),
        ("Cancel my dentist appointment on Friday.", {"dentist", "appointment", "friday"}, set()),
        ("The party on Friday is cancelled.", {"party", "friday"}, set()),
        ("Never mind.", set(), set()),
        ("I'll never forget it!", None, None),
        ("I went home and deleted the photos.", None, None),
        ("Don't forget to call mom.", None, None),
    ],
)
def test_forget_requests_are_recognised(text: str, words: set[str] | None, names: set[str] | None) -> None:
    request = read_forget_request(text, ("Caroline", "Melanie"))
    if words is None:
        assert request is None
    else:
        assert request is not None
        assert (request.words, request.names) == ({stem(w) for w in words}, {stem(w) for w in names or set()})


def test_a_request_naming_one_place_spares_the_other(store: MemoryStore, data_dir: Path) -> None:
    out = run(store, data_dir, [BOSTON, DENVER], [["new", BOSTON.id, DENVER.id]],
              turn("Please forget that I live in Denver."))
    assert store.get_one(DENVER.id).status == Status.DELETED
    assert store.get_one(BOSTON.id).status == Status.ACTIVE
    assert {n.record_id: n.action for n in out["changes"]} == {DENVER.id: "delete", BOSTON.id: "noop"}


# --- No-op --------------------------------------------------------------------------------------


def test_different_subjects_are_left_alone_and_the_decision_is_recorded(store: MemoryStore, data_dir: Path) -> None:
    out = run(store, data_dir, [PAINTS, POTTERY], [[PAINTS.id, POTTERY.id]], question="What do they like?",
              mode="ask")
    assert [store.get_one(r.id).text for r in (PAINTS, POTTERY)] == [PAINTS.text, POTTERY.text]
    assert [n.action for n in out["changes"]] == ["noop", "noop"]
    [noop] = store.history(PAINTS.id)
    assert noop.action == Action.NOOP and noop.reason
    assert [e.id for e in out["evidence"]] == [PAINTS.id, POTTERY.id]


def test_values_that_can_both_hold_are_not_a_conflict(store: MemoryStore, data_dir: Path) -> None:
    sunset = fact("fact:D8:6:0", "Caroline likes sunsets.", "Caroline", "likes", "sunsets", JULY)
    out = run(store, data_dir, [PAINTS, sunset], [[PAINTS.id, sunset.id]], question="What does Caroline like?",
              mode="ask")
    assert [n.action for n in out["changes"]] == ["noop", "noop"]
    assert store.get_one(PAINTS.id).status == Status.ACTIVE


def test_ids_that_are_not_live_records_are_ignored(store: MemoryStore, data_dir: Path) -> None:
    out = run(store, data_dir, [PAINTS], [["fact:D9:9:9", "bogus"]], question="What does Caroline like?", mode="ask")
    assert out["changes"] == []
    assert "nothing to change" in out["trace"][-1].summary


def test_single_valued_attributes() -> None:
    assert single_valued("lives_in") and single_valued("works_as") and single_valued("favorite_color")
    assert not single_valued("likes") and not single_valued("lived_in") and not single_valued("has_pets")


# --- the model policy ---------------------------------------------------------------------------


def update_reply(record_id: str, content: str) -> str:
    return json.dumps({
        "Action": "Update", "memory_type": "fact", "dataList": [{"id": record_id, "new_content": content}],
        "timestamp": "empty", "reason": "Caroline moved; the newer turn gives the current city.",
    })


def test_model_update_is_applied_and_labelled(store: MemoryStore, data_dir: Path) -> None:
    model = fake(update_reply(BOSTON.id, "Caroline lives in Denver with her two cats."))
    out = run(store, data_dir, [BOSTON], [["new", BOSTON.id]], turn("I live in Denver now."), chat_model=model)
    assert store.get_one(BOSTON.id).text == "Caroline lives in Denver with her two cats."
    [note] = out["changes"]
    assert note.policy == "model:GenericFakeChatModel" and "newer turn" in note.reason
    assert store.history(BOSTON.id)[0].policy == "model:GenericFakeChatModel"


@pytest.mark.parametrize(
    "wrap",
    [
        lambda j: f"```json\n{j}\n```",
        lambda j: f"Sure! Here is my decision:\n{j}\nLet me know if you need anything else.",
    ],
)
def test_model_json_in_fences_or_prose_is_read(wrap: Any, store: MemoryStore, data_dir: Path) -> None:
    model = fake(wrap(update_reply(BOSTON.id, "Caroline lives in Denver.")))
    out = run(store, data_dir, [BOSTON], [["new", BOSTON.id]], turn("I live in Denver now."), chat_model=model)
    assert store.get_one(BOSTON.id).text == "Caroline lives in Denver."
    assert out["changes"][0].policy.startswith("model:")


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("", "empty reply"),
        ("I would update the memory to say Denver.", "no JSON object"),
        ('{"memory_type": "fact", "dataList": []}', "field Action"),
        ('{"Action": "Rewrite", "dataList": []}', "field Action"),
        ('{"Action": "Update", "dataList": "fact:D1:4:0"}', "field dataList"),
        ('{"Action": "Update", "dataList": [{"id": 7, "new_content": "x"}]}', "field dataList"),
    ],
)
def test_malformed_model_output_falls_back_to_the_offline_policy(
    reply: str, problem: str, store: MemoryStore, data_dir: Path
) -> None:
    moved = turn("I live in Denver now.")
    out = run(store, data_dir, [BOSTON, raw_of(moved)], [["new", BOSTON.id]], moved, chat_model=fake(reply))
    # the offline policy still brings the value up to date
    assert store.get_one(BOSTON.id).status == Status.SUPERSEDED
    policy = out["changes"][0].policy
    assert policy.startswith("offline (model output unusable:") and problem in policy
    assert out["trace"][-1].policy == policy


def test_model_ids_outside_the_conflict_are_never_touched(store: MemoryStore, data_dir: Path) -> None:
    model = fake(update_reply(UNRELATED.id, "Caroline works as a pilot."))
    out = run(store, data_dir, [BOSTON, UNRELATED], [["new", BOSTON.id]], turn("I live in Denver now."),
              chat_model=model)
    assert store.get_one(UNRELATED.id).text == UNRELATED.text
    assert store.history(UNRELATED.id) == []
    policy = out["changes"][0].policy
    assert policy.startswith("offline (model output unusable:") and UNRELATED.id in policy


def test_model_delete_without_a_request_is_refused(store: MemoryStore, data_dir: Path) -> None:
    reply = json.dumps({"Action": "Delete", "memory_type": "fact", "dataList": [{"id": BOSTON.id}], "reason": "old"})
    out = run(store, data_dir, [BOSTON], [["new", BOSTON.id]], turn("I really love Boston in the fall."),
              chat_model=fake(reply))
    assert store.get_one(BOSTON.id).status == Status.ACTIVE
    assert out["changes"][0].action == "noop"
    assert "explicit request" in out["changes"][0].policy


def test_model_delete_on_request_and_model_noop(store: MemoryStore, data_dir: Path) -> None:
    reply = json.dumps({"Action": "delete", "dataList": [{"id": BOSTON.id, "new_content": ""}], "reason": "asked"})
    out = run(store, data_dir, [BOSTON], [["new", BOSTON.id]], turn("Please forget that I live in Boston."),
              chat_model=fake(reply))
    assert store.get_one(BOSTON.id).status == Status.DELETED
    assert out["changes"][0].policy == "model:GenericFakeChatModel"

    noop = '{"Action": "No-Op", "memory_type": "fact", "dataList": [], "timestamp": "empty", "reason": "unsure"}'
    out = run(store, data_dir, [PAINTS, POTTERY], [[PAINTS.id, POTTERY.id]], question="What do they like?",
              mode="ask", chat_model=fake(noop))
    assert [n.action for n in out["changes"]] == ["noop", "noop"]
    assert all(n.reason.startswith("unsure") for n in out["changes"])


def test_a_persona_aspect_is_named_by_a_word_of_the_attribute_not_a_part_of_one() -> None:
    """'education', 'location' and 'vacation_spot' hold "cat" and were family traits; 'display_name' a hobby."""
    from strata.memory.persona import aspect_of

    assert [aspect_of(a) for a in ("education", "location", "vacation_spot", "communication_style",
                                   "display_name")] == [None] * 5
    assert [aspect_of(a) for a in ("likes", "dislikes", "favorite_color", "lives_in", "owns_cat", "kids",
                                   "plays_guitar", "reading", "works_as", "is_a")] == [
        "preferences", "preferences", "preferences", "home", "family", "family", "hobbies", "hobbies", "work",
        "identity"]


def test_a_camel_case_attribute_is_split_into_its_words_as_a_snake_case_one_is() -> None:
    """A model may name attributes in camelCase: "myFavoriteBook" read as "myfavoritebook" named no aspect."""
    from strata.memory.persona import aspect_of

    assert [aspect_of(a) for a in ("myFavoriteBook", "currentCity", "hasDog", "isA", "fanOf", "favoriteBook")] == [
        "preferences", "home", "family", "identity", "preferences", "preferences"]
    assert [aspect_of(a) for a in ("displayName", "vacationSpot", "emailAddress")] == [None] * 3
