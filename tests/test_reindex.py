"""Rebuilding an embedded folder's vector indexes (memory/reindex.py), on real LoCoMo turns and real Chroma.

A rebuild keeps every record, vector, document, metadata and index setting; a swap
stopped halfway is finished or undone by the next opener, losing nothing; a dropped
namespace leaves no index folder (Chroma keeps a deleted collection's, vectors and all).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import files_holding_vector, index_folders, offline_environment
from strata.memory.chroma import collection_name, get_collection, grown_large, open_client
from strata.memory.erasure import compact_chroma
from strata.memory.records import KINDS
from strata.memory.registry import close_all
from strata.memory.reindex import REBUILT_SUFFIX, rebuild_folder

from strata import Memory
from strata.conversations import load_turns

TURNS = 40


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory, locomo_dir: Path, embedder: Any) -> Path:
    """The TURNS turns ingested once for the whole file, the folder closed: each test rebuilds its own copy."""
    folder = tmp_path_factory.mktemp("reindex") / "mem"
    with offline_environment():
        Memory("conv-26", data_dir=str(folder)).add(
            [t for s in load_turns(locomo_dir / "conv-26.json").sessions for t in s.turns][:TURNS])
        close_all()
    return folder


@pytest.fixture
def memory(ingested: Path, data_dir: Path) -> Memory:
    shutil.copytree(ingested, data_dir)
    return Memory("conv-26", data_dir=str(data_dir))


def _contents(memory: Memory) -> dict[str, Any]:
    """Each collection's records as Chroma holds them, and its index settings."""
    client = open_client(memory.context("ask").store_settings())
    held = {}
    for kind in ("raw", "fact"):
        collection = get_collection(client, "conv-26", kind, True)
        got = collection.get(include=["embeddings", "documents", "metadatas"])
        rows = sorted(zip(got["ids"], got["documents"], got["metadatas"], got["embeddings"], strict=True),
                      key=lambda row: row[0])
        held[kind] = ([(i, d, m) for i, d, m, _ in rows], np.asarray([e for *_, e in rows]),
                      collection.configuration_json["hnsw"], collection.metadata)
    return held


def _folders(data_dir: Path) -> set[str]:
    return {p.name for p in (data_dir / "chroma").iterdir() if p.is_dir()}


def test_a_rebuild_keeps_every_record_and_drops_the_old_index_folders(memory: Memory, data_dir: Path) -> None:
    before = _contents(memory)
    asked = memory.retrieve("What did Caroline research?").evidence_ids()
    close_all()
    old = _folders(data_dir)

    copied = rebuild_folder(data_dir / "chroma")

    assert copied[collection_name("conv-26", "raw")] == TURNS
    assert not old & _folders(data_dir)  # every index was written anew, and the old folders are gone
    reopened = Memory("conv-26", data_dir=str(data_dir))
    after = _contents(reopened)
    for kind, (rows, vectors, hnsw, metadata) in before.items():
        assert after[kind][0] == rows and after[kind][2] == hnsw and after[kind][3] == metadata
        assert np.allclose(after[kind][1], vectors, atol=1e-6)
    assert reopened.retrieve("What did Caroline research?").evidence_ids() == asked


def test_an_erased_vector_still_in_chromas_log_is_rebuilt_away(memory: Memory, data_dir: Path) -> None:
    """A large collection saves its index every 1,000 writes: a delete waits in Chroma's log and the index
    file, written before the erase, still holds the vector."""
    raw = get_collection(open_client(memory.context("ask").store_settings()), "conv-26", "raw", True)
    vector = np.asarray(raw.get(ids=["raw:D1:3"], include=["embeddings"])["embeddings"][0], dtype=np.float32)
    grown_large(raw)  # as past EXACT_LIMIT records
    memory.erase(["raw:D1:3"])
    close_all()
    assert files_holding_vector(data_dir, vector)  # the index file was not written since
    assert compact_chroma(data_dir / "chroma")
    assert files_holding_vector(data_dir, vector) == []


def test_a_namespace_dropped_after_a_stopped_rebuild_stays_dropped(memory: Memory, data_dir: Path) -> None:
    close_all()
    client = open_client(memory.context("ask").store_settings())
    name = collection_name("conv-26", "raw")
    source = client.get_collection(name)
    got = source.get(include=["embeddings", "documents", "metadatas"])
    copy = client.create_collection(name + REBUILT_SUFFIX, metadata=source.metadata, embedding_function=None)
    copy.add(ids=got["ids"], embeddings=got["embeddings"], documents=got["documents"], metadatas=got["metadatas"])
    close_all()  # a rebuild stopped before it deleted the original, and nothing opened the folder since

    Memory("conv-26", data_dir=str(data_dir)).drop()

    again = Memory("conv-26", data_dir=str(data_dir))
    assert again.store.all("raw") == [] and not again.retrieve("What did Caroline research?").evidence


@pytest.mark.parametrize("stopped", ["before the delete", "after the delete"])
def test_a_swap_stopped_halfway_loses_nothing(memory: Memory, data_dir: Path, stopped: str) -> None:
    ids = sorted(r.id for r in memory.store.all("raw"))
    close_all()
    client = open_client(memory.context("ask").store_settings())
    name = collection_name("conv-26", "raw")
    source = client.get_collection(name)
    copy = client.create_collection(name + REBUILT_SUFFIX, metadata=source.metadata, embedding_function=None)
    got = source.get(include=["embeddings", "documents", "metadatas"], limit=TURNS // 2)  # a copy cut short ...
    copy.add(ids=got["ids"], embeddings=got["embeddings"], documents=got["documents"], metadatas=got["metadatas"])
    if stopped == "after the delete":  # ... or finished, and the original already deleted
        rest = source.get(include=["embeddings", "documents", "metadatas"], offset=TURNS // 2)
        copy.add(ids=rest["ids"], embeddings=rest["embeddings"], documents=rest["documents"],
                 metadatas=rest["metadatas"])
        client.delete_collection(name)
    close_all()

    reopened = Memory("conv-26", data_dir=str(data_dir))

    assert sorted(r.id for r in reopened.store.all("raw")) == ids
    names = {c.name for c in open_client(reopened.context("ask").store_settings()).list_collections()}
    assert name in names and name + REBUILT_SUFFIX not in names
    assert reopened.retrieve("When did Caroline go to the LGBTQ support group?").evidence


def test_a_dropped_namespace_leaves_no_index_folder(memory: Memory, data_dir: Path) -> None:
    other = Memory("other", data_dir=str(data_dir))
    other.add([{"speaker": "Ann", "text": "I play the cello on Sundays.", "dia_id": "D1:1"}])
    raw = get_collection(open_client(memory.context("ask").store_settings()), "conv-26", "raw", True)
    vector = np.asarray(raw.get(limit=1, include=["embeddings"])["embeddings"][0], dtype=np.float32)
    folders = index_folders(data_dir)
    dropped = {folders[name] for name in (collection_name("conv-26", kind) for kind in KINDS) if name in folders}
    assert dropped and any(path.split("/")[1] in dropped for path in files_holding_vector(data_dir, vector))
    kept = _folders(data_dir)

    memory.drop()

    # its index folders went with its collections, vectors and all, and only theirs. (Another index may
    # hold freed bytes of its vectors, chroma-core/chroma#7688: a rebuild takes those, as after an erase.)
    assert _folders(data_dir) == kept - dropped and set(index_folders(data_dir).values()) == kept - dropped
    texts = [r.text for r in Memory("other", data_dir=str(data_dir)).store.all("raw")]
    assert texts == ["I play the cello on Sundays."]


# The rebuild killed with SIGKILL at the n-th call of a Chroma step (each collection is copied, its original
# deleted, the copy renamed): deterministic kill points, no sleeps.
KILLING = """
import os, signal, sys
from pathlib import Path
from chromadb.api.client import Client
from chromadb.api.models.Collection import Collection
from strata.memory.reindex import rebuild_folder

step, nth = sys.argv[2], int(sys.argv[3])
calls = 0


def killing(original, name):
    def call(*args, **kwargs):
        global calls
        if name == step:
            calls += 1
            if calls == nth:
                os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)
    return call


Collection.add = killing(Collection.add, "add")
Client.delete_collection = killing(Client.delete_collection, "delete")
Collection.modify = killing(Collection.modify, "rename")
rebuild_folder(Path(sys.argv[1]))
"""
KILL_POINTS = [("add", 1), ("add", 2), ("delete", 1), ("rename", 1), ("delete", 2), ("rename", 2)]


def test_a_rebuild_killed_at_any_step_loses_nothing(
    memory: Memory, data_dir: Path, offline_env: dict[str, str]
) -> None:
    held = {kind: sorted((r.id, r.text) for r in memory.store.all(kind)) for kind in ("raw", "fact")}
    asked = memory.retrieve("What did Caroline research?").evidence_ids()
    close_all()
    for step, nth in KILL_POINTS:
        killed = subprocess.run([sys.executable, "-c", KILLING, str(data_dir / "chroma"), step, str(nth)],
                                env=offline_env, capture_output=True, text=True, timeout=300)
        assert killed.returncode == -signal.SIGKILL, (step, nth, killed.stderr[-1000:])
        reopened = Memory("conv-26", data_dir=str(data_dir))  # its opener finishes or undoes the swap
        assert {kind: sorted((r.id, r.text) for r in reopened.store.all(kind)) for kind in held} == held, (step, nth)
        assert reopened.retrieve("What did Caroline research?").evidence_ids() == asked
        names = {c.name for c in open_client(reopened.context("ask").store_settings()).list_collections()}
        assert not [n for n in names if n.endswith(REBUILT_SUFFIX) and n.startswith("strata-conv-26")]
        close_all()
    assert rebuild_folder(data_dir / "chroma")  # and a whole run after them all
    assert sorted((r.id, r.text) for r in Memory("conv-26", data_dir=str(data_dir)).store.all("raw")) == held["raw"]

