"""An incremental BM25 index: the lexical half of hybrid retrieval.

Dense search misses exact names, numbers and rare words; AdaMem backs off to a
keyword index and MAGMA fuses dense and keyword anchors by reciprocal rank.
Documents are added and removed one at a time as the memory changes, so the
index never has to be rebuilt: not on the write path, and not when another
process changed a few records (the store re-adds just those).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from strata.memory.records import natural_order


def _default_tokenize(text: str) -> list[str]:
    from strata.memory.entities import tokenize

    return tokenize(text)


class BM25Index:
    """Okapi BM25 (k1=1.5, b=0.75) over an inverted index kept in memory."""

    def __init__(
        self, tokenize: Callable[[str], list[str]] | None = None, k1: float = 1.5, b: float = 0.75
    ) -> None:
        self._tokenize = tokenize or _default_tokenize
        self.k1 = k1
        self.b = b
        self._postings: dict[str, dict[str, int]] = defaultdict(dict)
        self._lengths: dict[str, int] = {}
        self._terms: dict[str, list[str]] = {}  # each document's distinct tokens: removal touches only those
        self._total_length = 0

    def __len__(self) -> int:
        return len(self._lengths)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._lengths

    def add(self, doc_id: str, text: str) -> None:
        if doc_id in self._lengths:
            self.remove(doc_id)
        counts = Counter(self._tokenize(text))
        for token, tf in counts.items():
            self._postings[token][doc_id] = tf
        length = sum(counts.values())
        self._lengths[doc_id] = length
        self._terms[doc_id] = list(counts)
        self._total_length += length

    def state(self) -> dict[str, Any]:
        """The index as plain data, to be saved with a mirror (memory/snapshots.py)."""
        return {"postings": self._postings, "lengths": self._lengths, "terms": self._terms}

    @classmethod
    def restore(cls, state: dict[str, Any]) -> BM25Index:
        """An index from `state()`'s data, without tokenising any text again."""
        index = cls()
        index._postings = defaultdict(dict, state["postings"])
        index._lengths = dict(state["lengths"])
        index._terms = dict(state["terms"])
        index._total_length = sum(index._lengths.values())
        return index

    def remove(self, doc_id: str) -> None:
        length = self._lengths.pop(doc_id, None)
        if length is None:
            return
        self._total_length -= length
        for token in self._terms.pop(doc_id, ()):
            docs = self._postings.get(token)
            if docs is None:
                continue
            docs.pop(doc_id, None)
            if not docs:
                del self._postings[token]

    def search(self, query: str, k: int, allowed: Callable[[str], bool] | None = None) -> list[tuple[str, float]]:
        """Top-k (doc_id, score), best first; `allowed` filters ids (status, time window)."""
        n_docs = len(self._lengths)
        if n_docs == 0 or k <= 0:
            return []
        avg_len = self._total_length / n_docs or 1.0
        scores: dict[str, float] = defaultdict(float)
        for token in dict.fromkeys(self._tokenize(query)):  # in the query's order: sums, so ties, never vary
            docs = self._postings.get(token)
            if not docs:
                continue
            idf = math.log(1 + (n_docs - len(docs) + 0.5) / (len(docs) + 0.5))
            for doc_id, tf in docs.items():
                norm = tf + self.k1 * (1 - self.b + self.b * self._lengths[doc_id] / avg_len)
                scores[doc_id] += idf * tf * (self.k1 + 1) / norm
        items = list(scores.items()) if allowed is None else [item for item in scores.items() if allowed(item[0])]
        if len(items) > k:  # only a score at least the k-th best can rank: the ids' order is worked out for those
            cutoff = heapq.nlargest(k, [score for _, score in items])[-1]
            items = [item for item in items if item[1] >= cutoff]
        # Best first, equal scores in the ids' natural order (D1:2 before D1:10): the order the index was
        # filled in (how the records were loaded) must not decide between them, or a memory reopened from
        # disk would rank otherwise than the live one.
        return heapq.nsmallest(k, items, key=_best_then_id)


def _best_then_id(item: tuple[str, float]) -> tuple[float, tuple[str | int, ...]]:
    return -item[1], natural_order(item[0])


def reciprocal_rank_fusion(rankings: list[list[str]], k: int = 60) -> list[tuple[str, float]]:
    """Fuse ranked id lists: score = sum 1/(k + rank) (MAGMA's anchor fusion)."""
    scores: dict[str, float] = defaultdict(float)
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking, start=1):
            scores[doc_id] += 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: item[1], reverse=True)
