"""The graph's fast path for one turn (MAGMA 3.4, Algorithm 2): what is written while ingesting.

Given the turn's entity mentions, its note and the link decisions (from the
offline rules or the chat model; the Memory role chooses), this writes mention
edges and entity links, stores the note on the raw record, writes the semantic
links and applies memory evolution. Everything slower (densifying entity
links, causal links, summaries) waits for the slow path.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field
from strata.memory.graph import links as entity_graph
from strata.memory.graph.entities import Mention, find_mentions
from strata.memory.graph.evolution import Evolution, apply, evolve_offline
from strata.memory.graph.notes import CANDIDATES, Candidate, LinkDecision, Note, decide_offline, note_of, semantic_links
from strata.memory.records import Link, Record
from strata.memory.store import MemoryStore

POOL = 8  # dense hits fetched per candidate wanted: turns written ahead but not yet derived are skipped


class TurnGraph(BaseModel):
    """What the fast path wrote for one turn (counts for the trace)."""

    links: list[Link]
    records: list[Record] = Field(default_factory=list, description="records to stage with the turn (its note)")
    state: dict[str, object] = Field(default_factory=dict, description="ledger state to save with the links")
    mentions: int = 0
    entity: int = 0
    semantic: int = 0
    evolved: int = 0


class Plan(BaseModel):
    """What the fast path will write for one turn, before a chat model may revise it."""

    mentions: list[Mention]
    note: Note
    nearby: list[Candidate]
    decisions: list[LinkDecision]
    evolutions: list[Evolution]


def plan_offline(store: MemoryStore, raw: Record, listener: str = "", semantic_on: bool = True) -> Plan:
    """The offline policies for one turn: its entities (the photo it shares included), note, candidates,
    semantic link decisions and evolutions."""
    said = f"{raw.text} ({raw.image_caption})" if raw.image_caption else raw.text  # a shared photo is said too
    mentions = find_mentions(said, raw.speaker, listener, store.participants())
    note = note_of(raw, mentions)
    nearby = candidates(store, raw) if semantic_on else []
    decisions = decide_offline(note, nearby)
    evolutions = evolve_offline(decisions, {c.record.id: c.record for c in nearby}, raw.id)
    return Plan(mentions=mentions, note=note, nearby=nearby, decisions=decisions, evolutions=evolutions)


def candidates(store: MemoryStore, record: Record, k: int = CANDIDATES) -> list[Candidate]:
    """The nearest raw turns already filed as notes (A-MEM's top-k), excluding the turn itself."""
    vector = store.embedder.embed([record.text])[0]
    hits = store.dense("raw", vector, k * POOL)
    found = {r.id: r for r in store.get(rid for rid, _ in hits)}
    chosen: list[Candidate] = []
    for rid, similarity in hits:
        other = found.get(rid)
        if other is None or rid == record.id or not other.context:
            continue
        chosen.append(Candidate(record=other, similarity=similarity))
        if len(chosen) >= k:
            break
    return chosen


def write_turn(
    store: MemoryStore, raw: Record, facts: Sequence[Record], mentions: Sequence[Mention], note: Note,
    decisions: Sequence[LinkDecision], evolutions: Sequence[Evolution], policy: str,
    entities_on: bool = True, semantic_on: bool = True,
) -> TurnGraph:
    """One turn's entity graph, note, semantic links and evolutions: evolutions are written now (history
    entries), the rest is returned for the Memory role to stage with the turn (links, the note, the catalogue)."""
    ns = store.namespace
    out: list[Link] = []
    result = TurnGraph(links=[])
    if entities_on:
        participants = store.participants()
        out += entity_graph.mention_links(ns, raw, mentions)
        for fact in facts:
            out += entity_graph.mention_links(ns, fact, find_mentions(fact.text, known=participants))
        earlier = entity_graph.earlier_mentions(store, [m.key for m in mentions])
        linked = entity_graph.entity_links(ns, raw, mentions, earlier, store.turn_count())
        out += linked
        result.mentions, result.entity = len(out) - len(linked), len(linked)
        known = store.state(entity_graph.CATALOGUE, {}) or {}  # as staged by this batch's earlier turns
        new = entity_graph.catalogue_update(known, mentions)  # type: ignore[arg-type]
        if new:
            result.state[entity_graph.CATALOGUE] = {**known, **new}  # type: ignore[dict-item]
    filed = {"keywords": note.keywords, "tags": note.tags, "context": note.context}
    result.records.append(raw.model_copy(update=filed))
    if semantic_on:
        semantic = semantic_links(ns, raw.id, decisions)
        out += semantic
        result.semantic = len(semantic)
        result.evolved = len(apply(store, evolutions, policy))
    result.links = out
    return result
