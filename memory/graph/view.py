"""A namespace's memory seen as a graph: its typed links (the ledger) and its records' vectors (Chroma)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from strata.memory.records import Link, LinkType
from strata.memory.store import MemoryStore


class StoreGraph:
    """The `GraphView` a traversal walks, over one store."""

    def __init__(self, store: MemoryStore, types: Iterable[LinkType] | None = None) -> None:
        self.store = store
        self.types = list(types) if types is not None else None

    def edges(self, ids: Sequence[str]) -> list[Link]:
        return self.store.ledger.neighbours(self.store.namespace, ids, self.types)

    def vectors(self, ids: Iterable[str]) -> dict[str, np.ndarray]:
        return self.store.vectors(ids)

    def records(self, ids: Iterable[str]) -> set[str]:
        """The ids that are stored records, from the mirrors (entity nodes and unknown ids are not)."""
        return {record.id for record in self.store.get(ids)}
