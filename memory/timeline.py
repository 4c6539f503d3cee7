"""The active raw turns of a namespace in chronological order, kept sorted as they change.

Questions read the order on every call (a turn's neighbours share its score, MAGMA's
temporal chain; "now" is the latest time in memory; the participants are the speakers
in order of appearance). Re-sorting a 100,000-turn namespace after every stored turn,
or scanning it per question, would cost more than the search itself, so the order is
kept by insertion (bisect) and each read is a lookup.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from datetime import datetime

from strata.memory.records import Record, chronological_key
from strata.memory.store_items import ITEM_PREFIX

_Key = tuple[float, tuple[int, ...], str]


class Timeline:
    """Active raw turns sorted by `chronological_key`, with their speakers and latest time."""

    def __init__(self) -> None:
        self._keys: list[_Key] = []
        self._records: dict[str, Record] = {}  # by id, with the key each was filed under
        self._filed: dict[str, _Key] = {}
        self._first: dict[str, _Key] = {}  # each speaker's first turn
        self._participants: list[str] | None = None  # speakers in order of first turn; rebuilt when that changes
        self._latest: list[Record | None] | None = None  # [latest turn said], found again when the turns change

    def __len__(self) -> int:
        return len(self._keys)

    def put(self, record: Record) -> None:
        """File an active turn (or re-file a changed one)."""
        self.remove(record.id)
        self._latest = None
        key = chronological_key(record)
        insort(self._keys, key)
        self._records[record.id] = record
        self._filed[record.id] = key
        first = self._first.get(record.speaker)
        if record.speaker and (first is None or key < first):
            self._first[record.speaker] = key
            self._participants = None

    def remove(self, record_id: str) -> None:
        key = self._filed.pop(record_id, None)
        if key is None:
            return
        self._latest = None
        del self._keys[bisect_left(self._keys, key)]
        record = self._records.pop(record_id)
        if self._first.get(record.speaker) == key:  # a speaker's first turn left: find their next (rare)
            del self._first[record.speaker]
            later = [k for rid, k in self._filed.items() if self._records[rid].speaker == record.speaker]
            if later:
                self._first[record.speaker] = min(later)
            self._participants = None

    def records(self) -> list[Record]:
        """The turns in order (a new list: O(n), for the readers that need them all)."""
        return [self._records[key[2]] for key in self._keys]

    def adjacent(self, record_id: str, step: int) -> Record | None:
        """The turn `step` places after (negative: before) `record_id`, if any."""
        key = self._filed.get(record_id)
        if key is None:
            return None
        j = bisect_left(self._keys, key) + step
        if 0 <= j < len(self._keys):
            return self._records[self._keys[j][2]]
        return None

    def latest_time(self) -> datetime | None:
        """The latest time of any turn (undated turns sort first, before every dated one)."""
        latest = self.latest_turn()
        return latest.time if latest is not None else None

    def latest_turn(self) -> Record | None:
        """The turn said last, None when no turn is dated. A LangGraph store item is not a turn said: stamped
        when an app put it, it would make "now" the wall clock of a memory replayed from 2023 ("last week"
        then meant this week)."""
        if self._latest is None:
            said = (k for k in reversed(self._keys) if k[0] == -math.inf or not k[2].startswith(ITEM_PREFIX))
            last = next(said, None)
            self._latest = [self._records[last[2]] if last and last[0] != -math.inf else None]
        return self._latest[0]

    def participants(self) -> list[str]:
        """The distinct speakers, in order of their first turn."""
        if self._participants is None:
            self._participants = sorted(self._first, key=self._first.__getitem__)
        return list(self._participants)
