"""The context a question gets: units ranked per token, chosen under the token budget, shown in order.

MAGMA (section 4) linearises what the search found chronologically, each item
with its id and date, under a token budget; AMA's Retriever bounds the context
by K. Here every unit is ranked by its fused score per token^COST_EXPONENT, so
a long turn must be more relevant to take the place of two short ones, and the
best are kept until the budget (date headings counted) is spent. Research
builds its contexts here; the evaluation budgets its baselines the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, TypeVar

from strata.agents.common import brief_line, context_lines, date_heading, evidence_of
from strata.evaluation.tokens import count_tokens as _count_tokens
from strata.graph.state import Evidence, PathStep, day_of
from strata.memory.records import chronological_key
from strata.memory.search import Unit

COST_EXPONENT = 0.35  # score / tokens**0.35: a long turn must be more relevant to take a short one's place
MAX_EPISODES = 2  # episodes are long: at most this many in a question's context


@lru_cache(maxsize=50_000)
def line_tokens(text: str) -> int:
    """cl100k tokens of one context line and its newline (cached: the same records recur across questions)."""
    return _count_tokens(text) + 1


def unit_evidence(unit: Unit, people: Sequence[str] = (), line: str | None = None) -> Evidence:
    item = evidence_of(unit.record, round(unit.score, 6), sorted(unit.found_by), people, line, unit.until)
    item.path = path_of(unit)
    return item


def path_of(unit: Unit) -> list[PathStep]:
    """How a unit reached the context: its anchor's lists, then each edge the walk followed."""
    if unit.walked is None:
        return [PathStep(step="anchor", via=sorted(unit.found_by - {"graph"}), dst=unit.key)]
    reached = unit.walked.reached
    start = PathStep(step="anchor", via=unit.walked.anchor_lists, dst=reached.anchor)
    return [start, *(PathStep(step="edge", via=[s.via], src=s.src, dst=s.dst, hop=s.hop) for s in reached.path)]


class Shown(Protocol):
    """What `select` budgets an item by: its id and kind, the line it shows and the day it is under."""

    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def line(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def text(self) -> str: ...
    def day(self) -> str: ...


ShownT = TypeVar("ShownT", bound=Shown)


@dataclass
class Candidate:
    """A ranked unit before it becomes evidence: its line and its score per token, all `select` needs.
    A question at 100,000 records ranks thousands of units and keeps a few dozen, so only those chosen
    are built as `Evidence` (building every one was a third of a question's time)."""

    unit: Unit
    line: str
    score: float
    people: Sequence[str] = ()

    @property
    def id(self) -> str:
        return self.unit.record.id

    @property
    def kind(self) -> str:
        return self.unit.record.kind

    @property
    def label(self) -> str:
        return ""

    @property
    def text(self) -> str:
        return self.unit.record.text

    def day(self) -> str:
        return day_of(self.unit.record.local_time())

    def evidence(self) -> Evidence:
        item = unit_evidence(self.unit, self.people, self.line)
        item.score = self.score
        return item


def candidates(units: dict[str, Unit], people: Sequence[str] = ()) -> list[Candidate]:
    """Units best first; the score is per token^COST_EXPONENT so that short items compete (a turn's
    tokens as shown: without small talk when `people` are given)."""
    ranked = []
    for unit in units.values():
        line = brief_line(unit.record, people, unit.until)
        score = round(round(unit.score, 6) / (line_tokens(line) ** COST_EXPONENT), 8)
        ranked.append(Candidate(unit, line, score, people))
    return sorted(ranked, key=lambda c: (-c.score, c.id))


def select(ranked: Sequence[ShownT], budget: int, limit: int | None = None) -> list[ShownT]:
    """Best first until the token budget (or `limit` items) is reached; each record once.

    Items are already one per source turn: a fact is shown on its own only when it
    says something its turn does not (see `Searcher._to_units`).
    """
    chosen: list[ShownT] = []
    ids: set[str] = set()
    days: set[str] = set()
    used = 0
    episodes = 0
    for item in ranked:
        if item.id in ids or (item.kind == "episode" and episodes >= MAX_EPISODES):
            continue
        cost = item_tokens(item) + (0 if item.day() in days else line_tokens(date_heading(item.day())))
        if used + cost > budget:
            continue
        chosen.append(item)
        ids.add(item.id)
        days.add(item.day())
        used += cost
        episodes += item.kind == "episode"
        if limit is not None and len(chosen) >= limit:
            break
    return chosen


def chronological(items: Iterable[Evidence]) -> list[Evidence]:
    return sorted(items, key=chronological_key)


def item_tokens(item: Shown) -> int:
    return line_tokens(item.line or item.label or item.text)


def context_tokens(items: Sequence[Evidence]) -> int:
    """Tokens of the context as the roles see it (`agents.common.context_lines`), in chronological order."""
    return sum(line_tokens(line) for line in context_lines(chronological(items)))
