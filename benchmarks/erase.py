"""What erasing one person costs: `erase(about=...)` on a whole LoCoMo conversation, offline.

The script ingests a conversation and consolidates it, then erases everything one participant
said and everything about them, as a person asking to be forgotten would have it. It times the
plan (what would go: `Memory.erasure_plan`), the whole erase and, in a data folder, the rebuild of
Chroma's files with the memory closed (`compact_chroma`, as `strata erase` ends), and prints what
went. With
`--servers` the memory lives on a throwaway `chroma run` and PostgreSQL (started as the tests
start them), where each ledger query is a round trip.

    .venv/bin/python benchmarks/erase.py                    # conv-26, embedded
    .venv/bin/python benchmarks/erase.py --servers          # conv-26, Chroma server + PostgreSQL
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from common import locomo_files, servers
from strata.memory.erasure import compact_chroma
from strata.memory.records import KINDS
from strata.memory.registry import close_all

from strata.api import Memory
from strata.conversations import load_turns
from strata.ingestion import ingest_conversation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, help="a LoCoMo conversation (default: conv-26)")
    parser.add_argument("--servers", action="store_true", help="Chroma server and PostgreSQL, not a data folder")
    args = parser.parse_args()
    file = args.file or next(f for f in locomo_files("erase.py") if f.name == "conv-26.json")
    person = json.loads(file.read_text())["speaker_a"]
    with tempfile.TemporaryDirectory(prefix="strata-erase-") as folder, ExitStack() as stack:
        settings: dict[str, Any] = {"data_dir": folder}
        if args.servers:
            store = stack.enter_context(servers(Path(folder), "erase"))
            settings = store.model_dump(exclude_none=True, exclude={"embedder", "chroma_auth_header", "chroma_ssl"})
        memory = Memory("erase", model="offline", **settings)
        ingest_conversation(memory, load_turns(file))
        memory.consolidate()
        stats = memory.stats()
        records = sum(sum(stats[kind].values()) for kind in KINDS)
        start = time.perf_counter()
        plan = memory.erasure_plan(about=person)
        planned = time.perf_counter() - start
        start = time.perf_counter()
        report = memory.erase(about=person)
        erased = time.perf_counter() - start
        where = "Chroma server + PostgreSQL" if args.servers else "embedded"
        print(f"{file.name} ({where}): {records} records, {stats['history']} history rows; "
              f"erasing {person}: {len(plan.targets)} records")
        print(f"  plan {planned:.2f} s; erase {erased:.2f} s in all (it plans again under the namespace's lock)")
        print(f"  {report.summary()}")
        if not args.servers:  # an embedded folder: the CLI's last step, with the memory closed
            close_all()
            start = time.perf_counter()
            compacted = compact_chroma(Path(folder) / "chroma")
            print(f"  Chroma's database and indexes rebuilt ({compacted}) in {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
