"""StrataStore against what LangGraph's own store tests expect of a BaseStore.

The cases follow LangGraph's store test-suite (namespaces with prefix, suffix,
wildcards, max_depth, limit/offset; put/get/delete; filters with operators;
query search with pagination and index=False; sync and async), with real
words instead of character embeddings, plus what this backend adds: LoCoMo
turns found by semantic search, durability across a reopen, undoable deletes, and
use as `compile(store=...)` in a LangGraph app.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
import unicodedata
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pytest
from langgraph.graph import START, StateGraph
from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, ListNamespacesOp, PutOp, SearchOp
from strata.memory import store_items
from strata.memory.errors import InputError, StrataError
from strata.memory.records import Record, Status
from strata.memory.registry import close_all, open_store
from strata.memory.settings import StoreSettings
from strata.memory.store import MemoryStore

from strata import Memory, langgraph_store
from strata.conversations import load_turns
from strata.langgraph_store import StrataStore

COLOURS = [
    ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
    ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
    ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
    ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
]


@pytest.fixture
def store(data_dir: Path, embedder: Any) -> Iterator[StrataStore]:
    opened = StrataStore(data_dir=str(data_dir))
    yield opened
    opened.close()


def put_all(store: StrataStore, namespaces: list[tuple[str, ...]]) -> None:
    for i, ns in enumerate(namespaces):
        store.put(ns, f"id_{i}", {"data": f"value_{i:02d}"})


# namespaces ------------------------------------------------------------------
def test_list_namespaces_prefix_suffix_depth_and_paging(store: StrataStore) -> None:
    namespaces = [
        ("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f"),
        ("b", "a", "f"), ("users", "123"), ("users", "456", "settings"), ("admin", "users", "789"),
    ]
    put_all(store, namespaces)

    assert sorted(store.list_namespaces(prefix=("a", "b"))) == [
        ("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"),
    ]
    assert sorted(store.list_namespaces(suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert sorted(store.list_namespaces(prefix=("a",), suffix=("f",))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(store.list_namespaces(prefix=("a", "b"), max_depth=3)) == [
        ("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f"),
    ]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert sorted(store.list_namespaces(prefix=("a", "*", "f"))) == [("a", "b", "f"), ("a", "c", "f")]
    assert sorted(store.list_namespaces(suffix=("*", "f"))) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    assert sorted(store.list_namespaces(max_depth=1)) == [("a",), ("admin",), ("b",), ("users",)]


def test_list_namespaces_empty_store_and_deleted_items(store: StrataStore) -> None:
    assert store.list_namespaces() == []
    store.put(("only",), "k", {"text": "something"})
    assert store.list_namespaces() == [("only",)]
    store.delete(("only",), "k")
    assert store.list_namespaces() == []  # a namespace with only tombstones is empty


def test_list_namespaces_pagination(store: StrataStore) -> None:
    for i in range(8):
        store.put(("namespace", f"sub_{i:02d}"), f"id_{i:02d}", {"data": f"value_{i:02d}"})
    assert store.list_namespaces(prefix=("namespace",), limit=3, offset=0) == [
        ("namespace", f"sub_{i:02d}") for i in range(3)
    ]
    assert store.list_namespaces(prefix=("namespace",), limit=3, offset=3) == [
        ("namespace", f"sub_{i:02d}") for i in range(3, 6)
    ]
    assert store.list_namespaces(prefix=("namespace",), limit=3, offset=6) == [
        ("namespace", f"sub_{i:02d}") for i in range(6, 8)
    ]


def test_wrong_settings_are_refused_not_replaced_by_the_default_folder(tmp_path: Path) -> None:
    for settings, says in (({"data_dri": str(tmp_path)}, "data_dri: Extra inputs are not permitted"),
                           ({"data_dir": ""}, "data_dir: setting data_dir is empty"),
                           ({"data_dir": "a\x00b"}, "NUL character")):
        with pytest.raises(InputError, match=says):
            StrataStore(**settings)


def test_settings_not_given_come_from_the_environment_as_memorys_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica configured by STRATA_* variables got a private ./.strata ledger and Chroma from
    StrataStore(), so its items were invisible to the other replicas."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STRATA_DATA_DIR", str(tmp_path / "shared"))
    store = StrataStore()
    assert Path(store.settings.data_dir) == (tmp_path / "shared").resolve()
    store.put(("users", "ann"), "k", {"text": "hello"})
    assert not (tmp_path / ".strata").exists()
    assert StrataStore(data_dir=str(tmp_path / "mine")).settings.data_dir.endswith("mine")  # given is kept
    monkeypatch.setenv("STRATA_CHROMA_PORT", "0")
    with pytest.raises(StrataError, match="STRATA_CHROMA_PORT"):
        StrataStore()


def test_invalid_namespaces_are_refused(store: StrataStore) -> None:
    doc = {"foo": "bar"}
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "foo", doc)
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("foo.bar",), "k")])
    # "langgraph" is only reserved as the root label of the public put API
    store.put(("foo", "langgraph", "foo"), "bar", doc)
    assert store.get(("foo", "langgraph", "foo"), "bar").value == doc  # type: ignore[union-attr]
    store.batch([PutOp(("langgraph", "foo"), "bar", doc)])
    assert store.search(("langgraph", "foo"))[0].value == doc
    store.delete(("langgraph", "foo"), "bar")
    assert store.get(("langgraph", "foo"), "bar") is None


def test_labels_langgraph_accepts_map_reversibly_to_memory_namespaces(store: StrataStore, data_dir: Path) -> None:
    """Labels such as 'auth0|abc123' (an Auth0 user id) were refused; LangGraph's stores accept them."""
    assert langgraph_store.namespace_name(("users", "ann")) == "users/ann"  # a label valid before keeps its name
    assert langgraph_store.namespace_name(("a_b-c@d+e", "Zoë")) == "a_b-c@d+e/Zoë"
    odd = [("memories", "auth0|abc123"), ("a/b",), ("a", "b"), ("with space", "x#y:z"), ("*",)]
    for n, ns in enumerate(odd):
        assert langgraph_store.namespace_labels(langgraph_store.namespace_name(ns)) == ns
        store.put(ns, "k", {"text": f"item {n}"})
    assert langgraph_store.namespace_name(("memories", "auth0|abc123")) == "memories/auth0.7c.abc123"
    for n, ns in enumerate(odd):
        item = store.get(ns, "k")
        assert item is not None and item.value == {"text": f"item {n}"} and item.namespace == ns
        assert [r.value["text"] for r in store.search(ns)] == [f"item {n}"]
    assert sorted(store.list_namespaces()) == sorted(odd)
    assert [r.key for r in store.search(("memories",), query="item")] == ["k"]
    assert Memory("memories/auth0.7c.abc123", data_dir=str(data_dir)).store.get(["raw:item:k"])[0].text == "item 0"
    with pytest.raises(InvalidNamespaceError, match="at most 128"):
        store.put(("|" * 40,), "k", {"text": "too long once written"})
    # "José" typed with a separate accent is the namespace Memory opens for either spelling, not "Jose.301."
    decomposed = unicodedata.normalize("NFD", "José")
    assert langgraph_store.namespace_name(("users", decomposed)) == "users/José"
    store.put(("users", decomposed), "k", {"text": "likes tea"})
    found = store.get(("users", "José"), "k")
    assert found is not None and found.value == {"text": "likes tea"}
    assert Memory(f"users/{decomposed}", data_dir=str(data_dir)).store.has("raw:item:k")
    for typed in (decomposed, "José"):  # search and list_namespaces find it under either spelling, as get does
        assert [r.value for r in store.search(("users", typed))] == [{"text": "likes tea"}]
        assert [r.key for r in store.search(("users", typed), query="tea")] == ["k"]
        assert store.list_namespaces(prefix=("users", typed)) == [("users", "José")]
        assert store.list_namespaces(suffix=(typed,)) == [("users", "José")]
    assert langgraph_store.namespace_labels("app/v1.0.1") == ("app", "v1.0.1")  # a memory's own dots, no NUL


def test_nul_and_missing_limits_are_one_line_errors(store: StrataStore) -> None:
    """NUL went into the ledger (PostgreSQL refused it with a DataError, SQLite kept it); limit=None and
    offset=None raised a raw TypeError."""
    store.put(("n",), "k", {"text": "fine"})
    for call, says in [
        (lambda: store.put(("n",), "a\x00b", {"t": "x"}), "store key holds a NUL"),
        (lambda: store.get(("n",), "a\x00b"), "store key holds a NUL"),
        (lambda: store.put(("n",), "v", {"t": "a\x00b"}), "store value is refused: the text at t holds a NUL"),
        (lambda: store.put(("n",), "v", {"a\x00": "b"}), "the field name .a.+ holds a NUL"),
        (lambda: store.put(("n",), "v", {"t": ["x", {"y": "\x00"}]}), "the text at t.1.y holds a NUL"),
        (lambda: store.put(("n",), "v", {"a\nb": {"x" * 300: "\x00"}}), r"the text at a b\.x{27}\.\.\. holds"),
        (lambda: store.batch([PutOp(("n\x00",), "v", {"t": "x"})]), "namespace label holds a NUL"),
        (lambda: store.search(("n",), limit=None), "limit must be a whole number"),  # type: ignore[arg-type]
        (lambda: store.search(("n",), offset=None), "offset must be a whole number"),  # type: ignore[arg-type]
        (lambda: store.batch([ListNamespacesOp(limit=None)]), "limit must be a whole number"),  # type: ignore[arg-type]
    ]:
        with pytest.raises(InputError, match=says) as error:
            call()
        assert len(str(error.value).splitlines()) == 1
    assert store.get(("n",), "v") is None and [r.key for r in store.search(("n",))] == ["k"]


# put / get / delete --------------------------------------------------------------
def test_put_get_overwrite_delete_and_put_again(store: StrataStore) -> None:
    ns = ("users", "ann", "memories")
    assert store.get(ns, "missing") is None
    store.put(ns, "m1", {"content": "Ann is vegetarian", "context": "said at dinner", "n": 1})
    first = store.get(ns, "m1")
    assert first is not None
    assert first.value == {"content": "Ann is vegetarian", "context": "said at dinner", "n": 1}
    assert first.namespace == ns and first.key == "m1"
    assert isinstance(first.created_at, datetime) and first.created_at.tzinfo is not None

    store.put(ns, "m1", {"content": "Ann eats fish again", "n": 2})
    second = store.get(ns, "m1")
    assert second is not None and second.value == {"content": "Ann eats fish again", "n": 2}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at

    store.delete(ns, "m1")
    assert store.get(ns, "m1") is None
    assert store.search(ns) == []
    store.delete(ns, "m1")  # deleting twice is harmless
    store.delete(("never", "written"), "x")

    store.put(ns, "m1", {"content": "Ann is vegan"})
    third = store.get(ns, "m1")
    assert third is not None and third.value == {"content": "Ann is vegan"}
    assert third.created_at > first.created_at  # a new life after the delete


def test_a_batch_that_raises_writes_nothing(store: StrataStore) -> None:
    """A bad put late in a batch left the puts before it applied, and a version row with no record."""
    store.put(("acct",), "balance", {"text": "balance", "amount": 100})
    for ops in (
        [PutOp(("acct",), "balance", {"text": "balance", "amount": 50}),
         PutOp(("acct",), "log", {"entries": [{"at": object()}]})],
        [PutOp(("acct",), "balance", {"text": "balance", "amount": 50}), PutOp(("acct",), "fresh", {"text": "x"}),
         PutOp(("other",), "k", {"text": "y"}), PutOp(("acct",), "bad", {"t": "\ud800"})],
        [PutOp(("acct",), "balance", {"text": "balance", "amount": 50}), PutOp(("acct", "x.y"), "k", {"t": "v"})],
    ):
        with pytest.raises((InputError, InvalidNamespaceError)):
            store.batch(ops)
    assert store.get(("acct",), "balance").value == {"text": "balance", "amount": 100}  # type: ignore[union-attr]
    assert store.get(("acct",), "fresh") is None and store.get(("other",), "k") is None
    assert [v.key for v in store_items.versions(store._ledger(), "acct")] == ["balance"]
    assert store_items.versions(store._ledger(), "other") == []


def _disk_full(*args: Any, **kwargs: Any) -> Any:
    raise sqlite3.OperationalError("database or disk is full")  # as the SQLite ledger says it


def test_a_full_disk_is_one_line_and_leaves_no_put_half_stored(
    store: StrataStore, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by audit: a put on a full disk rose as the library's own error (sqlite3's OperationalError, Chroma's
    InternalError); and in a batch of puts whose second version the ledger had no room for, the first one's
    version stayed without its record. It is one line saying to free space, and no version of the batch stays."""
    store.put(("ann",), "kept", {"text": "Ann keeps bees."})
    real = store_items.insert_version
    calls: list[str] = []

    def second_refused(*args: Any, **kwargs: Any) -> int:
        calls.append(args[2])
        return _disk_full() if len(calls) == 2 else real(*args, **kwargs)

    monkeypatch.setattr(store_items, "insert_version", second_refused)
    with pytest.raises(StrataError) as caught:
        store.batch([PutOp(("ann",), "one", {"text": "Ann sold her bike."}),
                     PutOp(("ann",), "two", {"text": "Ann moved to Denver."})])
    message = str(caught.value)
    assert message.startswith(f"the disk holding {data_dir} is full: free space there") and "\n" not in message
    monkeypatch.setattr(store_items, "insert_version", real)
    monkeypatch.setattr(MemoryStore, "_write", _disk_full)  # the records' write refused (Chroma, or the ledger)
    with pytest.raises(StrataError, match="is full: free space"):
        store.put(("ann",), "three", {"text": "Ann paints."})
    monkeypatch.undo()
    ledger = open_store(store.settings, "ann").ledger
    assert [v.key for v in store_items.versions(ledger, "ann")] == ["kept"]
    assert [store.get(("ann",), key) is None for key in ("one", "two", "three")] == [True, True, True]


def test_a_version_left_without_its_record_is_no_item_and_goes_with_the_key_s_next_put(store: StrataStore) -> None:
    """A full disk may refuse the take-back as well: such a version is in no export, and the next put of its key
    replaces it."""
    store.put(("ann",), "kept", {"text": "Ann keeps bees."})
    ledger = open_store(store.settings, "ann").ledger
    now = datetime(2024, 5, 1)
    store_items.insert_version(ledger, "ann", "left", {"text": "half"}, "half", True, now, now)
    assert store.get(("ann",), "left") is None
    assert [v.key for v in Memory("ann", data_dir=store.settings.data_dir).export().items] == ["kept"]
    store.put(("ann",), "left", {"text": "whole"})
    assert [v.text for v in store_items.versions(ledger, "ann", "left")] == ["whole"]
    assert store.get(("ann",), "left").value == {"text": "whole"}  # type: ignore[union-attr]


def test_batch_reads_before_writes_and_last_put_wins(store: StrataStore) -> None:
    ns = ("batch",)
    results = store.batch([
        PutOp(ns, "k", {"text": "one"}),
        GetOp(ns, "k"),
        PutOp(ns, "k", {"text": "two"}),
        ListNamespacesOp(),
    ])
    assert results[0] is None and results[1] is None and results[3] == []
    item = store.get(ns, "k")
    assert item is not None and item.value == {"text": "two"}


def test_bad_values_and_filters_are_one_line_errors(store: StrataStore) -> None:
    with pytest.raises(InputError, match=r"batch takes store operations .* not int"):
        store.batch([1])  # type: ignore[list-item]
    with pytest.raises(InputError, match="must be a dict"):
        store.batch([PutOp(("x",), "k", ["not", "a", "dict"])])  # type: ignore[arg-type]
    with pytest.raises(InputError, match="JSON"):
        store.put(("x",), "k", {"when": object()})
    store.put(("x",), "k", {"n": 1})
    with pytest.raises(InputError, match="unknown filter operator"):
        store.search(("x",), filter={"n": {"$near": 1}})
    with pytest.raises(NotImplementedError):
        store.put(("x",), "k", {"n": 1}, ttl=5)
    deep: dict[str, Any] = {}
    for _ in range(5_000):
        deep = {"x": deep}
    wrong: list[tuple[Any, str]] = [
        (lambda: store.put("ann", "k", {"n": 2}), "tuple of text labels"),  # not ('a', 'n', 'n')
        (lambda: store.search(("x",), query=5), "query is text"),
        (lambda: store.search(("x",), filter=["n"]), "filter is a dict"),
        (lambda: store.search(("x",), filter={5: 1}), "filter is a dict"),
        (lambda: store.search(("x",), limit="5"), "limit must be a whole number"),
        (lambda: store.put(("x",), "k", {"n": 2}, index=5), "index is False, None or a list"),
        (lambda: store.list_namespaces(max_depth="x"), "max_depth"),
        (lambda: store.batch(None), "list of store operations"),  # type: ignore[arg-type]
        (lambda: store.put(("x",), "k\ud800", {"n": 2}), "lone surrogate"),
        (lambda: store.get(("x",), "\ud800"), "lone surrogate"),
        (lambda: store.put(("x",), "k", {"t": "\ud800"}), "lone surrogate"),
        (lambda: store.search(("x",), query="\ud800"), "lone surrogate"),
        (lambda: store.put(("x",), "k", deep), "nested too deeply"),
    ]
    for call, says in wrong:
        with pytest.raises(InputError, match=says) as error:
            call()
        assert len(str(error.value).splitlines()) == 1
    assert store.get(("x",), "k").value == {"n": 1}  # type: ignore[union-attr]


# search --------------------------------------------------------------------------------
def test_search_without_query_filters_and_pages(store: StrataStore) -> None:
    for key, value in COLOURS:
        store.put(("test",), key, value)
    store.put(("test", "nested"), "doc5", {"text": "red bike", "color": "red", "score": 5.0, "meta": {"lang": "en"}})

    everything = store.search(("test",))
    assert {r.key for r in everything} == {"doc1", "doc2", "doc3", "doc4", "doc5"}
    assert everything[0].key == "doc5"  # newest first, as LangGraph's SQL stores order them
    assert all(r.score is None for r in everything)
    assert {r.key for r in store.search(("test",), filter={"color": "red"})} == {"doc1", "doc2", "doc5"}
    assert {r.key for r in store.search(("test",), filter={"score": {"$gt": 3.2, "$lt": 5}})} == {
        "doc1", "doc3", "doc4",
    }
    assert {r.key for r in store.search(("test",), filter={"color": {"$ne": "red"}})} == {"doc3", "doc4"}
    assert [r.key for r in store.search(("test",), filter={"meta": {"lang": "en"}})] == ["doc5"]
    assert [r.key for r in store.search(("test",), filter={"meta.lang": "en"})] == ["doc5"]
    assert {r.key for r in store.search(("test",), filter={"color": {"$in": ["green", "blue"]}})} == {"doc3", "doc4"}
    assert [r.key for r in store.search(("test", "nested"))] == ["doc5"]
    pages = [store.search(("test",), limit=2, offset=o) for o in (0, 2, 4)]
    assert [len(p) for p in pages] == [2, 2, 1]
    assert len({r.key for p in pages for r in p}) == 5
    assert store.search(("test",), limit=0) == []


def test_search_with_query_and_filters(store: StrataStore) -> None:
    for key, value in COLOURS:
        store.put(("test",), key, value)

    results = store.search(("test",), query="apple", filter={"color": "red"})
    assert [r.key for r in results][:1] == ["doc1"] and len(results) == 2
    results = store.search(("test",), query="car", filter={"color": "red"})
    assert [r.key for r in results][:1] == ["doc2"] and len(results) == 2
    results = store.search(("test",), query="blue", filter={"score": {"$gt": 3.2}})
    assert len(results) == 3 and results[0].key == "doc4"
    results = store.search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
    assert [r.key for r in results] == ["doc3"]
    assert all(r.score is not None and r.score > 0 for r in store.search(("test",), query="fruit"))


def test_query_scores_are_cosine_similarities_that_compare_across_namespaces(
    store: StrataStore, embedder: Any
) -> None:
    """Ranks were fused per namespace, so each namespace's best item scored about 1/61 however unrelated,
    and a threshold such as `score > 0.5` kept nothing."""
    data = {
        ("users", "ann"): [("f1", "Ann's favourite food is pizza"), ("f2", "Ann's sister lives in Berlin"),
                           ("f3", "Ann enjoys a Neapolitan flatbread with tomato and mozzarella")],
        ("users", "bob"): [("b1", "Bob's car needs new brake pads")],
        ("users", "cy"): [("c1", "Cy filed the tax return in April")],
    }
    texts = {}
    for ns, items in data.items():
        for key, text in items:
            store.put(ns, key, {"text": text})
            texts[key] = text
    query = "pizza"
    found = store.search(("users",), query=query, limit=10)
    assert len(found) == 5
    vectors = np.asarray(embedder.embed([query, *(texts[r.key] for r in found)]), dtype=np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for result, vector in zip(found, vectors[1:], strict=True):
        assert result.score == pytest.approx(float(vectors[0] @ vector), abs=1e-4)
    scores = [r.score for r in found]
    assert scores == sorted(scores, reverse=True)  # the order is the score's
    assert found[0].key == "f1" and [r.key for r in found if r.score > 0.5] == ["f1"]  # type: ignore[operator]
    assert {r.key for r in found[-2:]} <= {"b1", "c1", "f2"}  # another namespace's best is not lifted


def test_include_memory_false_ranks_its_items_among_many_turns(data_dir: Path, embedder: Any) -> None:
    """The items competed with the namespace's turns for a fixed pool and came back unscored."""
    memory_store = open_store(StoreSettings(data_dir=str(data_dir)), "ann")
    memory_store.add([
        Record(id=f"raw:D1:{i}", kind="raw", text=f"I love drinking coffee in the morning, day {i}", namespace="ann",
               dialogue_id=f"D1:{i}", speaker="Ann")
        for i in range(200)
    ])
    own = StrataStore(data_dir=str(data_dir), include_memory=False)
    own.put(("ann",), "coffee", {"text": "Ann drinks coffee every morning"})
    own.put(("ann",), "tea", {"text": "Ann's brother prefers green tea"})
    own.put(("ann",), "car", {"text": "Ann's car is a red hatchback"})
    found = own.search(("ann",), query="coffee in the morning", limit=3)
    assert [r.key for r in found][:1] == ["coffee"] and all(r.score is not None for r in found)
    assert len(found) == 3


def test_update_changes_what_a_query_finds_and_index_false_is_not_ranked(store: StrataStore) -> None:
    store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    store.put(("test",), "doc2", {"text": "something about dogs"})
    store.put(("test",), "doc3", {"text": "text about birds"})
    initial = store.search(("test",), query="Zany Xerxes")
    assert initial[0].key == "doc1"
    initial_score = initial[0].score
    assert initial_score is not None

    store.put(("test",), "doc1", {"text": "new text about dogs"})
    after = store.search(("test",), query="Zany Xerxes")
    after_score = next((r.score for r in after if r.key == "doc1"), 0.0)
    assert after_score is not None and after_score < initial_score
    assert store.search(("test",), query="new text about dogs")[0].key == "doc1"

    store.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    top = store.search(("test",), query="new text about dogs", limit=3)
    assert "doc4" not in [r.key for r in top]
    everything = store.search(("test",), query="new text about dogs", limit=10)
    assert everything[-1].key == "doc4" and everything[-1].score is None  # found, but never ranked


def test_index_fields_choose_what_is_matched(store: StrataStore) -> None:
    store.put(("docs",), "a", {"title": "gardening", "body": "tomatoes and basil"}, index=["title"])
    store.put(("docs",), "b", {"title": "cooking", "body": "gardening tools for sale"}, index=["title"])
    assert store.search(("docs",), query="gardening")[0].key == "a"
    store.put(("docs",), "c", {"chapters": [{"content": "volcanoes erupt"}, {"content": "lava cools"}]},
              index=["chapters[*].content"])
    assert store.search(("docs",), query="volcano lava")[0].key == "c"


def test_query_pagination_and_edge_cases(store: StrataStore) -> None:
    for i in range(5):
        store.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    page1 = store.search(("test",), query="test", limit=2)
    page2 = store.search(("test",), query="test", limit=2, offset=2)
    assert len(page1) == 2 and len(page2) == 2
    assert {r.key for r in page1}.isdisjoint({r.key for r in page2})
    assert len(store.search(("test",), query="test", limit=10)) == 5
    for query in ["", None, "test " * 100, "test!@#$%^&*()"]:
        assert len(store.search(("test",), query=query, filter={"text": "test document number 3"})) == 1


def test_locomo_turns_found_by_semantic_search(store: StrataStore, locomo_dir: Path) -> None:
    conversation = load_turns(locomo_dir / "conv-26.json")
    ns = ("locomo", conversation.conversation_id)
    for turn in conversation.sessions[0].turns:
        store.put(ns, turn.dia_id or "", {"text": turn.text, "speaker": turn.speaker})

    painted = store.search(ns, query="What did Melanie paint last year?", limit=3)
    assert "D1:14" in [r.key for r in painted]
    career = store.search(("locomo",), query="Caroline would like to work in counseling", limit=3)
    assert "D1:11" in [r.key for r in career]
    mel = store.search(ns, query="painting", filter={"speaker": "Melanie"}, limit=20)
    assert mel and all(r.value["speaker"] == "Melanie" for r in mel)
    assert mel[0].key in {"D1:6", "D1:12", "D1:14", "D1:16"}  # the turns where Melanie talks of painting


# this backend's own promises ------------------------------------------------------------
def test_items_survive_a_reopen(data_dir: Path, embedder: Any) -> None:
    first = StrataStore(data_dir=str(data_dir))
    first.put(("users", "bo"), "pet", {"text": "Bo has a cat called Miso"})
    first.close()
    close_all()  # as after a restart: no cached client, ledger or mirror

    reopened = StrataStore(data_dir=data_dir)  # a Path names the folder as its string does
    try:
        item = reopened.get(("users", "bo"), "pet")
        assert item is not None and item.value == {"text": "Bo has a cat called Miso"}
        assert reopened.search(("users",), query="what pet does Bo have")[0].key == "pet"
        assert reopened.list_namespaces() == [("users", "bo")]
    finally:
        reopened.close()


def test_dropping_a_namespace_drops_its_items_versions(store: StrataStore, data_dir: Path) -> None:
    store.put(("users", "bo"), "pet", {"text": "Bo has a cat called Miso"})
    store.put(("users", "bo"), "pet", {"text": "Bo has two cats"})
    store.put(("users", "al"), "pet", {"text": "Al has a dog"})
    ledger = Memory("users/bo", data_dir=str(data_dir)).store.ledger
    assert len(store_items.versions(ledger, "users/bo")) == 2

    Memory("users/bo", data_dir=str(data_dir)).drop()

    assert store_items.versions(ledger, "users/bo") == []  # the values of every version, not only the records
    assert store.get(("users", "bo"), "pet") is None and store.get(("users", "al"), "pet") is not None


def test_delete_and_overwrite_are_in_history_and_undoable(store: StrataStore, data_dir: Path) -> None:
    ns = ("users", "cy")
    store.put(ns, "home", {"text": "Cy lives in Leeds"})
    store.put(ns, "home", {"text": "Cy lives in York"})
    store.delete(ns, "home")
    assert store.get(ns, "home") is None

    memory = Memory("users/cy", data_dir=str(data_dir))  # the same namespace, seen through the API
    changes = memory.history()
    assert [c.action.value for c in changes[:2]] == ["delete", "update"]
    assert changes[1].old_text == "Cy lives in Leeds" and changes[1].new_text == "Cy lives in York"

    memory.undo()  # the delete
    restored = store.get(ns, "home")
    assert restored is not None and restored.value == {"text": "Cy lives in York"}
    memory.undo()  # the overwrite: the older value comes back with its text
    restored = store.get(ns, "home")
    assert restored is not None and restored.value == {"text": "Cy lives in Leeds"}


def test_overwrites_keep_one_version_per_text_and_undo_still_finds_each_value(
    store: StrataStore, data_dir: Path
) -> None:
    """Every put kept a version row for good and every read fetched them all: a counter overwritten
    thousands of times made each get, put and search slower."""
    ns = ("app", "state")
    for n in range(30):
        store.put(ns, "counter", {"text": "visit counter", "n": n})
    assert [v.value["n"] for v in store_items.versions(store._ledger(), "app/state", "counter")] == [29]
    assert store.get(ns, "counter").value == {"text": "visit counter", "n": 29}  # type: ignore[union-attr]
    created = store.get(ns, "counter").created_at  # type: ignore[union-attr]

    store.put(ns, "counter", {"text": "page views", "n": 1})
    store.put(ns, "counter", {"text": "page views", "n": 2})
    store.put(ns, "counter", {"text": "visit counter", "n": 30})
    assert [v.value["n"] for v in store_items.versions(store._ledger(), "app/state", "counter")] == [2, 30]
    item = store.get(ns, "counter")
    assert item is not None and item.value["n"] == 30 and item.created_at == created

    memory = Memory("app/state", data_dir=str(data_dir))
    memory.undo()  # the last overwrite: "page views" comes back with its newest value
    assert store.get(ns, "counter").value == {"text": "page views", "n": 2}  # type: ignore[union-attr]
    memory.undo()  # a text's value is its newest version's, as it always was
    assert store.get(ns, "counter").value == {"text": "visit counter", "n": 30}  # type: ignore[union-attr]
    assert [r.value["n"] for r in store.search(ns)] == [30]


def test_a_turn_and_an_item_never_share_a_record(store: StrataStore, data_dir: Path) -> None:
    """A turn ingested with dia_id 'item:pet' had the record id of the item 'pet', and a put overwrote it."""
    memory = Memory("users/ann", data_dir=str(data_dir))
    with pytest.raises(InputError, match="starts with 'item:'"):
        memory.add([{"speaker": "Ann", "text": "I adopted a cat called Miso.", "dia_id": "item:pet"}])
    assert memory.store.get(["raw:item:pet"]) == []
    # such a turn stored by an earlier version is not overwritten by a put either
    memory.store.add([Record(id="raw:item:pet", kind="raw", text="I adopted a cat called Miso.",
                             namespace="users/ann", dialogue_id="item:pet", speaker="Ann")])
    with pytest.raises(InputError, match="not a store item") as error:
        store.batch([PutOp(("users", "ann"), "other", {"text": "x"}), PutOp(("users", "ann"), "pet", {"text": "y"})])
    assert len(str(error.value).splitlines()) == 1
    assert memory.store.get(["raw:item:pet"])[0].text == "I adopted a cat called Miso."
    assert store.get(("users", "ann"), "pet") is None and store.get(("users", "ann"), "other") is None


def test_records_the_memory_wrote_are_items(store: StrataStore, data_dir: Path, locomo_dir: Path) -> None:
    conversation = load_turns(locomo_dir / "conv-26.json")
    memory_store = open_store(StoreSettings(data_dir=str(data_dir)), "conv-26")
    memory_store.add([
        Record(
            id=f"raw:{t.dia_id}", kind="raw", text=t.text, namespace="conv-26", dialogue_id=t.dia_id or "",
            speaker=t.speaker, time=t.time, source_ids=[t.dia_id or ""],
        )
        for t in conversation.sessions[0].turns
    ])
    assert ("conv-26",) in store.list_namespaces()
    item = store.get(("conv-26",), "raw:D1:14")
    assert item is not None and item.value["speaker"] == "Melanie" and "lake sunrise" in item.value["text"]
    found = store.search(("conv-26",), query="lake sunrise painting", limit=3)
    assert found[0].key == "raw:D1:14"
    store.delete(("conv-26",), "raw:D1:14")  # a tombstone, like any delete here
    assert store.get(("conv-26",), "raw:D1:14") is None
    assert memory_store.history()[0].record_id == "raw:D1:14"

    own = StrataStore(data_dir=str(data_dir), include_memory=False)
    try:
        assert own.get(("conv-26",), "raw:D1:13") is None
        assert own.list_namespaces() == []
    finally:
        own.close()


def test_an_item_never_hides_or_takes_along_a_record_the_memory_wrote(store: StrataStore, data_dir: Path) -> None:
    """An app's item keyed 'raw:D1:1' hid the ingested turn of that id from search, and deleting the item
    tombstoned the turn too; such a key is now refused, and a delete of an item (put by an earlier version)
    takes only the item."""
    memory = Memory("ann", data_dir=str(data_dir))
    memory.add([{"speaker": "Ann", "text": "I moved to Denver last week.", "dia_id": "D1:1"}])
    with pytest.raises(InputError, match=r"^the key 'raw:D1:1' has the form of a memory record's id .*nothing was "
                                         r"written$"):
        store.put(("ann",), "raw:D1:1", {"text": "my own note"})
    assert store.get(("ann",), "raw:D1:1").value["text"] == "I moved to Denver last week."
    own = StrataStore(data_dir=str(data_dir), include_memory=False)
    try:
        own.put(("ann",), "raw:D1:1", {"text": "my own note"})  # the item of an app that does not mix them
        store.delete(("ann",), "raw:D1:1")
        assert own.get(("ann",), "raw:D1:1") is None
        assert store.get(("ann",), "raw:D1:1").value["text"] == "I moved to Denver last week."  # shown again
        store.delete(("ann",), "raw:D1:1")  # found by review: a second delete found the deleted item, not the turn
        assert store.get(("ann",), "raw:D1:1") is None
        memory.undo()
    finally:
        own.close()
    assert memory.store.get_one("raw:D1:1").status == Status.ACTIVE


def test_items_put_with_index_false_are_not_evidence_for_the_memorys_questions(
    store: StrataStore, data_dir: Path
) -> None:
    """LangGraph's index=False is "do not index": such an item was still found and cited by Memory.ask."""
    store.put(("ann",), "locker", {"text": "Ann's locker code is 4711."}, index=False)
    store.put(("ann",), "pet", {"text": "Ann has a cat called Miso."})
    memory = Memory("ann", data_dir=str(data_dir))
    assert "raw:item:locker" not in [e.id for e in memory.retrieve("What is Ann's locker code?").evidence]
    assert "4711" not in memory.ask("What is Ann's locker code?").answer
    assert "raw:item:pet" in [e.id for e in memory.retrieve("What pet does Ann have?").evidence]
    memory.consolidate()  # found by review: the slow path told the unindexed item in a topic summary
    assert not [r.id for r in memory.store.all("summary") if "item:locker" in r.source_ids or "4711" in r.text]
    store.put(("ann",), "locker", {"text": "Ann's locker code is 4711."})  # indexed now: found
    assert "raw:item:locker" in [e.id for e in memory.retrieve("What is Ann's locker code?").evidence]


# async and inside a LangGraph app -----------------------------------------------------------
def test_async_api(store: StrataStore) -> None:
    async def scenario() -> None:
        ns = ("async", "user")
        await asyncio.gather(*[store.aput(ns, key, value) for key, value in COLOURS])
        item = await store.aget(ns, "doc3")
        assert item is not None and item.value["text"] == "green apple"
        found = await store.asearch(ns, query="apple", filter={"color": "red"})
        assert [r.key for r in found][:1] == ["doc1"]
        assert await store.alist_namespaces(prefix=("async",)) == [ns]
        await store.adelete(ns, "doc3")
        assert await store.aget(ns, "doc3") is None
        with pytest.raises(InvalidNamespaceError):
            await store.aput(("the", "thing.about"), "foo", {"a": "b"})
        results = await store.abatch([GetOp(ns, "doc1"), SearchOp(ns, {"color": "blue"}, 5, 0, None)])
        assert results[0].value["color"] == "red"  # type: ignore[union-attr]
        assert [r.key for r in results[1]] == ["doc4"]  # type: ignore[union-attr]

    asyncio.run(scenario())


class Notes(TypedDict, total=False):
    user: str
    note: str
    recalled: list[str]


def test_compiled_app_uses_it_as_its_store(store: StrataStore) -> None:
    """What an existing app does: `compile(store=...)`, then `store.put/search` inside its nodes."""

    def save(state: Notes, store: BaseStore) -> dict[str, Any]:
        store.put(("memories", state["user"]), str(uuid.uuid4()), {"content": state["note"]})
        return {}

    def recall(state: Notes, store: BaseStore) -> dict[str, Any]:
        hits = store.search(("memories", state["user"]), query="what food does the user like", limit=1)
        return {"recalled": [h.value["content"] for h in hits]}

    builder = StateGraph(Notes)
    builder.add_node("save", save)
    builder.add_node("recall", recall)
    builder.add_edge(START, "save")
    builder.add_edge("save", "recall")
    app = builder.compile(store=store)

    app.invoke({"user": "dee", "note": "Dee's favourite food is ramen"})
    result = app.invoke({"user": "dee", "note": "Dee plays the cello on Sundays"})
    assert result["recalled"] == ["Dee's favourite food is ramen"]
    assert store.list_namespaces(prefix=("memories",)) == [("memories", "dee")]


def test_two_stores_putting_one_new_key_at_once_leave_one_value_and_its_record(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put of a new key found it absent, wrote its first version (deleting every older one) and then its
    record, each on its own: two puts at once (two stores, or two processes) both found it absent, and the
    value read was one put's while the record, which search finds, held the other's text. One step now: the
    second waits for the first and overwrites it whole."""
    first, second = StrataStore(data_dir=data_dir), StrataStore(data_dir=data_dir)
    first.put(("ann",), "warm", {"text": "warm up"})
    both_checked = threading.Barrier(2, timeout=2.0)  # (with the fix the second never gets here in time)
    real_insert = store_items.insert_version

    inserted: list[int] = []

    def insert_once_both_checked(*args: Any, **kwargs: Any) -> int:
        with contextlib.suppress(threading.BrokenBarrierError):
            both_checked.wait()
        seq = real_insert(*args, **kwargs)
        inserted.append(seq)
        if len(inserted) == 1:
            time.sleep(0.5)  # the first to insert writes its record last
        return seq

    monkeypatch.setattr(store_items, "insert_version", insert_once_both_checked)
    errors: list[BaseException] = []

    def put(store: StrataStore, who: str) -> None:
        try:
            store.put(("ann",), "tea", {"text": f"{who} says Ann drinks tea at {who}-time"})
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=put, args=(s, who)) for s, who in ((first, "A"), (second, "B"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    item = first.get(("ann",), "tea")
    assert item is not None
    record = open_store(first.settings, "ann").get([store_items.ITEM_PREFIX + "tea"])[0]
    assert record.text == item.value["text"]
