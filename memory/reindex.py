"""Rebuild an embedded Chroma folder's vector indexes from what they hold, so an erased record leaves them.

Chroma removes a record from a collection's HNSW index by marking it deleted: its vector stays in the
index file (`data_level0.bin`) until the slot is reused. And the index library writes buffers it never
cleared: capacity past the last element holds whatever the writing process had freed, erased text
included (chroma-core/chroma#7688; seen here in `data_level0.bin` after an erase). So after an erase,
`rebuild_folder` copies every collection into a fresh one (ids, vectors, documents and metadata as
stored: nothing is embedded again) and swaps it in under the collection's name. It runs in a process of
its own (`python -m strata.memory.reindex <folder>`), started after the erasing one has closed the
folder, whose memory never held an erased record: the files it writes hold kept records only.

A copy is built beside its collection (`<name>-rebuilt`), then the collection is deleted and the copy
renamed. Stopped at any point, nothing is lost: `recover`, which every opener of an embedded collection
runs first (`memory/chroma.py: get_collection`), deletes a copy whose collection still exists (it may
be unfinished) and renames a copy whose collection is gone (it was finished: the delete comes last).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

from strata.memory.errors import InputError
from strata.memory.ledger_sql import sqlite_uri
from strata.memory.private_files import keeps_private, make_private_tree

CHROMA_DB = "chroma.sqlite3"
REBUILT_SUFFIX = "-rebuilt"  # no collection of ours ends so: their names end with a kind
PAGE = 1_000  # records read and written at a time


def recover(client: Any, name: str) -> None:
    """Finish or undo an interrupted swap of the collection `name` (see the module's docstring)."""
    copy = name + REBUILT_SUFFIX
    try:
        rebuilt = client.get_collection(copy)
    except Exception:  # Chroma raises its own NotFoundError (a ValueError in older versions): no copy
        return
    try:
        client.get_collection(name)
    except Exception:
        rebuilt.modify(name=name)  # the collection was deleted after its copy was complete
        return
    client.delete_collection(copy)  # the copy may be unfinished; its collection is whole


def rebuild(client: Any, name: str) -> int:
    """Copy the collection `name` into a new one and swap it in; the number of records copied."""
    recover(client, name)
    source = client.get_collection(name)
    hnsw = dict((source.configuration_json or {}).get("hnsw") or {})
    copy = client.create_collection(name + REBUILT_SUFFIX, metadata=source.metadata, embedding_function=None,
                                    configuration={"hnsw": hnsw} if hnsw else None)
    copied = 0
    while True:
        page = source.get(include=["embeddings", "documents", "metadatas"], limit=PAGE, offset=copied)
        if not page["ids"]:
            break
        copy.add(ids=page["ids"], embeddings=page["embeddings"], documents=page["documents"],
                 metadatas=page["metadatas"])
        copied += len(page["ids"])
    if copy.count() != source.count():
        client.delete_collection(copy.name)
        raise RuntimeError(f"the copy of {name} holds {copy.count()} records, not {source.count()}: kept as it was")
    client.delete_collection(name)
    copy.modify(name=name)
    return copied


def open_chroma_db(chroma_path: Path) -> sqlite3.Connection | None:
    """An embedded Chroma folder's database, read-only (None when there is none): what it says of its
    segments and its write-ahead log."""
    database = chroma_path / CHROMA_DB
    if not database.is_file():
        return None
    return sqlite3.connect(sqlite_uri(database, "mode=ro"), uri=True, timeout=30, isolation_level=None)


def remove_orphan_indexes(chroma_path: Path) -> int:
    """Delete the index folders of deleted collections, which Chroma leaves on disk (vectors and all);
    the number deleted. A folder is an index's when named by a segment id; it is kept while the
    database names it. Folders are listed before the database is read: a collection created meanwhile
    has its segment named before its folder is written, so a live folder is never taken for an orphan."""
    if not (chroma_path / CHROMA_DB).is_file():
        return 0
    folders = [p for p in chroma_path.iterdir() if p.is_dir() and _is_segment_id(p.name)]
    conn = open_chroma_db(chroma_path)
    if conn is None:
        return 0
    try:
        with closing(conn):
            live = {row[0] for row in conn.execute("SELECT id FROM segments")}
    except sqlite3.Error:
        return 0  # a database laid out otherwise: nothing is taken for an orphan
    orphans = [p for p in folders if p.name not in live]
    for folder in orphans:
        shutil.rmtree(folder, ignore_errors=True)
    return len(orphans)


def _is_segment_id(name: str) -> bool:
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


def require_chroma(folder: Path) -> None:
    """Refuse, in one line, a folder that holds no Chroma database: Chroma would create an empty one there."""
    if (folder / CHROMA_DB).is_file():
        return
    inside = " (it holds chroma/: name that folder)" if (folder / "chroma" / CHROMA_DB).is_file() else ""
    raise InputError(f"{folder} holds no Chroma database ({CHROMA_DB}){inside}: name an embedded Chroma "
                     "folder, <data_dir>/chroma or a stopped server's --path")


def rebuild_folder(chroma_path: Path) -> dict[str, int]:
    """Rebuild every collection of an embedded Chroma folder (none may be open in another process), then
    delete the folders of the indexes it replaced. Every one, not only the erased namespace's: any process
    that ever held an erased text (the one that ingested it, any that read it) may have written its freed
    bytes into whatever index it wrote next, another namespace's included, and no file says which did."""
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(path=str(chroma_path), settings=Settings(anonymized_telemetry=False))
    before = {p.name for p in chroma_path.iterdir() if p.is_dir()}
    for name in [c.name for c in client.list_collections() if c.name.endswith(REBUILT_SUFFIX)]:
        recover(client, name.removesuffix(REBUILT_SUFFIX))
    copied = {c.name: rebuild(client, c.name) for c in sorted(client.list_collections(), key=lambda c: c.name)}
    remove_orphan_indexes(chroma_path)
    if not keeps_private(chroma_path):  # the copies' folders, made as the umask says (memory/chroma.py)
        for folder in [p for p in chroma_path.iterdir() if p.is_dir() and p.name not in before]:
            make_private_tree(folder)
    return copied


def main(argv: list[str]) -> int:
    """`compact_chroma` runs this while it holds the folder's lock; run by hand, close every process
    that has the folder open first."""
    parser = argparse.ArgumentParser(prog="python -m strata.memory.reindex", description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="an embedded Chroma folder (<data_dir>/chroma)")
    args = parser.parse_args(argv)
    try:
        require_chroma(args.folder)
    except InputError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    copied = rebuild_folder(args.folder)
    print(f"rebuilt {len(copied)} collections, {sum(copied.values())} records")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
