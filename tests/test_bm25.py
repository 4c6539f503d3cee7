"""BM25's fast top-k (memory/bm25.py) ranks exactly as scoring every document does: the same ids, the same
float scores to the last bit, equal scores by id, whatever the index went through (adds, removals, re-adds,
a restore from saved state)."""

from __future__ import annotations

import heapq
import math
import random
from collections import defaultdict
from collections.abc import Callable

import pytest
from strata.memory.bm25 import GROUPED, BM25Index
from strata.memory.records import natural_order


def _reference(index: BM25Index, query: str, k: int, allowed: Callable[[str], bool] | None = None
               ) -> list[tuple[str, float]]:
    """The search as it was before it read a wide word by groups: every document holding a query word scored,
    the words summed in the query's order, then the full sort."""
    n_docs = len(index._lengths)
    if n_docs == 0 or k <= 0:
        return []
    avg_len = index._total_length / n_docs or 1.0
    scores: dict[str, float] = defaultdict(float)
    for token in dict.fromkeys(index._tokenize(query)):
        docs = index._postings.get(token)
        if not docs:
            continue
        idf = math.log(1 + (n_docs - len(docs) + 0.5) / (len(docs) + 0.5))
        for doc_id, tf in docs.items():
            norm = tf + index.k1 * (1 - index.b + index.b * index._lengths[doc_id] / avg_len)
            scores[doc_id] += idf * tf * (index.k1 + 1) / norm
    items = [item for item in scores.items() if allowed is None or allowed(item[0])]
    return heapq.nsmallest(k, items, key=lambda item: (-item[1], natural_order(item[0])))


def _texts(rng: random.Random, count: int) -> list[str]:
    common = ["ok", "caroline", "melanie", "paint", "support", "group"]
    rare = [f"w{i}" for i in range(400)]
    texts = []
    for i in range(count):
        if rng.random() < 0.15:
            texts.append(f"ok {i}")  # tiny turns sharing a word: equal scores by the hundred
        elif rng.random() < 0.1 and texts:
            texts.append(rng.choice(texts))  # a repeated text
        else:
            words = [rng.choice(common) if rng.random() < 0.4 else rng.choice(rare) for _ in range(rng.randint(1, 12))]
            texts.append(" ".join(words))
    return texts


def _ids(rng: random.Random, count: int) -> list[str]:
    forms = ("raw:D{s}:{i}", "fact:D{s}:{i}:0", "raw:D{s}:{i}", "item:{i}")
    return [rng.choice(forms).format(s=rng.randint(1, 30), i=i) for i in range(count)]


def _queries(rng: random.Random, texts: list[str]) -> list[str]:
    picked = [rng.choice(texts) for _ in range(60)]
    return [*picked, "ok", "ok 7", "caroline ok", "ok caroline ok", "w3 ok", "paint support group ok", "nothing here"]


@pytest.mark.parametrize("seed", [1, 2])
def test_the_top_k_is_the_full_sorts_to_the_last_bit(seed: int) -> None:
    rng = random.Random(seed)
    count = 3 * GROUPED + 400
    index = BM25Index(tokenize=str.split)
    ids, texts = _ids(rng, count), _texts(rng, count)
    for doc_id, text in zip(ids, texts, strict=True):
        index.add(doc_id, text)
    queries = _queries(rng, texts)
    odd: Callable[[str], bool] = lambda doc_id: int(doc_id.split(":")[-1]) % 3 != 0  # noqa: E731

    def check(searched: BM25Index) -> None:
        for query in queries:
            for k in (1, 20, 60, count + 5):
                for allowed in (None, odd):
                    assert searched.search(query, k, allowed) == _reference(searched, query, k, allowed), (query, k)

    check(index)
    for doc_id in rng.sample(ids, count // 4):  # removals, some ids put back with another text
        index.remove(doc_id)
        if rng.random() < 0.5:
            index.add(doc_id, rng.choice(texts))
    for doc_id in rng.sample(ids, 50):
        index.add(doc_id, rng.choice(texts))  # replaced in place
    check(index)
    restored = BM25Index.restore(index.state())
    restored._tokenize = str.split
    check(restored)
    for doc_id in list(restored._lengths):  # every document of a wide word removed: its groups go with it
        if "ok" in restored._terms[doc_id]:
            restored.remove(doc_id)
    assert "ok" not in restored._groups
    check(restored)


def test_a_word_every_document_holds_reads_k_of_them_not_all() -> None:
    """Found timing ingest as a namespace grows: tiny turns ("ok N") all hold "ok", and every search scored
    and ordered the ids of all of them (74 ms a search at 8,000). Those that hold the wide word alone score
    alike in their group and only the first k in the ids' order are read."""
    index = BM25Index(tokenize=str.split)
    for i in range(8000):
        index.add(f"raw:D1:{i}", f"ok {i}")
    read: list[str] = []
    lengths = index._lengths

    class Counting(dict):  # type: ignore[type-arg]
        def __getitem__(self, doc_id: str) -> int:
            read.append(doc_id)
            return lengths[doc_id]

    index.search("ok 7", 10)  # groups built on the first search
    index._lengths = Counting(lengths)
    found = index.search("ok 7", 10)
    assert len(read) < 20  # the scored documents: the one holding "7", not the 8,000 holding "ok"
    assert found == _reference(index, "ok 7", 10)
    assert [doc_id for doc_id, _ in found] == ["raw:D1:7", *(f"raw:D1:{i}" for i in range(10) if i != 7)]
