"""Many and large namespaces in one process: the registry keeps a bounded number open and
closes the idle ones; a collection is mirrored page by page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import strata.memory.store as store_module
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
    from strata.memory.locks import lock_wait_seconds

    for endless in ("nan", "inf"):  # nan is never below a bound: a busy folder was waited on for ever
        monkeypatch.setenv("STRATA_LOCK_WAIT", endless)
        with pytest.raises(ConfigError, match=f"STRATA_LOCK_WAIT='{endless}': give a number"):
            lock_wait_seconds()


def test_a_collection_is_mirrored_page_by_page(data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole-collection read binds one SQL variable per record, which SQLite caps near 32,766."""
    monkeypatch.setattr(store_module, "READ_PAGE", 2)
    settings = StoreSettings(data_dir=str(data_dir))
    records = [
        Record(id=f"raw:D1:{n}", kind="raw", text=f"turn number {n}", namespace="ann", dialogue_id=f"D1:{n}")
        for n in range(1, 6)
    ]
    open_store(settings, "ann").add(records)
    open_store(settings, "ann").close()
    assert sorted(r.id for r in open_store(settings, "ann").all("raw")) == sorted(r.id for r in records)


@pytest.mark.parametrize("raw", ["soon", "-1"])
def test_a_bad_lock_wait_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    from strata.memory.locks import lock_wait_seconds

    monkeypatch.setenv("STRATA_LOCK_WAIT", raw)
    with pytest.raises(ConfigError, match=r"STRATA_LOCK_WAIT='.*': give a number of at least 0 seconds"):
        lock_wait_seconds()
    monkeypatch.setenv("STRATA_LOCK_WAIT", "2.5")
    assert lock_wait_seconds() == 2.5
