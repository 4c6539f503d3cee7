"""Evidence recall of the Research role on its own, against plain dense and BM25 top-k over raw turns.

One LoCoMo conversation is ingested offline into a data folder (kept, so a
second run only asks): through the full graph by default (every role per turn,
as `strata ingest` does), or with `--direct` as raw turns plus the offline facts
of `memory.facts` written straight to the store (no links, episodes or persona;
quick). Then every question of categories 1-4 goes through the research node
once (retrieve mode, first round: no Judge, no retry), and the figures are:
- strict evidence recall (a gold turn counts when its raw turn, or a fact that
  cites it, is in the context), per category and overall;
- context tokens per question (cl100k, the labelled lines the roles see);
- the same for dense top-k ("speaker: text" embeddings) and BM25 top-k over raw turns.

    .venv/bin/python benchmarks/research_recall.py [--file conv-26.json] [--data-dir DIR] [--direct]
                                                   [--budget 1800] [--top-k 10]
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from langgraph.runtime import Runtime
from strata.agents.common import format_evidence
from strata.agents.research import research
from strata.evaluation.baselines import TurnIndex
from strata.evaluation.metrics import ContextItem, evidence_recall
from strata.evaluation.systems import RunSettings
from strata.evaluation.tokens import count_tokens
from strata.graph.context import Context
from strata.graph.graph import graph as memory_graph
from strata.graph.state import Evidence, State
from strata.memory.entities import extract_entities
from strata.memory.facts import extract_facts
from strata.memory.records import Record, raw_record
from strata.memory.registry import open_store
from strata.memory.settings import StoreSettings

from strata.conversations import LoadedConversation, load_questions, load_turns

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"


def ingest_direct(conversation: LoadedConversation, data_dir: str, namespace: str) -> None:
    """Raw turns and their offline facts, written as the Memory role writes them (ids, times, sources)."""
    store = open_store(StoreSettings(data_dir=data_dir), namespace)
    records: list[Record] = []
    for turn in conversation.turns():
        dia = turn.dia_id or ""
        records.append(raw_record(turn, namespace, extract_entities(turn.text)))
        for i, draft in enumerate(extract_facts(turn, turn.time, turn.listener)):
            records.append(Record(
                id=f"fact:{dia}:{i}", kind="fact", text=draft.text, namespace=namespace, dialogue_id=dia,
                session=turn.session_label(), speaker=turn.speaker, time=turn.time, source_ids=[dia],
                subject=draft.subject, attribute=draft.attribute, value=draft.value, entities=list(draft.entities),
            ))
    store.add(records)


def ingest_graph(conversation: LoadedConversation, data_dir: str, namespace: str) -> None:
    """Every turn through the full graph, one run per session (the Memory role writes everything)."""
    context = Context(mode="ingest", data_dir=data_dir, namespace=namespace)
    for session in conversation.sessions:
        memory_graph.invoke({"turns": [t.model_dump() for t in session.turns]}, context=context,
                           config={"recursion_limit": 100 * len(session.turns) + 100})


def measure(
    name: str, retrieve: Callable[[str], Sequence[Evidence]], questions: Sequence[tuple[str, list[str], int]]
) -> None:
    by_category: dict[int, list[float]] = defaultdict(list)
    tokens: list[int] = []
    started = time.perf_counter()
    for question, gold, category in questions:
        evidence = retrieve(question)
        coverage = evidence_recall(gold, [ContextItem(e.kind, e.dialogue_id, tuple(e.source_ids)) for e in evidence])
        if coverage is None:
            continue
        by_category[category].append(coverage.recall)
        tokens.append(count_tokens(format_evidence(evidence)))
    scores = [r for values in by_category.values() for r in values]
    per_category = "  ".join(f"cat{c} {sum(v) / len(v):.3f} (n={len(v)})" for c, v in sorted(by_category.items()))
    elapsed = (time.perf_counter() - started) / max(len(scores), 1) * 1000
    print(f"{name:<22} recall {sum(scores) / len(scores):.3f}  tokens/question {sum(tokens) / len(tokens):7.0f}  "
          f"max {max(tokens):5d}  {elapsed:5.0f} ms/question   {per_category}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", default="conv-26.json", help="a LoCoMo conversation (name in shared/data/locomo)")
    parser.add_argument("--data-dir", default="", help="memory folder (default: .bench/<conversation>[-direct])")
    parser.add_argument("--direct", action="store_true", help="write raw turns and offline facts directly")
    parser.add_argument("--budget", type=int, default=1800, help="research token budget")
    parser.add_argument("--top-k", type=int, default=10, help="k of the dense and BM25 baselines")
    args = parser.parse_args()
    path = Path(args.file) if Path(args.file).is_file() else LOCOMO / args.file
    conversation = load_turns(path)
    namespace = conversation.conversation_id
    data_dir = args.data_dir or f".bench/{path.stem}{'-direct' if args.direct else ''}"
    store = open_store(StoreSettings(data_dir=data_dir), namespace)
    if store.count("raw") == 0:
        started = time.perf_counter()
        (ingest_direct if args.direct else ingest_graph)(conversation, data_dir, namespace)
        print(f"ingested {conversation.turn_count()} turns ({'direct' if args.direct else 'graph'}) in "
              f"{time.perf_counter() - started:.0f} s into {data_dir}")
    counts = {kind: store.count(kind) for kind in ("raw", "fact", "episode", "persona")}  # type: ignore[arg-type]
    print(f"{path.name}: {counts}")
    questions = [(q.question, q.evidence, q.category) for q in load_questions(path) if q.category in (1, 2, 3, 4)]
    runtime = Runtime(context=Context(mode="retrieve", data_dir=data_dir, namespace=namespace,
                                      token_budget=args.budget))
    measure("research (round 1)", lambda q: research(State(question=q), runtime)["evidence"], questions)
    index = TurnIndex(RunSettings(data_dir=data_dir, top_k=args.top_k))
    index.ensure(conversation, "baselines")
    measure(f"dense top-{args.top_k}", lambda q: index.dense(q, args.top_k), questions)
    measure(f"bm25 top-{args.top_k}", lambda q: index.lexical(q, args.top_k), questions)


if __name__ == "__main__":
    main()
