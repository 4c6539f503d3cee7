"""What the memory graph's write side adds, per conversation: links by type, slow-path cost, and reach.

Each LoCoMo conversation is written offline as the Memory role writes it, minus
the per-turn research and judge (quick): raw turns, offline facts, and the
graph's fast path per turn (entity mentions and links, notes, semantic links,
evolution); then the slow path (`consolidate`: causal links, denser entity
links, summaries), timed. The folder is kept, so a second run only measures.

Then every question of categories 1-4 goes through the research node once
(retrieve mode, first round, as today: it does not walk these links), and for
the gold turns its context misses (strict: the raw turn or a fact citing it),
the script counts how many each mechanism puts one step away:
- entity / semantic / causal: a link of that type from a context item (a fact
  counts through its turn) to the missed turn;
- summaries: one of the two summary records nearest the question (hybrid
  search over the summary collection) cites the missed turn.
Beside each, the number of records that step adds per question (its cost): a
traversal that reads them all pays that many records. This measures what the
links make reachable, not what a traversal policy picks; the read side's
harness measures recall with traversal.

Tuning, leave-conversations-out: the semantic-link threshold is chosen on three
conversations (the least similarity whose links keep the records added per
question under `--max-added`, maximising the missed gold reached) and reported
on the other two, for five rotations. Offline semantic links are written at
the lowest threshold and their weight is the similarity, so a higher threshold
is the same links filtered by weight.

    .venv/bin/python benchmarks/graph_write.py [--files conv-26 conv-30 ...] [--data-dir .bench/graph]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from langgraph.runtime import Runtime
from strata.agents.research import research
from strata.evaluation.metrics import ContextItem, evidence_recall
from strata.graph.context import Context
from strata.graph.state import State
from strata.memory.entities import extract_entities
from strata.memory.facts import extract_facts
from strata.memory.graph import fast_path
from strata.memory.graph.consolidation import consolidate
from strata.memory.graph.notes import MIN_SIMILARITY
from strata.memory.records import LinkType, Record, raw_record
from strata.memory.registry import open_store
from strata.memory.settings import StoreSettings
from strata.memory.store import MemoryStore

from strata.conversations import LoadedConversation, load_questions, load_turns

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"
THRESHOLDS = (MIN_SIMILARITY, 0.40, 0.45, 0.50, 0.55, 0.60)
MECHANISMS = ("entity", "semantic", "causal", "summaries")


def write(conversation: LoadedConversation, store: MemoryStore) -> float:
    """Raw turns, offline facts and the fast path, session by session; returns seconds."""
    started = time.perf_counter()
    for session in conversation.sessions:
        raws = [raw_record(t, store.namespace, extract_entities(t.text)) for t in session.turns]
        store.add(raws)
        for turn, raw in zip(session.turns, raws, strict=True):
            dia = turn.dia_id or ""
            facts = [
                Record(id=f"fact:{dia}:{i}", kind="fact", text=d.text, namespace=store.namespace, dialogue_id=dia,
                       session=turn.session_label(), speaker=turn.speaker, time=d.time or turn.time, source_ids=[dia],
                       subject=d.subject, attribute=d.attribute, value=d.value, entities=list(d.entities))
                for i, d in enumerate(extract_facts(turn, turn.time, turn.listener))
            ]
            plan = fast_path.plan_offline(store, raw, turn.listener or "")
            graph = fast_path.write_turn(store, raw, facts, plan.mentions, plan.note, plan.decisions,
                                         plan.evolutions, "offline")
            store.stage([*facts, *graph.records], graph.links, graph.state)
            store.flush()
    return time.perf_counter() - started


def reach(store: MemoryStore, data_dir: str, path: Path) -> dict[str, object]:
    """Strict recall of research's first round, and what each mechanism puts one step from its context."""
    runtime = Runtime(context=Context(mode="retrieve", data_dir=data_dir, namespace=store.namespace))
    questions = [q for q in load_questions(path) if q.category in (1, 2, 3, 4)]
    recall: list[float] = []
    missed_total = 0
    reached: dict[str, int] = defaultdict(int)
    added: dict[str, int] = defaultdict(int)
    semantic_at: dict[float, list[int]] = {t: [0, 0] for t in THRESHOLDS}  # threshold -> [reached, added]
    for question in questions:
        evidence = research(State(question=question.question), runtime)["evidence"]
        items = [ContextItem(e.kind, e.dialogue_id, tuple(e.source_ids)) for e in evidence]
        coverage = evidence_recall(question.evidence, items)
        if coverage is None:
            continue
        recall.append(coverage.recall)
        covered = {f"raw:{d}" for e in evidence if e.kind in ("raw", "fact") for d in e.source_ids}
        missed = {f"raw:{d}" for d in question.evidence} - covered
        missed_total += len(missed)
        anchors = sorted(covered)
        for mechanism, kind in (("entity", LinkType.ENTITY), ("semantic", LinkType.SEMANTIC),
                                ("causal", LinkType.CAUSAL)):
            links = store.ledger.neighbours(store.namespace, anchors, [kind])
            near: dict[str, float] = {}
            for link in links:
                for end in (link.src, link.dst):
                    if end not in covered:
                        near[end] = max(near.get(end, 0.0), link.weight)
            reached[mechanism] += len(missed & set(near))
            added[mechanism] += len(near)
            if mechanism == "semantic":
                for threshold in THRESHOLDS:
                    kept = {n for n, w in near.items() if w >= threshold}
                    semantic_at[threshold][0] += len(missed & kept)
                    semantic_at[threshold][1] += len(kept)
        cited: set[str] = set()
        for hit in store.search("summary", question.question, 2):
            cited |= {f"raw:{d}" for d in hit.record.source_ids}
        reached["summaries"] += len(missed & cited)
        added["summaries"] += len(cited - covered)
    n = max(len(recall), 1)
    return {
        "questions": len(recall), "recall": sum(recall) / n, "missed": missed_total,
        "reached": dict(reached), "added_per_question": {k: v / n for k, v in added.items()},
        "semantic_at": {t: (r, a / n) for t, (r, a) in semantic_at.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", nargs="+", default=["conv-26", "conv-30", "conv-41", "conv-42", "conv-43"])
    parser.add_argument("--data-dir", default=".bench/graph", help="memory folder, one namespace per conversation")
    parser.add_argument("--max-added", type=float, default=30.0,
                        help="records a semantic step may add per question when tuning its threshold")
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    for name in args.files:
        path = Path(name) if Path(name).is_file() else LOCOMO / f"{Path(name).stem}.json"
        conversation = load_turns(path)
        store = open_store(StoreSettings(data_dir=args.data_dir), conversation.conversation_id)
        if store.count("raw") == 0:
            seconds = write(conversation, store)
            fast = store.ledger.count_links(store.namespace)
            report = consolidate(store)
            print(f"{path.stem}: {conversation.turn_count()} turns written in {seconds:.0f} s; links after the "
                  f"fast path {dict(sorted(fast.items()))}")
            print(f"{path.stem}: slow path {report.seconds:.1f} s for {report.turns} turns "
                  f"({report.per_thousand_turns():.0f} s per 1,000 turns): causal {report.causal}, "
                  f"summaries {report.summaries}")
        slow = dict(sorted(store.ledger.count_links(store.namespace).items()))
        print(f"{path.stem}: links after the slow path {slow}; summaries {store.count('summary')}")
        result = reach(store, args.data_dir, path)
        results[path.stem] = result
        reached = result["reached"]
        added = result["added_per_question"]
        assert isinstance(reached, dict) and isinstance(added, dict)
        print(f"{path.stem}: {result['questions']} questions, strict recall (research, round 1) "
              f"{result['recall']:.3f}, gold turns missed {result['missed']}")
        for mechanism in MECHANISMS:
            print(f"    {mechanism:<10} reaches {reached.get(mechanism, 0):4d} of the missed, "
                  f"adding {added.get(mechanism, 0.0):6.1f} records per question")
    if len(results) >= 5:
        rotate(results, args.max_added)


def rotate(results: dict[str, dict[str, object]], max_added: float) -> None:
    """Tune the semantic threshold on three conversations, report it on the other two; five rotations."""
    names = sorted(results)
    print("leave-conversations-out (semantic threshold): tune on 3, report on 2")
    for start in range(len(names)):
        tune = [names[(start + i) % len(names)] for i in range(3)]
        test = [n for n in names if n not in tune]
        best = _best(results, tune, max_added)
        print(f"    tune {','.join(tune)} -> {best:.2f}; tuned: {_score(results, tune, best)}; "
              f"held out {','.join(test)}: {_score(results, test, best)}")


def _totals(results: dict[str, dict[str, object]], names: Sequence[str], threshold: float) -> tuple[int, int, float]:
    reached = missed = 0
    added: list[float] = []
    for name in names:
        at = results[name]["semantic_at"]
        assert isinstance(at, dict)
        got, per_question = at[threshold]
        reached += got
        missed += int(results[name]["missed"])  # type: ignore[call-overload]
        added.append(per_question)
    return reached, missed, sum(added) / len(added)


def _best(results: dict[str, dict[str, object]], names: Sequence[str], max_added: float) -> float:
    allowed = [t for t in THRESHOLDS if _totals(results, names, t)[2] <= max_added] or [max(THRESHOLDS)]
    return max(allowed, key=lambda t: (_totals(results, names, t)[0], -t))


def _score(results: dict[str, dict[str, object]], names: Sequence[str], threshold: float) -> str:
    reached, missed, added = _totals(results, names, threshold)
    return f"reaches {reached}/{missed} missed ({reached / max(missed, 1):.3f}), adds {added:.1f}/question"


if __name__ == "__main__":
    main()
