"""Turn cost: how ingest's per-turn time and a question's time grow with the namespace.

One namespace is grown through the whole ingest graph (`Memory.add`, offline), and at each size (1,000,
2,000, 4,000 and 8,000 stored turns by default) the last `--window` turns before it are timed, then
`--questions` questions are asked retrieval-only (`Memory.retrieve`) and their p50 taken. Two kinds of turns:
- `tiny`: "ok N" turns, which all share a word: the worst case for the keyword index (every turn holds
  the query's word) and for near-equal vectors;
- `locomo`: the LoCoMo conversations' turns replayed in order, round after round, dated sessions kept
  (dialogue ids renumbered per copy); the questions are LoCoMo's own.
Real embeddings, offline. Prints one line per size and writes the figures as JSON with --out.

    .venv/bin/python benchmarks/turn_cost.py --turns tiny
    .venv/bin/python benchmarks/turn_cost.py --turns locomo --sizes 1000,2000,4000 --window 100
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from common import locomo_files

from strata.api import Memory
from strata.conversations import load_questions, load_turns


def tiny_turns(total: int) -> tuple[list[dict[str, Any]], list[str]]:
    turns = [{"speaker": "Ann" if i % 2 else "Bob", "text": f"ok {i}"} for i in range(total)]
    return turns, [f"ok {i}?" for i in range(0, total, max(1, total // 50))]


def locomo_turns(total: int) -> tuple[list[dict[str, Any]], list[str]]:
    """LoCoMo's turns in order, replayed round after round, each copy's ids renumbered (D1:3 -> D101:3 for the first)
    and times shifted past the previous round's."""
    files = locomo_files("turn_cost")
    source = [list(load_turns(path).turns()) for path in files]
    questions = [q.question for path in files for q in load_questions(path)]
    times = [t.time for conversation in source for t in conversation if t.time]
    span = max(times) - min(times) + timedelta(days=30)
    turns: list[dict[str, Any]] = []
    round_no = 0
    while len(turns) < total:
        for number, conversation in enumerate(source, start=round_no * len(source) + 1):
            for turn in conversation:
                if len(turns) >= total:
                    break
                dia = turn.dia_id.replace("D", f"D{number}0", 1) if turn.dia_id else None  # distinct per copy
                turns.append({"speaker": turn.speaker, "text": turn.text, "listener": turn.listener,
                              "time": turn.time + span * round_no if turn.time else None, "dia_id": dia})
        round_no += 1
    if len({t["dia_id"] for t in turns}) != len(turns):
        raise SystemExit("turn_cost: error: two replayed turns share a dialogue id")
    return turns, questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", choices=("tiny", "locomo"), default="tiny")
    parser.add_argument("--sizes", default="1000,2000,4000,8000", help="stored turns at which to measure")
    parser.add_argument("--window", type=int, default=100, help="turns timed before each size")
    parser.add_argument("--questions", type=int, default=20, help="questions timed at each size")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="a new folder to grow in, kept (default: a temporary one, removed)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures here as JSON")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    turns, questions = (tiny_turns if args.turns == "tiny" else locomo_turns)(sizes[-1])
    if args.data_dir is not None and args.data_dir.exists() and any(args.data_dir.iterdir()):
        raise SystemExit(f"turn_cost: error: {args.data_dir} is not empty: give a new folder (nothing is deleted)")
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="turn_cost-"))
    memory = Memory("turn-cost", data_dir=str(data_dir))
    rows: list[dict[str, Any]] = []
    done = 0
    started = time.perf_counter()
    for size in sizes:
        timed_from = max(done, size - args.window)
        if timed_from > done:
            memory.add(turns[done:timed_from])
        t = time.perf_counter()
        memory.add(turns[timed_from:size])
        turn_ms = (time.perf_counter() - t) * 1000 / (size - timed_from)
        done = size
        asked = []
        for question in questions[: args.questions]:
            t = time.perf_counter()
            memory.retrieve(question)
            asked.append((time.perf_counter() - t) * 1000)
        row = {"stored": size, "turn_ms": round(turn_ms, 1), "question_p50_ms": round(statistics.median(asked), 1),
               "elapsed_s": round(time.perf_counter() - started)}
        rows.append(row)
        print(f"{args.turns}: {size:>6} stored  {row['turn_ms']:7.1f} ms a turn (last {size - timed_from})  "
              f"question p50 {row['question_p50_ms']:7.1f} ms  [{row['elapsed_s']} s]", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"turns": args.turns, "window": args.window, "rows": rows}, indent=1))
    if args.data_dir is None:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
