"""The Memory role: writes each turn at every granularity (AMA Constructor, AdaMem Memory Agent).

It runs twice per turn. The first intake of a run stores every raw turn of the
input verbatim, in one write, before anything else can fail: a write-ahead that
no later error can undo. Each turn's intake then pushes it to working memory.
A turn stays marked pending until it is derived, so adding it again after a
failure derives it rather than skipping it. After
research, judge and refresher have looked at the turn (stage "intake"), it
derives facts, closes an episode when a boundary is reached, distils persona
traits and links the new records: temporal neighbours (MAGMA), derived-from,
the earlier turns research found or the model named as related (AMA's R_t),
and the memory graph's fast path (memory/graph/): entity nodes and links, the
turn's A-MEM note, weighted semantic links and memory evolution. The slow path
(causal links, summaries) runs apart, in `memory/graph/consolidation.py`.
What a turn derives (records, links, the open episode and the
other small state, the cleared pending mark) is staged in the store and written
with the other turns of its batch: at the end of the input, or every
`FLUSH_TURNS` turns (memory/staging.py). A crash before that write leaves the
batch's turns pending, to be derived again from the state of the last write.
"""

from __future__ import annotations

from typing import Annotated, Any
from zoneinfo import ZoneInfo

from langgraph.runtime import Runtime
from pydantic import Field, field_validator
from strata.agents.common import (
    OFFLINE,
    format_evidence,
    format_window,
    store_of,
    traced,
)
from strata.agents.llm import ask_json, chat_model
from strata.agents.wire import new_question, new_unit
from strata.graph.context import Context
from strata.graph.state import RoleNote, State, fresh_run, input_print, validate_turns
from strata.memory.dates import parse_datetime
from strata.memory.entities import extract_entities
from strata.memory.episodes import (
    OPEN_SEGMENT,
    Boundary,
    OpenSegment,
    detect_boundary,
    narrate,
    photo_line,
    title_of,
)
from strata.memory.errors import InputError
from strata.memory.facts import FactDraft, comparable, extract_facts
from strata.memory.forgetting import is_request
from strata.memory.graph import fast_path
from strata.memory.graph.entities import Mention, normalise
from strata.memory.graph.evolution import Evolution
from strata.memory.graph.links import temporal_links
from strata.memory.graph.notes import Candidate, LinkDecision, Note, note_of
from strata.memory.graph.replies import (
    MAX_ITEMS,
    SOME_USABLE,
    Advisory,
    Ids,
    Line,
    ModelNote,
    Name,
    Reply,
    Story,
    Weight,
    at_most,
    collected,
    noted,
)
from strata.memory.journal import PENDING
from strata.memory.moments import local, offset_in, utc_now, zone_of
from strata.memory.persona import aspect_of, persona_id
from strata.memory.records import Link, LinkType, Record, Turn, natural_order, raw_record
from strata.memory.store import MemoryStore
from strata.memory.turn_ids import TURN_COUNTER, check_turn_ids, highest_numbered
from strata.prompts import graph as graph_prompts
from strata.prompts import memory as prompts

RELATED_FROM_MODEL = 3  # at most this many earlier turns the Constructor names as related are linked


class ModelFact(Reply):
    content: Line
    subject: Name = ""
    attribute: Name = ""
    value: Name = ""


class ModelFacts(Reply):
    """AMA's Constructor output contract, plus subject/attribute/value for conflict checks.

    `facts` is required: a reply without it (a bare list of facts, `"Facts"`, a wrapped object) was not
    read, and taking it as "no facts" would lose the turn's facts; refused, the offline extractor stands in.
    An empty list the model writes is its answer."""

    facts: Annotated[list[ModelFact], SOME_USABLE, at_most(MAX_ITEMS)]
    related_id: Ids = Field(default_factory=list)
    timestamp: Advisory = "empty"

    @field_validator("facts", mode="before")
    @classmethod
    def _without_blank_facts(cls, value: object) -> object:
        """A fact of nothing but spaces is left out; a reply whose every fact is blank is refused."""
        if not isinstance(value, list):
            return value
        kept = [f for f in value if not (isinstance(f, dict) and isinstance(f.get("content"), str)
                                          and not f["content"].strip())]
        if value and not kept:
            raise ValueError("every fact is blank")
        return kept


class ModelBoundary(Reply):
    """AMA's episode trigger output."""

    T_t: int = Field(..., ge=0, le=1)
    reason: Advisory = ""
    confidence: Weight = 0.5
    topic_summary: Advisory = ""


class ModelEpisode(Reply):
    """AMA's episode writer output."""

    title: Line
    content: Story
    timestamp: Advisory = ""


def memory(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Intake (raw, write-ahead) or derive (facts, episodes, persona, links), by stage.

    Each step holds the namespace's write lock: concurrent runs on one namespace (threads,
    or replicas on one PostgreSQL ledger) interleave turn by turn, never inside a turn's
    read-modify-write of the ledger.
    """
    store = store_of(runtime)
    if state.stage == "intake":
        with store.edits():  # the turn's note evolutions stand with its batch (memory/journal.py)
            return _derive(state, runtime)
    with store.writing():
        return _intake(state, runtime)


def _intake(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    update: dict[str, Any] = fresh_run() if state.stage == "done" else {}
    # each turn is researched and judged on its own, not as a retry round of the turn before it
    update.update({"plan": None, "rounds": 0, "evidence": [], "verdict": None})
    cursor = int(update.get("cursor", state.cursor))
    if not state.turns:
        raise InputError(
            f"mode {runtime.context.mode!r} needs turns: pass {{'turns': [{{'speaker': 'Ann', 'text': '...'}}]}}"
        )
    # each turn stored gets a full model-call budget; a model that stayed down after its retries on an earlier
    # turn of this run is not asked again (each turn would wait through them: 36 min over 300 turns at 503s)
    (new_question if cursor == 0 else new_unit)(runtime.context)
    store = store_of(runtime)
    turns = state.turns
    if cursor == 0:
        checked = validate_turns(turns, max_chars=runtime.context.max_turn_chars)  # all, before any write
        store.flush()  # what an earlier run derived but did not write (it stopped mid-batch)
        turns = on_clock(_with_ids(store, checked), zone_of(runtime.context.timezone))  # (an undated turn: now)
        _prefetch(store, turns, chat_model(runtime.context) is None)
        _write_ahead(store, turns)
    # the turns with their ids, once (graph/state.py); saved again at every later step, they cost as much
    seen = {"turns": turns, "turns_seen": input_print(turns)} if cursor == 0 else {}
    turn = turns[cursor]
    raw_id = f"raw:{turn.dia_id}"
    # the trace starts again with each turn: a thread saves the whole state at every step, and a run's trace
    # grown over 300 turns made that 174 MB (the roles' runs are traced one by one, and streamed, all the same)
    if raw_id not in _pending(store):
        notes = [*update.get("notes", state.notes), f"{turn.dia_id} is already stored: skipped"]
        last = cursor + 1 >= len(turns) and runtime.context.mode == "ingest"
        if last:
            store.flush()
        return {**update, **seen, "cursor": cursor + 1,
                "stage": "done" if last else "stored", "notes": notes,
                "trace": [RoleNote(role="memory", policy=OFFLINE, summary=f"{turn.dia_id} already stored")]}
    store.push_working(turn.speaker, turn.dia_id or "", turn.text, turn.time, runtime.context.working_size)
    return {
        **update, **seen, "cursor": cursor, "stage": "intake",
        "stored_ids": [*update.get("stored_ids", state.stored_ids), raw_id],
        "trace": [RoleNote(role="memory", policy=OFFLINE,
                           summary=f"raw turn {turn.dia_id} stored (write-ahead); deriving it")],
    }


def _write_ahead(store: MemoryStore, turns: list[Turn]) -> None:
    """Store every new raw turn of the input in one write, before any is derived.

    A turn already stored with the same words is left alone (re-ingesting is
    idempotent) unless its derive never finished; one whose id holds other words
    refuses the whole input (memory/turn_ids.py). Turns are marked pending before
    the write and each is cleared once derived, so a crash at any point leaves
    them to be derived on the next ingest rather than lost.
    """
    existing = check_turn_ids(store, turns)
    pending = set(_pending(store))
    people = list(dict.fromkeys([*store.participants(), *(t.speaker for t in turns)]))  # names opening a sentence
    new: list[Record] = []
    marked: set[str] = set()
    for turn in turns:
        raw_id = f"raw:{turn.dia_id}"
        if existing.get(raw_id) == turn.text and raw_id not in pending:
            continue
        marked.add(raw_id)
        # a pending turn is written again too: its earlier write may have reached Chroma without
        # its change-sequence stamp (the ledger went down in between), and replicas reload by stamp
        speakers = [p for p in (turn.speaker, turn.listener, *people) if p]
        named = [] if is_request(turn.text) else extract_entities(turn.text, speakers)
        new.append(raw_record(turn, store.namespace, named))
    if marked:
        store.ledger.set_state(store.namespace, PENDING, sorted(pending | marked))
    store.add(new)


def _derive(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    context = runtime.context
    store = store_of(runtime)
    turn = state.turns[state.cursor]
    if not _still_pending(store, f"raw:{turn.dia_id}"):  # another run derived it while this one researched
        cursor = state.cursor + 1
        more = cursor < len(state.turns)
        if not more:
            store.flush()
        return {"cursor": cursor, "stage": "stored" if (more or context.mode == "chat") else "done",
                "notes": [*state.notes, f"{turn.dia_id} was derived by another run meanwhile: skipped"],
                "trace": traced(state, "memory", OFFLINE, f"{turn.dia_id} derived by another run meanwhile")}
    raw = store.get_one(f"raw:{turn.dia_id}")
    # an instruction to the memory (the Refresher carries it out), not something to remember: its words are what
    # it asks to forget, so they give no facts, note, entities or links
    instruction = is_request(turn.text)
    with collected() as cuts:  # what the limits cut from the model's replies (memory/graph/replies.py)
        drafts, policy, related = ([], OFFLINE, []) if instruction else _facts(turn, state, runtime, store)
        facts = [
            Record(
                id=f"fact:{turn.dia_id}:{i}", kind="fact", text=d.text, namespace=store.namespace,
                dialogue_id=turn.dia_id or "", session=raw.session, speaker=turn.speaker, time=d.time or turn.time,
                source_ids=[turn.dia_id or ""], subject=d.subject, attribute=d.attribute, value=d.value,
                entities=list(d.entities), policy=policy,
                # the turn's clock when the fact keeps the turn's time; a date its words named is that day already
                utc_offset=turn.utc_offset if d.time in (None, turn.time) else None,
            )
            for i, d in enumerate(drafts)
        ]
        personas = _persona(facts, turn)
        episode, segment, boundary, boundary_policy = _episode(store, raw, facts, context, runtime)
        records = [*facts, *personas, *([episode] if episode else [])]
        links, state_after, replaced = _links(store, raw, facts, personas, episode, state, related, instruction)
        graph, graph_policy = (fast_path.TurnGraph(links=[]), OFFLINE) if instruction else _graph(
            store, raw, facts, turn, runtime)  # the note and evolutions are written at once
    links += graph.links
    state_after.update(graph.state)
    state_after[OPEN_SEGMENT] = segment.model_dump(mode="json")
    state_after[PENDING] = sorted(set(_pending(store)) - {raw.id})
    full = store.stage([*records, *graph.records], links, state_after, replaced)  # graph.records: the turn's note
    cursor = state.cursor + 1
    more = cursor < len(state.turns)
    if full or not more or context.mode == "chat":
        # records first, then the batch's edges and state (pending marks cleared) in one transaction:
        # a crash before it leaves the batch's turns pending, redone whole from the last written state
        store.flush()
    summary = f"{turn.dia_id}: {len(facts)} facts, {len(personas)} persona traits, {len(links)} links"
    if episode:
        summary += f", closed episode {episode.id} ({boundary.reason})"
    if boundary_policy != OFFLINE:
        summary += f"; episode boundary by {boundary_policy}"
    if context.entity_graph or context.semantic_links:  # the graph's policy is its own (facts may fall back alone)
        summary += (
            f"; graph by {graph_policy}: {graph.mentions} entity mentions, {graph.entity} entity links, "
            f"{graph.semantic} semantic links, {graph.evolved} notes evolved"
        )
    if cuts:
        summary += f"; cut from the model's replies: {'; '.join(cuts)}"
    trace = traced(state, "memory", policy, summary)
    return {
        "cursor": cursor,
        "stage": "stored" if (more or context.mode == "chat") else "done",
        "stored_ids": [*state.stored_ids, *(r.id for r in records)],
        "trace": trace,
    }


# facts ---------------------------------------------------------------------
def _facts(
    turn: Turn, state: State, runtime: Runtime[Context], store: MemoryStore
) -> tuple[list[FactDraft], str, list[str]]:
    """The turn's facts, the policy that wrote them, and the earlier dialogue ids the model said it refers to."""
    model = chat_model(runtime.context)
    people = store.participants()  # a participant's name opening a fact is a name there too (its entities)
    if model is None:
        return extract_facts(turn, participants=people), OFFLINE, []
    user = prompts.FACTS_USER.format(
        session_date=said.strftime("%Y-%m-%d %H:%M") if (said := turn.local_time()) else "unknown",
        speaker=turn.speaker, listener=turn.listener or "unknown", window=format_window(store),
        evidence=format_evidence(state.evidence), dia_id=turn.dia_id, text=turn.text,
        caption=f"\n(shared a photo: {turn.image_caption})" if turn.image_caption else "",
    )
    parsed, _, policy = ask_json(model, prompts.FACTS_SYSTEM, user, ModelFacts, runtime.context)
    if parsed is None:
        return extract_facts(turn, participants=people), policy, []
    # AMA's Constructor gives the time the facts are about (when the turn states one) and the earlier turns it refers to
    stated = parse_datetime(parsed.timestamp) if parsed.timestamp.strip().lower() not in ("", "empty") else None
    # a fact listed twice is one fact (the offline extractor's drafts are unique too): a second record of it
    # would take a second place in every search; one differing in its slots says something else and stays
    first: dict[tuple[str, ...], ModelFact] = {}
    for f in parsed.facts:
        first.setdefault(tuple(comparable(part) for part in (f.content, f.subject, f.attribute, f.value)), f)
    unique = list(first.values())
    if len(unique) < len(parsed.facts):
        noted(f"facts: {len(parsed.facts) - len(unique)} duplicate(s) of {len(parsed.facts)} dropped")
    drafts = [
        FactDraft(
            text=f.content, subject=f.subject, attribute=f.attribute, value=f.value, time=stated or turn.time,
            source_ids=[turn.dia_id or ""],
            entities=extract_entities(f.content, [p for p in (turn.speaker, turn.listener, *people) if p]),
        )
        for f in unique
    ]
    return drafts, policy, [i.strip() for i in parsed.related_id if i.strip()]


# persona -------------------------------------------------------------------
def _persona(facts: list[Record], turn: Turn) -> list[Record]:
    traits: list[Record] = []
    for fact in facts:
        aspect = aspect_of(fact.attribute)
        participant = fact.subject or turn.speaker
        if aspect is None or participant != turn.speaker or not fact.value:
            continue
        traits.append(
            Record(
                id=persona_id(participant, aspect, fact.value), kind="persona", text=fact.text,
                namespace=fact.namespace, dialogue_id=fact.dialogue_id, session=fact.session,
                speaker=participant, participant=participant, aspect=aspect, time=fact.time, utc_offset=fact.utc_offset,
                source_ids=list(fact.source_ids), subject=fact.subject, attribute=fact.attribute,
                value=fact.value, policy=fact.policy,
            )
        )
    return traits


# episodes ------------------------------------------------------------------
def _episode(
    store: MemoryStore, raw: Record, facts: list[Record], context: Context, runtime: Runtime[Context]
) -> tuple[Record | None, OpenSegment, Boundary, str]:
    """Add the turn to the open segment; close an episode when a boundary fires.

    Returns the episode to write (if any), the open segment after this turn, the
    boundary decision and the policy that made it. Nothing is saved here: the
    caller writes the episode first and the segment after it, so a crash in
    between redoes the same close (the episode's id comes from its first turn).
    """
    segment = open_segment(store)
    if raw.dialogue_id in segment.turn_ids:  # derived again after a failure: already a member
        return None, segment, Boundary(split=False, reason="already in the open episode"), OFFLINE
    members = [r.text for r in store.get(f"raw:{i}" for i in segment.turn_ids)]
    vectors = store.embedder.embed([raw.text, *members])
    boundary = detect_boundary(segment, raw.session, raw.text, vectors[0], vectors[1:], context.episode_max_turns,
                               raw.time, raw.utc_offset)
    boundary, policy = _model_boundary(boundary, segment, members, raw, runtime)
    episode = None
    if boundary.split:
        episode = _close(store, segment, boundary, runtime.context)
        segment = OpenSegment(session=raw.session)
    segment.session = raw.session
    segment.turn_ids.append(raw.dialogue_id)
    segment.speakers = list(dict.fromkeys([*segment.speakers, raw.speaker]))
    segment.facts.extend(f.text for f in facts)
    if raw.image_caption and not facts:
        segment.facts.append(photo_line(raw.speaker, raw.image_caption))
    if segment.start is None:
        segment.start, segment.utc_offset = raw.time, raw.utc_offset
    segment.end = raw.time or segment.end
    return episode, segment, boundary, policy


def open_segment(store: MemoryStore) -> OpenSegment:
    """The episode being written, as the ledger holds it."""
    return OpenSegment.model_validate(store.state(OPEN_SEGMENT, {}))


def close_open_episode(
    store: MemoryStore, reason: str = "session ended", last_turn: str | None = None, context: Context | None = None
) -> Record | None:
    """Write the open segment as an episode now (end of a session or of an import).

    With `last_turn`, only a segment that ends at that turn is closed: a resumed
    import that skips a session already stored must not close the episode of a
    later session it had started. The episode is written before the segment is
    cleared, under an id taken from its first turn, so a crash in between
    closes the same episode again rather than losing or doubling it. With the
    run's `context`, its chat model writes the episode, as at a boundary found
    while deriving (a close is one more unit of `max_model_calls`); without it,
    the offline narrative does.
    """
    with store.writing():
        store.flush()
        segment = open_segment(store)
        if not segment.turn_ids or (last_turn is not None and segment.turn_ids[-1] != last_turn):
            return None
        if context is not None:
            new_unit(context)  # its own call budget; a model that gave out in this run stays out
        episode = _close(store, segment, Boundary(split=True, reason=reason), context)
        store.add([episode])
        with store.ledger.transaction() as conn:
            store.ledger.add_links(_episode_links(store.namespace, episode), conn)
            store.ledger.set_state(store.namespace, OPEN_SEGMENT, OpenSegment().model_dump(mode="json"), conn)
        return episode


def episode_id(segment: OpenSegment) -> str:
    """An episode is named by its first turn: a turn belongs to one episode, and a redone close
    after a crash overwrites the same record instead of adding a second one."""
    return f"episode:{segment.turn_ids[0]}"


def _close(store: MemoryStore, segment: OpenSegment, boundary: Boundary, context: Context | None) -> Record:
    """The segment as an episode: written by the context's chat model, else (or when its reply is unusable)
    narrated from its facts."""
    title = title_of(segment.facts, segment.speakers)
    text, policy = narrate(segment, title), OFFLINE
    model = chat_model(context) if context is not None else None
    if model is not None and context is not None:
        members = store.get(f"raw:{i}" for i in segment.turn_ids)
        turns = "\n".join(f"[{r.dialogue_id}] {r.speaker}: {r.text}" for r in members)
        user = prompts.EPISODE_USER.format(
            session_date=start.strftime("%Y-%m-%d %H:%M") if (start := local(segment.start, segment.utc_offset))
            else "unknown",
            reason=boundary.reason, conversation=turns,
        )
        parsed, _, policy = ask_json(model, prompts.EPISODE_SYSTEM, user, ModelEpisode, context)
        if parsed is not None:
            title, text = parsed.title, parsed.content
    return Record(
        id=episode_id(segment), kind="episode", text=text, namespace=store.namespace,
        dialogue_id=segment.turn_ids[0], session=segment.session, speaker=", ".join(segment.speakers),
        time=segment.start, time_end=segment.end, source_ids=list(segment.turn_ids), title=title, policy=policy,
        utc_offset=segment.utc_offset,
    )


def _model_boundary(
    boundary: Boundary, segment: OpenSegment, members: list[str], raw: Record, runtime: Runtime[Context]
) -> tuple[Boundary, str]:
    """With a model, AMA's trigger prompt decides topic shifts; session changes and saturation always split."""
    model = chat_model(runtime.context)
    if model is None or not segment.turn_ids or boundary.settled:
        return boundary, OFFLINE
    user = prompts.BOUNDARY_USER.format(history="\n".join(members[-8:]), message=f"{raw.speaker}: {raw.text}")
    parsed, _, policy = ask_json(model, prompts.BOUNDARY_SYSTEM, user, ModelBoundary, runtime.context)
    if parsed is None:
        return boundary, policy
    return Boundary(split=bool(parsed.T_t), reason=parsed.reason or boundary.reason), policy


# links ---------------------------------------------------------------------
def _links(
    store: MemoryStore, raw: Record, facts: list[Record], personas: list[Record], episode: Record | None, state: State,
    related_ids: list[str], instruction: bool = False,
) -> tuple[list[Link], dict[str, object], list[Link]]:
    """The turn's edges, and the link-tracking state to save with them (the last turn). A request to forget
    keeps only its place in the chain of turns: what it found is what it asks to forget."""
    ns = store.namespace
    links = [Link(namespace=ns, src=f.id, dst=raw.id, type=LinkType.DERIVED_FROM) for f in facts]
    links += [Link(namespace=ns, src=p.id, dst=raw.id, type=LinkType.DERIVED_FROM) for p in personas]
    chain, state_after, replaced = temporal_links(store, raw, set(_pending(store)) - {raw.id})
    links += chain
    named = [f"raw:{i}" if not i.startswith("raw:") else i for i in related_ids]
    named = [r.id for r in store.get(n for n in named if n != raw.id)][:RELATED_FROM_MODEL]
    found = [e.id for e in state.evidence if e.kind == "raw" and e.id != raw.id and len(e.found_by) > 1
             and store.has(e.id)][:3]  # found before the lock: an erase may have removed it since
    related = [] if instruction else list(dict.fromkeys([*named, *found]))
    links += [Link(namespace=ns, src=raw.id, dst=r, type=LinkType.RELATED) for r in related]
    if episode is not None:
        links += _episode_links(ns, episode)
    return links, state_after, replaced


def _graph(
    store: MemoryStore, raw: Record, facts: list[Record], turn: Turn, runtime: Runtime[Context]
) -> tuple[fast_path.TurnGraph, str]:
    """The memory graph's fast path for this turn: entities, note, semantic links, evolution (memory/graph/)."""
    context = runtime.context
    if not (context.entity_graph or context.semantic_links):
        return fast_path.TurnGraph(links=[]), OFFLINE
    plan = fast_path.plan_offline(store, raw, turn.listener or "", context.semantic_links)
    mentions, note, nearby = plan.mentions, plan.note, plan.nearby
    decisions, evolutions = plan.decisions, plan.evolutions
    policy = OFFLINE
    model = chat_model(context)
    if model is not None:
        user = graph_prompts.NOTE_USER.format(
            date=raw.said_on("unknown"), speaker=raw.speaker,
            listener=turn.listener or "unknown", dia_id=raw.dialogue_id, text=raw.text,
            candidates="\n".join(
                f"[{c.record.id}] (similarity {c.similarity:.2f}) {c.record.speaker}: {c.record.text}" for c in nearby
            ) or "(none)",
        )
        parsed, _, policy = ask_json(model, graph_prompts.NOTE_SYSTEM, user, ModelNote, context)
        if parsed is not None:
            mentions, note, decisions, evolutions = _from_model(parsed, raw, nearby, mentions)
    graph = fast_path.write_turn(
        store, raw, facts, mentions, note, decisions, evolutions, policy,
        entities_on=context.entity_graph, semantic_on=context.semantic_links,
    )
    return graph, policy


def _from_model(
    parsed: ModelNote, raw: Record, nearby: list[Candidate], offline_mentions: list[Mention]
) -> tuple[list[Mention], Note, list[LinkDecision], list[Evolution]]:
    """The model's note, links and evolutions, kept only where they name real candidates."""
    mentions = [m for m in (normalise(e.name, e.type) for e in parsed.entities) if m is not None]
    keywords = [k.strip().lower() for k in parsed.keywords if k.strip()][:8]
    note = Note(
        keywords=keywords or [m.key for m in mentions][:8],
        tags=[t.strip().lower() for t in parsed.tags if t.strip()][:5],
        context=parsed.context.strip() or note_of(raw, mentions).context,
    )
    allowed = {c.record.id for c in nearby}
    decisions = [
        LinkDecision(target=link.id, weight=max(0.01, link.strength))
        for link in parsed.links if link.id in allowed and link.strength > 0
    ]
    linked = {d.target for d in decisions}
    evolutions = [
        Evolution(target=e.id, tags=e.tags, context=e.context, reason=f"evolved by {raw.id}")
        for e in parsed.evolve if e.id in linked
    ]
    return mentions or offline_mentions, note, decisions, evolutions


def _episode_links(namespace: str, episode: Record) -> list[Link]:
    return [
        Link(namespace=namespace, src=episode.id, dst=f"raw:{i}", type=LinkType.DERIVED_FROM)
        for i in episode.source_ids
    ]


# helpers -------------------------------------------------------------------
def _with_ids(store: MemoryStore, turns: list[Turn]) -> list[Turn]:
    """Give turns a dialogue id when the caller did not (T1, T2, ... per namespace).

    A client whose run stopped after the write-ahead sends the same input again, and the turns not yet
    derived are the last ones it wrote, still pending: the input's last turns without an id that repeat
    the last pending turns, in order (same speaker, words and photo, and time if given), take their ids
    and are derived under them. With new ids they were stored twice, the first copies pending for ever.
    The cost: an input whose last turns repeat, word for word, the last turns of an input still being
    stored is taken for its retry. New numbers come from one atomic step of the ledger, so concurrent
    writers never share one.
    """
    if all(turn.dia_id for turn in turns):
        return turns
    given = {turn.dia_id for turn in turns if turn.dia_id}
    waiting = sorted((r for r in store.written(_pending(store)) if r.dialogue_id not in given),
                     key=lambda r: natural_order(r.id))  # in the order they were written
    named = list(turns)
    unnamed = [n for n, turn in enumerate(turns) if not turn.dia_id]
    for n, record in zip(reversed(unnamed), reversed(waiting), strict=False):
        turn = turns[n]
        if (record.speaker, record.text, record.image_caption or None) != (turn.speaker, turn.text,
                                                                            turn.image_caption or None) \
                or (turn.time is not None and turn.time != record.time):
            break
        named[n] = turn.model_copy(update={"dia_id": record.dialogue_id, "time": turn.time or record.time,
                                           "utc_offset": turn.utc_offset if turn.time else record.utc_offset})
    missing = sum(1 for turn in named if not turn.dia_id)
    if not missing:
        return named
    # numbers the counter hands out, less those a caller already gave a turn ("T1" in a turn list, an import)
    given = {turn.dia_id for turn in named if turn.dia_id}
    free: list[int] = []
    while len(free) < missing:
        wanted = missing - len(free)
        top = store.ledger.bump(store.namespace, TURN_COUNTER, wanted)
        handed = range(top - wanted + 1, top + 1)
        taken = {n for n in handed if f"T{n}" in given or store.has(f"raw:T{n}")}
        free += [n for n in handed if n not in taken]
        if taken:  # past every number a caller gave at once, not one counter step per given id
            highest = highest_numbered([*given, *(r.dialogue_id for r in store.all("raw", include_inactive=True))])
            if highest > top:
                store.ledger.bump(store.namespace, TURN_COUNTER, highest - top)
    numbers = iter(free)
    now = utc_now()
    for n, turn in enumerate(named):
        if not turn.dia_id:
            named[n] = turn.model_copy(update={"dia_id": f"T{next(numbers)}", "time": turn.time or now})
    return named


def on_clock(turns: list[Turn], zone: ZoneInfo | None) -> list[Turn]:
    """The turns whose time names no offset, on the memory's time zone (`Context.timezone`): its offset at
    that instant (daylight saving included). A turn's own offset stands."""
    if zone is None:
        return turns
    return [turn.model_copy(update={"utc_offset": offset_in(turn.time, zone)})
            if turn.time is not None and turn.utc_offset is None else turn for turn in turns]


def _still_pending(store: MemoryStore, raw_id: str) -> bool:
    """Whether the turn still waits for its derive, as this run sees it (its own batch staged) and as the
    ledger says (another process, or another run of the same input retried meanwhile, may have derived it
    between this run's intake and its derive: research and judging run without the write lock)."""
    stored = store.ledger.get_state(store.namespace, PENDING, [])
    return raw_id in _pending(store) and isinstance(stored, list) and raw_id in stored


def _pending(store: MemoryStore) -> list[str]:
    """Raw ids written ahead whose derive has not finished (normally none, or the turn in progress)."""
    value = store.state(PENDING, [])
    return [str(v) for v in value] if isinstance(value, list) else []


def _prefetch(store: MemoryStore, turns: list[Turn], offline: bool) -> None:
    """Embed a batch's turns in one call, and hand its offline facts to the embedder's background
    thread, which embeds them while the turns are researched and derived: bulk ingestion speed.

    Only a speed-up, and it runs before the raw write: a failure here is left
    for the derive step to meet, after the turn is safely stored (write-ahead).
    """
    store.embedder.prefetch([t.text for t in turns])  # the write-ahead needs these at once
    facts: list[str] = []
    try:
        for turn in turns if offline else ():
            facts.extend(d.text for d in extract_facts(turn))
    except Exception:
        return
    store.embedder.prefetch(facts, background=True)
