"""What moving a memory costs: export and import of whole LoCoMo conversations, offline.

For each conversation the script ingests it into a fresh embedded folder and
consolidates it, then times `Memory.export()` and the JSON it is written as, and
`import_from` of that file into an empty namespace of a second folder (each record
embedded again: the embedder's cache is emptied first, so nothing is reused). It
prints the document's size and counts, and checks the moved memory: the same
evidence ids for the conversation's first questions, in both folders.

    .venv/bin/python benchmarks/export_import.py                      # conv-26
    .venv/bin/python benchmarks/export_import.py --files ../shared/data/locomo/conv-43.json --questions 100
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from common import locomo_files
from strata.memory.embeddings import get_embedder

from strata.api import Memory
from strata.conversations import load_turns
from strata.ingestion import ingest_conversation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=Path, nargs="*", help="LoCoMo conversations (default: conv-26)")
    parser.add_argument("--questions", type=int, default=60, help="questions whose evidence is compared")
    args = parser.parse_args()
    files = args.files or [f for f in locomo_files("export_import.py") if f.name == "conv-26.json"]
    for file in files:
        with tempfile.TemporaryDirectory(prefix="strata-move-") as folder:
            source = Memory("source", data_dir=f"{folder}/a")
            ingest_conversation(source, load_turns(file))
            source.consolidate()
            start = time.perf_counter()
            document = source.export()
            exported = time.perf_counter() - start
            start = time.perf_counter()
            text = document.model_dump_json()
            path = Path(folder) / "memory.json"
            path.write_text(text, encoding="utf-8")
            written = time.perf_counter() - start
            get_embedder().clear()  # the import embeds every record again, as in a new process
            target = Memory("moved", data_dir=f"{folder}/b")
            start = time.perf_counter()
            report = target.import_from(path)
            imported = time.perf_counter() - start
            questions = [q["question"] for q in json.loads(file.read_text())["qa"]][: args.questions]
            same = sum(source.retrieve(q).evidence_ids() == target.retrieve(q).evidence_ids() for q in questions)
            print(f"{file.name}: {len(document.records)} records, {len(document.links)} links, "
                  f"{len(document.history)} history entries; {len(text) / 1e6:.1f} MB")
            print(f"  export {exported:.2f} s + JSON written {written:.2f} s; import {imported:.2f} s "
                  f"({report.records / imported:.0f} records/s, embedding included)")
            print(f"  the same evidence for {same} of {len(questions)} questions")


if __name__ == "__main__":
    main()
