"""Derived writes held back and written together: the write-behind of an ingest.

Chroma pays a fixed cost per upsert call (about 4 ms on an idle embedded store,
several times that while the embedder runs beside it, plus a fraction of a
millisecond per record), so writing each turn's facts on their own made per-call
overhead the second cost of an ingest after embedding. The Memory role
therefore stages what it derives from a turn (records with their vectors,
links, small ledger state such as the open episode and the pending marks) and
the store writes a whole batch at once: one upsert per kind, then one ledger
transaction for links and state.

Staged records are readable at once (the store mirrors them and searches their
vectors here by brute force), so later turns of the same input see them exactly
as if they were written. Durability does not depend on the stage: raw turns are
written ahead and stay marked pending until the ledger transaction that clears
the mark also holds their links, so a crash before a flush leaves those turns to
be derived again, with the same deterministic ids (nothing is duplicated).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from strata.memory.records import Kind, Link, Record, Status

FLUSH_TURNS = 32
"""Turns staged at most before a flush: bounds the work redone after a crash (and the memory held);
at 32 the per-call upsert cost is already below 1 ms a turn."""


class StagedWrites(BaseModel):
    """Records, vectors, links and ledger state of the turns derived since the last flush."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    records: dict[str, Record] = Field(default_factory=dict)
    vectors: dict[str, np.ndarray] = Field(default_factory=dict)
    links: dict[tuple[str, str, str], Link] = Field(default_factory=dict)
    unlinks: dict[tuple[str, str, str], Link] = Field(
        default_factory=dict, description="Links the batch removes (a chain link a backfilled turn came between)."
    )
    state: dict[str, object] = Field(default_factory=dict)
    turns: int = 0
    before: dict[str, Record | None] = Field(
        default_factory=dict, description="Each staged id as stored before this batch (None: new), for the journal."
    )

    def __bool__(self) -> bool:
        return bool(self.records or self.links or self.unlinks or self.state)

    def put(
        self, records: Sequence[Record], vectors: np.ndarray | None, links: Iterable[Link], state: dict[str, object],
        stored: dict[str, Record] | None = None, unlinks: Iterable[Link] = (),
    ) -> None:
        """Stage one turn's derived writes (a later version of an id or a key replaces the earlier one);
        without `vectors`, the records' vectors are filled in when first needed (`unresolved`). `stored`
        holds the stored versions of the ids, kept for the journal as they were before the batch."""
        for i, record in enumerate(records):
            if record.id not in self.records:
                self.before[record.id] = (stored or {}).get(record.id)
            self.records[record.id] = record
            if vectors is None:
                self.vectors.pop(record.id, None)
            else:
                self.vectors[record.id] = vectors[i]
        for link in unlinks:  # an earlier turn of the batch may have staged it
            key = (link.src, link.dst, link.type.value)
            self.links.pop(key, None)
            self.unlinks[key] = link
        for link in links:
            key = (link.src, link.dst, link.type.value)
            self.links[key] = link
            self.unlinks.pop(key, None)
        self.state.update(state)
        self.turns += 1

    def unresolved(self, kind: Kind | None = None) -> list[Record]:
        """Staged records (of `kind`, or all) whose vectors are not filled in yet."""
        return [r for rid, r in self.records.items() if rid not in self.vectors and kind in (None, r.kind)]

    def nearest(
        self, kind: Kind, vector: np.ndarray, time_window: tuple[datetime, datetime] | None, include_inactive: bool
    ) -> list[tuple[str, float]]:
        """Cosine similarity of every staged record of `kind` that passes the filters a Chroma query applies."""
        found: list[tuple[str, float]] = []
        for record_id, record in self.records.items():
            if record.kind != kind or (not include_inactive and record.status != Status.ACTIVE):
                continue
            if time_window is not None and (record.time is None or not time_window[0] <= record.time <= time_window[1]):
                continue
            found.append((record_id, float(np.dot(self.vectors[record_id], vector))))
        return found

    def neighbours(self, ids: set[str]) -> list[Link]:
        """Staged links touching any of `ids`."""
        return [link for link in self.links.values() if link.src in ids or link.dst in ids]


def merge_nearest(
    stored: list[tuple[str, float]], staged: list[tuple[str, float]], replaced: set[str], k: int
) -> list[tuple[str, float]]:
    """One top-k from Chroma's hits and the staged ones; a staged version (in `replaced`) hides its
    stored one, whether or not the staged version passes the filters."""
    if not replaced:
        return stored
    best = {rid: score for rid, score in stored if rid not in replaced}
    best.update(staged)
    return sorted(best.items(), key=lambda pair: -pair[1])[:k]
