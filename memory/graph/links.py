"""The entity graph in the ledger: mention edges to entity nodes, and weighted entity links.

MAGMA (3.2) connects events to abstract entity nodes so that one thing stays
one node across disjoint stretches of the timeline. Here a record mentioning
an entity gets a `mentions` edge to the node `entity:<key>` (the node's label
and type live in a small catalogue in the ledger's state), and on the fast path
an `entity` link to the latest few earlier records that mention the same node.
The slow path (memory/graph/consolidation.py) densifies: every pair of records
sharing a specific entity.

How much a shared entity says is its specificity, from document frequency:
an entity named by a few turns connects them strongly; one named by a large
share of the conversation ("Caroline" in a conversation with Caroline)
connects nothing, so it gets no entity links at all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pydantic import BaseModel
from strata.memory.graph.entities import Mention
from strata.memory.records import Link, LinkType, Record, chronological_key, entity_node_id, id_numbers
from strata.memory.store import MemoryStore

CATALOGUE = "entity_catalogue"  # ledger state: {key: [label, type]}
LAST_TURN = "last_raw"  # ledger state: the raw turn the next one's temporal link starts from
# An entity mentioned by more than this share of the raw turns is too common to connect them
# (participants' own names, "time", "thing"); below COMMON_FLOOR mentions it always may.
COMMON_SHARE = 0.05
COMMON_FLOOR = 4
# On the fast path a new record links to this many of the latest earlier mentions per entity;
# consolidation links the rest.
RECENT_MENTIONS = 2
KEYS_PER_QUERY = 500  # entity nodes per ledger query (SQLite binds two variables per node)
LINKED_KINDS = ("raw",)  # record-to-record entity links join raw turns; facts get mention edges only


class EntityNode(BaseModel):
    """One node of the entity graph, as the catalogue and the mention edges describe it."""

    key: str
    label: str
    type: str
    records: list[str]


def specificity(mentions: int, total: int) -> float:
    """Weight of a link through an entity named by `mentions` of `total` records: 1 for a pair, less for many.

    Inverse document frequency scaled to (0, 1]; 0 when the entity is too common to connect anything.
    """
    if mentions <= 1:
        return 1.0
    if mentions > max(COMMON_FLOOR, COMMON_SHARE * total):
        return 0.0
    total = max(total, mentions + 1)
    return round(max(0.05, math.log(total / (mentions - 1)) / math.log(total)), 4)


def mention_links(namespace: str, record: Record, mentions: Sequence[Mention]) -> list[Link]:
    """The record's edges to its entity nodes."""
    return [
        Link(namespace=namespace, src=record.id, dst=entity_node_id(m.key), type=LinkType.MENTIONS)
        for m in mentions
    ]


def earlier_mentions(store: MemoryStore, keys: Iterable[str]) -> dict[str, list[str]]:
    """For each entity key, the records already mentioning it (written or staged by this batch), read
    with one query for all the keys."""
    nodes = {entity_node_id(key): key for key in keys}
    found: dict[str, dict[str, None]] = {key: {} for key in nodes.values()}
    names = list(nodes)
    for start in range(0, len(names), KEYS_PER_QUERY):
        for link in store.edges(names[start : start + KEYS_PER_QUERY], [LinkType.MENTIONS]):
            key = nodes.get(link.dst)
            if key is not None and link.src not in nodes:
                found[key][link.src] = None
    return {key: list(records) for key, records in found.items()}


def entity_links(
    namespace: str, record: Record, mentions: Sequence[Mention], earlier: dict[str, list[str]], total_raw: int,
    order: dict[str, tuple[object, ...]] | None = None,
) -> list[Link]:
    """Fast path: link a new raw turn to the latest earlier turns that share a specific entity with it.

    `earlier` maps each key to the records already mentioning it; `order` (optional) sorts them
    chronologically, else their ids' numbers do. A pair sharing several entities keeps the strongest weight.
    """
    if record.kind not in LINKED_KINDS:
        return []
    best: dict[str, float] = {}
    for mention in mentions:
        others = [r for r in earlier.get(mention.key, []) if r != record.id and r.split(":", 1)[0] in LINKED_KINDS]
        weight = specificity(len(others) + 1, total_raw)
        if weight <= 0:
            continue
        others.sort(key=lambda rid: (order or {}).get(rid) or id_numbers(rid))
        for other in others[-RECENT_MENTIONS:]:
            best[other] = max(best.get(other, 0.0), weight)
    return [
        Link(namespace=namespace, src=record.id, dst=other, type=LinkType.ENTITY, weight=weight)
        for other, weight in best.items()
    ]


def still_mentioned(store: MemoryStore, keys: Iterable[str]) -> set[str]:
    """The entity keys some record still mentions."""
    return {key for key, records in earlier_mentions(store, keys).items() if records}


def catalogue_update(known: dict[str, list[str]], mentions: Sequence[Mention]) -> dict[str, list[str]]:
    """New catalogue entries (label, type) for entities not seen before; a typed entry replaces 'other'/'name'."""
    new: dict[str, list[str]] = {}
    for m in mentions:
        entry = known.get(m.key)
        if entry is None or (entry[1] in ("other", "name") and m.type not in ("other", "name")):
            new[m.key] = [m.label, m.type]
    return new


def temporal_links(
    store: MemoryStore, raw: Record, pending: set[str]
) -> tuple[list[Link], dict[str, object], list[Link]]:
    """The turn's place in the chain of turns said ("src precedes dst"), the state to save with it, and the
    link it replaces.

    A turn said after the last one derived follows it, and is the next one's start. Older talk added later
    (a backfill) is placed where it was said: linked from the derived turn said just before it and to the one
    said just after, leaving the chain's end where it was (it was linked after the latest turn, as said later).
    The link between those two goes: they no longer follow each other (a walk from the one before would
    otherwise skip the backfilled turn, and a turn gained a second "previous turn").
    """
    previous = store.state(LAST_TURN)
    last = store.get([previous]) if isinstance(previous, str) and previous != raw.id else []
    undated = raw.time is None or (bool(last) and last[0].time is None)  # no time to place it by: it comes now
    if not last or undated or chronological_key(last[0]) <= chronological_key(raw):
        return [Link(namespace=store.namespace, src=r.id, dst=raw.id, type=LinkType.TEMPORAL) for r in last], {
            LAST_TURN: raw.id}, []
    # a neighbour still to be derived (later in the same input) links to this one itself when derived
    before = store.adjacent([raw.id], -1).get(raw.id)
    after = store.adjacent([raw.id], 1).get(raw.id)
    links: list[Link] = []
    if before is not None and before.id not in pending:
        links.append(Link(namespace=store.namespace, src=before.id, dst=raw.id, type=LinkType.TEMPORAL))
    if after is not None and after.id not in pending:
        links.append(Link(namespace=store.namespace, src=raw.id, dst=after.id, type=LinkType.TEMPORAL))
    first, then = _derived_beside(store, before, -1, pending), _derived_beside(store, after, 1, pending)
    replaced = [Link(namespace=store.namespace, src=first.id, dst=then.id, type=LinkType.TEMPORAL)] \
        if first is not None and then is not None else []
    return links, {}, replaced


def _derived_beside(store: MemoryStore, turn: Record | None, step: int, pending: set[str]) -> Record | None:
    """`turn`, or the first turn past it (in the direction of `step`) that is derived: the ends of the link
    a backfilled turn comes between, when its own neighbours are still to be derived (later in its input)."""
    while turn is not None and turn.id in pending:
        turn = store.adjacent([turn.id], step).get(turn.id)
    return turn
