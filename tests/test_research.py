"""The Research role plans by AMA's rule and brings the gold turns within a token budget.

Memory is real: the first three sessions of LoCoMo conv-26 (speakers, text,
captions and session dates only) stored in Chroma as raw turns, their offline
facts, one episode and temporal links, the way the Memory role writes them.
The gold questions are read from conv-26's `qa` here, on the evaluation side.
The model policy runs on LangChain's fake chat models, malformed replies included.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import strata.graph  # noqa: F401  (loads the graph package before the role modules it wires)
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langgraph.runtime import Runtime
from strata.agents.budget import candidates, context_tokens, item_tokens, select
from strata.agents.research import intent_of, k_dyn_of, offline_plan, research, rewrite_query, route_of
from strata.graph.context import Context
from strata.graph.state import Evidence, State, Verdict
from strata.memory.entities import extract_entities
from strata.memory.errors import InputError
from strata.memory.facts import extract_facts, split_sentences
from strata.memory.records import Link, LinkType, Record, Turn, raw_record
from strata.memory.registry import close_all, open_store
from strata.memory.search import MENTION_LAG, POOL, Searcher, strip_names
from strata.memory.settings import StoreSettings

from strata.conversations import load_questions, load_turns

NAMESPACE = "conv26"
SESSIONS = ("1", "2", "3")


def build_memory(data_dir: Path, locomo_dir: Path) -> list[Turn]:
    """Raw turns, offline facts, one episode and temporal links for conv-26 sessions 1-3."""
    conversation = load_turns(locomo_dir / "conv-26.json")
    turns = [t for t in conversation.turns() if t.session_label() in SESSIONS]
    store = open_store(StoreSettings(data_dir=str(data_dir)), NAMESPACE)
    records: list[Record] = []
    links: list[Link] = []
    for turn in turns:
        dia = turn.dia_id or ""
        records.append(raw_record(turn, NAMESPACE, extract_entities(turn.text)))
        for i, draft in enumerate(extract_facts(turn, turn.time, turn.listener)):
            records.append(Record(
                id=f"fact:{dia}:{i}", kind="fact", text=draft.text, namespace=NAMESPACE, dialogue_id=dia,
                session=turn.session_label(), speaker=turn.speaker, time=turn.time, source_ids=[dia],
                subject=draft.subject, attribute=draft.attribute, value=draft.value, entities=list(draft.entities),
            ))
            links.append(Link(namespace=NAMESPACE, src=f"fact:{dia}:{i}", dst=f"raw:{dia}", type=LinkType.DERIVED_FROM))
    for before, after in pairwise(turns):
        links.append(Link(namespace=NAMESPACE, src=f"raw:{before.dia_id}", dst=f"raw:{after.dia_id}",
                          type=LinkType.TEMPORAL))
    first = [t for t in turns if t.session_label() == "1"]
    records.append(Record(
        id="episode:1", kind="episode", namespace=NAMESPACE, dialogue_id="D1:1", session="1",
        speaker="Caroline, Melanie", time=first[0].time, title="Support group and painting",
        text="On 8 May 2023 Caroline told Melanie about the LGBTQ support group she went to the day before and "
             "her wish to study counseling; Melanie shared a painting of a sunset over a lake.",
        source_ids=[t.dia_id or "" for t in first],
    ))
    store.add(records)
    store.link(links)
    return turns


@pytest.fixture(scope="module")
def memory_dir(tmp_path_factory: pytest.TempPathFactory, locomo_dir: Path, embedder: object) -> Path:
    path = tmp_path_factory.mktemp("research") / "mem"
    build_memory(path, locomo_dir)
    close_all()
    return path


@pytest.fixture(scope="module")
def gold(locomo_dir: Path) -> list[tuple[str, list[str]]]:
    """conv-26 questions (categories 1-4) whose gold turns all lie in sessions 1-3 (evaluation side)."""
    questions = load_questions(locomo_dir / "conv-26.json")
    return [
        (q.question, q.evidence) for q in questions
        if q.category in (1, 2, 3, 4) and q.evidence
        and all(e.split(":")[0] in {f"D{s}" for s in SESSIONS} for e in q.evidence)
    ]


def runtime(memory_dir: Path, **settings: Any) -> Runtime[Context]:
    return Runtime(context=Context(data_dir=str(memory_dir), namespace=NAMESPACE, **settings))


def ask(memory_dir: Path, question: str, **settings: Any) -> dict[str, Any]:
    return research(State(question=question), runtime(memory_dir, mode=settings.pop("mode", "ask"), **settings))


def reached(evidence: list[Evidence]) -> set[str]:
    """Gold turns in the context by the strict rule: a raw turn, or a fact citing it."""
    return {t for e in evidence if e.kind in ("raw", "fact") for t in e.turn_ids()}


# --- the plan -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("question", "intent", "route"),
    [
        ("When did Caroline go to the LGBTQ support group?", [1, 0, 1, 1], "raw"),
        ("What exactly did Melanie say about her painting?", [1, 0, 0, 1], "raw"),
        ("Why did Caroline decide to study counseling?", [0, 1, 0, 0], "episode"),
        ("How does Melanie feel about running?", [0, 1, 0, 0], "episode"),
        ("What activities does Melanie partake in?", [0, 0, 1, 0], "episode"),
        ("What did Caroline research?", [0, 0, 0, 1], "fact"),
        ("What is Caroline's identity?", [0, 0, 0, 1], "fact"),
    ],
)
def test_intent_and_route_follow_amas_rule(question: str, intent: list[int], route: str) -> None:
    assert intent_of(question) == intent
    assert route_of(intent_of(question), ["raw", "fact", "episode"]) == route


def test_route_stays_inside_the_allowed_granularities() -> None:
    abstract = intent_of("Why did Caroline decide to study counseling?")
    assert route_of(abstract, ["raw", "fact"]) == "fact"
    assert route_of(abstract, ["raw"]) == "raw"
    assert route_of(intent_of("What did Caroline research?"), ["raw", "episode"]) == "raw"


def test_broad_questions_get_a_larger_budget() -> None:
    broad = "What activities does Melanie partake in?"
    single = "What did Caroline research?"
    assert k_dyn_of(broad, intent_of(broad)) > k_dyn_of(single, intent_of(single))


def test_rewrite_resolves_pronouns_and_nicknames() -> None:
    window = [
        {"speaker": "Melanie", "dia_id": "D2:7", "text": "We're going camping next month.", "time": ""},
        {"speaker": "Caroline", "dia_id": "D2:8", "text": "Researching adoption agencies.", "time": ""},
    ]
    people = ["Caroline", "Melanie"]
    assert rewrite_query("What did she research?", people, window) == "What did Caroline research?"
    assert rewrite_query("When is Mel going camping?", people, window) == "When is Melanie going camping?"
    assert rewrite_query("What is her favourite book?", people, window) == "What is Caroline's favourite book?"
    # a named participant is kept, and a turn's own speaker is never what "she" refers to
    assert rewrite_query("What did Melanie say?", people, window) == "What did Melanie say?"
    assert "Melanie" in rewrite_query("Did she like it?", people, window, speaker="Caroline")


# --- the node -------------------------------------------------------------------------------
def test_first_round_plans_searches_and_traces(memory_dir: Path) -> None:
    out = ask(memory_dir, "When did Caroline go to the LGBTQ support group?")
    plan = out["plan"]
    assert plan.route == "raw" and plan.participants == ["Caroline"] and plan.policy == "offline"
    assert plan.searched == ["raw", "fact"]
    assert out["rounds"] == 1 and out["stage"] == "asking"  # a fresh run: stage was "done"
    assert out["cursor"] == 0 and out["answer"] is None  # fresh-run fields came along
    assert [n.role for n in out["trace"]] == ["research"]
    assert "round 1" in out["trace"][0].summary and "-> raw" in out["trace"][0].summary
    ids = [e.id for e in out["evidence"]]
    assert len(ids) == len(set(ids))
    times = [e.time for e in out["evidence"] if e.time]
    assert times == sorted(times)  # linearised chronologically
    assert all(e.label.startswith(f"[{e.dialogue_id or e.id} | ") for e in out["evidence"])


def test_gold_turn_for_the_support_group_question_fits_a_small_budget(memory_dir: Path) -> None:
    out = ask(memory_dir, "When did Caroline go to the LGBTQ support group?", token_budget=300)
    assert "D1:3" in reached(out["evidence"])
    assert context_tokens(out["evidence"]) <= 300


def test_locomo_questions_reach_their_gold_turns(memory_dir: Path, gold: list[tuple[str, list[str]]]) -> None:
    assert len(gold) >= 10
    recalls = []
    for question, evidence in gold:
        out = ask(memory_dir, question, token_budget=800)
        assert context_tokens(out["evidence"]) <= 800
        found = reached(out["evidence"])
        recalls.append(sum(g in found for g in evidence) / len(evidence))
    assert sum(recalls) / len(recalls) >= 0.9


def test_turns_are_shown_without_small_talk_so_more_of_them_fit(memory_dir: Path) -> None:
    """A context shows each turn without its greetings, thanks and praise (the `brief_turns` switch):
    the same budget then holds more turns; the switch off shows every turn whole."""
    question = "What did Caroline and Melanie talk about when they met again?"
    brief = ask(memory_dir, question, token_budget=600)["evidence"]
    whole = ask(memory_dir, question, token_budget=600, brief_turns=False)["evidence"]
    assert all(f"{e.speaker}: {e.text}" in e.line for e in whole if e.kind == "raw")
    trimmed = [e for e in brief if e.kind == "raw" and e.text not in e.line]
    assert trimmed, "no turn in the context had small talk to leave out"
    for item in trimmed:
        head = f"[{item.dialogue_id}] {item.speaker}: "
        assert item.line.startswith(head)  # still cited by its id
        said = item.line.removeprefix(head).split(" [shared a photo ")[0]
        assert len(said) < len(item.text) and all(s in item.text for s in split_sentences(said))  # word for word
    assert context_tokens(brief) <= 600 and context_tokens(whole) <= 600
    assert len(brief) > len(whole)


def test_facts_reactivate_their_source_turn(memory_dir: Path) -> None:
    out = ask(memory_dir, "What did Caroline research?", token_budget=400)
    d28 = next(e for e in out["evidence"] if e.id == "raw:D2:8")
    assert "fact" in d28.found_by and d28.kind == "raw"


def test_a_broad_question_reads_facts_and_more_of_them_fit(memory_dir: Path) -> None:
    """"What activities..." gathers many events: its first round shows facts on their own, no raw turns,
    so it holds more items than a narrow question in the same budget."""
    broad = ask(memory_dir, "What activities does Melanie partake in?")
    narrow = ask(memory_dir, "When did Caroline go to the LGBTQ support group?")
    assert "raw" not in broad["plan"].searched and "raw" in narrow["plan"].searched
    kinds = {e.kind for e in broad["evidence"]}
    assert "fact" in kinds and "raw" not in kinds
    assert len(broad["evidence"]) > len(narrow["evidence"])


def test_an_edited_fact_is_shown_beside_the_turn_it_came_from(memory_dir: Path) -> None:
    store = open_store(StoreSettings(data_dir=str(memory_dir)), NAMESPACE)
    fact_id = next(r.id for r in store.all("fact") if r.source_ids == ["D2:8"])
    change = store.update(fact_id, "Caroline is researching adoption agencies in Denver.", reason="test")
    try:
        out = ask(memory_dir, "What is Caroline researching?", token_budget=400)
        shown = {e.id: e for e in out["evidence"]}
        assert fact_id in shown and "Denver" in shown[fact_id].text  # the raw turn does not say the new value
        assert "raw:D2:8" in shown
    finally:
        store.undo(change.id)


def test_dates_in_the_question_become_a_time_window(memory_dir: Path) -> None:
    out = ask(memory_dir, "What did Melanie talk about on 25 May 2023?", token_budget=400)
    start, end = out["plan"].time_window
    assert start == datetime(2023, 5, 25) and end.date() == datetime(2023, 5, 25).date()
    evidence = out["evidence"]
    inside = [e for e in evidence if e.time and start <= e.time <= end + MENTION_LAG]  # told up to 2 weeks later
    assert all("time" in e.found_by for e in inside)
    assert not any("time" in e.found_by for e in evidence if e not in inside)
    assert len(inside) >= 0.8 * len(evidence)


def test_relative_dates_resolve_against_the_latest_memory(memory_dir: Path) -> None:
    out = ask(memory_dir, "What did Caroline do last week?")
    start, end = out["plan"].time_window
    assert datetime(2023, 5, 28) <= start < end < datetime(2023, 6, 9)  # the last session is 9 June 2023


def test_retry_rounds_widen_the_search_and_keep_earlier_finds(memory_dir: Path) -> None:
    rt = runtime(memory_dir, mode="ask", token_budget=500)
    state = State(question="What did Caroline research?")
    first = research(state, rt)
    state = replace(state, **{**first, "verdict": Verdict(action="Retry", reason="no place")})
    second = research(state, rt)
    assert second["rounds"] == 2 and "stage" not in second
    assert second["plan"].searched == ["fact", "raw", "episode"]
    assert "retry: searched episode" in second["trace"][-1].summary
    assert len(second["trace"]) == 2
    assert context_tokens(second["evidence"]) <= 500
    kept = {e.id for e in first["evidence"]} & {e.id for e in second["evidence"]}
    assert len(kept) >= len(first["evidence"]) // 2
    assert "raw:D2:8" in {e.id for e in second["evidence"]}
    state = replace(state, **second)
    third = research(state, rt)
    assert third["rounds"] == 3 and "wider K" in third["trace"][-1].summary
    assert context_tokens(third["evidence"]) <= 500


def test_retry_follows_links_of_what_was_found(memory_dir: Path) -> None:
    rt = runtime(memory_dir, mode="ask", token_budget=300, granularities="raw")
    state = State(question="What did Caroline research?")
    first = research(state, rt)
    state = replace(state, **first)
    second = research(state, rt)
    linked = [e for e in second["evidence"] if "link" in e.found_by]
    assert linked, second["trace"][-1].summary
    assert "linked records" in second["trace"][-1].summary
    # Each linked item shows how it was reached: an earlier find's path, then the typed edge from it.
    for item in linked:
        starts = [e for e in first["evidence"] if item.path[: len(e.path)] == e.path and len(item.path) > len(e.path)]
        assert starts, (item.id, item.path)
        edge = item.path[len(starts[0].path)]
        assert edge.step == "edge" and edge.src == starts[0].id
        assert edge.via[0] in ("temporal", "entity", "derived_from", "related")
        assert item.path[-1].dst == item.id


def test_only_allowed_granularities_are_searched(memory_dir: Path) -> None:
    out = ask(memory_dir, "Why did Caroline decide to study counseling?", granularities="raw")
    assert out["plan"].route == "raw" and out["plan"].searched == ["raw"]
    assert {e.kind for e in out["evidence"]} == {"raw"}
    with_episodes = ask(memory_dir, "Why did Caroline decide to study counseling?")
    assert with_episodes["plan"].route == "episode" and "episode" in with_episodes["plan"].searched


def test_ingest_leaves_out_the_turn_being_stored(memory_dir: Path, locomo_dir: Path) -> None:
    turn = next(t for t in load_turns(locomo_dir / "conv-26.json").turns() if t.dia_id == "D2:8")
    state = State(turns=[turn], stage="intake")
    out = research(state, runtime(memory_dir, mode="ingest"))
    ids = {e.id for e in out["evidence"]}
    assert "raw:D2:8" not in ids and ids
    assert "stage" not in out and out["rounds"] == 1
    assert len(out["evidence"]) <= max(out["plan"].k_dyn, 8)


def test_a_run_without_a_question_is_refused(memory_dir: Path) -> None:
    with pytest.raises(InputError, match="ask needs a question"):
        research(State(), runtime(memory_dir, mode="ask"))


# --- the model policy -------------------------------------------------------------------------
PLAN = {
    "rewrite_query": "When did Caroline go to the LGBTQ support group?",
    "intent_vector": {"b_fine": 1, "b_abs": 0, "b_event": 1, "b_atomic": 0},
    "memory_type": "raw",
    "K_dyn": 4,
}


def model_plan(memory_dir: Path, reply: str, question: str = "When did she go to the support group?") -> Any:
    model = FakeListChatModel(responses=[reply])
    out = research(State(question=question), runtime(memory_dir, mode="ask", chat_model=model))
    return out["plan"], out


@pytest.mark.parametrize(
    "reply",
    [
        json.dumps(PLAN),
        f"```json\n{json.dumps(PLAN, indent=2)}\n```",
        f"Here is the plan:\n{json.dumps(PLAN)}\nHope this helps.",
        json.dumps({**PLAN, "memory_type": "Raw Text", "K_dyn": "4",
                    "intent_vector": {"b_fine": True, "b_abs": "0", "b_event": 1, "b_atomic": False}}),
    ],
)
def test_model_plans_are_read(memory_dir: Path, reply: str) -> None:
    plan, out = model_plan(memory_dir, reply)
    assert plan.policy == "model:FakeListChatModel"
    assert plan.query == PLAN["rewrite_query"] and plan.route == "raw" and plan.k_dyn == 4
    assert plan.intent == [1, 0, 1, 0] and plan.participants == ["Caroline"]
    assert "D1:3" in reached(out["evidence"])
    assert out["trace"][-1].policy == "model:FakeListChatModel"


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("", "empty reply"),
        ("I think you should search the raw turns.", "no JSON object"),
        (json.dumps({"memory_type": "raw", "K_dyn": 3}), "rewrite_query"),
        (json.dumps({**PLAN, "intent_vector": {"b_fine": 7, "b_abs": 0, "b_event": 0, "b_atomic": 0}}), "b_fine"),
        (json.dumps({**PLAN, "K_dyn": "many"}), "K_dyn"),
        (json.dumps({**PLAN, "memory_type": "graph"}), "memory_type"),
    ],
)
def test_unusable_model_plans_fall_back_to_the_offline_plan(memory_dir: Path, reply: str, problem: str) -> None:
    plan, out = model_plan(memory_dir, reply, "When did she go to the LGBTQ support group?")  # she: the model is asked
    assert plan.policy.startswith("offline (model output unusable: ") and problem in plan.policy
    assert plan.route == "raw" and plan.query.endswith(" go to the LGBTQ support group?")  # the offline rewrite
    assert "D1:3" in reached(out["evidence"])


def test_model_route_outside_the_allowed_granularities_is_redirected(memory_dir: Path) -> None:
    model = FakeListChatModel(responses=[json.dumps({**PLAN, "memory_type": "episode"})])
    out = research(State(question="Why?"), runtime(memory_dir, mode="ask", chat_model=model, granularities="raw,fact"))
    assert out["plan"].route == "fact" and "episode" not in out["plan"].searched


def test_only_chosen_candidates_become_evidence_and_the_context_is_the_same(memory_dir: Path) -> None:
    """Ranking works on light candidates (line and score per token) and builds evidence only for what
    the budget keeps; the context must equal building every ranked unit first and choosing from those."""
    store = open_store(StoreSettings(data_dir=str(memory_dir)), NAMESPACE)
    question = "What did Melanie paint, and what did Caroline research?"
    plan = offline_plan(question, store.participants(), [], None, ["raw", "fact", "episode"])
    searcher = Searcher(store, plan, strip_names(plan.query, store.participants()), set())
    people = tuple(store.participants())
    units = searcher.units(["raw", "fact", "episode"], POOL)
    ranked = candidates(units, people)
    assert len(ranked) > 20
    every = [c.evidence() for c in ranked]  # the old way: each unit built as evidence, then chosen
    assert [(e.id, e.score, e.line) for e in every] == [(c.id, c.score, c.line) for c in ranked]
    assert all(c.day() == e.day() and item_tokens(c) == item_tokens(e) for c, e in zip(ranked, every, strict=True))
    chosen = select(ranked, 400)
    assert 3 <= len(chosen) < len(ranked)
    assert [c.evidence() for c in chosen] == select(every, 400)
