"""What keeping a mirror fresh costs a reader, on SQLite + embedded Chroma and on PostgreSQL + a Chroma server.

A writer and a reader each open the same namespace with their own ledger
connection and their own in-memory mirror, as two replicas would. With N raw
records stored (LoCoMo turns replayed under distinct ids), it prints:
- cold load: the reader's first read of the collection (a full Chroma read and a
  BM25 build), which is what every question would pay if freshness meant reloading;
- check: one read by id when nothing changed (compare the change sequence, one number);
- after an update: the reader's next read by id once the writer updated one record
  (fetch that record, update the mirror and the BM25 index in place);
- lexical: one BM25 search over the mirror.

    .venv/bin/python benchmarks/freshness.py [--records 3000] [--postgres]

`--postgres` starts a throwaway PostgreSQL and `chroma run` (tests/servers.py) and
runs the same on them.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import locomo_files, machine, median_ms, servers, timed
from strata.memory.embeddings import get_embedder
from strata.memory.ledger import open_ledger
from strata.memory.records import Record, raw_record
from strata.memory.settings import StoreSettings
from strata.memory.store import MemoryStore

from strata.conversations import load_turns

NAMESPACE = "freshness"


def replayed_turns(count: int) -> list[Record]:
    """`count` raw records: the LoCoMo turns, replayed under new ids until there are enough."""
    turns = [turn for file in locomo_files("freshness") for turn in load_turns(file).turns()]
    records = []
    for n in range(count):
        turn = turns[n % len(turns)]
        round_ = n // len(turns)
        records.append(raw_record(turn.model_copy(update={"dia_id": f"D{round_}{n}:{n}"}), NAMESPACE))
    return records


def measure(settings: StoreSettings, records: list[Record]) -> dict[str, str]:
    embedder = get_embedder(settings.embedder)
    vectors = embedder.embed([r.text for r in records])
    writer = MemoryStore(settings, NAMESPACE, open_ledger(settings.ledger_path, settings.ledger_url))
    reader = MemoryStore(settings, NAMESPACE, open_ledger(settings.ledger_path, settings.ledger_url))
    for start in range(0, len(records), 1000):
        writer.add(records[start:start + 1000], vectors[start:start + 1000])
    cold = timed(lambda: reader.all("raw"), 1)
    probe = records[0].id
    check = timed(lambda: reader.get([probe]), 500)
    targets = [r.id for r in records[:: max(1, len(records) // 30)]]
    after: list[float] = []
    for record_id in targets:
        writer.update(record_id, f"an updated turn about zeppelins number {record_id}", reason="benchmark")
        after += timed(lambda rid=record_id: reader.get([rid]), 1)
    assert reader.lexical("raw", "zeppelins", 100), "the reader did not see the updates"
    lexical = timed(lambda: reader.lexical("raw", "what did Caroline paint at the lake", 20), 100)
    return {
        "records": str(len(records)),
        "cold load (full read + BM25 build)": f"{cold[0] * 1000:.1f} ms",
        "get by id, nothing changed (sequence check)": median_ms(check),
        "get by id after another's update of it": median_ms(after),
        "BM25 search, 20 hits": median_ms(lexical),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=3000, help="raw records in the namespace (default 3000)")
    parser.add_argument("--postgres", action="store_true", help="also on PostgreSQL + a Chroma server")
    args = parser.parse_args()
    records = replayed_turns(args.records)
    with tempfile.TemporaryDirectory(prefix="strata-fresh-") as tmp:
        results = {"SQLite + embedded Chroma": measure(StoreSettings(data_dir=str(Path(tmp) / "embedded")), records)}
        if args.postgres:
            with servers(Path(tmp), "freshness") as settings:
                results["PostgreSQL + Chroma server"] = measure(settings, records)
    print(f"machine: {machine()}")
    for backend, figures in results.items():
        print(f"\n{backend}")
        for name, value in figures.items():
            print(f"  {name:46} {value}")


if __name__ == "__main__":
    main()
