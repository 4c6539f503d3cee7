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

A file holds the records' words, so one saved before an erase (or a drop) holds what was erased. The process
that erases deletes its own folder's files, but replicas of one deployment each keep a folder of their own
(`data_dir`) beside a shared ledger: the erase leaves in the ledger the sequence at which it removed the
records and bumps a ledger-wide counter, and each replica deletes its files saved before that sequence at
its next read of any namespace (the counter comes with the sequence it reads anyway), its next open, or as
it would save one (`outdated`, `sweep`). A replica that never runs again keeps its files as they were.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError
from strata.memory.private_files import make_private_folder
from strata.memory.records import Kind, Record

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
    """Delete the files of an erased or dropped namespace (a dropped one's would be ignored anyway), and what
    a save killed midway left of them."""
    for collection in collections:
        path = snapshot_path(folder, collection)
        for stale in (path, *_killed_saves(path)):
            stale.unlink(missing_ok=True)


def _killed_saves(path: Path) -> list[Path]:
    """The temporary files a save of `path` killed midway left (a collection's name is letters, digits and
    `-`: nothing a pattern would read)."""
    try:
        return list(path.parent.glob(f"{path.name}*.tmp"))
    except OSError:
        return []


Marks = tuple[int, int, bool]
"""What a namespace's saved mirror is checked against: (the sequence of its last drop, the sequence at which
an erase last removed its records, whether an erase of it is under way) (`Ledger.outdating`)."""

_HEADER = re.compile(rb'\{"format":(\d+),"namespace":("(?:[^"\\]|\\.)*"),"kind":"\w+","seq":(\d+),')
_HEADER_BYTES = 1_024  # a namespace is at most 128 characters
_SWEPT: dict[str, int] = {}  # folder -> the ledger's count of erases and drops it was last swept at
_SWEEP_LOCK = threading.Lock()


def outdated(seq: int, marks: Marks) -> bool:
    """Whether a mirror as of change sequence `seq` may hold what was dropped or erased since (or is being
    erased now): such a mirror is neither saved nor kept on disk."""
    reset, erased, erasing = marks
    return erasing or reset > seq or erased > seq


def header(path: Path) -> tuple[int, str, int] | None:
    """(format, namespace, sequence) of a saved file, read from its first bytes (`save` writes them first),
    or None when they are not a mirror's."""
    try:
        with path.open("rb") as file:
            found = _HEADER.match(file.read(_HEADER_BYTES))
        return None if found is None else (int(found[1]), orjson.loads(found[2]), int(found[3]))
    except (OSError, orjson.JSONDecodeError):
        return None


def discard_outdated(path: Path, marks: Marks) -> bool:
    """Delete one saved file (or what a save killed midway left of it) if it was saved before what `marks`
    say; True when one went. A file saved since (another process of a shared folder) stays."""
    gone = False
    for held in (path, *_killed_saves(path)):
        seen = header(held)
        if seen is not None and outdated(seen[2], marks):
            held.unlink(missing_ok=True)
            gone = True
    return gone


def sweep(folder: Path, count: int, marks_of: Callable[[str], Marks]) -> set[Path]:
    """Delete the files in `folder`'s mirrors saved before an erase or a drop of their namespace, or of an
    older layout (never read again), once per value of the ledger's count of erases and drops (`count`:
    another replica erased); the paths deleted. The first call in a process sweeps whatever the count."""
    key = str(folder)
    with _SWEEP_LOCK:
        if _SWEPT.get(key) == count:
            return set()
        _SWEPT[key] = count
    try:
        return _swept(folder, marks_of)
    except BaseException:  # the ledger stopped answering, say: the next read sweeps again
        with _SWEEP_LOCK:
            if _SWEPT.get(key) == count:
                del _SWEPT[key]
        raise


def _swept(folder: Path, marks_of: Callable[[str], Marks]) -> set[Path]:
    marks: dict[str, Marks] = {}
    gone: set[Path] = set()
    try:
        held = [*(folder / "mirrors").glob("*.json"), *(folder / "mirrors").glob("*.json*.tmp")]
    except OSError:
        return gone
    for path in held:
        seen = header(path)
        if seen is None:
            continue
        layout, namespace, seq = seen
        if layout == FORMAT and namespace not in marks:
            marks[namespace] = marks_of(namespace)
        if layout < FORMAT or (layout == FORMAT and outdated(seq, marks[namespace])):
            try:
                path.unlink(missing_ok=True)
            except OSError:
                continue
            gone.add(path)
    return gone
