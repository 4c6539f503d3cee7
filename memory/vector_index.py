"""Exact cosine search over a small collection's vectors, held in process memory beside its mirror.

A Chroma query costs about a millisecond whatever the collection's size, and an ingest makes three per
turn (the turn's research and its note's candidates): with the embedder on onnxruntime, Chroma calls
were half of the ingest's critical path (py-spy, conv-26). Below `EXACT_LIMIT` records a matrix product
over every vector answers the same question in tens of microseconds, exactly (Chroma's HNSW index is
approximate), for 1.5 KB of memory a record. Larger collections are searched by Chroma as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

import numpy as np
from strata.memory.records import natural_order

EXACT_LIMIT = 5_000
"""Records of one kind up to which a namespace searches its vectors in memory (7.5 MB at most per kind;
a product over 5,000 vectors takes about as long as one Chroma query)."""


class ExactIndex:
    """Unit vectors by id in one growing matrix; `nearest` ranks them all by dot product."""

    def __init__(self) -> None:
        self._matrix = np.zeros((0, 0), dtype=np.float32)  # sized by the first vector put
        self._ids: list[str | None] = []  # row -> id (None: a removed row, reused by the next put)
        self._rows: dict[str, int] = {}
        self._free: list[int] = []

    def __len__(self) -> int:
        return len(self._rows)

    def put(self, ids: Iterable[str], vectors: np.ndarray) -> None:
        """Add or replace the vectors of `ids`."""
        for record_id, vector in zip(ids, vectors, strict=True):
            row = self._rows.get(record_id)
            if row is None:
                row = self._free.pop() if self._free else self._grow(len(vector))
                self._rows[record_id] = row
                self._ids[row] = record_id
            self._matrix[row] = vector

    def get(self, record_id: str) -> np.ndarray | None:
        """The vector of `record_id`, or None when it is not held."""
        row = self._rows.get(record_id)
        return None if row is None else self._matrix[row]

    def remove(self, record_id: str) -> None:
        row = self._rows.pop(record_id, None)
        if row is not None:
            self._ids[row] = None
            self._matrix[row] = 0.0  # a free row never outranks a real one: its score is 0
            self._free.append(row)

    def nearest(self, vector: np.ndarray, k: int, allowed: Callable[[str], bool]) -> list[tuple[str, float]]:
        """The k most similar allowed ids with their cosine similarity, best first."""
        used = len(self._ids)
        if k <= 0 or not self._rows:
            return []
        scores = similarities(self._matrix[:used], np.asarray(vector, dtype=np.float32))
        order = np.argsort(-scores, kind="stable")
        found: list[tuple[str, float]] = []
        for row in order:
            record_id = self._ids[row]
            if record_id is None or not allowed(record_id):
                continue
            score = float(scores[row])
            if len(found) >= k and score != found[-1][1]:
                break  # past the k-th, only records as similar as it (the same text) are read on
            found.append((record_id, score))
        found.sort(key=lambda hit: (-hit[1], natural_order(hit[0])))  # equal ones by id, not by load order
        return found[:k]

    def _grow(self, dim: int) -> int:
        row = len(self._ids)
        if row == len(self._matrix):
            grown = np.zeros((max(64, 2 * len(self._matrix)), dim), dtype=np.float32)
            if row:
                grown[:row] = self._matrix
            self._matrix = grown
        self._ids.append(None)
        return row


_ONE_THREAD = threading.Lock()


@cache
def _blas() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="blas")


def similarities(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """`matrix @ vector` on one BLAS thread. OpenBLAS splits a product this size over every core: on a
    machine whose cores are busy (the embedder's threads, another process) its second thread waits to be
    scheduled, and a product of 50 microseconds took 10 to 25 ms, most of an ingest's time past 1,000
    turns. One thread also gives every row's score the same low bits whatever the number of cores (a
    split puts a row in another position of the kernel's blocks, which can change its last bit)."""
    with _ONE_THREAD, _blas().limit(limits=1):  # the limit is process-wide: one caller sets and restores it
        return matrix @ vector
