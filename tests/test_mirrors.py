"""A namespace's in-memory mirror at scale: saved and reloaded with only what changed since,
kept in chronological order with its lookups, and searched densely without a status filter."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import strata.memory.snapshots as snapshots
import strata.memory.store as store_module
from strata.memory.ledger import open_ledger
from strata.memory.records import Record, Status, chronological_key
from strata.memory.settings import StoreSettings
from strata.memory.store import MemoryStore

START = datetime(2023, 5, 1, 9, 0)  # stored times are naive UTC
TEXTS = ["Ann keeps bees on the roof.", "Bob repairs old violins.", "Ann sold her red bike.",
         "Bob sails to the island on Sundays.", "Ann paints the lake at dawn."]


def _turns(namespace: str) -> list[Record]:
    return [
        Record(id=f"raw:D1:{n}", kind="raw", text=text, namespace=namespace, dialogue_id=f"D1:{n}", session="1",
               speaker=text.split()[0], time=START + timedelta(minutes=n), source_ids=[f"D1:{n}"])
        for n, text in enumerate(TEXTS, start=1)
    ]


def _fact(namespace: str, n: int, text: str) -> Record:
    return Record(id=f"fact:D1:{n}:0", kind="fact", text=text, namespace=namespace, dialogue_id=f"D1:{n}",
                  source_ids=[f"D1:{n}"], time=START + timedelta(minutes=n))


def _store(settings: StoreSettings, namespace: str) -> MemoryStore:
    """A store with its own ledger connection and mirror, as another process would open it."""
    return MemoryStore(settings, namespace, open_ledger(settings.ledger_path, settings.ledger_url))


def _saved(data_dir: Path, monkeypatch: pytest.MonkeyPatch, records: list[Record]) -> MemoryStore:
    """A store of `records` whose mirrors were saved as it closed (any size is saved here)."""
    monkeypatch.setattr(snapshots, "MIN_RECORDS", 1)
    first = _store(StoreSettings(data_dir=str(data_dir)), "ann")
    first.add(records)
    first.close()
    return first


def test_a_saved_mirror_reopens_without_a_full_read_and_sees_what_changed_since(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = StoreSettings(data_dir=str(data_dir))
    _saved(data_dir, monkeypatch, [*_turns("ann"), _fact("ann", 3, "Ann sold a bike.")])
    assert (data_dir / "mirrors").is_dir() and len(list((data_dir / "mirrors").glob("*.json"))) == 2
    writer = _store(settings, "ann")  # changes made after the save, by a store that never saves
    writer.update("raw:D1:2", "Bob repairs old cellos.", reason="test")
    writer.delete("raw:D1:4", reason="test")
    writer.add([Record(id="raw:D1:6", kind="raw", text="Cid plays the zither.", namespace="ann",
                       dialogue_id="D1:6", session="1", speaker="Cid", time=START + timedelta(minutes=6))])
    writer.purge()

    def no_full_read(collection: Any) -> Any:
        raise AssertionError("the saved mirror should have been used")

    monkeypatch.setattr(store_module, "read_collection", no_full_read)
    reader = _store(settings, "ann")
    assert [r.id for r in reader.timeline()] == ["raw:D1:1", "raw:D1:2", "raw:D1:3", "raw:D1:5", "raw:D1:6"]
    assert reader.get_one("raw:D1:2").text == "Bob repairs old cellos."
    assert [rid for rid, _ in reader.lexical("raw", "cellos", 5)] == ["raw:D1:2"]
    assert reader.lexical("raw", "violins", 5) == []
    assert [rid for rid, _ in reader.lexical("raw", "zither", 5)] == ["raw:D1:6"]
    assert [r.id for r in reader.facts_from(["D1:3"])] == ["fact:D1:3:0"]


def test_a_stale_or_broken_saved_mirror_is_ignored(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = StoreSettings(data_dir=str(data_dir))
    first = _saved(data_dir, monkeypatch, _turns("ann"))
    saved = next((data_dir / "mirrors").glob("*raw.json"))
    kept = saved.read_bytes()
    first.drop()  # a dropped namespace written again: the old file must not come back
    assert not saved.exists()
    first.add(_turns("ann")[:2])
    saved.write_bytes(kept)
    assert [r.id for r in _store(settings, "ann").all("raw")] == ["raw:D1:1", "raw:D1:2"]
    saved.write_bytes(b"{not json")
    assert len(_store(settings, "ann").all("raw")) == 2


def test_the_timeline_and_its_lookups_follow_every_change(data_dir: Path, embedder: Any) -> None:
    store = _store(StoreSettings(data_dir=str(data_dir)), "ann")
    turns = _turns("ann")
    store.add(list(reversed(turns)))
    store.add([_fact("ann", 1, "Ann keeps bees."), _fact("ann", 3, "Ann sold a bike.")])
    assert store.timeline() == sorted(turns, key=chronological_key)
    assert store.participants() == ["Ann", "Bob"]
    assert store.latest_time() == START + timedelta(minutes=5)
    assert {k: r.id for k, r in store.adjacent(["raw:D1:1", "raw:D1:5"], 1).items()} == {"raw:D1:1": "raw:D1:2"}
    store.delete("raw:D1:2", reason="test")
    store.delete("raw:D1:5", reason="test")
    assert store.adjacent(["raw:D1:1"], 1)["raw:D1:1"].id == "raw:D1:3"
    assert store.latest_time() == START + timedelta(minutes=4)
    store.delete("fact:D1:3:0", reason="test")
    assert [r.id for r in store.facts_from(["D1:1", "D1:3"])] == ["fact:D1:1:0"]
    store.undo()
    assert [r.id for r in store.facts_from(["D1:3"])] == ["fact:D1:3:0"]
    early = Record(id="raw:D0:1", kind="raw", text="Cid says hello first.", namespace="ann", dialogue_id="D0:1",
                   speaker="Cid", time=START)
    store.add([early])
    assert store.participants() == ["Cid", "Ann", "Bob"]
    active = [r for r in store.all("raw", include_inactive=True) if r.status == Status.ACTIVE]
    assert store.timeline() == sorted(active, key=chronological_key)


def test_dense_search_leaves_out_inactive_records_with_or_without_a_filter(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "EXACT_LIMIT", 0)  # Chroma's index, not the in-memory one
    store = _store(StoreSettings(data_dir=str(data_dir)), "ann")
    store.add(_turns("ann"))
    vector = embedder.embed(["Ann sold her red bike."])[0]
    assert store.dense("raw", vector, 1)[0][0] == "raw:D1:3"
    store.delete("raw:D1:3", reason="test")
    unfiltered = store.dense("raw", vector, 4)
    monkeypatch.setattr(store_module, "UNFILTERED_SLACK", 0)  # Chroma's status filter instead
    assert [rid for rid, _ in store.dense("raw", vector, 4)] == [rid for rid, _ in unfiltered]
    assert "raw:D1:3" not in {rid for rid, _ in unfiltered} and len(unfiltered) == 4
    assert store.dense("raw", vector, 5, include_inactive=True)[0][0] == "raw:D1:3"


def test_a_time_windowed_dense_search_names_the_window_s_records_to_chroma(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "EXACT_LIMIT", 0)  # Chroma's index, not the in-memory one
    store = _store(StoreSettings(data_dir=str(data_dir)), "ann")
    store.add(_turns("ann"))
    store.delete("raw:D1:3", reason="test")
    vector = embedder.embed(["Ann sold her red bike."])[0]
    window = (START + timedelta(minutes=2), START + timedelta(minutes=4))
    by_ids = store.dense("raw", vector, 5, window)
    monkeypatch.setattr(store_module, "WINDOW_IDS", 0)  # Chroma's metadata filter instead
    assert by_ids == store.dense("raw", vector, 5, window)
    assert sorted(rid for rid, _ in by_ids) == ["raw:D1:2", "raw:D1:4"]


def test_the_superseded_records_are_kept_apart_through_a_save_another_writer_and_an_undo(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Questions about a past time read the superseded facts from their own lookup (not a scan of every
    record): it must follow every way a record's status changes."""
    settings = StoreSettings(data_dir=str(data_dir))
    facts = [_fact("ann", 1, "Ann lives in Boston."), _fact("ann", 2, "Ann lives in Denver."),
             _fact("ann", 3, "Ann lives in Austin.")]
    _saved(data_dir, monkeypatch, [*_turns("ann"), *facts])
    reader = _store(settings, "ann")
    assert reader.superseded("fact") == []
    writer = _store(settings, "ann")  # another process supersedes after the mirror was saved
    writer.supersede("fact:D1:1:0", "fact:D1:2:0", reason="moved")
    later = writer.supersede("fact:D1:2:0", "fact:D1:3:0", reason="moved again")
    assert sorted(r.id for r in reader.superseded("fact")) == ["fact:D1:1:0", "fact:D1:2:0"]
    writer.undo(later.id)
    assert [r.id for r in reader.superseded("fact")] == ["fact:D1:1:0"]
    writer.delete("fact:D1:1:0", reason="forgotten")  # tombstoned: no longer found for a past time either
    assert reader.superseded("fact") == []
    assert _store(settings, "ann").superseded("fact") == []  # a fresh open agrees
