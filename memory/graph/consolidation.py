"""The slow path (MAGMA 3.4, Algorithm 3): consolidation after ingestion, never during it.

It walks the turns already filed as notes that it has not consolidated yet, in
order and in batches, and for each batch infers causal links and densifies the
entity links of the entities the batch mentions (every pair of turns sharing a
specific entity, weighted by its specificity at that time). Then it regroups
topics and persona aspects into summary records (memory/graph/summaries.py),
rewriting only the groups whose turns changed (with the citations of the turns
they no longer hold taken back) and removing those that new turns dissolved.

Safe to stop at any moment: links are written with INSERT OR REPLACE and
summaries under fixed ids, so redoing a batch writes the same rows again; the
set of consolidated turns advances only after a batch's links are stored, and
a summary's digest only after the summary is. A crash loses at most the batch
in progress, which the next run redoes. Turns an ingest is still deriving are
left to the next run, both ledger values are read again under the write lock
before one batch or summary changes them (an erase meanwhile edits them too), a
summary's digest covers the facts it tells (a Refresher update re-tells it;
digests written before that was so differ once, and each summary is told
again once), and a run with causal or entity links off (an ablation) keeps a
list of its own, so the turns it did are still to do for the other. The policies that infer causes and
write summaries are passed in (the Memory role supplies the chat-model ones);
by default the offline ones run.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence, Set

from pydantic import BaseModel, Field
from strata.memory import store_items
from strata.memory.forgetting import is_request
from strata.memory.graph import causal, fast_path, summaries
from strata.memory.graph import links as entity_graph
from strata.memory.journal import PENDING
from strata.memory.records import ENTITY_NODE, Link, LinkType, Record, entity_node_id
from strata.memory.store import MemoryStore

DONE = "consolidated_turns"  # ledger state: raw ids consolidated by a run with causal and entity links on
# ... and by a run with only one of them on (an ablation): the other still has those turns to do
DONE_BY = {"causal": f"{DONE}:causal", "entity": f"{DONE}:entity"}
# ... and the turns a run told offline while the model was down (asked again later): they were in place when
# the turns after them were judged, so they are no backfill (`_backfilled_causes`)
RETRIED = f"{DONE}:retried"
DONE_LISTS = (DONE, *DONE_BY.values(), RETRIED)
DIGESTS = "summary_digests"  # ledger state: {summary id: digest of what it was written from}
BATCH = 50  # turns per committed step: what a crash can cost at most
MAX_PAIRS_PER_ENTITY = 50  # a turn is linked to at most this many other turns through one entity (its latest)

CausalPolicy = Callable[[Record, Sequence[Record]], list[causal.CausalLink]]
SummaryPolicy = Callable[[summaries.Group, Sequence[Record], str], tuple[str, str] | None]


class ConsolidationReport(BaseModel):
    """What one slow-path run did, and what it cost."""

    turns: int = Field(0, description="Turns consolidated by this run.")
    filed: int = Field(0, description="Turns an earlier version stored without a note, filed by this run first.")
    causal: int = Field(0, description="Causal links this run added (one found again is not counted).")
    entity: int = Field(0, description="Entity links this run added (one the fast path wrote is not counted).")
    summaries: int = 0
    summaries_unchanged: int = 0
    seconds: float = 0.0
    policy: str = "offline"

    def per_thousand_turns(self) -> float:
        """Seconds this run would take for 1,000 turns at the same rate."""
        return 1000.0 * self.seconds / self.turns if self.turns else 0.0


def offline_causal(store: MemoryStore) -> CausalPolicy:
    """The cue-based policy, with the store's embedder for similarities."""
    known = store.participants()

    def similarity(text: str, records: Sequence[Record]) -> list[float]:
        vectors = store.embedder.embed([text, *(r.text for r in records)])
        return [float(v) for v in vectors[1:] @ vectors[0]]

    def policy(record: Record, earlier: Sequence[Record]) -> list[causal.CausalLink]:
        return causal.infer(record, earlier, similarity, known)

    return policy


def consolidate(
    store: MemoryStore, causal_on: bool = True, entities_on: bool = True, summaries_on: bool = True,
    causal_policy: CausalPolicy | None = None, summary_policy: SummaryPolicy | None = None, policy: str = "offline",
    limit: int | None = None, semantic_on: bool = True, fallbacks: Mapping[str, str] | None = None,
    retry: Set[str] = frozenset(),
) -> ConsolidationReport:
    """Run the slow path over every filed turn not consolidated yet (at most `limit` of them). `fallbacks`:
    the label a summary told offline is stored with when `summary_policy` could not write it, by group id
    (the policy fills it in as it goes: `offline (model output unusable: ...)`); plain `offline` otherwise.
    `retry`: the turns and summary groups the policies told offline because the model could not be reached
    (filled in as they go); they are not counted done, so a later run asks the model again."""
    started = time.perf_counter()
    report = ConsolidationReport(policy=policy)
    ns = store.namespace
    infer = causal_policy or offline_causal(store)
    if entities_on or semantic_on:  # (with both off, ingest files no note: an ablation, left as it is)
        report.filed = file_unfiled_turns(store, entities_on, semantic_on, limit)
    # the turns filed as notes by the fast path, without those an ingest is still deriving: staged, a turn
    # has its note in the mirror but its entity mentions not yet in the ledger, and a crash takes it back
    # (read after the timeline: a turn staged in between is pending still)
    unindexed = store_items.unindexed(store.ledger, ns)  # a store item put with index=False: never told, never linked
    filed = [r for r in store.timeline() if r.context and r.id not in unindexed]
    waiting = set(store.ledger.get_state(ns, PENDING, []) or [])  # type: ignore[arg-type]
    timeline = [r for r in filed if r.id not in waiting]
    told = _digests_now(store)  # what the summaries were told from when these turns were read
    order = {r.id: i for i, r in enumerate(timeline)}
    key = DONE if causal_on and entities_on else DONE_BY["causal"] if causal_on else DONE_BY["entity"]
    done = {i for k in {DONE, key} for i in store.ledger.get_state(ns, k, []) or []}  # type: ignore[union-attr]
    todo = [i for i, r in enumerate(timeline) if r.id not in done] if causal_on or entities_on else []
    if limit is not None:
        todo = todo[:limit]
    retried = set(store.ledger.get_state(ns, RETRIED, []) or [])  # type: ignore[arg-type]
    done_in_session: dict[str, list[int]] = defaultdict(list)  # a session's turns consolidated before, in order
    for i, record in enumerate(timeline):
        if record.id in done:
            done_in_session[record.session].append(i)
    for start in range(0, len(todo), BATCH):
        batch = todo[start : start + BATCH]
        found_causes: list[Link] = []
        unfinished: set[str] = set()  # backfilled turns whose later turns the model could not be asked about
        if causal_on:
            for index in batch:
                found = causal.causal_links(ns, infer(timeline[index], timeline[:index]))
                if timeline[index].id not in retry:  # told offline while the model was down: asked again later
                    found_causes += found
            backfilled = [i for i in batch if timeline[i].id not in retried]
            ahead, unfinished = _backfilled_causes(store, timeline, backfilled, done_in_session, infer, retry)
            found_causes += ahead
        found_entities = _densify(store, [timeline[i] for i in batch], order) if entities_on else []
        with store.writing():  # an erase meanwhile has removed turns these links would point at
            kept = _between_kept(store, [*found_causes, *found_entities])
            added = _new(store, kept)  # counted before the write
            store.link(kept)  # all: densify's weight replaces the fast path's
            # read again under the lock: an erase meanwhile took its turns out of the list
            now = set(store.ledger.get_state(ns, key, []) or [])  # type: ignore[arg-type]
            now.update(timeline[i].id for i in batch
                       if store.has(timeline[i].id) and timeline[i].id not in retry | unfinished)
            store.ledger.set_state(ns, key, sorted(now))
            waiting_again = set(store.ledger.get_state(ns, RETRIED, []) or [])  # type: ignore[arg-type]
            waiting_again = (waiting_again | {timeline[i].id for i in batch if timeline[i].id in retry}) - now
            store.ledger.set_state(ns, RETRIED, sorted(i for i in waiting_again if store.has(i)))
        report.turns += len(batch)
        report.causal += sum(link.type == LinkType.CAUSAL for link in added)
        report.entity += sum(link.type == LinkType.ENTITY for link in added)
    if summaries_on:
        written, unchanged = _summarise(
            store, timeline, told, summary_policy, policy, {} if fallbacks is None else fallbacks, retry)
        report.summaries, report.summaries_unchanged = written, unchanged
    report.seconds = time.perf_counter() - started
    return report


def _backfilled_causes(
    store: MemoryStore, timeline: Sequence[Record], batch: Sequence[int], done_in_session: Mapping[str, list[int]],
    infer: CausalPolicy, retry: Set[str],
) -> tuple[list[Link], set[str]]:
    """The causal links between the batch's backfilled turns and the later turns of their session that were
    consolidated before them (an older session's turns imported after the newer ones): those turns' cue halves
    point back to what was said before them, and a backfilled turn is now among it. Each later turn is judged
    again by the same rule, and only its new links to a backfilled turn are kept (a pair already linked is
    not written again). With the model down for a later turn, the backfilled turns of its session are
    returned as unfinished: not counted done, so a later run looks again."""
    first: dict[str, int] = {}  # the batch's earliest turn of each session (the batch is in time order)
    for index in batch:
        first.setdefault(timeline[index].session, index)
    later: set[int] = set()
    for session, index in first.items():
        done = done_in_session.get(session, [])
        later.update(done[bisect.bisect_right(done, index):])
    backfilled = {timeline[i].id for i in batch}
    found: list[Link] = []
    unfinished: set[str] = set()
    for index in sorted(later):
        effect = timeline[index]
        links = [link for link in causal.causal_links(store.namespace, infer(effect, timeline[:index]))
                 if backfilled & {link.src, link.dst}]
        if effect.id in retry:  # told offline while the model was down: asked again when the model is back
            unfinished |= {timeline[i].id for i in batch if timeline[i].session == effect.session and i < index}
            continue
        found += links
    return _new(store, found), unfinished


def _densify(store: MemoryStore, batch: Sequence[Record], order: dict[str, int]) -> list[Link]:
    """Each batch turn linked to every other turn sharing a specific entity with it (MAGMA's entity densification).

    A pair is written from the later turn to the earlier one, as the fast path writes it, so
    writing it again (another batch, another run) replaces the same row.
    """
    total = len(order)
    ns = store.namespace
    ids = [r.id for r in batch]
    touching: dict[str, set[str]] = defaultdict(set)  # entity key -> batch turns mentioning it
    for link in store.ledger.neighbours(ns, ids, [LinkType.MENTIONS]):
        if link.dst.startswith(ENTITY_NODE) and link.src in ids:
            touching[link.dst[len(ENTITY_NODE):]].add(link.src)
    mentions = entity_graph.earlier_mentions(store, sorted(touching))
    best: dict[tuple[str, str], float] = {}
    for key, turns in mentions.items():
        others = sorted({i for i in turns if i.startswith("raw:")})
        weight = entity_graph.specificity(len(others), total)
        if weight <= 0:
            continue
        latest = sorted((i for i in others if i in order), key=order.__getitem__)[-MAX_PAIRS_PER_ENTITY:]
        for mine in sorted(touching[key]):
            for other in latest:
                if other != mine:
                    pair = (mine, other) if order[mine] > order[other] else (other, mine)
                    best[pair] = max(best.get(pair, 0.0), weight)
    return [Link(namespace=ns, src=a, dst=b, type=LinkType.ENTITY, weight=w) for (a, b), w in best.items()]


def _summarise(
    store: MemoryStore, timeline: Sequence[Record], digests: Mapping[str, str], policy_fn: SummaryPolicy | None,
    policy: str, fallbacks: Mapping[str, str], retry: Set[str] = frozenset(),
) -> tuple[int, int]:
    """Regroup topics and persona aspects; write the groups whose turns changed. (written, unchanged).
    `digests`: the summaries' digests as they were when `timeline` was read (`_digests_now`)."""
    ns = store.namespace
    raw = {r.id: r for r in timeline}
    catalogue: dict[str, list[str]] = dict(store.ledger.get_state(ns, entity_graph.CATALOGUE, {}) or {})  # type: ignore[arg-type]
    types = {key: entry[1] for key, entry in catalogue.items()}
    mentions: dict[str, list[str]] = defaultdict(list)
    for link in store.ledger.neighbours(ns, [entity_node_id(k) for k in catalogue], [LinkType.MENTIONS]):
        if link.src in raw:
            mentions[link.dst[len(ENTITY_NODE):]].append(link.src)
    activities: dict[str, dict[str, list[str]]] = defaultdict(dict)
    for key, ids in mentions.items():
        if types.get(key) != "activity":
            continue
        for rid in ids:
            activities[raw[rid].speaker].setdefault(key, []).append(rid)
    facts = store.all("fact")
    groups = [*summaries.topic_groups(mentions, types, raw), *summaries.persona_groups(activities, facts, raw)]
    facts_by_turn = _facts_by_turn(facts)
    written = unchanged = 0
    for group in groups:
        digest = summaries.group_digest(group, raw, facts_by_turn)
        if digests.get(group.id) == digest:
            unchanged += 1
            continue
        members = [raw[i] for i in group.turn_ids]
        drafted = policy_fn(group, members, summaries.narrate(group, raw, facts_by_turn)) if policy_fn else None
        if drafted is not None:
            title, text, used = drafted[0], drafted[1], policy
        else:  # from the facts read when the groups were made; the label says why, when a policy fell back
            title, text = group.heading, summaries.narrate(group, raw, facts_by_turn)
            used = fallbacks.get(group.id, "offline")
        # Embedded first, so a remote embedder's wait holds up no writer (the write finds the vector
        # cached). Then written under the namespace's write lock, checked first: an erase that ran since
        # the groups were made (it holds the same lock) removed turns or facts this summary would tell.
        store.embedder.embed([text])
        with store.writing():
            if not all(store.has(i) for i in group.turn_ids):
                continue  # the next run regroups what stays
            if _digests_now(store).get(group.id) != digests.get(group.id):
                continue  # another run told this group since this one read the turns: its telling is as new
            if drafted is None:  # from the facts stored now (the same text unless an erase came between)
                text = _told_offline(store, group, raw)
            record = summaries.summary_record(group, text, title, ns, raw, used)
            store.add([record])
            cites = summaries.summary_links(ns, record)
            kept = {(link.src, link.dst) for link in cites}
            store.ledger.remove_links(  # turns the group no longer holds are no longer cited
                old for old in store.ledger.neighbours(ns, [record.id], [LinkType.DERIVED_FROM])
                if old.src == record.id and (old.src, old.dst) not in kept
            )
            store.link(cites)
            _set_digest(store, group.id, None if group.id in retry else digest)  # no digest: told again next run
        written += 1
    # A group the new turns dissolved (its turns now belong to another topic) leaves no frozen summary
    # behind: it would repeat, out of date, what the group that took its turns says.
    with store.writing():  # only summaries no other run has told since this one read the turns
        now = _digests_now(store)
        dissolved = sorted(sid for sid in set(store.active("summary")) - {group.id for group in groups}
                           if now.get(sid) == digests.get(sid))
        if dissolved:  # the digest first: a crash in between must not leave one for a summary that is gone
            for summary_id in dissolved:
                _set_digest(store, summary_id, None)
            store.discard("summary", dissolved)
    return written, unchanged


def _digests_now(store: MemoryStore) -> dict[str, str]:
    """The summaries' digests as the ledger holds them now. Two runs of one namespace (two threads, or two
    replicas) may overlap; the one that read the turns first must not take back what the later one wrote
    from more turns (a smaller group told again, or a new group's summary dissolved), so each write checks
    that the digest is still the one this run read."""
    return dict(store.ledger.get_state(store.namespace, DIGESTS, {}) or {})  # type: ignore[arg-type]


def _set_digest(store: MemoryStore, summary_id: str, digest: str | None) -> None:
    """Record (or, with None, forget) one summary's digest, under the caller's write lock. The ledger's
    digests are read again here, not written from a copy taken before: an erase meanwhile took out the
    digests of the summaries it removed, and writing them back made the next run skip those groups."""
    digests = _digests_now(store)
    if digest is None:
        digests.pop(summary_id, None)
    else:
        digests[summary_id] = digest
    store.ledger.set_state(store.namespace, DIGESTS, digests)


def _new(store: MemoryStore, links: Sequence[Link]) -> list[Link]:
    """The links not stored yet, each once: what a run reports as added (a pair found twice, or one the
    fast path wrote, is written again all the same, with the weight found now, but is not new)."""
    unique = list({(link.src, link.dst, link.type): link for link in links}.values())
    sources = sorted({link.src for link in unique})
    stored = {(link.src, link.dst, link.type)
              for link in store.ledger.neighbours(store.namespace, sources, sorted({link.type for link in unique}))}
    return [link for link in unique if (link.src, link.dst, link.type) not in stored]


def _told_offline(store: MemoryStore, group: summaries.Group, raw: dict[str, Record]) -> str:
    """A group's summary told by the offline rule from the facts its turns have now."""
    return summaries.narrate(group, raw, _facts_by_turn(store.facts_from(raw[i].dialogue_id for i in group.turn_ids)))


def file_unfiled_turns(
    store: MemoryStore, entities_on: bool = True, semantic_on: bool = True, limit: int | None = None
) -> int:
    """File, offline and oldest first, the turns an earlier version stored before notes existed: their
    entities, note and semantic links, as the fast path files a new turn (memory/graph/fast_path.py). The
    slow path reads notes, and would pass such turns by for ever. A turn still waiting for its derive (one
    being ingested, or left by a run cut short) is not one of them: its derive files it. The number filed."""
    filed = 0
    def waiting() -> set[str]:
        return set(store.state(PENDING, []) or [])  # type: ignore[call-overload]

    unfiled = [r for r in store.timeline() if not r.context and r.id not in waiting() and not is_request(r.text)]
    for raw in unfiled[:limit]:  # (a request to forget is an instruction, never filed: agents/memory.py)
        with store.edits():  # a turn's evolutions stand with its note, or neither does
            current = store.get([raw.id])
            if not current or current[0].context or raw.id in waiting():
                continue  # erased, filed by an ingest meanwhile, or written ahead by one
            plan = fast_path.plan_offline(store, raw, "", semantic_on)
            graph = fast_path.write_turn(store, raw, store.facts_from([raw.dialogue_id]), plan.mentions, plan.note,
                                         plan.decisions, plan.evolutions, "offline", entities_on, semantic_on)
            store.stage(graph.records, graph.links, graph.state)
            store.flush()
        filed += 1
    return filed


def _facts_by_turn(facts: Sequence[Record]) -> dict[str, list[Record]]:
    by_turn: dict[str, list[Record]] = defaultdict(list)
    for fact in facts:
        by_turn[fact.dialogue_id].append(fact)
    return by_turn


def _between_kept(store: MemoryStore, links: Sequence[Link]) -> list[Link]:
    """The links whose records are all still stored (an entity node is not a record)."""
    ends = {end for link in links for end in (link.src, link.dst) if not end.startswith(ENTITY_NODE)}
    gone = {end for end in ends if not store.has(end)}
    return [link for link in links if link.src not in gone and link.dst not in gone]
