"""Query-time traversal of the memory graph: a budgeted beam search over typed edges.

MAGMA (section 4, Algorithm 1) starts from anchors found by fused dense, lexical
and time lists and walks the typed graphs, the edge types weighted by what the
question asks (a why-question follows causal edges first, a when-question the
temporal chain, a who- or what-question the entity edges); AdaMem (section 3.3)
propagates scores along the graph with a decay per step. Here a record reached
over an edge scores its own similarity to the question (blended with its
parent's score by `SIMILARITY_SHARE`: AdaMem's propagation), times the edge type's
weight for the question's focus, times the link's own weight, times a decay per
hop; the best few of each hop are expanded further (the beam), and the walk
stops after a fixed number of hops or records. A node without a vector (an
entity node, say) passes its parent's score on instead, so it can bridge two
records without ranking itself.

Every record reached keeps the path it was reached by (the anchor, then each
edge type and hop), so a context can show why each item is in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
from strata.memory.records import Link, natural_order

Focus = Literal["why", "when", "who", "what", "list", "other"]

# MAGMA walks a few hops. Offline, one hop reaches more gold evidence than two at every budget measured
# (the second hop's far neighbours crowd the walk's ranked list; docs/evaluation.md, leave-conversations-out).
HOPS = 1
BEAM = 8  # records per hop whose edges are followed further (a walk of one hop expands none)
MAX_REACHED = 400  # the walk's budget: the best scored records it keeps
# Per hop: a record two edges away needs a higher similarity to rank with a near one (one hop: the same
# factor for every record reached, so no effect on their order).
DECAY = 0.8
# How much of a reached record's score is its own similarity to the question; the rest is its parent's
# score passed on (AdaMem's score propagation: the neighbour of a strong anchor inherits its strength).
# 1.0 ranks neighbours by similarity alone (MAGMA), 0.0 by where they were reached from alone.
SIMILARITY_SHARE = 0.0  # chosen leave-conversations-out (docs/evaluation.md: 0 over 0.5 and 1.0)

# How far each edge type is trusted when it is not the question's favoured kind of edge.
BASE_WEIGHTS: dict[str, float] = {
    "related": 0.8,  # the earlier turn a turn refers to (AMA's R_t)
    "semantic": 0.8,  # similar notes (A-MEM links)
    "entity": 0.7,  # records naming the same person, place, object or activity
    "derived_from": 0.7,  # a fact, episode, summary or persona trait and the turns it came from
    "causal": 0.6,  # one event given as the reason for another
    "temporal": 0.5,  # the next or previous turn
    "supersedes": 0.3,  # a newer version of a record
}
UNKNOWN_WEIGHT = 0.5  # an edge type this module does not know yet
# MAGMA's intent-aware routing: the edge types a question of each focus follows at full weight.
FAVOURED: dict[Focus, tuple[str, ...]] = {
    "why": ("causal", "related"),
    "when": ("temporal", "derived_from"),
    "who": ("entity",),
    "what": ("entity", "semantic"),
    "list": ("derived_from", "entity", "semantic"),  # topic summaries and persona traits cite their turns
    "other": (),
}

_WHY = re.compile(r"^\s*(why|how come)\b|\b(reason|because|cause[sd]?|motivat\w*|made \w+ (?:decide|want))\b", re.I)
_WHEN = re.compile(r"^\s*(when|how long|since when|what (?:date|day|year|month|time))\b", re.I)
_WHO = re.compile(r"^\s*(who|whom|whose)\b", re.I)
_WHAT = re.compile(r"^\s*(what|which|where|how)\b", re.I)


def focus_of(question: str, broad: bool = False) -> Focus:
    """The kind of link the question is about: why -> causal, when -> temporal, who/what -> entity,
    a question gathering many things -> the summaries and traits that list them."""
    if _WHY.search(question):
        return "why"
    if _WHEN.search(question):
        return "when"
    if broad:
        return "list"
    if _WHO.search(question):
        return "who"
    if _WHAT.search(question):
        return "what"
    return "other"


def edge_weights(focus: Focus, disabled: Iterable[str] = ()) -> dict[str, float]:
    """Edge type -> weight for a question of this focus; `disabled` types (ablations) weigh nothing."""
    weights = dict(BASE_WEIGHTS)
    for kind in FAVOURED[focus]:
        weights[kind] = 1.0
    for kind in disabled:
        weights[kind] = 0.0
    return weights


class GraphView(Protocol):
    """What the walk reads: the typed edges around some records and the records' vectors."""

    def edges(self, ids: Sequence[str]) -> list[Link]: ...

    def vectors(self, ids: Iterable[str]) -> dict[str, np.ndarray]: ...

    def records(self, ids: Iterable[str]) -> set[str]: ...


@dataclass(frozen=True)
class Step:
    """One edge of a path: its type, the record it left from, the record it reached, and the hop."""

    via: str
    src: str
    dst: str
    hop: int


@dataclass(frozen=True)
class Reached:
    """A record the walk reached: its score, the anchor it started from, and the edges taken."""

    id: str
    score: float
    anchor: str
    path: tuple[Step, ...]


def traverse(
    anchors: Sequence[str] | Mapping[str, float], query: np.ndarray, view: GraphView, weights: Mapping[str, float], *,
    hops: int | None = None, beam: int | None = None, max_reached: int | None = None, decay: float | None = None,
) -> dict[str, Reached]:
    """Records reached from `anchors` (not the anchors themselves; a mapping gives each anchor's strength
    in [0, 1], a list starts them all at 1), best path each, by the rule in the module docstring. Unset
    limits are the module's constants, read at call time (so a tuning run can set them)."""
    hops = HOPS if hops is None else hops
    beam = BEAM if beam is None else beam
    max_reached = MAX_REACHED if max_reached is None else max_reached
    decay = DECAY if decay is None else decay
    strength = dict(anchors) if isinstance(anchors, Mapping) else dict.fromkeys(anchors, 1.0)
    starts = list(strength)
    best: dict[str, Reached] = {}
    paths: dict[str, Reached] = {a: Reached(a, strength[a], a, ()) for a in starts}
    share = SIMILARITY_SHARE
    frontier = starts
    query = _unit(query)
    for hop in range(1, hops + 1):
        if not frontier or len(best) >= max_reached:
            break
        edges = [e for e in view.edges(frontier) if weights.get(e.type.value, UNKNOWN_WEIGHT) > 0]
        candidates: list[tuple[str, str, Link]] = []
        frontier_set = set(frontier)
        for edge in edges:
            for here, there in ((edge.src, edge.dst), (edge.dst, edge.src)):
                if here in frontier_set and there not in paths:
                    candidates.append((here, there, edge))
        # in the ids' order, not the ledger's (which differs between two copies of one memory): of two
        # equal paths to a record, the same one is kept
        candidates.sort(key=lambda c: (natural_order(c[0]), natural_order(c[1]), c[2].type.value))
        reached_ids = sorted({there for _, there, _ in candidates})
        # vectors only when a neighbour's own similarity counts (a read of each from the vector store);
        # otherwise only which ids are records
        vectors = view.vectors(reached_ids) if share > 0 else {}
        known = set(vectors) if share > 0 else view.records(reached_ids)
        found: dict[str, Reached] = {}
        for here, there, edge in candidates:
            weight = weights.get(edge.type.value, UNKNOWN_WEIGHT) * max(edge.weight, 0.0) * decay**hop
            parent = paths[here]
            vector = vectors.get(there)
            similar = max(float(_unit(vector) @ query), 0.0) if vector is not None else parent.score
            own = share * similar + (1.0 - share) * parent.score
            score = own * weight
            if score <= 0 or (there in found and found[there].score >= score):
                continue
            step = Step(via=edge.type.value, src=here, dst=there, hop=hop)
            found[there] = Reached(there, score, parent.anchor, (*parent.path, step))
        ranked = sorted(found.values(), key=lambda r: (-r.score, natural_order(r.id)))[: max_reached - len(best)]
        for reached in ranked:
            paths[reached.id] = reached
            if reached.id in known:  # bridges (entity nodes) are walked through, never shown
                best[reached.id] = reached
        frontier = [r.id for r in ranked[:beam]]
    return best


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector
