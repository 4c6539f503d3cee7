"""Scale: one namespace grown to 100,000 records, and 1,000 small namespaces in one process.

Offline, on embedded Chroma + a SQLite ledger in a data folder under runs/ (git-ignored)
or --data-dir, or (`--backend server`) on a Chroma server + PostgreSQL started for the
run as the tests start them (tests/servers.py). Prints:
- growing: records/s of the bulk load (see below);
- one big namespace, measured in a fresh process: cold open (open the namespace and
  answer a first question, the embedder, the Chroma library and the token counter
  already loaded: a server loads them once for all namespaces), question p50/p95
  through the whole graph (`Memory.ask`), RSS, and ingest turns/s of one new LoCoMo
  session through the whole graph (`Memory.add`) on top of the 100,000 records;
- many namespaces, in a fresh process: each written (one LoCoMo session) and searched
  once, then left idle; RSS growth per idle namespace, with the registry's bound on
  open namespaces (STRATA_MAX_OPEN_STORES, memory/registry.py).
Targets: question p50 < 100 ms and p95 < 300 ms at 100,000 records; cold open < 3 s;
RSS growth per idle namespace < 1 MB.

How the big namespace is grown: the five LoCoMo conversations are replayed, round after
round, into distinct dated sessions (each round shifted past the last; dialogue ids
renumbered), and written in batches of raw turns plus the facts the offline extractor
derives from them, straight through `MemoryStore.add` (not the per-turn graph: 30,000
turns through research and judge would take hours on 2 cores). Vectors of repeated
texts come from the embedder layer's text-keyed cache (`CachedEmbedder`), so only the
first round pays for embedding. The grow process saves the namespace's mirror when it
closes the namespace (memory/snapshots.py), as a server does when it closes an idle one.

    .venv/bin/python benchmarks/scale.py                      # both parts, 100,000 records, 1,000 namespaces
    .venv/bin/python benchmarks/scale.py --backend server     # the same on a Chroma server + PostgreSQL
    .venv/bin/python benchmarks/scale.py --records 20000 --namespaces 200 --questions 30   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

from common import REPO, locomo_files, percentiles, rss_mb, servers
from strata.memory.embeddings import get_embedder
from strata.memory.entities import extract_entities
from strata.memory.facts import extract_facts
from strata.memory.records import Link, LinkType, Record, Turn, raw_record
from strata.memory.registry import close_all, open_count, open_store
from strata.memory.settings import StoreSettings, max_open_stores

from strata.api import Memory
from strata.conversations import load_questions, load_turns

BIG = "scale-big"
WRITE_BATCH = 2_000  # records per upsert while growing: large enough that per-call costs vanish
TARGETS = {"ask_p50_ms": 100.0, "ask_p95_ms": 300.0, "cold_open_s": 3.0, "rss_per_idle_namespace_mb": 1.0}


def conversations() -> list[list[list[Turn]]]:
    """The LoCoMo development conversations as lists of sessions of turns."""
    return [[list(s.turns) for s in load_turns(f).sessions] for f in locomo_files("scale")]


class Derived:
    """A turn's raw record and facts, derived once and replayed with new ids and dates."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        speakers = [p for p in (turn.speaker, turn.listener) if p]
        self.entities = extract_entities(turn.text, speakers)
        self.drafts = extract_facts(turn, turn.time, turn.listener)

    def records(self, namespace: str, dia_id: str, shift: timedelta) -> tuple[list[Record], list[Link]]:
        time = self.turn.time + shift if self.turn.time else None
        turn = self.turn.model_copy(update={"dia_id": dia_id, "session": None, "time": time})
        raw = raw_record(turn, namespace, self.entities)
        facts = [
            Record(
                id=f"fact:{dia_id}:{i}", kind="fact", text=d.text, namespace=namespace, dialogue_id=dia_id,
                session=raw.session, speaker=turn.speaker, time=(d.time + shift) if d.time else time,
                source_ids=[dia_id], subject=d.subject, attribute=d.attribute, value=d.value,
                entities=list(d.entities),
            )
            for i, d in enumerate(self.drafts)
        ]
        links = [Link(namespace=namespace, src=f.id, dst=raw.id, type=LinkType.DERIVED_FROM) for f in facts]
        return [raw, *facts], links


def grow(settings: StoreSettings, target: int) -> dict[str, Any]:
    """Write `target` records into one namespace; returns the growing figures."""
    store = open_store(settings, BIG)
    embedder = get_embedder()
    sessions = [[Derived(t) for t in session] for conv in conversations() for session in conv]
    times = [d.turn.time for s in sessions for d in s if d.turn.time]
    span = max(times) - min(times) + timedelta(days=30)
    written = rounds = session_number = 0
    pending: list[Record] = []
    links: list[Link] = []
    previous: str | None = None
    started = time.perf_counter()

    def write() -> None:
        nonlocal pending, links
        if pending:
            store.add(pending, embedder.embed([r.text for r in pending]))
            store.link(links)
        pending, links = [], []

    while written + len(pending) < target:
        shift = span * rounds
        for session in sessions:
            session_number += 1
            for n, derived in enumerate(session, start=1):
                records, derived_links = derived.records(BIG, f"D{session_number}:{n}", shift)
                records = records[: target - written - len(pending)]
                pending += records
                links += derived_links
                if previous is not None:
                    links.append(Link(namespace=BIG, src=previous, dst=records[0].id, type=LinkType.TEMPORAL))
                previous = records[0].id
                if len(pending) >= WRITE_BATCH:
                    written += len(pending)
                    write()
                    print(f"  grown to {written:,} records ({time.perf_counter() - started:.0f} s)", flush=True)
                if written + len(pending) >= target:
                    break
            if written + len(pending) >= target:
                break
        rounds += 1
    written += len(pending)
    write()
    seconds = time.perf_counter() - started
    close_all()
    return {"records": written, "rounds": rounds, "grow_s": round(seconds, 1),
            "grow_records_per_s": round(written / seconds, 1)}


def measure_big(settings: StoreSettings, question_count: int) -> dict[str, Any]:
    """In a fresh process: cold open, question latency, RSS, ingest speed at scale."""
    get_embedder().embed(["warm up"])  # what a server loads once for all its namespaces: the embedder,
    import chromadb  # noqa: F401  (the Chroma library)
    from strata.evaluation.tokens import count_tokens

    count_tokens("warm up")  # the token counter's encoding
    from strata.memory.lemmas import lemmas

    lemmas("sold")  # and the word-form lexicon (0.7 s to read; the Judge's filter and the entity graph use it)

    rss_start = rss_mb()
    questions = [q.question for f in locomo_files("scale") for q in load_questions(f)]
    step = max(1, len(questions) // question_count)
    questions = questions[::step][:question_count]
    started = time.perf_counter()
    memory = Memory(BIG, model="offline", **_context_of(settings))
    memory.ask(questions[0])
    cold = time.perf_counter() - started
    rss_open = rss_mb()
    times: list[float] = []
    for question in questions[1:]:
        began = time.perf_counter()
        memory.ask(question)
        times.append(time.perf_counter() - began)
    session = conversations()[0][0]
    last = max(int(r.dialogue_id.split(":")[0][1:]) for r in memory.store.timeline())  # a --reuse rerun added one
    fresh = [t.model_copy(update={"dia_id": f"D{last + 1}:{n}", "session": None})
             for n, t in enumerate(session, start=1)]
    get_embedder().clear()  # this session pays for its own embeddings, as a new conversation would
    began = time.perf_counter()
    memory.add(fresh, end_session=True)
    ingest = time.perf_counter() - began
    stats = memory.store.stats()
    return {
        "records": sum(stats[k]["active"] for k in ("raw", "fact", "episode", "persona")),
        "cold_open_s": round(cold, 2), "questions": len(times), "ask_ms": percentiles(times),
        "rss_before_open_mb": round(rss_start, 1), "rss_after_open_mb": round(rss_open, 1),
        "rss_end_mb": round(rss_mb(), 1),
        "ingest_turns": len(fresh), "ingest_s": round(ingest, 2), "ingest_turns_per_s": round(len(fresh) / ingest, 1),
    }


def measure_many(settings: StoreSettings, count: int) -> dict[str, Any]:
    """In a fresh process: `count` namespaces, each written and searched once, then idle."""
    embedder = get_embedder()
    sessions = [s for conv in conversations() for s in conv]
    derived = [[Derived(t) for t in s] for s in sessions[:20]]
    embedder.embed([r.text for s in derived for d in s for r in d.records("x", "D1:1", timedelta())[0]])
    marks: dict[int, float] = {0: rss_mb()}
    started = time.perf_counter()
    for i in range(count):
        namespace = f"user-{i:05d}"
        store = open_store(settings, namespace)
        session = derived[i % len(derived)]
        records: list[Record] = []
        for n, d in enumerate(session, start=1):
            records += d.records(namespace, f"D1:{n}", timedelta())[0]
        store.add(records, embedder.embed([r.text for r in records]))
        store.search("fact", session[0].turn.text, 5)
        store.search("raw", session[-1].turn.text, 5)
        if (i + 1) % max(1, count // 10) == 0:
            marks[i + 1] = rss_mb()
            print(f"  {i + 1} namespaces, RSS {marks[i + 1]:.0f} MB, {open_count()} open", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - started
    # growth once the open namespaces (and their vector indexes in Chroma's cache) are at their bound:
    # what one more idle namespace costs; before that, each new namespace is also an open one
    steady = [k for k in marks if k >= 2 * max_open_stores()]
    first = min(steady[:-1] or [k for k in marks if k > 0])
    growth = (marks[count] - marks[first]) / max(1, count - first)
    return {
        "namespaces": count, "max_open": open_count(), "seconds": round(seconds, 1),
        "rss_mb": {str(k): round(v, 1) for k, v in marks.items()},
        "rss_per_idle_namespace_mb": round(growth, 3), "measured_from": first,
    }


def _context_of(settings: StoreSettings) -> dict[str, Any]:
    """The graph's context settings for these store settings."""
    return settings.model_dump(exclude_none=True, exclude={"embedder", "chroma_auth_header", "chroma_ssl"})


def child(part: str, settings: StoreSettings, extra: list[str]) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter (cold caches), return its JSON."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run(
        [sys.executable, __file__, "--child", part, "--settings", settings.model_dump_json(), *extra],
        env=env, cwd=REPO, check=True, stdout=subprocess.PIPE, text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def table(result: dict[str, Any]) -> str:
    mark = {True: "met", False: "MISSED"}
    rows = [("backend", result["backend"]),
            ("machine", f"{os.cpu_count()} cpus, load average {result['load_before']:.1f} before, "
                        f"{result['load_after']:.1f} after")]
    if "grow" in result:
        grow_ = result["grow"]
        rows.append(("grow (bulk load)", f"{grow_['records']:,} records in {grow_['grow_s']} s, "
                                         f"{grow_['grow_records_per_s']:,} records/s"))
    if "big" in result:
        big = result["big"]
        rows += [
            ("records in namespace", f"{big['records']:,}"),
            ("cold open", f"{big['cold_open_s']:.2f} s (target < {TARGETS['cold_open_s']:.0f} s: "
                          f"{mark[big['cold_open_s'] < TARGETS['cold_open_s']]})"),
            ("ask() p50 / p95", f"{big['ask_ms']['p50']} / {big['ask_ms']['p95']} ms over {big['questions']} "
                                f"questions (targets < 100 / < 300: "
                                f"{mark[big['ask_ms']['p50'] < TARGETS['ask_p50_ms']]} / "
                                f"{mark[big['ask_ms']['p95'] < TARGETS['ask_p95_ms']]})"),
            ("RSS", f"{big['rss_before_open_mb']} MB before open, {big['rss_after_open_mb']} MB after the first "
                    f"question, {big['rss_end_mb']} MB at the end"),
            ("ingest at scale", f"{big['ingest_turns']} turns in {big['ingest_s']} s, "
                                f"{big['ingest_turns_per_s']} turns/s"),
        ]
    if "many" in result:
        many = result["many"]
        per = many["rss_per_idle_namespace_mb"]
        rows += [
            ("namespaces", f"{many['namespaces']:,} in {many['seconds']} s, {many['max_open']} left open "
                           f"(bound STRATA_MAX_OPEN_STORES)"),
            ("RSS by namespaces", ", ".join(f"{k}: {v:.0f}" for k, v in many["rss_mb"].items()) + " MB"),
            ("RSS per idle namespace",
             f"{per:.3f} MB from {many['measured_from']} namespaces on "
             f"(target < 1 MB: {mark[per < TARGETS['rss_per_idle_namespace_mb']]})"),
        ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="records in the big namespace")
    parser.add_argument("--namespaces", type=int, default=1_000, help="small namespaces in one process")
    parser.add_argument("--questions", type=int, default=100, help="questions asked of the big namespace")
    parser.add_argument("--part", choices=["all", "big", "many"], default="all")
    parser.add_argument("--backend", choices=["embedded", "server"], default="embedded",
                        help="embedded Chroma + SQLite, or a Chroma server + PostgreSQL started for the run")
    parser.add_argument("--data-dir", type=Path, default=REPO / "runs" / "scale", help="where the memory is written")
    parser.add_argument("--reuse", action="store_true", help="measure a big namespace grown by an earlier run")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--child", choices=["big", "many"], help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        settings = StoreSettings.model_validate_json(args.settings)
        if args.child == "big":
            print(json.dumps(measure_big(settings, args.questions)))
        else:
            print(json.dumps(measure_many(settings, args.namespaces)))
        return 0
    if min(args.records, args.namespaces, args.questions) < 2:
        print("scale: error: --records, --namespaces and --questions must be at least 2", file=sys.stderr)
        return 2
    if args.reuse and args.backend == "server":
        print("scale: error: --reuse needs --backend embedded (the servers are started for one run)", file=sys.stderr)
        return 2
    result: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    with ExitStack() as stack:
        if args.backend == "server":
            folder = args.data_dir / "server"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            print(f"starting PostgreSQL and a Chroma server in {folder} ...", flush=True)
            big = stack.enter_context(servers(folder / "big", "scale_big"))
            many = stack.enter_context(servers(folder / "many", "scale_many"))
            result["backend"] = "Chroma server + PostgreSQL (both on this machine)"
        else:
            big = StoreSettings(data_dir=str(args.data_dir / "big"))
            many = StoreSettings(data_dir=str(args.data_dir / "many"))
            result["backend"] = "embedded Chroma + SQLite"
        if args.part in ("all", "big"):
            if not args.reuse:
                shutil.rmtree(big.data_dir, ignore_errors=True)
                print(f"growing one namespace to {args.records:,} records ...", flush=True)
                result["grow"] = grow(big, args.records)
            print("measuring it in a fresh process ...", flush=True)
            result["big"] = child("big", big, ["--questions", str(args.questions)])
        if args.part in ("all", "many"):
            shutil.rmtree(many.data_dir, ignore_errors=True)
            print(f"writing {args.namespaces:,} namespaces in a fresh process ...", flush=True)
            result["many"] = child("many", many, ["--namespaces", str(args.namespaces)])
    result["load_after"] = os.getloadavg()[0]
    print(table(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
