"""Small kinds are searched exactly in memory (memory/vector_index.py): the same neighbours as Chroma's
index on real LoCoMo turns, kept in step with updates, deletes and other processes' writes, and
handed back to Chroma when a kind grows past the limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import strata.memory.store as store_module
from strata.memory.ledger import open_ledger
from strata.memory.records import Record
from strata.memory.settings import StoreSettings
from strata.memory.store import MemoryStore
from strata.memory.vector_index import ExactIndex

from strata.conversations import load_questions, load_turns


def _store(data_dir: Path, namespace: str = "conv26") -> MemoryStore:
    settings = StoreSettings(data_dir=str(data_dir))
    return MemoryStore(settings, namespace, open_ledger(settings.ledger_path, settings.ledger_url))


def _records(locomo_dir: Path, count: int, namespace: str = "conv26") -> list[Record]:
    turns = list(load_turns(locomo_dir / "conv-26.json").turns())[:count]
    return [
        Record(id=f"raw:{t.dia_id}", kind="raw", text=t.text, namespace=namespace, dialogue_id=t.dia_id or "",
               speaker=t.speaker, time=t.time, source_ids=[t.dia_id or ""])
        for t in turns
    ]


def test_the_exact_search_finds_chromas_neighbours_on_real_turns(
    data_dir: Path, embedder: Any, locomo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(data_dir)
    store.add(_records(locomo_dir, 200))
    store.delete("raw:D1:3", reason="test")
    questions = [q.question for q in load_questions(locomo_dir / "conv-26.json")[:20]]
    vectors = embedder.embed(questions)
    exact = [store.dense("raw", v, 10) for v in vectors]
    assert store._exact["raw"] is not None and len(store._exact["raw"]) == 200
    monkeypatch.setattr(store_module, "EXACT_LIMIT", 0)
    by_chroma = _store(data_dir)  # a store of the same folder that asks Chroma
    chroma = [by_chroma.dense("raw", v, 10) for v in vectors]
    assert by_chroma._exact["raw"] is None
    for mine, theirs in zip(exact, chroma, strict=True):
        assert [rid for rid, _ in mine] == [rid for rid, _ in theirs]
        assert np.allclose([s for _, s in mine], [s for _, s in theirs], atol=1e-4)
        assert "raw:D1:3" not in {rid for rid, _ in mine}


def test_a_time_window_and_inactive_records_filter_as_chroma_does(
    data_dir: Path, embedder: Any, locomo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records(locomo_dir, 120)
    store = _store(data_dir)
    store.add(records)
    store.delete(records[5].id, reason="test")
    dated = sorted({r.time for r in records if r.time is not None})
    window = (dated[1], dated[-1])  # the sessions after the first
    vector = embedder.embed(["What did Caroline do at the support group?"])[0]
    exact = (store.dense("raw", vector, 8, window), store.dense("raw", vector, 8, include_inactive=True))
    monkeypatch.setattr(store_module, "EXACT_LIMIT", 0)
    chroma_store = _store(data_dir)
    chroma = (chroma_store.dense("raw", vector, 8, window), chroma_store.dense("raw", vector, 8, include_inactive=True))
    for mine, theirs in zip(exact, chroma, strict=True):
        assert [rid for rid, _ in mine] == [rid for rid, _ in theirs]
    assert all(window[0] <= store.get_one(rid).time <= window[1] for rid, _ in exact[0])


def test_updates_deletes_and_another_processs_writes_are_searched_at_once(
    data_dir: Path, embedder: Any, locomo_dir: Path
) -> None:
    reader = _store(data_dir)
    writer = _store(data_dir)  # another store with its own mirror, as another process would have
    writer.add(_records(locomo_dir, 60))
    pottery = embedder.embed(["I signed up for a pottery class with my cousin."])[0]
    before = reader.dense("raw", pottery, 1)[0][0]
    writer.update("raw:D1:10", "I signed up for a pottery class with my cousin.", reason="test")
    assert reader.dense("raw", pottery, 1)[0][0] == "raw:D1:10" != before
    writer.delete("raw:D1:10", reason="test")
    assert reader.dense("raw", pottery, 1)[0][0] != "raw:D1:10"
    assert writer.purge() == 1  # the deleted turn leaves Chroma, and the reader's index with it
    assert len(reader.dense("raw", pottery, 100)) == len(reader.active("raw")) == 59
    assert "raw:D1:10" not in reader._exact["raw"]._rows


def test_a_kind_grown_past_the_limit_is_searched_by_chroma(
    data_dir: Path, embedder: Any, locomo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "EXACT_LIMIT", 30)
    records = _records(locomo_dir, 50)
    store = _store(data_dir)
    store.add(records[:20])
    vector = embedder.embed([records[40].text])[0]
    assert store.dense("raw", vector, 1)[0][0] != records[40].id
    assert store._exact["raw"] is not None
    store.add(records[20:])
    assert store._exact["raw"] is None
    assert store.dense("raw", vector, 1)[0][0] == records[40].id


def test_the_index_reuses_removed_rows_and_never_ranks_them() -> None:
    index = ExactIndex()
    eye = np.eye(4, dtype=np.float32)
    index.put(["a", "b", "c"], eye[:3])
    index.remove("b")
    assert [rid for rid, _ in index.nearest(eye[1], 3, lambda rid: True)] == ["a", "c"]
    index.put(["d"], eye[3:4])
    assert len(index) == 3 and index.nearest(eye[3], 1, lambda rid: True) == [("d", 1.0)]
    assert index.nearest(eye[0], 2, lambda rid: rid != "a")[0][0] in {"c", "d"}


def test_equal_scores_rank_by_id_whatever_order_the_memory_was_loaded_in(locomo_dir: Path) -> None:
    """A memory reopened from disk loads its records in another order than the live one added them; records
    as similar as each other (the same text) must still rank the same, or a restart changes the answers
    (it did: 4 of conv-26's first 60 questions, through BM25 ties)."""
    from strata.memory.bm25 import BM25Index

    turns = [(r.id, r.text) for r in _records(locomo_dir, 30)]
    twins = [("raw:D9:10", "Thanks, Caroline!"), ("raw:D9:2", "Thanks, Caroline!"), ("raw:D10:1", "Thanks, Caroline!")]
    rankings = []
    for docs in (turns + twins, list(reversed(twins)) + list(reversed(turns))):
        lexical = BM25Index()
        exact = ExactIndex()
        for doc_id, text in docs:
            lexical.add(doc_id, text)
        exact.put([d for d, _ in docs], np.asarray([[1.0, 0.0] if t == "Thanks, Caroline!" else [0.0, 1.0]
                                                   for _, t in docs], dtype=np.float32))
        rankings.append(([d for d, _ in lexical.search("thanks caroline", 4)],
                         [d for d, _ in exact.nearest(np.asarray([1.0, 0.0]), 2, lambda rid: True)]))
    assert rankings[0] == rankings[1]
    assert rankings[0][1] == ["raw:D9:2", "raw:D9:10"]  # numbers compared as numbers


def test_bm25_orders_by_id_only_the_scores_that_can_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by audit profiling ingest as a namespace grows: each search worked out the natural order of the id
    of every document holding a query word (3M calls in 500 turns at 6,000 stored). The index keeps each id's
    order once worked out. The ranking is that of the full sort, ties included."""
    import random

    import strata.memory.bm25 as bm25

    rng = random.Random(7)
    lexical = bm25.BM25Index()
    docs = {f"raw:D{rng.randint(1, 30)}:{i}": " ".join(rng.choice(["porto", "cat", "ok", "sofia", "hike"])
                                                       for _ in range(rng.randint(1, 6))) for i in range(2000)}
    for doc_id, text in docs.items():
        lexical.add(doc_id, text)
    calls: list[str] = []
    natural = bm25.natural_order
    monkeypatch.setattr(bm25, "natural_order", lambda doc_id: calls.append(doc_id) or natural(doc_id))
    for query, k in (("porto sofia", 10), ("ok", 5), ("hike cat porto", 50), ("porto", 3000)):
        found = lexical.search(query, k)
        words = set(query.split())
        scored = lexical.search(query, len(docs))  # every match: the full sort
        assert found == scored[:k] and len(found) == min(k, sum(1 for t in docs.values() if words & set(t.split())))
        assert found == sorted(found, key=lambda hit: (-hit[1], natural(hit[0])))
        calls.clear()
        assert lexical.search(query, k) == found
        assert not calls  # an id's natural order is worked out once, not on every search


def _reference_nearest(index: ExactIndex, vector: np.ndarray, k: int, allowed: Any) -> list[tuple[str, float]]:
    """What `nearest` answered before its product ran on one BLAS thread: every row's score, best first,
    equal scores by id."""
    from strata.memory.records import natural_order

    scores = index._matrix[: len(index._ids)] @ np.asarray(vector, dtype=np.float32)
    found = [(rid, float(scores[row])) for row, rid in enumerate(index._ids) if rid is not None and allowed(rid)]
    return sorted(found, key=lambda hit: (-hit[1], natural_order(hit[0])))[:k]


def test_the_search_runs_on_one_blas_thread_and_ranks_as_before() -> None:
    """Found timing ingest as a namespace grows: past 1,000 turns the product over the vectors, 50
    microseconds of work, took 10 to 25 ms, because OpenBLAS split it over both cores while the embedder's
    threads held them. On one thread every row's score has the same bits whatever the cores (a split moves
    rows within the kernel's blocks: on 2 threads, most sizes past 1,200 rows changed some last bits); the
    ranked ids are those of the full sort, equal scores (repeated vectors) by id."""
    from threadpoolctl import ThreadpoolController

    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((1500, 384)).astype(np.float32)
    vectors[1000:1100] = vectors[:100]  # repeated texts: equal scores, ranked by id
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = ExactIndex()
    index.put([f"raw:D{i % 7}:{i}" for i in range(1500)], vectors)
    for rid in ("raw:D0:7", "raw:D3:1000"):
        index.remove(rid)
    queries = np.concatenate([vectors[rng.integers(0, 1500, 40)], rng.standard_normal((40, 384)).astype(np.float32)])
    one = ThreadpoolController().select(user_api="blas")
    with one.limit(limits=2):  # as on a machine of two cores or more
        for query in queries:
            for k, allowed in ((10, lambda rid: True), (60, lambda rid: not rid.startswith("raw:D2"))):
                found = index.nearest(query, k, allowed)
                with one.limit(limits=1):
                    expected = _reference_nearest(index, query, k, allowed)
                assert found == expected
