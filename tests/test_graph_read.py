"""The read side of the memory graph: traversal, the Judge's filter, sub-questions, paths, export, reads
that do not write.

Memory is real: every turn of LoCoMo conv-26 (speakers, text, captions, session
dates) stored in Chroma with the temporal links the Memory role writes between
consecutive turns, embedded by the local MiniLM. The chat model is LangChain's
fake one, malformed replies included.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import networkx as nx
import pytest
import strata.graph  # noqa: F401  (loads the graph package before the role modules it wires)
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langgraph.runtime import Runtime
from strata.agents.judge import irrelevant_items, judge
from strata.agents.research import offline_plan, research
from strata.agents.subquestion import offline_subquestion, subquestion
from strata.graph.context import Context
from strata.graph.state import Evidence, State, Verdict
from strata.memory.graph.export import write_graph
from strata.memory.graph.traversal import edge_weights, focus_of, traverse
from strata.memory.graph.view import StoreGraph
from strata.memory.records import Link, LinkType, raw_record
from strata.memory.registry import close_all, open_store
from strata.memory.search import Searcher, strip_names
from strata.memory.settings import StoreSettings

from strata.api import Memory
from strata.cli import main
from strata.conversations import load_questions, load_turns

NAMESPACE = "conv26"
# A real conv-26 question whose second gold turn (D1:9, "counseling or working in mental health") shares
# neither words nor much meaning with the question: it answers the turn before it (D1:10 asks back).
QUESTION = "What fields would Caroline be likely to pursue in her educaton?"
GOLD = "raw:D1:9"


@pytest.fixture(scope="module")
def memory_dir(tmp_path_factory: pytest.TempPathFactory, locomo_dir: Path, embedder: object) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("graph_read") / "mem"
    turns = list(load_turns(locomo_dir / "conv-26.json").turns())
    store = open_store(StoreSettings(data_dir=str(path)), NAMESPACE)
    store.add([raw_record(t, NAMESPACE) for t in turns])
    store.link([
        Link(namespace=NAMESPACE, src=f"raw:{a.dia_id}", dst=f"raw:{b.dia_id}", type=LinkType.TEMPORAL)
        for a, b in pairwise(turns)
    ])
    close_all()
    yield path
    close_all()


def runtime(memory_dir: Path, **settings: Any) -> Runtime[Context]:
    return Runtime(context=Context(data_dir=str(memory_dir), namespace=NAMESPACE, **settings))


# --- traversal ---------------------------------------------------------------------------------
def test_the_question_is_real_and_its_gold_turn_is_the_one_walked_to(locomo_dir: Path) -> None:
    asked = [q for q in load_questions(locomo_dir / "conv-26.json") if q.question == QUESTION]
    assert asked and GOLD.removeprefix("raw:") in asked[0].evidence


def test_traversal_reaches_a_gold_turn_that_dense_and_bm25_miss(
    memory_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MAGMA's ranking: every anchor equally strong, each neighbour scored by its own similarity."""
    from strata.memory.graph import traversal

    monkeypatch.setattr(traversal, "SIMILARITY_SHARE", 1.0)
    store = open_store(StoreSettings(data_dir=str(memory_dir)), NAMESPACE)
    vector = store.embedder.embed([QUESTION])[0]
    dense = [rid for rid, _ in store.dense("raw", vector, 10)]
    lexical = [rid for rid, _ in store.lexical("raw", QUESTION, 10)]
    assert GOLD not in dense and GOLD not in lexical
    reached = traverse(list(dict.fromkeys(dense + lexical)), vector, StoreGraph(store), edge_weights("what"))
    best = sorted(reached.values(), key=lambda r: -r.score)[:3]
    assert GOLD in [r.id for r in best]
    path = reached[GOLD].path
    assert [(s.via, s.src, s.dst, s.hop) for s in path] == [("temporal", "raw:D1:10", GOLD, 1)]
    assert reached[GOLD].anchor == "raw:D1:10"


def test_a_neighbour_inherits_its_anchors_strength_as_the_similarity_share_falls(
    memory_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AdaMem's propagation: with SIMILARITY_SHARE 0 a reached turn scores what its anchor passes on."""
    from strata.memory.graph import traversal

    store = open_store(StoreSettings(data_dir=str(memory_dir)), NAMESPACE)
    vector = store.embedder.embed([QUESTION])[0]
    weights = edge_weights("what")
    monkeypatch.setattr(traversal, "SIMILARITY_SHARE", 1.0)
    strong = traverse({"raw:D1:10": 1.0}, vector, StoreGraph(store), weights, hops=1)
    monkeypatch.setattr(traversal, "SIMILARITY_SHARE", 0.0)
    inherited = traverse({"raw:D1:10": 0.6}, vector, StoreGraph(store), weights, hops=1)
    expected = 0.6 * weights["temporal"] * traversal.DECAY
    assert inherited[GOLD].score == pytest.approx(expected)
    assert strong[GOLD].score != pytest.approx(expected / 0.6)  # by similarity, the score was its own


def test_a_longer_walk_expands_only_the_beam_and_decays_per_hop(memory_dir: Path) -> None:
    """The walk's default is one hop (README: one hop reaches more gold offline); asked for two, it
    expands the best `beam` records of the first hop, and a second-hop record scores its parent's score
    times the edge's weight times the decay again."""
    from strata.memory.graph import traversal

    store = open_store(StoreSettings(data_dir=str(memory_dir)), NAMESPACE)
    vector = store.embedder.embed([QUESTION])[0]
    weights = edge_weights("what")
    one = traverse({"raw:D1:10": 1.0}, vector, StoreGraph(store), weights)
    assert traversal.HOPS == 1 and one and all(len(r.path) == 1 for r in one.values())
    two = traverse({"raw:D1:10": 1.0}, vector, StoreGraph(store), weights, hops=2, beam=2)
    second = [r for r in two.values() if len(r.path) == 2]
    assert second, "nothing two edges away from the anchor"
    assert len({r.path[1].src for r in second}) <= 2  # only the beam's records were expanded
    for reached in second:
        hop1, hop2 = reached.path
        assert (hop1.hop, hop2.hop, hop2.src) == (1, 2, hop1.dst)
        parent = two[hop1.dst].score if hop1.dst in two else None
        if parent is not None:  # a record, not a bridge: the child's score builds on it
            assert reached.score <= parent * weights[hop2.via] * traversal.DECAY**2 + 1e-9
        assert reached.id not in one


def test_the_walk_is_the_same_whatever_order_the_ledger_holds_its_links_in(
    memory_dir: Path, tmp_path: Path
) -> None:
    """Two copies of one memory (say an export imported elsewhere) hold the same links in another row order;
    with a budget smaller than the neighbours, the walk must keep the same records by the same paths."""
    source = open_store(StoreSettings(data_dir=str(memory_dir)), NAMESPACE)
    records = [r for r in source.all("raw")][:60]
    links = [Link(namespace=NAMESPACE, src=a.id, dst=b.id, type=LinkType.RELATED, weight=1.0)
             for a in records[:6] for b in records[6:]]  # many equal paths into the same records
    walks = []
    for order, name in ((links, "forward"), (list(reversed(links)), "backward")):
        store = open_store(StoreSettings(data_dir=str(tmp_path / name)), NAMESPACE)
        store.add(records)
        store.link(order)
        vector = store.embedder.embed([QUESTION])[0]
        reached = traverse(dict.fromkeys((r.id for r in records[:6]), 1.0), vector, StoreGraph(store),
                           {"related": 1.0}, max_reached=20)
        walks.append({rid: (round(r.score, 9), r.anchor, r.path) for rid, r in reached.items()})
    assert len(walks[0]) == 20 and walks[0] == walks[1]


def test_research_keeps_the_path_of_what_the_walk_reached(memory_dir: Path) -> None:
    rt = runtime(memory_dir, mode="retrieve", token_budget=600, granularities="raw")
    out = research(State(question=QUESTION), rt)
    walked = [e for e in out["evidence"] if "graph" in e.found_by]
    assert walked
    for item in walked:
        start, *edges = item.path
        assert start.step == "anchor" and edges and edges[-1].dst == item.id
        assert all(step.step == "edge" and step.via == ["temporal"] and step.hop == n
                   for n, step in enumerate(edges, start=1))
        assert edges[0].src == start.dst
    listed = [e for e in out["evidence"] if "graph" not in e.found_by]
    assert listed and all(len(e.path) == 1 and e.path[0].via == e.found_by for e in listed)
    off = research(State(question=QUESTION), runtime(memory_dir, mode="retrieve", token_budget=600,
                                                      granularities="raw", traversal=False))
    assert all("graph" not in e.found_by for e in off["evidence"])


@pytest.mark.parametrize(
    ("question", "focus", "favoured"),
    [
        ("Why did Caroline choose counseling?", "why", "causal"),
        ("When did Melanie paint a sunrise?", "when", "temporal"),
        ("Who supports Caroline?", "who", "entity"),
        ("What did Melanie paint?", "what", "entity"),
    ],
)
def test_edge_weights_follow_the_questions_focus(question: str, focus: str, favoured: str) -> None:
    assert focus_of(question) == focus
    weights = edge_weights(focus_of(question))
    assert weights[favoured] == 1.0 and min(weights.values()) < 1.0
    assert focus_of("What activities does Melanie do?", broad=True) == "list"
    assert edge_weights("why", disabled=["causal"])["causal"] == 0.0


# --- the Judge's filter --------------------------------------------------------------------------
def item(dia: str, text: str, score: float, speaker: str = "Melanie") -> Evidence:
    return Evidence(id=f"raw:{dia}", kind="raw", text=text, dialogue_id=dia, speaker=speaker, score=score,
                    source_ids=[dia], label=f"[{dia}] {speaker}: {text}", line=f"[{dia}] {speaker}: {text}")


FILTER_QUESTION = "What did Melanie paint for the art show?"
FILTER_ITEMS = [
    item("D1:12", "I painted a sunset over the lake for the art show last week.", 0.9),
    item("D1:13", "Thanks! It took me ages to get the colours right.", 0.5),  # follows the painting turn
    item("D4:2", "We went camping in the mountains with the kids.", 0.2),  # nothing the question asks
    item("D5:7", "The pottery class starts next Monday.", 0.1, "Caroline"),
]


@pytest.fixture
def half_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A four-item context leaves the filter room to drop only when it keeps the better half untouched."""
    from strata.agents import judge as judge_module

    monkeypatch.setattr(judge_module, "KEEP_SHARE", 0.5)


def test_the_filter_drops_an_irrelevant_item_and_keeps_the_answer_and_its_neighbour(half_kept: None) -> None:
    dropped = irrelevant_items(FILTER_QUESTION, FILTER_ITEMS, ["Caroline", "Melanie"])
    assert set(dropped) == {"raw:D4:2", "raw:D5:7"}


def test_the_filter_matches_word_forms_not_surface_words() -> None:
    """'sell' is held by 'sold', 'children' by 'child': the filter reads lemmas (memory/lemmas.py)."""
    items = [
        item("D2:1", "The weather was lovely on Sunday.", 0.9),
        item("D2:2", "We had pizza for dinner.", 0.8),
        item("D7:3", "I finally sold my old bike to a neighbour.", 0.2),  # the answer, scored low
        item("D9:5", "My children loved the museum.", 0.1),
        item("D9:9", "Work has been busy lately.", 0.05),
    ]
    dropped = irrelevant_items("What did Melanie sell, and what did her child love?", items, ["Melanie"])
    assert "raw:D7:3" not in dropped and "raw:D9:5" not in dropped
    assert "raw:D9:9" in dropped


def test_the_judge_node_filters_before_the_answer_and_says_so(memory_dir: Path, half_kept: None) -> None:
    state = State(question=FILTER_QUESTION, evidence=FILTER_ITEMS, rounds=1)
    out = judge(state, runtime(memory_dir, mode="ask", k_r=0))
    assert [e.id for e in out["evidence"]] == ["raw:D1:12", "raw:D1:13"]
    assert "filter (offline): 2 irrelevant item(s) left out (raw:D4:2, raw:D5:7)" in out["trace"][-1].summary
    unfiltered = judge(state, runtime(memory_dir, mode="ask", k_r=0, judge_filter=False))
    assert "evidence" not in unfiltered and "filter" not in unfiltered["trace"][-1].summary


@pytest.mark.parametrize(
    ("irrelevant", "kept"),
    [
        (["D4:2"], ["raw:D1:12", "raw:D1:13", "raw:D5:7"]),  # the dialogue id the context shows
        (["raw:D5:7", "[D4:2]", "D9:9"], ["raw:D1:12", "raw:D1:13"]),  # record ids, brackets; unknown ids ignored
        ("D4:2", ["raw:D1:12", "raw:D1:13", "raw:D5:7"]),  # one id as a string
        (None, ["raw:D1:12", "raw:D1:13", "raw:D4:2", "raw:D5:7"]),  # null: the model found nothing irrelevant
        ({"id": "D4:2"}, ["raw:D1:12", "raw:D1:13", "raw:D4:2", "raw:D5:7"]),  # malformed: ignored
    ],
)
def test_the_models_filter_is_read_leniently(memory_dir: Path, irrelevant: Any, kept: list[str]) -> None:
    reply = json.dumps({"Action": "Pass", "reason": "stated", "confidence": 0.9, "irrelevant": irrelevant})
    model = FakeListChatModel(responses=[reply])
    state = State(question=FILTER_QUESTION, evidence=FILTER_ITEMS, rounds=1)
    out = judge(state, runtime(memory_dir, mode="ask", chat_model=model))  # a Retry round is left: the model is asked
    assert [e.id for e in out.get("evidence", FILTER_ITEMS)] == kept
    assert out["verdict"].policy == "model:FakeListChatModel"


def test_an_unusable_model_reply_falls_back_to_the_offline_filter(memory_dir: Path, half_kept: None) -> None:
    model = FakeListChatModel(responses=["I think the first two items matter."])
    state = State(question=FILTER_QUESTION, evidence=FILTER_ITEMS, rounds=1)
    out = judge(state, runtime(memory_dir, mode="ask", chat_model=model))
    assert [e.id for e in out["evidence"]] == ["raw:D1:12", "raw:D1:13"]
    assert out["verdict"].policy.startswith("offline (model output unusable")
    assert "filter (offline)" in out["trace"][-1].summary


# --- sub-questions on Retry ----------------------------------------------------------------------
def test_offline_subquestion_asks_for_what_is_missing() -> None:
    people = ["Caroline", "Melanie"]
    assert offline_subquestion("What pottery did Melanie make?", ["content", "pottery"], people) == "pottery"
    assert offline_subquestion("When did Melanie paint a sunrise?", ["time"], people) == (
        "When did Melanie paint a sunrise? when date day"
    )
    assert offline_subquestion("What did Melanie paint?", [], people) == ""


@pytest.mark.parametrize(
    ("reply", "expected", "policy"),
    [
        ('{"question": "Which bowl did Melanie make in pottery class?"}',
         "Which bowl did Melanie make in pottery class?", "model:FakeListChatModel"),
        ('```json\n{"sub_question": "  Melanie pottery bowl  "}\n```', "Melanie pottery bowl",
         "model:FakeListChatModel"),
        ('{"question": ""}', "pottery", "offline (model output unusable"),
        ("no idea", "pottery", "offline (model output unusable"),
    ],
)
def test_model_subquestions_are_read_and_fall_back(reply: str, expected: str, policy: str) -> None:
    context = Context(chat_model=FakeListChatModel(responses=[reply]))
    text, used = subquestion("What pottery did Melanie make?", ["content", "pottery"], ["Caroline", "Melanie"], [],
                             context)
    assert text == expected and used.startswith(policy)


def test_a_retry_searches_with_the_subquestion(memory_dir: Path) -> None:
    rt = runtime(memory_dir, mode="retrieve", token_budget=300)
    state = State(question="What did Melanie make in her pottery class?")
    first = research(state, rt)
    state = replace(state, **{**first, "verdict": Verdict(action="Retry", missing=["content", "birthday"])})
    second = research(state, rt)
    assert "sub-question 'birthday' (offline)" in second["trace"][-1].summary
    found = [e for e in second["evidence"] if "subquestion" in e.found_by]
    assert found and all(e.id not in {x.id for x in first["evidence"]} for e in found)


# --- show the path: explain and export ------------------------------------------------------------
def test_explain_prints_each_items_path(memory_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    question = "What did Melanie paint recently?"
    code = main(["--data-dir", str(memory_dir), "--namespace", NAMESPACE, "explain", question])
    printed = capsys.readouterr().out
    assert code == 0
    assert printed.startswith(f"question: {question}\nresearch (offline): round 1")
    assert re.search(r"\n      anchor raw:D\d+:\d+ \((bm25|dense)", printed)
    assert re.search(r"\n      hop 1: raw:D\d+:\d+ -temporal-> raw:D\d+:\d+\n", printed)
    assert "found by " in printed


def test_graph_export_writes_json_graphml_and_png(memory_dir: Path, tmp_path: Path) -> None:
    memory = Memory(NAMESPACE, data_dir=str(memory_dir))
    exported = memory.graph(question="What did Melanie paint recently?")
    files = write_graph(exported, tmp_path, "question")
    assert [f.suffix for f in files] == [".json", ".graphml", ".png"]
    data = json.loads(files[0].read_text())
    roles = {n["id"]: n["role"] for n in data["nodes"]}
    walked = [e for e in data["edges"] if e["on_path"]]
    assert walked and all(e["type"] == "temporal" for e in walked)
    assert all(roles[e["src"]] in ("anchor", "reached") or roles[e["dst"]] in ("anchor", "reached") for e in walked)
    assert "anchor" in roles.values() and "reached" in roles.values()
    parsed = nx.read_graphml(files[1])
    assert set(parsed.nodes) == set(roles) and parsed.number_of_edges() == len(data["edges"])
    assert files[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and files[2].stat().st_size > 10_000


def test_graph_export_shows_summaries_as_records_and_its_graphml_parses_whatever_a_turn_holds(
    data_dir: Path, tmp_path: Path
) -> None:
    """A summary is a record with its text, not a text-less bridge; a deleted one is not shown through the links
    it leaves; a turn's escape code and bell (kept as sent) are written so that the GraphML is still XML."""
    memory = Memory("ann", data_dir=str(data_dir))
    memory.add([{"speaker": "Ann", "text": "I live in Denver and I work as a nurse at the city hospital. \x1b[31m\x07",
                 "time": "2023-05-01T10:00"},
                {"speaker": "Bob", "text": "Cool, I work as a teacher.", "time": "2023-05-01T10:01"}])
    memory.consolidate()
    summaries = memory.store.all("summary")
    assert summaries
    nodes = {n.id: n for n in memory.graph().nodes}
    assert all(nodes[r.id].kind == "summary" and nodes[r.id].text == r.text and nodes[r.id].role == ""
               for r in summaries)
    assert all(n.role != "bridge" or n.id.startswith("entity:") for n in nodes.values())
    memory.store.delete(summaries[0].id, reason="test")
    exported = memory.graph()
    assert summaries[0].id not in {n.id for n in exported.nodes}
    files = write_graph(exported, tmp_path, "ann", ("json", "graphml"))
    assert "\\u0007" in files[0].read_text()  # JSON keeps the text as stored
    parsed = nx.read_graphml(files[1])
    assert parsed.nodes["raw:T1"]["text"].endswith("\ufffd[31m\ufffd")


def test_graph_command_exports_the_namespace_and_refuses_unknown_people(
    memory_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--data-dir", str(memory_dir), "--namespace", NAMESPACE, "graph", "--out", str(tmp_path)]
    assert main([*base, "--formats", "json"]) == 0
    data = json.loads((tmp_path / "namespace.json").read_text())
    assert len(data["nodes"]) == 419 and len(data["edges"]) == 418
    assert main([*base, "--person", "Nobody"]) == 2
    assert "no participant 'Nobody'" in capsys.readouterr().err
    assert main([*base, "--formats", "svg"]) == 2
    capsys.readouterr()
    for out, says in ((tmp_path / "namespace.json", "is a file: name the folder"),
                      (memory_dir / "chroma", "would replace the memory's own chroma")):
        assert main([*base[:-1], str(out)]) == 2
        assert says in capsys.readouterr().err


def test_graph_command_writes_its_files_as_an_export_private_to_their_user(data_dir: Path, tmp_path: Path) -> None:
    """Found by audit: `strata graph --out` wrote its files (every turn's words) as the umask said, 0644 under the
    usual 022, and its folder 0755, while `export --out` writes 0600. A new file is 0600 and a folder made for it
    0700; a file replaced keeps its permissions, a link keeps leading to the file it names, which is rewritten."""
    Memory("ann", data_dir=str(data_dir)).add(ANN)
    close_all()
    out = tmp_path / "graph"
    base = ["--data-dir", str(data_dir), "--namespace", "ann", "graph", "--out", str(out)]
    before = os.umask(0o022)
    try:
        assert main(base) == 0
        assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in [out, *out.iterdir()]} == {
            "graph": 0o700, "namespace.json": 0o600, "namespace.graphml": 0o600, "namespace.png": 0o600}
        (out / "namespace.json").chmod(0o644)  # shared on purpose
        elsewhere = tmp_path / "elsewhere.graphml"
        elsewhere.write_text("old", encoding="utf-8")
        (out / "namespace.graphml").unlink()
        (out / "namespace.graphml").symlink_to(elsewhere)
        assert main([*base, "--formats", "json,graphml"]) == 0
    finally:
        os.umask(before)
    assert stat.S_IMODE((out / "namespace.json").stat().st_mode) == 0o644
    assert (out / "namespace.graphml").is_symlink() and nx.read_graphml(elsewhere).number_of_nodes() >= 2
    assert sorted(p.name for p in out.iterdir()) == ["namespace.graphml", "namespace.json", "namespace.png"]


# --- reads do not write ----------------------------------------------------------------------------
ANN = [
    {"speaker": "Ann", "text": "I live in Boston.", "dia_id": "D1:1", "time": "2023-05-08T10:00", "listener": "Ben"},
    {"speaker": "Ann", "text": "I moved to Denver last month.", "dia_id": "D2:1", "time": "2023-07-03T10:00",
     "listener": "Ben"},
]


def test_ask_reports_a_conflict_and_changes_nothing_unless_asked_to(data_dir: Path) -> None:
    Memory("ann", data_dir=str(data_dir), refresher=False).add(ANN)  # stored without resolving: a conflict stays
    memory = Memory("ann", data_dir=str(data_dir))
    before = ([c.model_dump() for c in memory.history()], [r.model_dump() for r in memory.store.all("fact")])
    for read in (memory.ask, memory.retrieve):
        answer = read("Where does Ann live?")
        assert answer.verdict is not None and answer.verdict.action == "Refresh" and answer.verdict.conflicts
        assert answer.changes == [] and any("memory unchanged" in n for n in answer.notes)
    after = ([c.model_dump() for c in memory.history()], [r.model_dump() for r in memory.store.all("fact")])
    assert after == before
    opted = memory.ask("Where does Ann live?", refresh=True)
    assert opted.changes and len(memory.history()) == len(before[0]) + len(opted.changes)


# --- summaries as anchors ------------------------------------------------------------------------
GATHERING = "What activities does Melanie partake in?"  # a real conv-26 question (gold D1:12, D1:18, ...)


@pytest.fixture(scope="module")
def consolidated(tmp_path_factory: pytest.TempPathFactory, locomo_dir: Path, embedder: object) -> Iterator[Path]:
    """conv-26's first three sessions ingested and consolidated offline (topic and persona summaries)."""
    from strata.ingestion import ingest_conversation

    path = tmp_path_factory.mktemp("summaries") / "mem"
    loaded = load_turns(locomo_dir / "conv-26.json")
    memory = Memory(NAMESPACE, data_dir=str(path))
    ingest_conversation(memory, loaded.model_copy(update={"sessions": loaded.sessions[:3]}))
    memory.consolidate()
    close_all()
    yield path
    close_all()


def test_a_gathering_question_walks_from_a_summary_to_the_turns_it_cites(consolidated: Path, locomo_dir: Path) -> None:
    gold = next(q for q in load_questions(locomo_dir / "conv-26.json") if q.question == GATHERING).evidence
    store = open_store(StoreSettings(data_dir=str(consolidated)), NAMESPACE)
    plan = offline_plan(GATHERING, store.participants(), [], None, ["raw", "fact", "episode"])
    searcher = Searcher(store, plan, strip_names(plan.query, store.participants()), set())
    anchors = searcher.summary_anchors()
    assert "summary:persona:melanie:activities" in anchors  # the record that lists what Melanie does
    summary = store.get(["summary:persona:melanie:activities"])[0]
    cited_gold = [f"raw:{d}" for d in gold if d in summary.source_ids]
    assert cited_gold, "the persona summary cites gold turns of this question"
    reached = traverse(anchors, searcher.vector, StoreGraph(store), edge_weights(focus_of(GATHERING, broad=True)))
    for turn in cited_gold:
        assert [(s.via, s.src, s.hop) for s in reached[turn].path][:1] == [("derived_from", reached[turn].anchor, 1)]
    rt = Runtime(context=Context(data_dir=str(consolidated), namespace=NAMESPACE, mode="retrieve", token_budget=1500))
    out = research(State(question=GATHERING), rt)
    assert all(e.kind != "summary" for e in out["evidence"])  # strict recall counts turns: summaries only bridge
    assert {e.dialogue_id for e in out["evidence"]} >= {t.removeprefix("raw:") for t in cited_gold}
    searcher.summaries = False  # the `summaries` switch: no summary starts a walk
    assert searcher.summary_anchors() == []
