"""Embedded Chroma's cache of vector indexes is bounded by the namespaces a process keeps open
(memory/chroma.py): namespaces written, evicted, read back and written again keep every record and
answer, an index an earlier version left unwritten to disk is switched to write at every write, and a
collection that grows past the exact-search limit goes back to Chroma's default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import strata.memory.store as store_module
from strata.memory.chroma import DEFAULT_SYNC, get_collection, open_client
from strata.memory.registry import open_count
from strata.memory.settings import StoreSettings

from strata.api import Memory
from strata.conversations import load_turns

QUESTION = "What career is Caroline keen on?"


def _sync(collection: Any) -> int:
    return int(collection.configuration_json["hnsw"]["sync_threshold"])


def test_namespaces_evicted_from_a_small_cache_keep_their_records_and_answers(
    data_dir: Path, embedder: Any, locomo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATA_MAX_OPEN_STORES", "16")  # room for 80 vector indexes: 16 namespaces'
    turns = list(load_turns(locomo_dir / "conv-26.json").turns())[:16]
    client = open_client(StoreSettings(data_dir=str(data_dir)))
    assert client._server.hnsw_cache_size == 80
    names = [f"user-{n}" for n in range(24)]
    for half in (turns[:8], turns[8:]):  # each namespace written, evicted, read back and written again
        for name in names:
            memory = Memory(name, data_dir=str(data_dir))
            memory.add([t.model_copy(update={"text": f"{t.text} ({name})"}) for t in half])
            assert open_count() <= 16
    for name in names:
        memory = Memory(name, data_dir=str(data_dir))
        stats = memory.store.stats()
        assert stats["raw"]["active"] == 16
        answer = memory.ask(QUESTION)
        assert "D1:11" in answer.evidence_ids()
        probe = memory.store.embedder.embed([f"{turns[3].text} ({name})"])[0]
        monkeypatch.setattr(store_module, "EXACT_LIMIT", 0)  # Chroma's own (evicted, read back) index
        memory.store._exact.clear()
        assert memory.store.dense("raw", probe, 1)[0][0] == f"raw:{turns[3].dia_id}"
        monkeypatch.undo()
        monkeypatch.setenv("STRATA_MAX_OPEN_STORES", "16")


def test_a_collection_from_an_earlier_version_writes_its_index_at_every_write(data_dir: Path) -> None:
    client = open_client(StoreSettings(data_dir=str(data_dir)))
    old = client.get_or_create_collection(
        "strata-ann-00000000-raw", embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
    )
    assert _sync(old) == DEFAULT_SYNC
    client.delete_collection(old.name)
    from strata.memory.chroma import collection_name

    client.get_or_create_collection(
        collection_name("ann", "raw"), embedding_function=None, configuration={"hnsw": {"space": "cosine"}},
        metadata={"namespace": "ann", "kind": "raw"},
    )
    assert _sync(get_collection(client, "ann", "raw", embedded=True)) == 1
    assert _sync(get_collection(client, "bob", "raw", embedded=True)) == 1  # created that way


def test_a_collection_grown_past_the_exact_limit_goes_back_to_chromas_default(
    data_dir: Path, embedder: Any, locomo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "EXACT_LIMIT", 10)
    memory = Memory("ann", data_dir=str(data_dir))
    turns = list(load_turns(locomo_dir / "conv-26.json").turns())
    memory.add(turns[:6])
    memory.retrieve(QUESTION)
    assert _sync(memory.store._collection("raw")) == 1
    memory.add(turns[6:18])
    assert _sync(memory.store._collection("raw")) == DEFAULT_SYNC
    assert "D1:11" in memory.ask(QUESTION).evidence_ids()
