"""An incremental BM25 index: the lexical half of hybrid retrieval.

Dense search misses exact names, numbers and rare words; AdaMem backs off to a
keyword index and MAGMA fuses dense and keyword anchors by reciprocal rank.
Documents are added and removed one at a time as the memory changes, so the
index never has to be rebuilt: not on the write path, and not when another
process changed a few records (the store re-adds just those).

A word most documents hold ("ok" in every tiny turn, a speaker's name) is not scored document by
document: its documents are kept in groups of equal term frequency and length, each in the ids'
natural order, and such a group scores alike; only the best groups' first documents are read (`search`).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from strata.memory.records import natural_order

GROUPED = 256
"""Documents a query word must be in for `search` to read it by groups (below, scoring each is cheaper)."""

_Key = tuple[str | int, ...]


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
        self._order: dict[str, _Key] = {}  # each document's `natural_order`, worked out once
        # word -> (term frequency, length) -> [(natural order, id)] sorted: for the words searched by groups
        self._groups: dict[str, dict[tuple[int, int], list[tuple[_Key, str]]]] = {}

    def __len__(self) -> int:
        return len(self._lengths)

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._lengths

    def add(self, doc_id: str, text: str) -> None:
        if doc_id in self._lengths:
            self.remove(doc_id)
        counts = Counter(self._tokenize(text))
        length = sum(counts.values())
        for token, tf in counts.items():
            self._postings[token][doc_id] = tf
            groups = self._groups.get(token)
            if groups is not None:
                insort(groups.setdefault((tf, length), []), (self._key(doc_id), doc_id))
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
            tf = docs.pop(doc_id, None)
            groups = self._groups.get(token)
            if groups is not None and tf is not None:
                group = groups.get((tf, length), [])
                entry = (self._key(doc_id), doc_id)
                at = bisect_left(group, entry)
                if at < len(group) and group[at] == entry:
                    del group[at]
                if not group:
                    groups.pop((tf, length), None)
            if not docs:
                del self._postings[token]
                self._groups.pop(token, None)
        self._order.pop(doc_id, None)

    def search(self, query: str, k: int, allowed: Callable[[str], bool] | None = None) -> list[tuple[str, float]]:
        """Top-k (doc_id, score), best first; `allowed` filters ids (status, time window)."""
        n_docs = len(self._lengths)
        if n_docs == 0 or k <= 0:
            return []
        avg_len = self._total_length / n_docs or 1.0
        words: dict[str, tuple[dict[str, int], float]] = {}  # in the query's order: sums, so ties, never vary
        for token in dict.fromkeys(self._tokenize(query)):
            docs = self._postings.get(token)
            if docs:
                words[token] = (docs, math.log(1 + (n_docs - len(docs) + 0.5) / (len(docs) + 0.5)))
        widest = max(words, key=lambda token: len(words[token][0]), default=None)
        rest = sum(len(docs) for token, (docs, _) in words.items() if token != widest)
        alone = widest is not None and len(words[widest][0]) >= max(GROUPED, rest)
        # A word held by more documents than the other words together (alone) is read for the documents that
        # hold another word too; those that hold it alone score its weight in their group.
        others = {doc_id for token, (docs, _) in words.items() if token != widest for doc_id in docs} if alone else None
        scores: dict[str, float] = defaultdict(float)
        for token, (docs, idf) in words.items():
            if others is not None and token == widest:
                pairs = [(doc_id, docs[doc_id]) for doc_id in others if doc_id in docs]
            else:
                pairs = docs.items()  # type: ignore[assignment]
            for doc_id, tf in pairs:
                norm = tf + self.k1 * (1 - self.b + self.b * self._lengths[doc_id] / avg_len)
                scores[doc_id] += idf * tf * (self.k1 + 1) / norm
        items = list(scores.items())
        only_widest = [] if others is None else self._best_alone(widest, words[widest][1], avg_len, k, scores, allowed)
        if allowed is not None:
            items = [item for item in items if allowed(item[0])]
        items += only_widest
        if len(items) > k:  # only a score at least the k-th best can rank: the ids' order is worked out for those
            cutoff = heapq.nlargest(k, [score for _, score in items])[-1]
            items = [item for item in items if item[1] >= cutoff]
        # Best first, equal scores in the ids' natural order (D1:2 before D1:10): the order the index was
        # filled in (how the records were loaded) must not decide between them, or a memory reopened from
        # disk would rank otherwise than the live one.
        return heapq.nsmallest(k, items, key=lambda item: (-item[1], self._key(item[0])))

    def _best_alone(
        self, token: str, idf: float, avg_len: float, k: int, scored: dict[str, float],
        allowed: Callable[[str], bool] | None,
    ) -> list[tuple[str, float]]:
        """The k best documents holding `token` that are not in `scored`, by score then id: group by group,
        best weight first, each group's first k such documents, until a group weighs less than the k-th."""
        groups = self._grouped(token)
        weights = []
        for tf, length in groups:
            norm = tf + self.k1 * (1 - self.b + self.b * length / avg_len)
            weights.append((idf * tf * (self.k1 + 1) / norm, (tf, length)))
        weights.sort(key=lambda weight: weight[0], reverse=True)
        found: list[tuple[str, float]] = []
        for weight, group in weights:
            if len(found) >= k and weight < found[k - 1][1]:
                break  # the groups left score less than k documents already found
            taken = 0
            for _, doc_id in groups[group]:
                if doc_id in scored or (allowed is not None and not allowed(doc_id)):
                    continue
                found.append((doc_id, weight))
                taken += 1
                if taken >= k:
                    break
        return found

    def _grouped(self, token: str) -> dict[tuple[int, int], list[tuple[_Key, str]]]:
        """The groups of `token`'s documents, built on the first search that needs them and kept from then on."""
        groups = self._groups.get(token)
        if groups is None:
            groups = {}
            for doc_id, tf in self._postings[token].items():
                groups.setdefault((tf, self._lengths[doc_id]), []).append((self._key(doc_id), doc_id))
            for group in groups.values():
                group.sort()
            self._groups[token] = groups
        return groups

    def _key(self, doc_id: str) -> _Key:
        key = self._order.get(doc_id)
        if key is None:
            key = self._order[doc_id] = natural_order(doc_id)
        return key


def reciprocal_rank_fusion(rankings: list[list[str]], k: int = 60) -> list[tuple[str, float]]:
    """Fuse ranked id lists: score = sum 1/(k + rank) (MAGMA's anchor fusion)."""
    scores: dict[str, float] = defaultdict(float)
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking, start=1):
            scores[doc_id] += 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: item[1], reverse=True)
