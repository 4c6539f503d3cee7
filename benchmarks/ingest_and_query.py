"""Ingest speed and question latency on one LoCoMo conversation, offline.

In a fresh data folder, with no chat model (the offline policies):
- the embedder's load time, measured on its own since a process pays it once;
- ingest through the full graph, one run per session and every role per turn: turns/s;
- for each gold question: `ask()` and `retrieve()` latency, p50 and p95;
- the records per store afterwards, and the share of gold evidence reached (a sanity
  check that speed was not bought by finding nothing).
Targets: at least 40 turns/s ingested on 2 cores, p50 under 50 ms per question. The
ingest's CPU seconds are printed beside its wall time: on a shared machine the wall
time depends on the other work, which the load average shows.

    .venv/bin/python benchmarks/ingest_and_query.py [--file conv-26.json] [--questions N] [--out result.json]
    .venv/bin/python benchmarks/ingest_and_query.py --profile   # where the time goes, per phase
    .venv/bin/python benchmarks/ingest_and_query.py --snapshot after.json   # what was stored, to compare

`--snapshot` writes every record (all kinds, all fields, inactive ones too), every
link (type and weight) and every history entry (its record, action, fields and
reason) in a stable order, so two builds can be checked to store the same memory
(`benchmarks/compare_snapshots.py before.json after.json`).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from strata.evaluation.metrics import evidence_recall
from strata.memory.embeddings import get_embedder
from strata.memory.records import KINDS
from strata.memory.registry import close_all

from strata.api import Memory
from strata.conversations import load_questions, load_turns
from strata.ingestion import ingest_conversation

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FILE = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "conv-26.json"
TARGET_TURNS_PER_SECOND = 40.0
TARGET_P50_MS = 50.0
T = TypeVar("T")


def percentiles(seconds: list[float]) -> dict[str, float]:
    """p50, p95 and mean in milliseconds."""
    if not seconds:
        return {"p50": 0.0, "p95": 0.0, "mean": 0.0}
    ms = np.asarray(seconds) * 1000.0
    return {"p50": float(np.percentile(ms, 50)), "p95": float(np.percentile(ms, 95)), "mean": float(ms.mean())}


def timed(run: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = run()
    return result, time.perf_counter() - started


def profiled(profile: cProfile.Profile | None, run: Callable[[], T]) -> T:
    if profile is None:
        return run()
    profile.enable()
    try:
        return run()
    finally:
        profile.disable()


def report_profile(name: str, profile: cProfile.Profile, rows: int = 25) -> str:
    """The top functions by own time, and the project's own functions by cumulative time (which node)."""
    out = io.StringIO()
    out.write(f"\n=== {name}: top {rows} by own time ===\n")
    pstats.Stats(profile, stream=out).strip_dirs().sort_stats("tottime").print_stats(rows)
    out.write(f"\n=== {name}: the project's functions by cumulative time ===\n")
    project = rf"{re.escape(str(REPO))}/(agents|memory|graph|strata)/"
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(project, rows)
    return out.getvalue().replace(f"{REPO}/", "")


def snapshot(memory: Memory) -> dict[str, Any]:
    """What the memory holds, in a stable order: records, links, history (ids and times of changes left out)."""
    store = memory.store
    records = {
        kind: sorted((r.model_dump(mode="json") for r in store.all(kind, include_inactive=True)), key=lambda r: r["id"])
        for kind in KINDS
    }
    with store.ledger.reading() as session:
        links = session.execute(
            "SELECT src, dst, type, weight FROM links WHERE namespace = ? ORDER BY type, src, dst", (store.namespace,)
        ).fetchall()
    history = [
        {"record_id": c.record_id, "action": c.action.value, "old_fields": c.old_fields, "new_fields": c.new_fields,
         "old_text": c.old_text, "new_text": c.new_text, "reason": c.reason}
        for c in reversed(store.history(limit=1_000_000))
    ]
    return {
        "records": records,
        "links": [[src, dst, kind, round(float(weight), 4)] for src, dst, kind, weight in links],
        "history": history,
    }


def run(
    file: Path, question_limit: int | None, limit_sessions: int | None, profile: bool,
    snapshot_to: Path | None = None,
) -> dict[str, Any]:
    conversation = load_turns(file)
    questions = load_questions(file)
    if question_limit is not None:
        questions = questions[:question_limit]

    load_before = os.getloadavg()[0]  # other work on the machine skews every figure: record it
    _, load_seconds = timed(lambda: get_embedder().embed(["warm up"]))
    ingest_profile = cProfile.Profile() if profile else None
    query_profile = cProfile.Profile() if profile else None

    with tempfile.TemporaryDirectory(prefix="strata-bench-") as folder:
        memory = Memory("bench", data_dir=folder, model="offline")
        # the Chroma client's start (a process pays it once, like the embedder's load) is measured apart
        _, open_seconds = timed(lambda: memory.store)
        cpu_before = time.process_time()
        summary = profiled(ingest_profile, lambda: ingest_conversation(memory, conversation, limit_sessions))
        ingest_cpu = time.process_time() - cpu_before
        if snapshot_to is not None:
            snapshot_to.parent.mkdir(parents=True, exist_ok=True)
            snapshot_to.write_text(json.dumps(snapshot(memory), indent=1, sort_keys=True) + "\n")
        memory.retrieve("warm up")  # first read mirrors the stores; not a per-question cost
        ask_times: list[float] = []
        retrieve_times: list[float] = []
        reached: list[float] = []
        for question in questions:
            answer, seconds = timed(lambda q=question.question: profiled(query_profile, lambda: memory.ask(q)))
            ask_times.append(seconds)
            _, seconds = timed(lambda q=question.question: profiled(query_profile, lambda: memory.retrieve(q)))
            retrieve_times.append(seconds)
            coverage = evidence_recall(
                question.evidence, [(e.kind, e.dialogue_id, e.source_ids) for e in answer.evidence]
            )
            if coverage is not None:
                reached.append(coverage.recall)
        close_all()

    ask = percentiles(ask_times)
    result: dict[str, Any] = {
        "file": str(file),
        "cpus": os.cpu_count(),
        "load_average_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "sessions": summary.sessions,
        "turns": summary.turns,
        "embedder_load_s": round(load_seconds, 3),
        "store_open_s": round(open_seconds, 3),
        "ingest_s": round(summary.seconds, 3),
        "ingest_cpu_s": round(ingest_cpu, 3),
        "turns_per_s": round(summary.turns_per_second, 2),
        "questions": len(questions),
        "ask_ms": {k: round(v, 1) for k, v in ask.items()},
        "retrieve_ms": {k: round(v, 1) for k, v in percentiles(retrieve_times).items()},
        "evidence_recall": round(float(np.mean(reached)), 3) if reached else None,
        "records": summary.records(),
        "links": summary.links(),
        "history": summary.stats.get("history", 0),
        "targets": {
            "turns_per_s": TARGET_TURNS_PER_SECOND,
            "ask_p50_ms": TARGET_P50_MS,
            "ingest_met": summary.turns_per_second >= TARGET_TURNS_PER_SECOND,
            "ask_p50_met": ask["p50"] < TARGET_P50_MS,
        },
    }
    if ingest_profile is not None and query_profile is not None:
        result["profile"] = report_profile("ingest", ingest_profile) + report_profile("questions", query_profile)
    return result


def table(result: dict[str, Any]) -> str:
    targets = result["targets"]
    mark = {True: "met", False: "MISSED"}
    rows = [
        ("file", Path(result["file"]).name),
        ("machine", f"{result['cpus']} cpus, load average {result['load_average_1min']['before']:.1f} before, "
                    f"{result['load_average_1min']['after']:.1f} after"),
        ("sessions / turns", f"{result['sessions']} / {result['turns']}"),
        ("embedder load", f"{result['embedder_load_s']:.2f} s"),
        ("store open", f"{result['store_open_s']:.2f} s (Chroma client and ledger, once per process)"),
        ("ingest", f"{result['ingest_s']:.2f} s wall, {result['ingest_cpu_s']:.2f} s CPU (all threads)"),
        ("ingest speed", f"{result['turns_per_s']:.1f} turns/s (target >= {targets['turns_per_s']:.0f}: "
                         f"{mark[targets['ingest_met']]})"),
        ("questions", str(result["questions"])),
        ("ask() p50 / p95", f"{result['ask_ms']['p50']:.1f} / {result['ask_ms']['p95']:.1f} ms "
                            f"(target p50 < {targets['ask_p50_ms']:.0f}: {mark[targets['ask_p50_met']]})"),
        ("retrieve() p50 / p95", f"{result['retrieve_ms']['p50']:.1f} / {result['retrieve_ms']['p95']:.1f} ms"),
        ("gold evidence recall", "n/a" if result["evidence_recall"] is None else f"{result['evidence_recall']:.3f}"),
        ("records", ", ".join(f"{k} {v}" for k, v in result["records"].items())),
        ("links / history", f"{result['links']} / {result['history']}"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE, help="a LoCoMo conversation (default conv-26)")
    parser.add_argument("--questions", type=int, metavar="N", help="only the first N questions (default all)")
    parser.add_argument("--limit-sessions", type=int, metavar="N", help="ingest only the first N sessions")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--profile", action="store_true", help="cProfile ingest and questions, print the top functions")
    parser.add_argument("--snapshot", type=Path, help="write what the ingest stored (records, links, history) here")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        print(f"benchmark: error: {args.file} not found: pass --file a LoCoMo conversation", file=sys.stderr)
        return 2
    result = run(args.file, args.questions, args.limit_sessions, args.profile, args.snapshot)
    print(table(result))
    if "profile" in result:
        print(result["profile"])
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({k: v for k, v in result.items() if k != "profile"}, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
