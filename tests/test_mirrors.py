"""A namespace's in-memory mirror at scale: saved and reloaded with only what changed since,
kept in chronological order with its lookups, and searched densely without a status filter."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import strata.memory.snapshots as snapshots
import strata.memory.store as store_module
from strata.memory.erasure import apply_erasure, plan_erasure
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


def _holding(data_dir: Path, text: str) -> list[str]:
    """The saved mirror files (and what a killed save left) whose bytes hold `text`."""
    return [path.name for path in (data_dir / "mirrors").glob("*") if text.encode() in path.read_bytes()]


def _erase(store: MemoryStore, ids: list[str]) -> None:
    with store.writing():  # as Memory.erase does
        apply_erasure(store, plan_erasure(store, ids))


def test_a_replica_s_saved_mirror_loses_what_another_replica_erased(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by audit: replicas share the ledger and Chroma, but each saves its mirrors in its own folder. After
    an erase on one, another's file kept the erased words until that replica read the namespace and then closed
    it (never, for a replica stopped without closing or one that never read the namespace again); and a replica
    that closed the namespace without reading it since the erase wrote the erased words back to its file."""
    settings = StoreSettings(data_dir=str(data_dir))
    erased = "Ann sold her red bike."
    _saved(data_dir, monkeypatch, _turns("ann"))
    replica = _store(settings, "ann")
    assert len(replica.all("raw")) == 5  # loaded from its saved mirror
    saved_before = {path: path.read_bytes() for path in (data_dir / "mirrors").glob("*.json")}
    replica.add([Record(id="raw:D1:6", kind="raw", text="Cid plays the zither.", namespace="ann",
                        dialogue_id="D1:6", session="1", speaker="Cid", time=START + timedelta(minutes=6))])
    # the replica's process last looked at its folder before the erase
    swept_before = dict(getattr(snapshots, "_SWEPT", {}))

    _erase(_store(settings, "ann"), ["raw:D1:3"])
    assert _holding(data_dir, erased) == []  # the erasing process's own files went
    replica.close()  # not read since the erase: its mirror is not saved again
    assert _holding(data_dir, erased) == []

    monkeypatch.setattr(snapshots, "_SWEPT", swept_before, raising=False)  # another replica's folder, as it was left
    for path, data in saved_before.items():
        path.write_bytes(data)
        path.with_name(path.name + "1234.tmp").write_bytes(data)  # and a save killed midway
    assert _holding(data_dir, erased)
    _store(settings, "bob").all("raw")  # its next read, of any namespace, deletes them
    assert _holding(data_dir, erased) == []

    for path, data in saved_before.items():  # a replica restarted: its first open of the namespace
        path.write_bytes(data)
    monkeypatch.setattr(snapshots, "_SWEPT", {}, raising=False)
    # (the open's own check, without the sweep)
    monkeypatch.setattr(snapshots, "sweep", lambda *args: set(), raising=False)
    reopened = _store(settings, "ann")
    assert [r.id for r in reopened.timeline()] == ["raw:D1:1", "raw:D1:2", "raw:D1:4", "raw:D1:5", "raw:D1:6"]
    assert _holding(data_dir, erased) == [] and _holding(data_dir, "Cid plays the zither.")  # saved anew


def test_a_mirror_saved_after_an_erase_or_of_another_namespace_stays(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = StoreSettings(data_dir=str(data_dir))
    _saved(data_dir, monkeypatch, _turns("ann"))
    bob = _store(settings, "bob")
    bob.add([Record(id="raw:D1:1", kind="raw", text="Bob tunes a harp.", namespace="bob", dialogue_id="D1:1",
                    session="1", speaker="Bob", time=START)])
    bob.all("raw")
    bob.close()
    _erase(_store(settings, "ann"), ["raw:D1:3"])
    later = _store(settings, "ann")
    later.all("raw")
    later.close()  # saved after the erase
    kept = sorted(path.name for path in (data_dir / "mirrors").glob("*.json"))
    assert len(kept) == 2
    monkeypatch.setattr(snapshots, "_SWEPT", {}, raising=False)
    assert [r.id for r in _store(settings, "bob").all("raw")] == ["raw:D1:1"]
    assert sorted(path.name for path in (data_dir / "mirrors").glob("*.json")) == kept
