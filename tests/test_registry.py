"""The registry keeps a bounded number of namespaces open and closes the idle ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from strata.memory.errors import ConfigError
from strata.memory.records import Record
from strata.memory.registry import max_open_stores, open_count, open_store
from strata.memory.settings import StoreSettings


def _raw(namespace: str, text: str) -> Record:
    return Record(id="raw:D1:1", kind="raw", text=text, namespace=namespace, dialogue_id="D1:1", source_ids=["D1:1"])


def test_the_least_recently_used_idle_namespace_is_closed_and_reopens_intact(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATA_MAX_OPEN_STORES", "2")
    settings = StoreSettings(data_dir=str(data_dir))
    first = open_store(settings, "ann")
    first.add([_raw("ann", "Ann keeps bees.")])
    busy = open_store(settings, "bob")
    busy.stage([_raw("bob", "Bob repairs violins.")])  # an ingest in progress: never closed
    open_store(settings, "cid").add([_raw("cid", "Cid sails.")])
    assert open_count() == 2
    assert open_store(settings, "bob") is busy and busy.has_staged()
    again = open_store(settings, "ann")
    assert again is not first and [r.text for r in again.all("raw")] == ["Ann keeps bees."]
    busy.flush()
    open_store(settings, "dee")
    assert open_count() == 2  # bob, idle now, and the least recently used, was closed


def test_a_bad_bound_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATA_MAX_OPEN_STORES", "lots")
    with pytest.raises(ConfigError, match="STRATA_MAX_OPEN_STORES='lots': give a whole number"):
        max_open_stores()
    monkeypatch.delenv("STRATA_MAX_OPEN_STORES")
    assert max_open_stores() == 64
