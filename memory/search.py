"""The hybrid search of one question: ranked lists per granularity, fused at the level of turns.

Each granularity the question searches (raw turns, facts, episodes) gives a
dense and a BM25 list, and again inside the question's time window when it has
one (MAGMA section 4: anchors from dense, lexical and time lists fused by
reciprocal rank). A fact stands for the turn it came from (AdaMem: facts
re-activate their turns) unless it was edited since. MAGMA's traversal walks
from the best fused units and what it reaches enters the fusion as one more
ranked list (`memory/graph/traversal.py`). Then the boosts: a turn by the one
person the question is about scores twice (AdaMem's participant resolution),
and a turn inherits a share of its neighbours' scores (MAGMA's temporal chain:
the answer follows the turn that asked).

Participant names in a question dominate a MiniLM embedding (every turn that
addresses "Caroline" looks alike), so the dense query is the question with the
participants' names taken out (`strip_names`); the names act through the
speaker boost and the BM25 list instead. Every constant below was checked
leave-conversations-out (docs/evaluation.md).
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

import numpy as np
from strata.memory import store_items
from strata.memory.bm25 import reciprocal_rank_fusion
from strata.memory.graph.traversal import Reached, traverse
from strata.memory.graph.view import StoreGraph
from strata.memory.records import Kind, Record
from strata.memory.store import MemoryStore

SEARCHABLE: tuple[Kind, ...] = ("raw", "fact", "episode")
POOL = 240  # depth of each ranked list before fusion
RRF_K = 30  # reciprocal-rank constant (MAGMA's anchor fusion); below the usual 60 so top ranks weigh more
ROUTED_WEIGHT = 1.3  # the routed granularity's lists count a little more (AMA routing)
MENTION_LAG = timedelta(days=14)  # records are dated when said; an event is often told a session later
SPEAKER_BOOST = 1.0  # a turn by the one participant the question is about scores twice (AdaMem)
NEIGHBOUR_SHARE = 0.5  # share of the previous turn's score a turn inherits (an answer follows its question)
NEIGHBOUR_SHARE_BACK = 0.25  # share of the next turn's score a turn inherits
ANCHORS = 10  # best fused units a traversal starts from (MAGMA's anchor set)
GRAPH_WEIGHT = 1.0  # the traversal's ranked list counts like one dense or BM25 list in the fusion
# Topic and persona summaries (AdaMem) matched by the question join the traversal's anchors: a gathering
# question finds the one record that lists its answers, and the walk's derived-from edges bring the turns
# it cites (strict recall counts turns, not summaries). This many of the best-fused summaries start a walk.
SUMMARY_ANCHORS = 2


class SearchQuery(Protocol):
    """What the search reads of a plan: the standalone question, its routed granularity, the
    participants it is about and its time window (Research's `Plan` is one)."""

    @property
    def query(self) -> str: ...
    @property
    def route(self) -> Kind: ...
    @property
    def participants(self) -> list[str]: ...
    @property
    def time_window(self) -> tuple[datetime, datetime] | None: ...


@dataclass
class Walked:
    """How the walk reached a unit: the lists that found its anchor, and the record reached with its edges."""

    anchor_lists: list[str]
    reached: Reached


@dataclass
class Unit:
    """One item of the context in the making: a turn, an episode, or a fact shown on its own."""

    key: str
    record: Record
    score: float = 0.0
    found_by: set[str] = field(default_factory=set)
    walked: Walked | None = None  # how the walk reached it, when it did
    until: datetime | None = None  # a superseded fact: when a newer statement replaced it


def strip_names(query: str, participants: Sequence[str]) -> str:
    """The query without the participants' names, for the dense search (see the module docstring)."""
    if not participants:
        return query
    words = {part for p in participants for part in p.split() if len(part) > 1}
    stripped = query
    for word in sorted(words, key=len, reverse=True):
        stripped = re.sub(rf"\b{re.escape(word)}(?:['’]s?)?(?=\W|$)", " ", stripped)
    stripped = re.sub(r"\s+([?.!,])", r"\1", " ".join(stripped.split()))
    content = re.findall(r"[A-Za-z]{3,}", stripped)
    return stripped if len(content) >= 2 else query


class Searcher:
    """The hybrid search of one round: ranked lists per granularity, fused at the level of turns."""

    def __init__(
        self, store: MemoryStore, plan: SearchQuery, dense_text: str, exclude: set[str], compact: bool = False,
        unindexed: set[str] | None = None,
    ) -> None:
        self.store = store
        self.plan = plan
        # Store items put with index=False are never evidence; a caller that already excludes them (a Retry's
        # sub-question is given its round's `exclude`) passes an empty set and saves the ledger query.
        if unindexed is None:
            unindexed = store_items.unindexed(store.ledger, store.namespace)
        self.exclude = exclude | unindexed
        self.vector = store.embedder.embed([dense_text])[0]
        self.raw = store.active("raw")  # a view, not a copy: a namespace may hold 100,000 turns
        self._records: dict[Kind, Mapping[str, Record]] = {"raw": self.raw}
        # A question that gathers many events ("what activities...", told by Research) reads facts,
        # not whole turns: several times more of them fit the token budget (AMA routes such questions
        # away from raw text). Its first round searches no raw turns, and facts are shown on their own.
        self.compact = compact
        self.summaries = True  # summaries may start a walk (the `summaries` switch turns it off)
        self._past: dict[str, Record] = {}  # superseded facts a windowed list found (`past`)

    def records(self, kind: Kind) -> Mapping[str, Record]:
        """A granularity's active records by id (the store's view), looked up once per round."""
        if kind not in self._records:
            self._records[kind] = self.store.active(kind)
        return self._records[kind]

    def ranked(self, kind: Kind, pool: int, window: tuple[datetime, datetime] | None) -> list[tuple[str, list[str]]]:
        """(name, ids) lists: dense and BM25, each optionally inside the time window."""
        dense = [rid for rid, _ in self.store.dense(kind, self.vector, pool, window)]
        lexical = [rid for rid, _ in self.store.lexical(kind, self.plan.query, pool, window)]
        return [("dense", dense), ("bm25", lexical)]

    def units(
        self, kinds: Sequence[Kind], pool: int, light: bool = False, walk: dict[str, float] | None = None
    ) -> dict[str, Unit]:
        """Fused units from `kinds`: raw turns (found directly or through their facts), and the
        episodes and facts that stand on their own. `light` (a turn being stored, not a question)
        leaves out the time window and the boosts; `walk` (edge type -> weight) adds the records a
        traversal reaches from the best of them as one more ranked list."""
        scores: dict[str, float] = {}
        found: dict[str, set[str]] = {}
        shown: MutableMapping[str, Record] = ChainMap({}, self.raw)  # what each unit shows; turns by default
        # Lists restricted to the question's time window count again, beside the unrestricted ones.
        windows: list[tuple[tuple[datetime, datetime] | None, str]] = [(None, "")]
        if self.plan.time_window is not None and not light:
            start, end = self.plan.time_window
            # the lag stops at the calendar's end: a window up to 31 December 9999 has no later day to reach
            windows.append(((start, min(end, datetime.max - MENTION_LAG) + MENTION_LAG), "time"))
        for kind in kinds:
            weight = ROUTED_WEIGHT if kind == self.plan.route else 1.0  # a fact's lists count as its turn's
            for window, tag in windows:
                for name, ids in self.ranked(kind, pool, window):
                    for rank, key in enumerate(self._to_units(kind, ids, shown), start=1):
                        scores[key] = scores.get(key, 0.0) + weight / (RRF_K + rank)
                        found.setdefault(key, set()).add(tag or name)
                        if kind == "fact":
                            found[key].add("fact")
        until: dict[str, datetime] = {}
        if len(windows) > 1 and "fact" in kinds:
            weight = ROUTED_WEIGHT if self.plan.route == "fact" else 1.0
            until = self.past(windows[1][0])  # type: ignore[arg-type]
            for rank, key in enumerate(until, start=1):
                shown.setdefault(key, self._past[key])
                scores[key] = scores.get(key, 0.0) + weight / (RRF_K + rank)
                found.setdefault(key, set()).update(("time", "fact", "past"))
        walked = self._walk(scores, found, shown, kinds, walk) if walk else {}
        if not light:
            self._boost(scores, shown)
        return {
            key: Unit(key=key, record=shown[key], score=score, found_by=found.get(key, set()), walked=walked.get(key),
                      until=until.get(key))
            for key, score in scores.items()
            if key in shown and key not in self.exclude
        }

    def past(self, window: tuple[datetime, datetime]) -> dict[str, datetime]:
        """The superseded facts that held during the question's window (said before its end, replaced after
        its start), nearest the question first, with when each was replaced: "where did Ann live in May?"
        is answered by May's fact after she moved, not only by the fact that replaced it."""
        start, end = window
        said_by_then = [r for r in self.store.superseded("fact") if r.time is not None and r.time <= end]
        ends = self.store.valid_until(said_by_then)
        held = {r.id: r for r in said_by_then if r.id in ends and ends[r.id] >= start}
        if not held:
            return {}
        vectors = self.store.vectors(sorted(held))
        similarity = {rid: float(np.dot(vectors[rid], self.vector)) if rid in vectors else -1.0 for rid in held}
        nearest = sorted(held, key=lambda rid: (-similarity[rid], rid))[:POOL]  # a pool, as each ranked list is
        self._past.update({rid: held[rid] for rid in nearest})
        return {rid: ends[rid] for rid in nearest}

    def _walk(
        self, scores: dict[str, float], found: dict[str, set[str]], shown: MutableMapping[str, Record],
        kinds: Sequence[Kind],
        weights: dict[str, float],
    ) -> dict[str, Walked]:
        """MAGMA's traversal from the best fused units; what it reaches enters the fusion as a ranked
        list of its own, and each unit it ranks keeps the path it was reached by."""
        anchors = [k for k, _ in sorted(scores.items(), key=lambda kv: -kv[1]) if k not in self.exclude][:ANCHORS]
        bridges = self.summary_anchors() if weights.get("derived_from", 0.0) > 0 else []
        top = max((scores[a] for a in anchors), default=1.0) or 1.0
        strength = {a: scores[a] / top for a in anchors} | dict.fromkeys(bridges, 1.0)
        reached = traverse(strength, self.vector, StoreGraph(self.store), weights)
        ranking: dict[str, Reached] = {}
        for item in sorted(reached.values(), key=lambda r: (-r.score, r.id)):
            for key in self._reached_keys(item.id, kinds, shown):
                ranking.setdefault(key, item)
        lists = {a: sorted(found.get(a, set())) for a in anchors} | {b: ["summary"] for b in bridges}
        walked: dict[str, Walked] = {}
        fresh = [(key, item) for key, item in ranking.items() if key not in self.exclude and key not in lists]
        for rank, (key, item) in enumerate(fresh, start=1):  # an anchor's own facts lead back to it: not new
            scores[key] = scores.get(key, 0.0) + GRAPH_WEIGHT / (RRF_K + rank)
            walked[key] = Walked(anchor_lists=lists[item.anchor], reached=item)
            found.setdefault(key, set()).add("graph")
        return walked

    def summary_anchors(self) -> list[str]:
        """The summaries that best match the question (dense and BM25 fused), as extra starts of the walk."""
        if SUMMARY_ANCHORS <= 0 or not self.summaries:
            return []
        fused = reciprocal_rank_fusion([ids for _, ids in self.ranked("summary", POOL, None)])
        return [i for i, _ in fused[:SUMMARY_ANCHORS]]

    def _reached_keys(self, record_id: str, kinds: Sequence[Kind], shown: MutableMapping[str, Record]) -> list[str]:
        """The unit keys a reached record stands for (an unedited fact is its turn, as in `_to_units`)."""
        kind = record_id.split(":", 1)[0]
        if kind not in kinds or kind not in SEARCHABLE:
            return []
        return self._to_units(kind, [record_id], shown)  # type: ignore[arg-type]

    def _to_units(self, kind: Kind, ids: list[str], shown: MutableMapping[str, Record]) -> list[str]:
        """A ranked id list as ranked unit keys. A fact stands for its source turn (AdaMem), unless it was
        edited since (the turn no longer says what the fact says) or its turn is gone: then it is shown itself."""
        ranking: dict[str, None] = {}
        by_id = self.records(kind)
        for record in (by_id[i] for i in ids if i in by_id):
            keys = [record.id]
            if kind == "fact":
                turns = [f"raw:{s}" for s in record.source_ids if f"raw:{s}" in self.raw]
                if turns and record.version == 1 and not self.compact:
                    keys = turns
            for key in keys:
                shown.setdefault(key, record)
                ranking.setdefault(key, None)
        return list(ranking)

    def _boost(self, scores: dict[str, float], shown: MutableMapping[str, Record]) -> None:
        """Speaker boost (AdaMem participant resolution), neighbour share (MAGMA temporal chain), and an
        edited fact ranked with the turn it corrects."""
        if len(self.plan.participants) == 1:
            who = self.plan.participants[0]
            for key in scores:
                record = shown.get(key)
                if record is not None and (record.speaker == who or record.subject == who):
                    scores[key] *= 1.0 + SPEAKER_BOOST
        inherited: dict[str, float] = {}
        turns = [key for key in scores if key in self.raw]
        for step, share in ((1, NEIGHBOUR_SHARE), (-1, NEIGHBOUR_SHARE_BACK)):
            for key, other in self.store.adjacent(turns, step).items():
                turn = self.raw.get(key)
                if turn is not None and other.session == turn.session:
                    inherited[other.id] = max(inherited.get(other.id, 0.0), share * scores[key])
        for key, share in inherited.items():
            scores[key] = scores.get(key, 0.0) + share
        for key in list(scores):
            record = shown.get(key)
            if record is not None and record.kind == "fact":
                turns = [scores.get(f"raw:{s}", 0.0) for s in record.source_ids]
                scores[key] = max([scores[key], *turns])
