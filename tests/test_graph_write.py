"""The memory graph's write side on real LoCoMo turns: entities, notes and links, evolution, the slow path.

Sessions 1, 2 and 17 of conv-26 go through `Memory.add` (the whole graph, offline
policies, real Chroma and MiniLM), then `Memory.consolidate` runs the slow path,
first for a few turns (a run stopped early), then for the rest. Each test reads
back one promise: entity nodes joining turns across sessions, with no
interjection among them and possessives resolved to their owner; weighted
semantic links between turns that share a keyword; memory evolution recorded in
history and undone; a causal link from a real "because"; topic and persona
summaries citing every turn they summarise and found by search; episodes told
as narratives; consolidation that resumes and repeats without change. The chat
model path of each mechanism, malformed replies included, is in the tests at
the end, with LangChain's fake chat model.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import offline_environment
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field
from strata.graph.context import Context
from strata.memory.entities import CHAT_WORDS
from strata.memory.errors import InputError
from strata.memory.graph import notes
from strata.memory.graph.consolidation import DONE
from strata.memory.graph.entities import find_mentions
from strata.memory.graph.links import CATALOGUE
from strata.memory.records import Action, Change, LinkType, entity_node_id
from strata.memory.registry import close_all
from strata.memory.store import MemoryStore
from strata.prompts import graph as graph_prompts

from strata.api import Memory
from strata.conversations import load_turns

NAMESPACE = "conv-26"
SESSIONS = (1, 2, 17)


class Ingested:
    def __init__(self, memory: Memory, first: Any, rest: Any, again: Any) -> None:
        self.memory, self.first, self.rest, self.again = memory, first, rest, again

    @property
    def store(self) -> MemoryStore:
        return self.memory.store


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory, locomo_dir: Path, embedder: Any) -> Iterator[Ingested]:
    """Three sessions of conv-26 (57 turns) stored offline, then consolidated in two runs, then once more."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("STRATA_MODEL", raising=False)
        conversation = load_turns(locomo_dir / "conv-26.json")
        memory = Memory(NAMESPACE, data_dir=str(tmp_path_factory.mktemp("graph_write")), model="offline")
        for session in conversation.sessions:
            if int(session.label) in SESSIONS:
                memory.add(session.turns, end_session=True)
        first = memory.consolidate(limit=10)  # a run stopped early...
        rest = memory.consolidate()  # ...and the next one finishes the job
        again = memory.consolidate()  # nothing left: changes nothing
        yield Ingested(memory, first, rest, again)
    close_all()


def mentions_of(store: MemoryStore, record_id: str) -> set[str]:
    return {x.dst for x in store.ledger.neighbours(NAMESPACE, [record_id], [LinkType.MENTIONS]) if x.src == record_id}


def test_entity_nodes_join_turns_across_sessions(ingested: Ingested) -> None:
    store = ingested.store
    node = entity_node_id("painting")
    turns = {x.src for x in store.ledger.neighbours(NAMESPACE, [node], [LinkType.MENTIONS]) if x.src.startswith("raw:")}
    sessions = {store.get_one(t).session for t in turns}
    assert {"1", "17"} <= sessions, turns  # D1:6 "love that painting" ... D17:14 "an abstract painting"
    # the adoption agency Caroline researches in session 2 is the one she advises on in session 17
    agency = {x.src for x in store.ledger.neighbours(NAMESPACE, [entity_node_id("adoption agency")],
                                                     [LinkType.MENTIONS])}
    assert {"raw:D2:8", "raw:D17:7"} <= agency
    entity = store.ledger.neighbours(NAMESPACE, ["raw:D17:7"], [LinkType.ENTITY])
    assert "raw:D2:8" in {x.src for x in entity} | {x.dst for x in entity}
    for link in entity:
        assert 0 < link.weight <= 1
        assert mentions_of(store, link.src) & mentions_of(store, link.dst)


def test_no_interjection_becomes_an_entity_and_possessives_resolve(ingested: Ingested) -> None:
    catalogue = ingested.store.ledger.get_state(NAMESPACE, CATALOGUE, {})
    assert isinstance(catalogue, dict) and len(catalogue) > 100
    assert not set(catalogue) & CHAT_WORDS  # "wow", "hey", "yeah", "thanks" ... never nodes
    raw = {r.id: r for r in ingested.store.all("raw")}
    # "Woah"/"Nah"-style openers: no word seen capitalised only at a sentence start became a name
    assert "woah" not in catalogue and "nah" not in catalogue
    # nor an adjective or a verb: D1:16 "after a long day", D1:10 "Anything that stands out?"
    assert "long" not in catalogue and "stand" not in catalogue
    assert catalogue["melanie's kid"][0] == "Melanie's kid"  # D2:7 "My kids are so excited", said by Melanie
    assert entity_node_id("melanie's kid") in mentions_of(ingested.store, "raw:D2:7")
    assert raw["raw:D2:7"].speaker == "Melanie"
    # plural and case: "kids" and "Kids" are the node "kid"
    assert [m.key for m in find_mentions("Kids love it. The kids do.")] == ["kid"]


def test_semantic_links_are_weighted_and_share_a_keyword(ingested: Ingested) -> None:
    store = ingested.store
    raw_ids = [r.id for r in store.all("raw")]
    semantic = [x for x in store.ledger.neighbours(NAMESPACE, raw_ids, [LinkType.SEMANTIC])]
    assert len(semantic) >= 10
    weights = {round(x.weight, 3) for x in semantic}
    assert len(weights) > 5  # real similarities, not a constant
    for link in semantic:
        assert notes.MIN_SIMILARITY <= link.weight <= 1
        new, old = store.get_one(link.src), store.get_one(link.dst)
        assert notes.shared_keywords(new.keywords, old.keywords), (new.id, old.id)
    # every filed turn carries its note
    for record in store.all("raw"):
        assert record.context and record.speaker in record.context


def test_memory_evolution_is_recorded_and_undone(ingested: Ingested) -> None:
    store = ingested.store
    evolutions = [c for c in store.history(limit=10_000) if c.action == Action.EVOLVE and not c.undone]
    assert evolutions, "no note evolved"
    change = evolutions[0]  # the newest: changes to one record are undone newest first
    before = json.loads(change.old_fields["tags"])
    after = store.get_one(change.record_id)
    assert after.tags and after.tags != before
    text, version = after.text, after.version
    undo = ingested.memory.undo(change.id)
    restored = store.get_one(change.record_id)
    assert undo.undoes == change.id
    assert restored.tags == before and restored.context == change.old_fields["context"]
    assert restored.text == text and restored.version == version + 1
    assert store.ledger.get_change(NAMESPACE, int(change.id or 0)).undone  # type: ignore[union-attr]
    # a plain undo() still means the latest content edit, never a background refinement
    assert all(c.action != Action.EVOLVE for c in store.history(limit=5) if c.undoes is None and c.action == "undo")


def test_an_older_evolution_is_not_undone_over_a_newer_one(ingested: Ingested) -> None:
    """Two evolutions of one note: undoing the older first would wipe the tags the newer one gave,
    which still stands in history. It is refused, naming the newer, and nothing changes."""
    store = ingested.store
    by_note: dict[str, list[Change]] = {}
    for change in store.history(limit=100_000):  # newest first
        if change.action == Action.EVOLVE and not change.undone:
            by_note.setdefault(change.record_id, []).append(change)
    note, (newer, *_, older) = next((k, v) for k, v in by_note.items() if len(v) >= 2)
    before = store.get_one(note)
    with pytest.raises(InputError) as refused:
        ingested.memory.undo(older.id)
    assert "\n" not in str(refused.value) and f"undo change {newer.id} first" in str(refused.value)
    after = store.get_one(note)
    assert (after.tags, after.context, after.version) == (before.tags, before.context, before.version)
    assert not store.ledger.get_change(NAMESPACE, int(older.id or 0)).undone  # type: ignore[union-attr]


def test_causal_link_from_a_real_because(ingested: Ingested) -> None:
    store = ingested.store
    # D17:14 Melanie: "I painted it because it was calming." -- "it" is the sunset painting she showed in D17:12
    causal = store.ledger.neighbours(NAMESPACE, ["raw:D17:14"], [LinkType.CAUSAL])
    pairs = {(x.src, x.dst): x.weight for x in causal}
    assert ("raw:D17:14", "raw:D17:12") in pairs, pairs
    assert 0 < pairs[("raw:D17:14", "raw:D17:12")] <= 1


def test_topic_summary_cites_every_turn_it_summarises(ingested: Ingested) -> None:
    store = ingested.store
    topics = [s for s in store.all("summary") if s.aspect == "topic"]
    assert topics
    raw = {r.id for r in store.all("raw")}
    for topic in topics:
        cited = {f"raw:{d}" for d in topic.source_ids}
        assert len({store.get_one(c).session for c in cited}) >= 2  # regrouped across sessions
        derived = {x.dst for x in store.ledger.neighbours(NAMESPACE, [topic.id], [LinkType.DERIVED_FROM])}
        assert derived == cited
        mentioning: set[str] = set()
        for key in topic.title.split(" / "):
            mentioning |= {x.src for x in store.ledger.neighbours(NAMESPACE, [entity_node_id(key)],
                                                                  [LinkType.MENTIONS]) if x.src in raw}
        assert mentioning <= cited and cited  # every turn naming the topic is cited
        for dia in topic.source_ids[:10]:
            assert f"[{dia}]" in topic.text
    painting = store.get_one("summary:topic:painting")
    assert {"D1:6", "D17:12", "D17:14"} <= set(painting.source_ids)
    hits = store.search("summary", "What paintings has Melanie done?", 3)
    assert "summary:topic:painting" in [h.record.id for h in hits]


def test_persona_summary_lists_a_participants_activities(ingested: Ingested) -> None:
    store = ingested.store
    activities = store.get_one("summary:persona:melanie:activities")
    assert activities.participant == "Melanie" and activities.aspect == "activities"
    assert all(store.get_one(f"raw:{d}").speaker == "Melanie" for d in activities.source_ids)
    assert "running" in activities.text and "D2:5" in activities.source_ids  # "running, reading, or playing my violin"


def test_consolidation_resumes_and_repeats_without_change(ingested: Ingested) -> None:
    total = len(ingested.store.all("raw"))
    assert ingested.first.turns == 10 and ingested.rest.turns == total - 10
    assert ingested.again.turns == 0 and ingested.again.summaries == 0
    assert ingested.again.summaries_unchanged == ingested.rest.summaries_unchanged + ingested.rest.summaries
    done = ingested.store.ledger.get_state(NAMESPACE, DONE, [])
    assert isinstance(done, list) and len(done) == total
    assert ingested.rest.causal >= 1 and ingested.rest.per_thousand_turns() > 0


def test_episodes_are_narratives_of_facts(ingested: Ingested) -> None:
    episodes = ingested.store.all("episode")
    assert episodes
    for episode in episodes:
        assert "talked about" not in episode.text
    first = min(episodes, key=lambda e: e.time or 0)  # type: ignore[arg-type, return-value]
    assert "Caroline went to a LGBTQ support group on 7 May 2023." in first.text
    assert first.text.startswith("On 8 May 2023, with Caroline and Melanie:")


# --- the chat-model policies -----------------------------------------------------------------------------
class GraphModel(GenericFakeChatModel):
    """Answers the graph's prompts from scripts; every other role gets a reply its parser refuses."""

    messages: Iterator[AIMessage | str] = iter(())
    scripts: dict[str, list[str]] = Field(default_factory=dict)
    calls: list[str] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        system = next(str(m.content) for m in messages if isinstance(m, SystemMessage))
        role = {graph_prompts.NOTE_SYSTEM: "note", graph_prompts.CAUSAL_SYSTEM: "causal",
                graph_prompts.SUMMARY_SYSTEM: "summary"}.get(system, "other")
        self.calls.append(role)
        script = self.scripts.get(role) or ["not json"]
        reply = script.pop(0) if len(script) > 1 else script[0]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=reply))])


THREE = [
    {"speaker": "Ann", "listener": "Ben", "text": "I adopted a greyhound named Pixel last week.",
     "dia_id": "D1:1", "time": "2023-05-08T10:00"},
    {"speaker": "Ben", "listener": "Ann", "text": "A greyhound! How is Pixel settling in?",
     "dia_id": "D1:2", "time": "2023-05-08T10:01"},
    {"speaker": "Ann", "listener": "Ben", "text": "Pixel loves the park, so I walk there every morning because of him.",
     "dia_id": "D1:3", "time": "2023-05-08T10:02"},
]


def model_memory(data_dir: Path, scripts: dict[str, list[str]], **settings: Any) -> tuple[Memory, GraphModel]:
    model = GraphModel(scripts=scripts, calls=[])
    return Memory("ann", data_dir=str(data_dir), chat_model=model, **settings), model


def note(links: list[dict[str, Any]], evolve: list[dict[str, Any]] | None = None) -> str:
    return json.dumps({
        "entities": [{"name": "Greyhounds", "type": "object"}, {"name": "Pixel", "type": "PERSON"}],
        "keywords": ["greyhound", "pixel"], "tags": ["pets"], "context": "Ann talks about her dog",
        "links": links, "evolve": evolve or [],
    })


def test_model_note_links_and_evolution(data_dir: Path, embedder: Any) -> None:
    replies = [
        note([]),
        note([{"id": "raw:D1:1", "strength": 0.9}, {"id": "raw:D9:9", "strength": 1.0}]),  # an unknown id is dropped
        "```json\n" + note([{"id": "raw:D1:1", "strength": 0.7}],
                           [{"id": "raw:D1:1", "tags": ["pets", "dogs"], "context": "Ann's new dog"}]) + "\n```",
    ]
    memory, model = model_memory(data_dir, {"note": replies})
    report = memory.add(THREE)
    store = memory.store
    semantic = {(x.src, x.dst): x.weight for x in store.ledger.neighbours("ann", ["raw:D1:1"], [LinkType.SEMANTIC])}
    assert semantic == {("raw:D1:2", "raw:D1:1"): 0.9, ("raw:D1:3", "raw:D1:1"): 0.7}
    first = store.get_one("raw:D1:1")
    assert first.tags == ["pets", "dogs"] and first.context == "Ann's new dog"
    evolved = [c for c in store.history(limit=50) if c.action == Action.EVOLVE]
    assert len(evolved) == 1 and evolved[0].policy.startswith("model:")
    assert entity_node_id("greyhound") in mentions_of_ns(store, "raw:D1:1")  # "Greyhounds" normalised
    assert model.calls.count("note") == 3
    del report


def mentions_of_ns(store: MemoryStore, record_id: str) -> set[str]:
    return {x.dst for x in store.ledger.neighbours(store.namespace, [record_id], [LinkType.MENTIONS])}


def test_malformed_note_reply_falls_back_to_the_offline_rules(data_dir: Path, embedder: Any) -> None:
    memory, _ = model_memory(data_dir, {"note": ['{"entities": "not a list"}', "Sure! Here are the links.", "{"]})
    context = Context(namespace="ann", mode="ingest", data_dir=str(data_dir))
    assert context.entity_graph and context.semantic_links
    from strata.graph.graph import graph

    updates = graph.stream({"turns": THREE}, context=memory.context("ingest"), stream_mode="updates")
    notes = [n for update in updates for n in (update.get("memory") or {}).get("trace", [])]  # each turn's own
    graph_notes = [n.summary for n in notes if n.role == "memory" and "; graph by " in n.summary]
    assert len(graph_notes) == 3
    assert all("; graph by offline (model output unusable: " in s for s in graph_notes)
    store = memory.store
    assert entity_node_id("greyhound") in mentions_of_ns(store, "raw:D1:1")  # the offline extractor wrote it
    assert store.get_one("raw:D1:3").context.startswith("Ann on 8 May 2023")


def test_model_causal_policy_and_its_fallback(data_dir: Path, embedder: Any) -> None:
    causal_ok = json.dumps({"links": [
        {"cause": "raw:D1:1", "effect": "raw:D1:3", "confidence": 0.8, "reason": "the dog is why she walks"},
        {"cause": "raw:D1:3", "effect": "raw:D7:7", "confidence": 0.9, "reason": "not in the neighbourhood"},
    ]})
    memory, model = model_memory(data_dir, {"note": [note([])], "causal": [causal_ok]})
    memory.add(THREE)
    report = memory.consolidate()
    causal = {(x.src, x.dst): x.weight for x in memory.store.ledger.neighbours("ann", ["raw:D1:3"], [LinkType.CAUSAL])}
    assert causal == {("raw:D1:1", "raw:D1:3"): 0.8}  # the id outside the neighbourhood was dropped
    assert model.calls.count("causal") == 1  # only D1:3 has a cue word
    assert report.policy.startswith("model:") and "unusable" not in report.policy
    other, _ = model_memory(data_dir, {"note": [note([])], "causal": ['{"links": [{"cause": 3}]}']})
    other.namespace = "ben"
    other.add(THREE)
    fallback = other.consolidate()
    assert "offline for 1 unusable replies" in fallback.policy
    assert fallback.causal >= 1  # the cue rule wrote what the model could not


def test_the_slow_path_gives_each_turn_its_own_model_call_budget(data_dir: Path, embedder: Any) -> None:
    """`max_model_calls` bounds one question or one stored turn; a consolidation asks once per turn with a
    cue (and once per group), so one budget for the whole run sent every prompt past it to the offline rule,
    reported as unusable replies."""
    turns = [{"speaker": "Ann", "text": f"I stayed in on day {n} because it rained.", "dia_id": f"D1:{n}",
              "time": f"2023-05-0{n}T10:00"} for n in range(1, 6)]
    memory, model = model_memory(data_dir, {"note": [note([])], "causal": ['{"links": []}']},
                                 max_model_calls=2, summaries=False)
    memory.add(turns)
    report = memory.consolidate()
    assert model.calls.count("causal") == 5
    assert report.policy.startswith("model:") and "offline" not in report.policy, report.policy


def test_model_summary_policy_and_its_fallback(data_dir: Path, embedder: Any) -> None:
    from strata.agents.consolidation import model_summary_policy
    from strata.memory.graph.summaries import Group

    memory, _ = model_memory(data_dir, {"summary": [
        '```json\n{"title": "Pixel", "content": "Ann adopted Pixel, a greyhound, in May 2023."}\n```',
        '{"title": ""}',
    ]})
    memory.add(THREE[:1])
    failures: list[str] = []
    policy = model_summary_policy(memory.context("ingest"), failures)
    group = Group(id="summary:topic:pixel", heading="pixel", turn_ids=["raw:D1:1"])
    members = memory.store.get(["raw:D1:1"])
    assert policy(group, members, "offline text") == ("Pixel", "Ann adopted Pixel, a greyhound, in May 2023.")
    assert policy(group, members, "offline text") is None and failures and "title" in failures[0]


def test_each_mechanism_switches_off_for_ablation(data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    monkeypatch.setenv("STRATA_ENTITY_GRAPH", "false")
    monkeypatch.setenv("STRATA_SEMANTIC_LINKS", "0")
    monkeypatch.setenv("STRATA_CAUSAL_LINKS", "no")
    monkeypatch.setenv("STRATA_SUMMARIES", "off")
    memory = Memory("ann", data_dir=str(data_dir), model="offline")
    context = memory.context("ingest")
    assert not (context.entity_graph or context.semantic_links or context.causal_links or context.summaries)
    memory.add(THREE)
    report = memory.consolidate()
    links = memory.stats()["links"]
    assert not {"mentions", "entity", "semantic", "causal"} & set(links), links
    assert report.causal == 0 and report.summaries == 0 and memory.store.all("summary") == []


@pytest.fixture(scope="module")
def first_sessions(tmp_path_factory: pytest.TempPathFactory, locomo_dir: Path, embedder: Any) -> dict[int, Path]:
    """conv-26's first sessions stored offline one at a time (`end_session=True`), as three tests below
    begin: the folder as it stands after 3, 4 and 7 sessions, closed; each test works in a copy."""
    base = tmp_path_factory.mktemp("first_sessions")
    folders: dict[int, Path] = {}
    with offline_environment():
        memory = Memory(NAMESPACE, data_dir=str(base / "mem"), model="offline")
        for number, session in enumerate(load_turns(locomo_dir / "conv-26.json").sessions[:7], start=1):
            memory.add(session.turns, end_session=True)
            if number in (3, 4, 7):
                close_all()
                folders[number] = base / f"after-{number}"
                shutil.copytree(base / "mem", folders[number])
        close_all()
    return folders


@pytest.mark.slow  # many fresh processes: kept out of the default run's ten minutes
def test_a_summary_whose_group_dissolved_does_not_outlive_it(
    tmp_path: Path, locomo_dir: Path, first_sessions: dict[int, Path], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Consolidating after seven sessions and again after three more ends with the summaries one
    consolidation of all ten writes: a topic whose turns the new sessions moved to another group
    (conv-26's "path" turns join "voice") is removed with its links, not kept frozen beside it."""
    monkeypatch.delenv("STRATA_MODEL", raising=False)
    sessions = load_turns(locomo_dir / "conv-26.json").sessions[:10]
    for name in ("step", "once"):  # both hold the same seven sessions before either consolidates
        shutil.copytree(first_sessions[7], tmp_path / name)
    step = Memory(NAMESPACE, data_dir=str(tmp_path / "step"), model="offline")
    step.consolidate()
    early = {s.id for s in step.store.all("summary")}
    for session in sessions[7:]:
        step.add(session.turns, end_session=True)
    step.consolidate()
    once = Memory(NAMESPACE, data_dir=str(tmp_path / "once"), model="offline")
    assert not once.store.all("summary", include_inactive=True)  # nothing consolidated before the ten are in
    for session in sessions[7:]:
        once.add(session.turns, end_session=True)
    once.consolidate()

    def summaries_of(memory: Memory) -> dict[str, list[str]]:
        return {s.id: s.source_ids for s in memory.store.all("summary", include_inactive=True)}

    final = summaries_of(once)
    assert early - set(final), "no group dissolved: the test no longer covers what it is for"
    assert summaries_of(step) == final
    for memory in (step, once):
        derived = memory.store.ledger.neighbours(NAMESPACE, list(final), [LinkType.DERIVED_FROM])
        cited = {(x.src, x.dst) for x in derived}
        assert cited == {(sid, f"raw:{d}") for sid, turns in final.items() for d in turns}


def test_an_evolution_that_leaves_out_the_tags_keeps_them(data_dir: Path, embedder: Any) -> None:
    """A model's evolution that only rewrites a neighbour's context ("tags" left out of the reply) keeps
    the neighbour's tags: what the evolution does not name stays as it was."""
    from strata.memory.graph.evolution import Evolution, apply
    from strata.memory.records import Record
    from strata.memory.registry import open_store
    from strata.memory.settings import StoreSettings

    store = open_store(StoreSettings(data_dir=str(data_dir)), "ann")
    store.add([Record(id="raw:D2:9", kind="raw", text="We found a flat near the river in Lisbon.", namespace="ann",
                      dialogue_id="D2:9", speaker="Ann", tags=["lisbon"], context="Ann on the flat she found")])
    changes = apply(store, [Evolution(target="raw:D2:9", context="Part of Ann's move to Lisbon.")], "model:stub")
    record = store.get_one("raw:D2:9")
    assert (record.tags, record.context) == (["lisbon"], "Part of Ann's move to Lisbon.")
    assert [c.action for c in changes] == [Action.EVOLVE]


def test_turns_stored_without_notes_are_filed_by_the_next_consolidation(
    tmp_path: Path, locomo_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A folder an earlier version wrote holds turns with no note (no keywords, tags or context line):
    here, stored with the graph switched off. The slow path reads notes, so it consolidated none of them
    and wrote no summary; it now files them first, as the fast path would have."""
    monkeypatch.delenv("STRATA_MODEL", raising=False)
    turns = [t for s in load_turns(locomo_dir / "conv-26.json").sessions[:3] for t in s.turns]
    old = Memory(NAMESPACE, data_dir=str(tmp_path / "mem"), model="offline", entity_graph=False, semantic_links=False)
    old.add(turns, end_session=True)
    assert not [r for r in old.store.timeline() if r.context]

    store = old.store
    waiting = store.timeline()[-1].id  # written ahead by an ingest under way: its derive files it
    store.ledger.set_state(NAMESPACE, "pending_derive", [waiting])
    report = Memory(NAMESPACE, data_dir=str(tmp_path / "mem"), model="offline").consolidate()
    assert report.filed == len(turns) - 1 and not store.get([waiting])[0].context
    store.ledger.set_state(NAMESPACE, "pending_derive", [])
    report = Memory(NAMESPACE, data_dir=str(tmp_path / "mem"), model="offline").consolidate()
    assert report.filed == 1 and report.summaries_unchanged + report.summaries > 0
    filed = store.timeline()
    assert all(r.context for r in filed) and sum(bool(r.keywords) for r in filed) > len(turns) // 2
    kinds = Counter(link.type for link in store.ledger.neighbours(NAMESPACE, [r.id for r in store.timeline()]))
    assert kinds[LinkType.MENTIONS] and kinds[LinkType.SEMANTIC] and kinds[LinkType.ENTITY]
    assert Memory(NAMESPACE, data_dir=str(tmp_path / "mem"), model="offline").consolidate().filed == 0


def test_a_summary_is_embedded_before_the_write_lock_is_taken(
    tmp_path: Path, first_sessions: dict[int, Path], embedder: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A remote embedder may take seconds: a summary's vector is asked for before the namespace's write
    lock is taken, so an ingest of the same namespace never waits on it (the write finds it cached)."""
    monkeypatch.delenv("STRATA_MODEL", raising=False)
    shutil.copytree(first_sessions[3], tmp_path / "mem")  # three sessions stored
    memory = Memory(NAMESPACE, data_dir=str(tmp_path / "mem"), model="offline")
    store = memory.store
    asked: list[tuple[list[str], bool]] = []  # of the cached embedder
    embedded: list[tuple[list[str], bool]] = []  # of the model behind it

    def recording(calls: list[tuple[list[str], bool]], embed: Any) -> Any:
        def call(texts: Any) -> Any:
            calls.append((list(texts), bool(getattr(store._write_lock._held, "stack", []))))
            return embed(texts)
        return call

    monkeypatch.setattr(store.embedder, "embed", recording(asked, store.embedder.embed))
    monkeypatch.setattr(store.embedder.inner, "embed", recording(embedded, store.embedder.inner.embed))
    store.embedder.clear()  # an earlier test of this process may have told the same summaries
    memory.consolidate()
    told = {r.text for r in store.all("summary")}
    assert told
    assert told <= {t for texts, held in asked if not held for t in texts}
    assert told <= {t for texts, held in embedded if not held for t in texts}  # the model did embed them
    assert not told & {t for texts, held in embedded if held for t in texts}


def test_an_erase_during_a_consolidation_leaves_no_summary_of_what_it_erased(
    tmp_path: Path, first_sessions: dict[int, Path], embedder: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The slow path runs on a schedule, so an erase can land while it works: here it lands after the
    groups are made and before the first summary is written. Nothing written afterwards may cite or
    link an erased turn, and no summary may tell an erased fact."""
    from strata.memory.graph import summaries

    monkeypatch.delenv("STRATA_MODEL", raising=False)
    shutil.copytree(first_sessions[4], tmp_path / "mem")  # four sessions stored
    memory = Memory(NAMESPACE, data_dir=str(tmp_path / "mem"), model="offline")
    erased: dict[str, Any] = {}
    digest_of = summaries.group_digest

    def erase_first(*args: Any, **kwargs: Any) -> str:
        if not erased:
            erased["report"] = memory.erase(about="Caroline")  # the write lock is free between two groups
        return digest_of(*args, **kwargs)

    monkeypatch.setattr(summaries, "group_digest", erase_first)
    memory.consolidate()
    gone = set(erased["report"].erased)
    turns = {i.removeprefix("raw:") for i in gone if i.startswith("raw:")}
    assert turns, "the erase removed no turn: the test no longer covers what it is for"
    store = memory.store
    for summary in store.all("summary", include_inactive=True):
        assert not set(summary.source_ids) & turns, summary.id
    linked = {end for link in store.ledger.neighbours(NAMESPACE, sorted(gone)) for end in (link.src, link.dst)}
    assert not linked & gone
    told = memory.export().model_dump_json()
    for record_id in sorted(gone)[:50]:
        assert f'"{record_id}"' not in told, record_id


def test_the_fast_path_counts_the_turns_without_copying_the_timeline(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by audit (ingest slows as a namespace grows): each turn's entity links took `len(store.timeline())`,
    and every stored turn drops that list, so each turn copied every turn stored before it. The count is read
    from the timeline's index; what is linked is unchanged (conv-26 ingested before
    and after: the same records and links)."""
    from strata.memory.timeline import Timeline

    copies: list[int] = []
    records = Timeline.records
    monkeypatch.setattr(Timeline, "records", lambda self: copies.append(len(self)) or records(self))
    memory = Memory("t", data_dir=str(data_dir))
    memory.add([{"speaker": "Ann" if i % 2 else "Bob", "text": f"I visited Porto with Sofia, day {i}."}
                for i in range(6)])
    assert copies == []
    assert memory.store.turn_count() == len(memory.store.timeline()) == 6
