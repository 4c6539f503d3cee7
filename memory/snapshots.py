"""A mirror saved to the local folder, so a namespace opens without reading all of Chroma.

Opening a large namespace read every record back from Chroma and tokenised it for
BM25: about 5 s at 20,000 records, a minute at 100,000 (`benchmarks/scale.py`).
A process therefore saves a collection's mirror (its records and their BM25 index)
once it has read a large one whole, and again when it closes the
namespace. A later process loads the file, then reloads from Chroma only the records
whose change sequence moved past the one the file was saved at (the ledger keeps
each record's last sequence, so nothing changed since is missed).

A file is only a cache: it is ignored when its format, namespace or kind differ, when
the namespace was dropped or its ledger replaced since (its sequence is then behind
the file's), or when it cannot be read; the store then reads Chroma as before and
saves a new one. A folder the process may not write keeps no file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError
from strata.memory.records import Kind, Record
from strata.memory.settings import make_private_folder

FORMAT = 3
"""Bumped whenever what a file holds changes, so files of an older layout are ignored (3: the BM25 index's
tokens of non-ASCII words, which the tokenizer now reads whole, in any script)."""
MIN_RECORDS = 2_000
"""Smaller collections are read from Chroma in well under a second: no file for them."""
_TIMES = ("time", "time_end")


def snapshot_path(folder: Path, collection: str) -> Path:
    return folder / "mirrors" / f"{collection}.json"


def save(path: Path, namespace: str, kind: Kind, seq: int, records: Iterable[Record], index: dict[str, Any]) -> bool:
    """Write the mirror of one collection as of change sequence `seq` (atomically); False when the
    folder cannot be written (a read-only memory folder)."""
    body = {
        "format": FORMAT, "namespace": namespace, "kind": kind, "seq": seq,
        "records": [record.model_dump(mode="json", exclude_defaults=True) for record in records], "index": index,
    }
    try:
        make_private_folder(path.parent)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(orjson.dumps(body))
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True


def load(path: Path, namespace: str, kind: Kind) -> tuple[int, list[Record], dict[str, Any]] | None:
    """(sequence, records, BM25 index state) of a saved mirror, or None when there is no usable file."""
    try:
        body: dict[str, Any] = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(body, dict) or (body.get("format"), body.get("namespace"), body.get("kind")) != (
        FORMAT, namespace, kind,
    ):
        return None
    try:
        records = []
        for data in body["records"]:
            for key in _TIMES:  # the validator takes a datetime at C speed, text in Python
                if isinstance(data.get(key), str):
                    data[key] = datetime.fromisoformat(data[key])
            records.append(Record.model_validate(data))
        index = body["index"]
        if not all(isinstance(index.get(part), dict) for part in ("postings", "lengths", "terms")):
            return None
        return int(body["seq"]), records, index
    except (KeyError, TypeError, ValueError, ValidationError):
        return None


def remove(folder: Path, collections: Iterable[str]) -> None:
    """Delete the files of a dropped namespace (they would be ignored anyway)."""
    for collection in collections:
        snapshot_path(folder, collection).unlink(missing_ok=True)
