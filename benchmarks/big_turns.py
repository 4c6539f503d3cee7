"""The cost of one big turn: time of one `Memory.add` by the turn's size, offline.

A pasted document arrives as one turn. Its cost must grow linearly with its
size, and a turn above `max_turn_chars` must be refused at once. For each size
the script builds one turn from the turns of the LoCoMo conversations (dates,
"we", "I", names, questions, as real speech has), adds it
to a fresh namespace and prints the seconds, the records derived from it, and
seconds per KB (flat when the cost is linear), wall clock and CPU time of this
process, and the machine's load average (figures from a busy machine are slower).

    .venv/bin/python benchmarks/big_turns.py                     # 2, 16, 32, 64 KB and the limit
    .venv/bin/python benchmarks/big_turns.py --sizes 2,64,1024 --max-turn-chars 1100000   # beyond the limit
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from strata.graph.context import Context
from strata.memory.embeddings import get_embedder
from strata.memory.errors import InputError
from strata.memory.registry import close_all

from strata.api import Memory
from strata.conversations import load_turns

REPO = Path(__file__).resolve().parents[1]
LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"


def big_text(sentences: list[str], size: int) -> str:
    """`size` characters of the conversations' own turns, in order; past the end they come round again
    marked with the round, so no fact repeats (a repeated one would be derived once and cost nothing)."""
    parts: list[str] = []
    length, round_ = 0, 0
    while length < size:
        for sentence in sentences:
            part = sentence if round_ == 0 else f"Round {round_}: {sentence}"
            parts.append(part)
            length += len(part) + 1
            if length >= size:
                break
        round_ += 1
    text = " ".join(parts)[:size]
    return text[: text.rfind(" ")] if " " in text else text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=Path, nargs="*", help="conversations whose turns make the text "
                        "(default: the LoCoMo files, else the shipped sample)")
    parser.add_argument("--sizes", default="", help="KB, comma separated (default: 2,16,32,64 and the limit)")
    parser.add_argument("--max-turn-chars", type=int, default=None, help="raise the limit to time bigger turns")
    args = parser.parse_args()
    limit = args.max_turn_chars or getattr(Context(), "max_turn_chars", 0)
    sizes = [int(s) * 1024 for s in args.sizes.split(",") if s.strip()] or [2048, 16384, 32768, 65536, limit]
    sizes = [s for s in sizes if s]
    sample = REPO / "strata" / "data" / "sample_conversation.json"
    files = args.files or sorted(LOCOMO.glob("conv-*.json")) or [sample]
    conversations = [load_turns(file) for file in files]
    speaker = conversations[0].participants[0]
    # Sentences naming a family or friends circle are left out: without one, the old rule for "we"
    # searched the whole turn to its end once per sentence, the slowest case.
    circle = re.compile(r"\b(?:family|fam|kids?|children|husband|wife|partner|son|daughter|parents?|mom|dad"
                        r"|friends?|gang|buddies|crew|group|team|mates|pals)\b", re.IGNORECASE)
    texts = (t.text for conversation in conversations for t in conversation.turns())
    sentences = list(dict.fromkeys(text for text in texts if not circle.search(text)))
    get_embedder().embed(["warm up"])
    settings = {"max_turn_chars": limit} if args.max_turn_chars else {}
    rows = []
    with tempfile.TemporaryDirectory(prefix="strata-big-turns-") as folder:
        start = time.perf_counter()  # a process pays its imports and Chroma start once: not a turn's cost
        Memory("warm-up", data_dir=folder, model="offline").add([{"speaker": speaker, "text": "Hello there."}])
        print(f"warm-up (imports, Chroma start, one small turn): {time.perf_counter() - start:.2f} s", flush=True)
        for n, size in enumerate(sizes):
            memory = Memory(f"big-{n}", data_dir=folder, model="offline", **settings)
            text = big_text(sentences, size)
            start, cpu = time.perf_counter(), time.process_time()
            try:
                report = memory.add([{"speaker": speaker, "text": text, "time": "2023-05-08T13:56:00Z"}])
                derived = len(report.stored_ids) - 1
                outcome = "stored"
            except InputError as error:
                derived, outcome = 0, f"refused: {error}"
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            rows.append({"chars": len(text), "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3),
                         "derived_records": derived,
                         "seconds_per_kb": round(seconds / (len(text) / 1024), 4), "outcome": outcome[:90]})
            print(f"{len(text) / 1024:8.1f} KB  {seconds:8.2f} s  {cpu:8.2f} s CPU  {derived:5d} derived  "
                  f"{seconds / (len(text) / 1024):7.4f} s/KB  {outcome[:90]}", flush=True)
        close_all()
    load = os.getloadavg()[0]  # other work on the machine slows every figure above
    print(json.dumps({"limit": limit, "load_average": round(load, 2), "rows": rows}))


if __name__ == "__main__":
    main()
