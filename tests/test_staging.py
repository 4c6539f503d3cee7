"""Staged writes (memory/staging.py): readable before the flush, written together by it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strata.memory.records import Link, LinkType, Record
from strata.memory.registry import open_store
from strata.memory.settings import StoreSettings


def _fact(n: int, text: str) -> Record:
    return Record(id=f"fact:D1:{n}:0", kind="fact", text=text, namespace="ns", dialogue_id=f"D1:{n}",
                  source_ids=[f"D1:{n}"])


def test_staged_records_are_searchable_and_flush_writes_them_in_one_go(data_dir: Path, embedder: Any) -> None:
    store = open_store(StoreSettings(data_dir=str(data_dir)), "ns")
    store.add([_fact(1, "Ann keeps bees on her roof in Lisbon.")])
    full = store.stage(
        [_fact(2, "Ann's brother Tom repairs violins."), _fact(3, "Ann plans a trip to Norway in June.")],
        [Link(namespace="ns", src="fact:D1:2:0", dst="raw:D1:2", type=LinkType.DERIVED_FROM)],
        {"open_episode": {"turn_ids": ["D1:2"]}},
    )
    assert not full
    # staged: in the mirror, found by dense and BM25 search, linked, but not yet in Chroma or the ledger
    hits = store.search("fact", "who repairs violins", k=2)
    assert hits[0].record.id == "fact:D1:2:0" and hits[0].found_by == ["dense", "bm25"]
    assert store.neighbours(["raw:D1:2"]) == ["fact:D1:2:0"]
    assert store.state("open_episode") == {"turn_ids": ["D1:2"]}
    assert store.count("fact") == 1 and store.ledger.get_state("ns", "open_episode") is None

    assert store.flush() == 2
    assert store.count("fact") == 3
    assert store.ledger.get_state("ns", "open_episode") == {"turn_ids": ["D1:2"]}
    assert [x.src for x in store.ledger.neighbours("ns", ["raw:D1:2"])] == ["fact:D1:2:0"]
    assert store.search("fact", "who repairs violins", k=1)[0].found_by == ["dense", "bm25"]
    assert store.flush() == 0


def test_an_edit_flushes_first_so_it_is_never_overwritten(data_dir: Path, embedder: Any) -> None:
    store = open_store(StoreSettings(data_dir=str(data_dir)), "ns")
    store.stage([_fact(1, "Ann lives in Lisbon.")])
    store.update("fact:D1:1:0", "Ann lives in Porto.", reason="moved")
    assert store.flush() == 0
    assert store.get_one("fact:D1:1:0").text == "Ann lives in Porto."
    assert store.count("fact") == 1


def test_a_note_evolved_inside_a_batch_is_written_with_it(data_dir: Path, embedder: Any) -> None:
    store = open_store(StoreSettings(data_dir=str(data_dir)), "ns")
    note = Record(id="raw:D1:1", kind="raw", text="I keep bees on my roof.", namespace="ns", dialogue_id="D1:1",
                  speaker="Ann", keywords=["bee", "roof"], context="Ann, about bee, roof")
    store.add([note])
    store.stage([_fact(2, "Ann sells honey at the market.")])  # an ingest's batch is open
    change = store.evolve("raw:D1:1", ["bee"], "Ann, about bee, roof", reason="evolved by raw:D1:2")

    def stored_tags() -> str:
        got = store._collection("raw").get(ids=["raw:D1:1"], include=["metadatas"])
        return str(got["metadatas"][0]["tags"])

    # readable at once, its history row written, the Chroma write left to the batch's flush
    assert store.get_one("raw:D1:1").tags == ["bee"]
    assert store.history("raw:D1:1")[0].id == change.id
    assert stored_tags() == "[]"
    assert store.flush() == 2
    assert stored_tags() == '["bee"]'
    store.undo(change.id)  # still one undoable change
    assert store.get_one("raw:D1:1").tags == [] and stored_tags() == "[]"
