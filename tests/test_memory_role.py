"""The Memory role on real LoCoMo turns: what one ingestion writes, at every granularity.

Sessions 1 and 2 of conv-26 go through `Memory.add` (the whole graph, offline
policies, real Chroma and MiniLM in a temporary folder), and each test reads
back one thing the role promises: verbatim raw turns with their metadata,
self-contained facts linked to their turn, captions kept with their turn,
persona traits for stable attributes only, episodes closed by a session change
and by `end_session`, typed links, a bounded working memory, idempotent
re-ingestion, and a raw turn that survives a failing derive step (write-ahead).
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import strata.agents.memory as memory_role
from strata.memory.records import LinkType, Record, Status, Turn, chronological_key
from strata.memory.registry import close_all
from strata.memory.store import MemoryStore

from strata.api import IngestReport, Memory
from strata.conversations import LOCOMO_TURN_KEYS, load_turns

NAMESPACE = "conv-26"
WORKING_SIZE = 4
EPISODE_MAX_TURNS = 16
SESSION_1_TIME = datetime(2023, 5, 8, 13, 56)
SESSION_2_TIME = datetime(2023, 5, 25, 13, 14)
FIRST_PERSON = re.compile(r"\b(I|my|I'm|I've|I'd|you|your)\b")


@dataclass
class Ingested:
    """Sessions 1-2 of conv-26 in one memory, with snapshots taken along the way."""

    memory: Memory
    session_1: list[Turn]
    session_2: list[Turn]
    report_1: IngestReport
    episodes_after_session_1: list[Record]
    episodes_after_first_d2: list[Record]
    closed: Record | None

    @property
    def turns(self) -> list[Turn]:
        return [*self.session_1, *self.session_2]

    @property
    def store(self) -> MemoryStore:
        return self.memory.store


def episode_ids(episodes: list[Record]) -> list[str]:
    return [i for e in sorted(episodes, key=chronological_key) for i in e.source_ids]


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory, locomo_dir: Path, embedder: Any) -> Iterator[Ingested]:
    """Ingest sessions 1 and 2 once for the module (about 15 s), the second in two calls."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("STRATA_MODEL", raising=False)
        conversation = load_turns(locomo_dir / "conv-26.json")
        session_1, session_2 = (list(s.turns) for s in conversation.sessions[:2])
        memory = Memory(
            NAMESPACE, data_dir=str(tmp_path_factory.mktemp("memory_role")), model="offline",
            working_size=WORKING_SIZE, episode_max_turns=EPISODE_MAX_TURNS,
        )
        report_1 = memory.add(session_1)
        after_1 = memory.store.all("episode")
        memory.add(session_2[:1])
        after_first_d2 = memory.store.all("episode")
        memory.add(session_2[1:])
        closed = memory.end_session()
        yield Ingested(memory, session_1, session_2, report_1, after_1, after_first_d2, closed)
    close_all()


def test_loader_hands_over_only_what_memory_may_read(ingested: Ingested) -> None:
    assert LOCOMO_TURN_KEYS == ("speaker", "dia_id", "text", "blip_caption")
    assert len(ingested.session_1) == 18 and len(ingested.session_2) == 17
    for turn in ingested.turns:
        assert set(turn.model_dump(exclude_none=True)) <= {"speaker", "text", "time", "dia_id", "session", "listener",
                                                           "image_caption"}
    # every stored record stands for turns of these two sessions and nothing else
    known = {t.dia_id for t in ingested.turns}
    store = ingested.store
    for kind in ("raw", "fact", "episode", "persona"):
        for record in store.all(kind, include_inactive=True):
            assert set(record.source_ids) <= known, record


def test_raw_turns_are_stored_verbatim_with_metadata(ingested: Ingested) -> None:
    store = ingested.store
    assert store.count("raw") == 35
    assert ingested.report_1.turns == 18
    assert [i for i in ingested.report_1.stored_ids if i.startswith("raw:")] == [
        f"raw:{t.dia_id}" for t in ingested.session_1
    ]
    for turn in ingested.turns:
        record = store.get_one(f"raw:{turn.dia_id}")
        session = turn.dia_id.split(":")[0][1:] if turn.dia_id else ""
        assert record.kind == "raw" and record.namespace == NAMESPACE
        assert record.text == turn.text  # verbatim, not cleaned up
        assert record.dialogue_id == turn.dia_id and record.session == session
        assert record.speaker == turn.speaker
        assert record.time == (SESSION_1_TIME if session == "1" else SESSION_2_TIME)
        assert record.source_ids == [turn.dia_id]
        assert record.status == Status.ACTIVE and record.version == 1


def test_facts_resolve_names_and_dates_and_cite_their_turn(ingested: Ingested) -> None:
    store = ingested.store
    facts = store.all("fact")
    assert len(facts) >= 35
    went = [f for f in facts if f.source_ids == ["D1:3"]]
    assert [f.text for f in went] == ["Caroline went to a LGBTQ support group on 7 May 2023."]
    assert went[0].time == datetime(2023, 5, 7) and went[0].dialogue_id == "D1:3" and went[0].session == "1"
    assert "yesterday" not in went[0].text
    for fact in facts:
        assert not FIRST_PERSON.search(fact.text), fact.text  # names in place of I / my / you
        assert len(fact.source_ids) == 1 and store.has(f"raw:{fact.source_ids[0]}")
        assert fact.id.startswith(f"fact:{fact.source_ids[0]}:")
    derived = store.ledger.neighbours(NAMESPACE, [went[0].id], [LinkType.DERIVED_FROM])
    assert {(link.src, link.dst) for link in derived} == {(went[0].id, "raw:D1:3")}


def test_a_photo_caption_stays_with_its_turn(ingested: Ingested) -> None:
    store = ingested.store
    with_photo = store.get_one("raw:D1:5")
    assert with_photo.image_caption == "a photo of a dog walking past a wall with a painting of a woman"
    assert with_photo.label().endswith(f"[shared a photo: {with_photo.image_caption}]")
    # a context line says "a photo" once
    assert with_photo.line().endswith("[shared a photo of a dog walking past a wall with a painting of a woman]")
    assert store.get_one("raw:D1:12").image_caption == "a photo of a painting of a sunset over a lake"
    assert store.get_one("raw:D1:3").image_caption == ""
    photo_facts = [f.text for f in store.all("fact") if f.source_ids == ["D1:5"] and "photo" in f.text]
    assert photo_facts == ["Caroline shared a photo of a dog walking past a wall with a painting of a woman."]
    # the keyword index sees the caption: a search for what the photo shows finds the turn
    assert store.lexical("raw", "a dog walking past a wall", 3)[0][0] == "raw:D1:5"


def test_persona_keeps_stable_traits_not_passing_states(ingested: Ingested) -> None:
    store = ingested.store
    traits = store.all("persona")
    keen = [p for p in traits if p.source_ids == ["D1:11"]]
    assert len(keen) == 1
    trait = keen[0]
    assert trait.participant == "Caroline" and trait.aspect == "preferences"
    assert trait.text == "Caroline is keen on counseling or working in mental health."
    assert trait.id.startswith("persona:Caroline:preferences:")
    link = store.ledger.neighbours(NAMESPACE, [trait.id], [LinkType.DERIVED_FROM])
    assert [(x.src, x.dst) for x in link] == [(trait.id, "raw:D1:11")]
    # "Melanie is swamped with the kids & work", "Caroline is off to go do some research": states, not traits
    assert all(p.attribute != "is" for p in traits)
    assert not [p for p in traits if p.source_ids in (["D1:2"], ["D1:17"], ["D1:18"])]


def test_persona_traits_of_stable_attributes(data_dir: Path, embedder: Any) -> None:
    memory = Memory("ann", data_dir=str(data_dir))
    when = "2023-06-01T10:00"
    memory.add([
        {"speaker": "Ann", "text": "I live in Boston with my two cats.", "time": when, "dia_id": "D1:1"},
        {"speaker": "Ann", "text": "I work as a nurse at the city hospital.", "time": when, "dia_id": "D1:2"},
        {"speaker": "Ann", "text": "I'm so tired today.", "time": when, "dia_id": "D1:3"},
    ])
    traits = {(p.participant, p.aspect, p.value, tuple(p.source_ids)) for p in memory.store.all("persona")}
    assert traits == {("Ann", "home", "Boston", ("D1:1",)), ("Ann", "work", "nurse", ("D1:2",))}


def test_episodes_close_on_session_change_and_on_end_session(ingested: Ingested) -> None:
    d1 = [t.dia_id for t in ingested.session_1]
    d2 = [t.dia_id for t in ingested.session_2]
    # after session 1 the last turns are still the open episode
    covered_1 = episode_ids(ingested.episodes_after_session_1)
    assert "D1:18" not in covered_1 and covered_1 == d1[: len(covered_1)]
    # the first turn of session 2 closes it: all of session 1 is in episodes, session 2 not yet
    assert episode_ids(ingested.episodes_after_first_d2) == d1
    closing = [e for e in ingested.episodes_after_first_d2 if "D1:18" in e.source_ids]
    assert closing[0].session == "1" and closing[0].time == SESSION_1_TIME
    # end_session writes the open segment, so every turn is in exactly one episode, in order
    assert ingested.closed is not None and ingested.closed.source_ids[-1] == "D2:17"
    episodes = ingested.store.all("episode")
    assert episode_ids(episodes) == d1 + d2
    for episode in episodes:
        sessions = {i.split(":")[0] for i in episode.source_ids}
        assert len(sessions) == 1 and episode.session == sessions.pop()[1:]
        assert 1 <= len(episode.source_ids) <= EPISODE_MAX_TURNS
        assert episode.text.startswith("On 8 May 2023" if episode.session == "1" else "On 25 May 2023")
        assert episode.time_end is not None and episode.time is not None and episode.time <= episode.time_end
        links = ingested.store.ledger.neighbours(NAMESPACE, [episode.id], [LinkType.DERIVED_FROM])
        assert {x.dst for x in links if x.src == episode.id} == {f"raw:{i}" for i in episode.source_ids}
    assert ingested.memory.end_session() is None  # nothing left open


def test_links_temporal_chain_derived_from_and_entities(ingested: Ingested) -> None:
    store = ingested.store
    raw_ids = [f"raw:{t.dia_id}" for t in ingested.turns]
    temporal = store.ledger.neighbours(NAMESPACE, raw_ids, [LinkType.TEMPORAL])
    # one chain through both sessions, D1:18 -> D2:1 included
    assert {(x.src, x.dst) for x in temporal} == set(itertools.pairwise(raw_ids))
    fact_ids = [f.id for f in store.all("fact")]
    derived = {(x.src, x.dst) for x in store.ledger.neighbours(NAMESPACE, fact_ids, [LinkType.DERIVED_FROM])}
    assert derived == {(f.id, f"raw:{f.source_ids[0]}") for f in store.all("fact")}
    entity = store.ledger.neighbours(NAMESPACE, raw_ids, [LinkType.ENTITY])
    assert ("raw:D2:12", "raw:D1:3") in {(x.src, x.dst) for x in entity}  # LGBTQ, two weeks apart
    for link in entity:  # an entity link joins two turns that mention one entity node
        nodes = [
            {m.dst for m in store.ledger.neighbours(NAMESPACE, [end], [LinkType.MENTIONS]) if m.src == end}
            for end in (link.src, link.dst)
        ]
        assert nodes[0] & nodes[1], (link.src, link.dst)
        assert 0 < link.weight <= 1


def test_working_memory_keeps_the_last_turns_of_each_participant(ingested: Ingested) -> None:
    window = ingested.store.working()
    for speaker in ("Caroline", "Melanie"):
        expected = [t.dia_id for t in ingested.session_2 if t.speaker == speaker][-WORKING_SIZE:]
        assert [w["dia_id"] for w in window if w["speaker"] == speaker] == expected
    assert len(window) == 2 * WORKING_SIZE


def test_ingesting_the_same_turns_again_changes_nothing(ingested: Ingested) -> None:
    store = ingested.store
    before = store.stats()
    texts = {r.id: (r.text, r.version) for k in ("raw", "fact", "episode", "persona") for r in store.all(k)}
    window = store.working()
    report = ingested.memory.add(ingested.session_1)
    assert report.stored_ids == []
    assert report.notes == [f"{t.dia_id} is already stored: skipped" for t in ingested.session_1]
    assert store.stats() == before
    assert {r.id: (r.text, r.version) for k in ("raw", "fact", "episode", "persona") for r in store.all(k)} == texts
    assert store.working() == window


def test_write_ahead_keeps_the_raw_turn_when_derive_fails(
    data_dir: Path, embedder: Any, locomo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = list(load_turns(locomo_dir / "conv-26.json").sessions[0].turns)[:3]
    memory = Memory(NAMESPACE, data_dir=str(data_dir))

    def broken(*args: Any, **kwargs: Any) -> list[Any]:
        raise RuntimeError("fact extractor broke")

    monkeypatch.setattr(memory_role, "extract_facts", broken)
    with pytest.raises(RuntimeError, match="fact extractor broke"):
        memory.add(turns)
    store = memory.store
    # the whole input was written ahead in one step, before the first derive failed
    kept = store.get(["raw:D1:1", "raw:D1:2", "raw:D1:3"])
    assert [r.text for r in kept] == [t.text for t in turns] and {r.status for r in kept} == {Status.ACTIVE}
    assert store.count("fact") == 0 and store.count("episode") == 0
    assert [w["dia_id"] for w in store.working()] == ["D1:1"]
    assert store.ledger.get_state(NAMESPACE, memory_role.PENDING) == ["raw:D1:1", "raw:D1:2", "raw:D1:3"]

    # once the fault is gone, adding the turns again derives the stored ones instead of skipping them
    monkeypatch.undo()
    report = memory.add(turns)
    assert "D1:1 is already stored: skipped" not in report.notes
    assert store.ledger.get_state(NAMESPACE, memory_role.PENDING) == []
    assert [f.text for f in store.all("fact") if f.source_ids == ["D1:3"]] == [
        "Caroline went to a LGBTQ support group on 7 May 2023."
    ]
    assert sorted(w["dia_id"] for w in store.working()) == ["D1:1", "D1:2", "D1:3"]  # D1:1 pushed once
    assert store.count("raw") == 3
    temporal = store.ledger.neighbours(NAMESPACE, ["raw:D1:2"], [LinkType.TEMPORAL])
    assert {(x.src, x.dst) for x in temporal} == {("raw:D1:1", "raw:D1:2"), ("raw:D1:2", "raw:D1:3")}


def _snapshot(store: MemoryStore) -> tuple[dict[str, str], set[tuple[str, str, str]], object]:
    """Every record's text, every link, and the open episode: what a crash must not change."""
    records = {r.id: r.text for k in ("raw", "fact", "episode", "persona") for r in store.all(k, include_inactive=True)}
    ids = list(records)
    links = {(x.src, x.dst, x.type.value) for x in store.ledger.neighbours(store.namespace, ids)}
    return records, links, store.ledger.get_state(store.namespace, memory_role.OPEN_SEGMENT)


def test_a_crash_mid_batch_resumes_to_the_same_memory(
    tmp_path: Path, embedder: Any, locomo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Derived writes are staged and flushed together; a process that dies before the flush keeps
    its raw turns pending, and adding the input again derives them once, exactly as a clean run."""
    turns = list(load_turns(locomo_dir / "conv-26.json").sessions[0].turns)[:8]
    clean = Memory(NAMESPACE, data_dir=str(tmp_path / "clean"), model="offline")
    clean.add(turns)
    expected = _snapshot(clean.store)
    close_all()

    memory = Memory(NAMESPACE, data_dir=str(tmp_path / "crashed"), model="offline")
    extract = memory_role.extract_facts

    def dies_on_d1_6(turn: Turn, *args: Any, **kwargs: Any) -> Any:
        if turn.dia_id == "D1:6":
            raise RuntimeError("process died")
        return extract(turn, *args, **kwargs)

    monkeypatch.setattr(memory_role, "extract_facts", dies_on_d1_6)
    with pytest.raises(RuntimeError, match="process died"):
        memory.add(turns)
    staged_facts = [r.id for r in memory.store.all("fact")]
    assert staged_facts and all(f.split(":")[2] in "12345" for f in staged_facts)  # D1:1-5 derived, staged
    close_all()  # the process is gone: what was staged is lost, nothing was flushed
    monkeypatch.undo()

    reopened = Memory(NAMESPACE, data_dir=str(tmp_path / "crashed"), model="offline")
    store = reopened.store
    assert store.count("fact") == 0 and store.count("raw") == len(turns)
    assert store.ledger.get_state(NAMESPACE, memory_role.PENDING) == [f"raw:{t.dia_id}" for t in turns]
    report = reopened.add(turns)
    assert not [n for n in report.notes if "already stored" in n]
    assert store.ledger.get_state(NAMESPACE, memory_role.PENDING) == []
    assert _snapshot(store) == expected


def test_older_talk_added_later_is_placed_where_it_was_said(data_dir: Path) -> None:
    """June's chat, then May's backfilled (no session labels): the May turns joined June's episode ("On 10 June
    ...", ending in May) and the chain of turns ran June -> May, against the links' meaning (src said first)."""
    memory = Memory("ann", data_dir=str(data_dir))
    june = [("Ann", "I started a pottery class today.", "2023-06-10T10:00"),
            ("Bob", "Pottery sounds fun, what are you making?", "2023-06-10T10:01"),
            ("Ann", "A blue pottery bowl for my mum.", "2023-06-10T10:02")]
    may = [("Ann", "I signed up for a pottery class yesterday.", "2023-05-02T09:00"),
           ("Bob", "Which pottery studio?", "2023-05-02T09:01"),
           ("Ann", "The pottery studio on Pearl Street.", "2023-05-02T09:02")]
    memory.add([{"speaker": s, "text": t, "time": w} for s, t, w in june])
    memory.add([{"speaker": s, "text": t, "time": w} for s, t, w in may])
    memory.add([{"speaker": "Bob", "text": "Did you finish the bowl?", "time": "2023-06-11T09:00"}], end_session=True)
    store = memory.store
    episodes = sorted(store.all("episode"), key=lambda e: e.time or datetime.min)
    assert [e.source_ids for e in episodes] == [["T4", "T5", "T6"], ["T1", "T2", "T3"], ["T7"]]  # a new day too
    assert all(e.time and e.time_end and e.time <= e.time_end for e in episodes)
    said = [r.id for r in store.timeline()]
    chain = {(link.src, link.dst) for link in store.edges(said, [LinkType.TEMPORAL])}
    assert chain == set(itertools.pairwise(said))  # T4 -> T5 -> T6 -> T1 -> T2 -> T3 -> T7, nothing else


def test_a_turn_backfilled_between_two_takes_the_place_of_their_link(data_dir: Path) -> None:
    """Older talk said between two stored turns: the link from the one before to the one after goes (it
    no longer follows it), whether the backfilled turns come one by one or several in one input."""
    memory = Memory("ann", data_dir=str(data_dir))
    said = [("I started a pottery class.", "2023-06-01T10:00"), ("The bowl came out of the kiln.", "2023-06-10T10:00")]
    memory.add([{"speaker": "Ann", "text": t, "time": w} for t, w in said])
    memory.add([{"speaker": "Ann", "text": "I shaped my first bowl.", "time": "2023-06-04T10:00"},
                {"speaker": "Ann", "text": "I glazed the bowl blue.", "time": "2023-06-06T10:00"}])
    memory.add([{"speaker": "Ann", "text": "The kiln was fired today.", "time": "2023-06-08T10:00"}])
    order = [r.id for r in memory.store.timeline()]
    assert order == ["raw:T1", "raw:T3", "raw:T4", "raw:T5", "raw:T2"]
    chain = {(link.src, link.dst) for link in memory.store.edges(order, [LinkType.TEMPORAL])}
    assert chain == set(itertools.pairwise(order))  # not also T1 -> T2, T4 -> T2


def test_ids_given_to_turns_without_one_pass_ids_callers_chose(data_dir: Path) -> None:
    """A turn list that names its turns T1, T2 (the form given ids take) was followed by chat lines refused
    as 'T1 is already stored with other words': the id handed out was one a caller had already used."""
    memory = Memory("ann", data_dir=str(data_dir))
    memory.add([{"speaker": "Ann", "text": "I adopted a cat named Miso.", "dia_id": "T1"},
                {"speaker": "Bob", "text": "Lovely!", "dia_id": "T2"},
                {"speaker": "Ann", "text": "She is three.", "dia_id": "T40"}])
    memory.add([{"speaker": "Ann", "text": "I also have a dog called Rex."},
                {"speaker": "Ann", "text": "Rex likes the park.", "dia_id": "T41"},
                {"speaker": "Ann", "text": "Rex is five."}])
    texts = {r.dialogue_id: r.text for r in memory.store.all("raw")}
    assert texts["T1"] == "I adopted a cat named Miso." and texts["T41"] == "Rex likes the park."
    new = sorted((d for d, t in texts.items() if t in ("I also have a dog called Rex.", "Rex is five.")),
                 key=lambda d: int(d[1:]))
    assert len(new) == 2 and all(int(d[1:]) > 41 for d in new), texts


def test_an_add_from_an_on_turn_callback_of_the_same_memory_returns(data_dir: Path) -> None:
    """Adds of one namespace take turns (memory/run_gate.py); the same thread adding again inside its own
    add (an `on_turn` callback storing a note) must not wait on itself for ever."""
    memory = Memory("ann", data_dir=str(data_dir))
    done: list[int] = []

    def noted(n: int) -> None:
        if not done:
            done.append(n)
            memory.add([{"speaker": "Ann", "text": "A note from the callback.", "dia_id": "N1"}])

    worker = threading.Thread(target=lambda: memory.add([{"speaker": "Ann", "text": "I live in Boston."}],
                                                        on_turn=noted), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive() and memory.store.get(["raw:N1"]), "the nested add waited on itself"
