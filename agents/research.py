"""The Research role: plan a search, run it, and hand over a small labelled context.

It unites three read paths:
- AMA's Retriever (AMA, section 3.3 and appendix C, figure 9): rewrite the input
  to stand alone, read a four-bit intent [fine, abstract, event, atomic], route
  to raw if fine, else episode if abstract or event, else fact, with
  K = max(K_dyn, K_m); on Retry, search the remaining granularities and the
  related records (R_t).
- AdaMem's Research Agent (AdaMem, section 3.3): resolve which participant the
  question is about and favour what they said; facts re-activate the turns
  they came from; a keyword index backs off to the raw turns dense search misses.
- MAGMA's query path (MAGMA, section 4): dates in the question become a time
  window, anchors come from dense and keyword lists fused by reciprocal rank,
  neighbours along the temporal chain share their anchor's score, and the
  result is linearised chronologically, each item with its id and date, under
  a token budget.

This module plans and runs the rounds; the search a round runs (ranked lists,
fusion, boosts, the walk's list) is `memory/search.py`, and the context it
becomes (ranked per token, budgeted, in chronological order) is `agents/budget.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo

from langgraph.runtime import Runtime
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator
from strata.agents.budget import Candidate, ShownT, candidates, chronological, context_tokens, select
from strata.agents.common import OFFLINE, decided_offline, evidence_of, input_of, shown_people, store_of
from strata.agents.llm import ask_json, chat_model
from strata.agents.subquestion import subquestion
from strata.agents.wire import new_question
from strata.graph.context import Context
from strata.graph.state import Evidence, PathStep, Plan, RoleNote, State, fresh_run
from strata.memory import search
from strata.memory.dates import time_window
from strata.memory.entities import wordset
from strata.memory.graph.replies import MAX_STORY_CHARS, Reply, Text, clipped
from strata.memory.graph.traversal import edge_weights, focus_of
from strata.memory.moments import local, offset_in, utc_now, zone_of
from strata.memory.records import Kind, LinkType, Record, Status
from strata.memory.search import SEARCHABLE, Searcher, strip_names
from strata.memory.speakers import resolve_participant
from strata.memory.store import MemoryStore
from strata.prompts import research as prompts

FALLBACK_ORDER: dict[Kind, tuple[Kind, ...]] = {
    "raw": ("raw", "fact", "episode"),
    "fact": ("fact", "raw", "episode"),
    "episode": ("episode", "fact", "raw"),
}
RETRY_NEW_SHARE = 0.15  # budget share a retry round reserves for new finds (each share drops earlier ones)
MAX_K_DYN = 20
COMPACT_BROAD = True  # broad questions read facts on their own, not raw turns (see Searcher.compact)
# Context switches (ablations) that take an edge type out of the walk; a switch absent from Context is on.
EDGE_SWITCHES: tuple[tuple[str, str], ...] = (
    ("entity_graph", "entity"), ("semantic_links", "semantic"), ("causal_links", "causal"),
)
INGEST_POOL = 24  # a turn being stored needs only its near neighbours: what it relates to or may contradict

Intent = list[int]

# --- intent rules (offline policy) ------------------------------------------------------------
_EVENT = re.compile(
    r"\b(when|what (?:date|day|year|month|time)|which (?:date|day|year|month)|how long|since when|how often"
    r"|how many times|before|after|first time|last time|until|during|ago|anniversary)\b"
)
_ABSTRACT = re.compile(
    r"\b(why|feel|feels|felt|feeling|feelings|summari[sz]e|summary|what kind of|what type of|what sort of|describe"
    r"|overall|in general|personality|attitude|opinion|think about|thoughts? on|likely|would \w+ (?:still|be|want)"
    r"|motivat\w*|inspir\w*|reason|meaning|mean to|important to|changed|traits?|values?|how (?:has|have|did|does|do)"
    r" \w+ (?:\w+ )?(?:change|grow|cope|handle|deal|react|respond|prioriti[sz]e))\b"
)
_FINE = re.compile(
    r"\b(exact|exactly|quote|word for word|say|said|name of|title of|called|which|what is the name|what was the name"
    r"|spell|what color|what colour|what number)\b"
)
_BROAD = re.compile(
    r"\b(all|every|ever|both|list|activities|things|ways|events|hobbies|places|kinds|types|some of|in what ways"
    r"|how many|what (?:\w+ )?(?:has|have) \w+ (?:done|made|read|painted|visited|seen|tried|bought|participated))\b"
)
_PLURAL_OBJECT = re.compile(r"^(?:what|which)\s+([a-z]*[^s\W]s)\b")  # "what books", not "what class"
_STARTS_QUESTION = re.compile(
    r"^(?:what|who|whom|whose|where|when|which|why|how|is|are|was|were|do|does|did|can|could|would|will|has|have"
    r"|had|should)\b"
)


def intent_of(text: str) -> Intent:
    """AMA's four flags [fine, abstract, event, atomic] by transparent word rules."""
    low = " ".join(text.lower().replace("’", "'").split())
    event = bool(_EVENT.search(low)) or _broad(low)
    fine = bool(_FINE.search(low)) or bool(re.search(r"\b(when|what date|how long ago|what year)\b", low))
    abstract = bool(_ABSTRACT.search(low)) and not re.match(r"^(when|how long|how many|what date)\b", low)
    words = len(low.split())
    atomic = not abstract and not _broad(low) and words <= 12 and bool(_STARTS_QUESTION.match(low) or words <= 8)
    return [int(fine), int(abstract), int(event), int(atomic)]


def reads_facts(query: str) -> bool:
    """A question whose first round reads facts on their own, not whole turns (`Searcher.compact`)."""
    return COMPACT_BROAD and _broad(query.lower())


def _broad(low: str) -> bool:
    """A question that gathers several events ("what activities...", "what books has...")."""
    plural = _PLURAL_OBJECT.match(low)
    return bool(_BROAD.search(low)) or bool(plural and plural.group(1) not in ("is", "was", "has", "does"))


def route_of(intent: Sequence[int], kinds: Sequence[str]) -> Kind:
    """AMA's routing rule, restricted to the granularities this run may search."""
    fine, abstract, event, _ = (bool(b) for b in intent)
    wanted: Kind = "raw" if fine else "episode" if abstract or event else "fact"
    return first_allowed(wanted, kinds)


def first_allowed(wanted: Kind, kinds: Sequence[str]) -> Kind:
    for kind in FALLBACK_ORDER.get(wanted, SEARCHABLE):
        if kind in kinds:
            return kind
    return "raw"


def k_dyn_of(text: str, intent: Sequence[int]) -> int:
    """A small budget, larger for broad or cross-event questions (AMA's K_dyn)."""
    low = text.lower()
    fine, abstract, event, atomic = (bool(b) for b in intent)
    if _broad(low):
        return 12
    if abstract:
        return 8
    if event:
        return 6
    if fine:
        return 5
    return 4 if atomic else 5


# --- query rewriting (offline policy) ---------------------------------------------------------
_PRONOUN = re.compile(r"\b(he|she|they|him|her|them|his|hers|their|theirs)\b", re.IGNORECASE)
_NOT_NOUN_AFTER_HER = wordset("and or but to for with at in on of from by about as than that when if so because")


def expand_nicknames(text: str, participants: Sequence[str]) -> str:
    """'Mel' -> 'Melanie' when the short form names exactly one participant."""
    def replace(match: re.Match[str]) -> str:
        word = match.group(1)
        if any(word.lower() == part.lower() for p in participants for part in p.split()):
            return match.group(0)
        found = resolve_participant(word, list(participants))
        return match.group(0).replace(word, found[0], 1) if len(found) == 1 else match.group(0)

    return re.sub(r"\b([A-Z][a-z]{2,})(?=\b)", replace, text)


def last_mentioned(window: Sequence[dict[str, str]], participants: Sequence[str], exclude: str = "") -> str | None:
    """The participant most recently named (or, failing that, speaking) in working memory."""
    for turn in reversed(window):
        named = [p for p in resolve_participant(turn.get("text", ""), list(participants)) if p != exclude]
        if named:
            return named[-1]
    for turn in reversed(window):
        speaker = turn.get("speaker", "")
        if speaker and speaker != exclude and speaker in participants:
            return speaker
    return None


def resolve_pronouns(text: str, name: str) -> str:
    """Third-person pronouns -> the name ('her' before a noun is possessive: "Caroline's")."""
    def replace(match: re.Match[str]) -> str:
        word = match.group(1).lower()
        following = text[match.end() :].lstrip()
        next_word = re.match(r"[A-Za-z]+|[.,?!]", following)
        nxt = next_word.group(0).lower() if next_word else ""
        possessive = word in ("his", "their", "hers", "theirs") or (
            word == "her" and nxt.isalpha() and nxt not in _NOT_NOUN_AFTER_HER
        )
        return f"{name}'s" if possessive else name

    return _PRONOUN.sub(replace, text)


def rewrite_query(
    text: str, participants: Sequence[str], window: Sequence[dict[str, str]], speaker: str = ""
) -> str:
    """The input made standalone: nicknames expanded, third-person pronouns resolved (AMA's u'_t)."""
    rewritten = expand_nicknames(" ".join(text.split()), participants)
    if _PRONOUN.search(rewritten) and not resolve_participant(rewritten, list(participants)):
        name = last_mentioned(window, participants, exclude=speaker)
        if name:
            rewritten = resolve_pronouns(rewritten, name)
    return rewritten


def offline_plan(
    text: str, participants: Sequence[str], window: Sequence[dict[str, str]], now: datetime | None,
    kinds: Sequence[str], speaker: str = "",
) -> Plan:
    query = rewrite_query(text, participants, window, speaker)
    intent = intent_of(query)
    return Plan(
        query=query, intent=intent, route=route_of(intent, kinds), k_dyn=k_dyn_of(query, intent),
        participants=resolve_participant(query, list(participants)), time_window=time_window(query, now),
        policy=OFFLINE,
    )


# --- model policy ------------------------------------------------------------------------------
class IntentFlags(BaseModel):
    """AMA's intent vector as the model writes it; booleans and "1" are read as flags."""

    model_config = ConfigDict(extra="ignore")

    b_fine: int = Field(..., ge=0, le=1)
    b_abs: int = Field(..., ge=0, le=1)
    b_event: int = Field(..., ge=0, le=1)
    b_atomic: int = Field(..., ge=0, le=1)

    @field_validator("b_fine", "b_abs", "b_event", "b_atomic", mode="before")
    @classmethod
    def _flag(cls, value: object) -> object:
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, str) and value.strip().lower() in ("0", "1", "true", "false", "yes", "no"):
            return int(value.strip().lower() in ("1", "true", "yes"))
        if isinstance(value, float) and value in (0.0, 1.0):
            return int(value)
        return value

    def as_list(self) -> Intent:
        return [self.b_fine, self.b_abs, self.b_event, self.b_atomic]


class ModelPlan(Reply):
    """AMA's Retriever output contract (appendix C, figure 9)."""

    model_config = ConfigDict(extra="ignore")

    # as long as a question may be (`max_question_chars`' default), not the megabytes a looping model writes
    rewrite_query: Annotated[Text, clipped(MAX_STORY_CHARS)] = Field(
        ..., validation_alias=AliasChoices("rewrite_query", "rewritten_query", "query"))
    intent_vector: IntentFlags = Field(..., validation_alias=AliasChoices("intent_vector", "intent"))
    memory_type: Literal["raw", "fact", "episode"] | None = None
    K_dyn: int = Field(5, validation_alias=AliasChoices("K_dyn", "k_dyn", "K"))

    @field_validator("memory_type", mode="before")
    @classmethod
    def _kind(cls, value: object) -> object:
        if isinstance(value, str):
            low = value.strip().lower()
            aliases = {"raw text": "raw", "raw_text": "raw", "facts": "fact", "fact knowledge": "fact",
                       "episodes": "episode", "episodic": "episode", "": None}
            return aliases.get(low, low)
        return value

    @field_validator("K_dyn", mode="before")
    @classmethod
    def _budget(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return max(1, min(MAX_K_DYN, value))
        return value


def model_plan(
    text: str, offline: Plan, participants: Sequence[str], store: MemoryStore, now: datetime | None,
    context: Context,
) -> Plan:
    """Ask the chat model for the plan; the offline plan stands in when its reply is unusable.

    The model is asked only where its plan can change the search. A stored turn
    is searched with its own words, so ingesting never asks. A question (ask,
    retrieve) that names who it is about, or refers to no one, has no pronoun
    to resolve, the one step of the plan the offline reading may get wrong, so
    it is not asked either; a live chat turn, which leans on the conversation
    around it, always is. That keeps a question to a few calls.
    """
    model = chat_model(context)
    if model is None:
        return offline
    if context.mode == "ingest":
        return offline.model_copy(update={"policy": decided_offline("a stored turn is searched by its own words")})
    standalone = not _PRONOUN.search(text) or resolve_participant(text, list(participants))
    if context.mode in ("ask", "retrieve") and standalone:
        return offline.model_copy(update={"policy": decided_offline("the question leaves no one to resolve")})
    window = "\n".join(f"[{t['dia_id']}] {t['speaker']}: {t['text']}" for t in store.working()) or "(empty)"
    user = prompts.PLAN_USER.format(
        participants=", ".join(participants) or "(unknown)", now=now.strftime("%Y-%m-%d") if now else "unknown",
        window=window, text=text,
    )
    parsed, _, policy = ask_json(model, prompts.PLAN_SYSTEM, user, ModelPlan, context)
    if parsed is None:
        return offline.model_copy(update={"policy": policy})
    intent = parsed.intent_vector.as_list()
    kinds = context.kinds()
    route = first_allowed(parsed.memory_type, kinds) if parsed.memory_type else route_of(intent, kinds)
    query = parsed.rewrite_query.strip()
    named = resolve_participant(query, list(participants)) or offline.participants
    window_range = time_window(query, now) or offline.time_window
    return Plan(
        query=query, intent=intent, route=route, k_dyn=parsed.K_dyn, participants=named,
        time_window=window_range, policy=policy,
    )


# --- the node ---------------------------------------------------------------------------------
def research(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Round 1 plans and searches; later rounds (after a Retry) widen the search."""
    context = runtime.context
    fresh = state.stage == "done"
    update: dict[str, Any] = {**fresh_run(), "stage": "asking"} if fresh else {}
    if fresh:
        new_question(context)  # a full model-call budget for this question
    rounds = 0 if fresh else state.rounds
    earlier: list[Evidence] = [] if fresh else list(state.evidence)
    trace: list[RoleNote] = [] if fresh else list(state.trace)
    text, speaker, exclude = input_of(state, context)
    if context.mode in ("ingest", "chat"):  # the input's later turns are written ahead but not yet said
        exclude |= {f"raw:{t.dia_id}" for t in state.turns[state.cursor + 1 :] if t.dia_id}
    store = store_of(runtime)
    participants = store.participants()
    now, clock = _now_of(state, store, context)
    kinds = [k for k in context.kinds() if k in SEARCHABLE]
    plan = None if fresh else state.plan
    first = rounds == 0 or plan is None
    if first or plan is None:
        offline = offline_plan(text, participants, store.working(), now, kinds, speaker)
        plan = _in_utc(model_plan(text, offline, participants, store, now, context), clock, zone_of(context.timezone))
    # A stored turn is searched with its own words: its vector is already cached from the write.
    dense_text = text if context.mode == "ingest" else strip_names(plan.query, participants)
    searcher = Searcher(store, plan, dense_text, exclude, compact=reads_facts(plan.query))
    searcher.summaries = getattr(context, "summaries", True)
    people = shown_people(participants, context)  # whose turns are shown without small talk
    if context.mode == "ingest":
        evidence, plan, summary = _ingest_round(searcher, plan, context, kinds, people)
    elif first:
        evidence, plan, summary = _first_round(searcher, plan, context, kinds, people)
    else:
        missing = list(state.verdict.missing) if state.verdict is not None else []
        evidence, plan, summary = _retry_round(searcher, plan, context, kinds, people, earlier, rounds, missing)
    trace.append(RoleNote(role="research", policy=plan.policy, summary=summary))
    return {**update, "plan": plan, "evidence": evidence, "rounds": rounds + 1, "trace": trace}


def _now_of(state: State, store: MemoryStore, context: Context) -> tuple[datetime, int | None]:
    """'Now' for relative dates, on the clock it was said on, and that clock (`Turn.utc_offset`): the turn's
    time, else the time of the turn said last (replayed dialogues), else the wall clock (UTC)."""
    if context.mode in ("ingest", "chat") and state.turns and state.cursor < len(state.turns):
        turn = state.turns[state.cursor]
        said = turn.local_time()
        if said is not None:
            return said, turn.utc_offset
    latest = store.latest_turn()
    said = latest.local_time() if latest is not None else None
    return (said, latest.utc_offset) if said is not None and latest is not None else (utc_now(), None)


def _in_utc(plan: Plan, clock: int | None, zone: ZoneInfo | None = None) -> Plan:
    """The plan with its time window, read in days on the speaker's clock, widened to hold both kinds of
    stored time: a turn's, a UTC instant ("last week" said in Denver is Denver's week, 06:00 UTC on), and a
    fact dated by its words ("on 7 May"), which is that day already. Each end shifts by the offset of the
    memory's `timezone` at that day (daylight saving), else by the clock of the turn said last. The days
    themselves are kept as `Plan.days`, for what compares the speaker's days (the Working role's reader)."""
    if plan.time_window is None:
        return plan
    start, end = plan.time_window
    plan = plan.model_copy(update={"days": (start.date(), end.date())})
    if not (clock or zone):
        return plan

    def shifts(bound: datetime) -> int:
        return (offset_in(bound, zone) if zone is not None else clock) or 0

    first = min(start, local(start, -shifts(start)) or start)
    last = max(end, local(end, -shifts(end)) or end)
    return plan.model_copy(update={"time_window": (first, last)})


def _first_round(
    searcher: Searcher, plan: Plan, context: Context, kinds: Sequence[Kind], people: Sequence[str]
) -> tuple[list[Evidence], Plan, str]:
    """The routed granularity, plus raw turns and facts (recall at a small budget); broad questions
    leave raw turns to a retry."""
    searched: list[Kind] = [plan.route, *(k for k in ("raw", "fact") if k in kinds and k != plan.route)]
    if searcher.compact and "fact" in searched:
        searched = [k for k in searched if k != "raw"]  # a broad question reads facts, not whole turns
    k = max(plan.k_dyn, context.k_m)
    units = searcher.units(searched, search.POOL, walk=walk_weights(plan, context, searcher.compact))
    chosen = select(candidates(units, people), context.token_budget)
    evidence = chronological(c.evidence() for c in chosen)
    plan = plan.model_copy(update={"searched": list(searched)})
    return evidence, plan, _summary(plan, evidence, k, 1)


def walk_weights(plan: Plan, context: Context, broad: bool) -> dict[str, float] | None:
    """Edge weights for this question's traversal (None when traversal is switched off)."""
    if not context.traversal:
        return None
    disabled = [edge for switch, edge in EDGE_SWITCHES if not getattr(context, switch, True)]
    return edge_weights(focus_of(plan.query, broad or _broad(plan.query.lower())), disabled)


def _ingest_round(
    searcher: Searcher, plan: Plan, context: Context, kinds: Sequence[Kind], people: Sequence[str]
) -> tuple[list[Evidence], Plan, str]:
    """A turn being stored: the few turns and facts nearest its own words, which the Judge checks for
    conflicts and the Memory role links to (AMA's R_t). No time window, boosts or retry."""
    searched: list[Kind] = [k for k in ("raw", "fact") if k in kinds] or [plan.route]
    k = max(plan.k_dyn, context.k_m)
    units = searcher.units(searched, INGEST_POOL, light=True)
    chosen = select(candidates(units, people), context.token_budget, k)
    evidence = chronological(c.evidence() for c in chosen)
    plan = plan.model_copy(update={"searched": list(searched)})
    return evidence, plan, _summary(plan, evidence, k, 1)


def _retry_round(
    searcher: Searcher, plan: Plan, context: Context, kinds: Sequence[Kind], people: Sequence[str],
    earlier: list[Evidence], rounds: int, missing: Sequence[str] = (),
) -> tuple[list[Evidence], Plan, str]:
    """Remaining granularities, then link neighbours of what was found, then a sub-question for what the
    Judge found missing (AdaMem), or a wider K when it named nothing (AMA's Retry)."""
    store, exclude = searcher.store, searcher.exclude
    remaining = [k for k in kinds if k not in plan.searched]
    searched = list(plan.searched)
    new: list[Candidate | Evidence] = []  # built as evidence only if chosen
    steps: list[str] = []
    known = {e.id for e in earlier}
    participants = store.participants()
    sub, policy = subquestion(plan.query, missing, participants, earlier, context)
    if sub:  # what the Judge found missing comes first: it is what this round is for
        sub_plan = plan.model_copy(update={"query": sub})
        sub_searcher = Searcher(
            store, sub_plan, strip_names(sub, participants), exclude, reads_facts(sub), unindexed=set()
        )
        walk = walk_weights(sub_plan, context, searcher.compact)
        units = sub_searcher.units(list(plan.searched), search.POOL, walk=walk)
        for unit in units.values():
            unit.found_by.add("subquestion")
        new += [c for c in candidates(units, people) if c.id not in known][: max(plan.k_dyn, context.k_m)]
        steps.append(f"sub-question {sub!r} ({policy})")
    if remaining:
        units = searcher.units(remaining, search.POOL)
        new += candidates(units, people)
        searched += remaining
        steps.append("searched " + ", ".join(remaining))
    linked = _linked(store, earlier, exclude, people)
    if linked:
        new += linked
        steps.append(f"{len(linked)} linked records")
    if not sub and not remaining:
        wider = max(plan.k_dyn, context.k_m) * (rounds + 1)
        units = searcher.units(plan.searched, search.POOL * (rounds + 1))
        new += [c for c in candidates(units, people) if c.id not in known][: wider]
        steps.append(f"wider K={wider}")
    fresh = [e for e in _dedupe(new) if e.id not in known]
    budget = context.token_budget
    reserve = int(budget * RETRY_NEW_SHARE) if fresh else 0
    ranked_old = sorted(earlier, key=lambda e: -e.score)
    new_part = _built(select(fresh, reserve))
    old_part = select(ranked_old, budget - context_tokens(new_part))
    taken = {e.id for e in new_part}
    left = budget - context_tokens(new_part) - context_tokens(old_part)
    rest = _built(select([e for e in fresh if e.id not in taken], left))
    evidence = chronological(_dedupe([*old_part, *new_part, *rest]))
    plan = plan.model_copy(update={"searched": searched})
    summary = _summary(plan, evidence, max(plan.k_dyn, context.k_m), rounds + 1)
    dropped = len(earlier) - len(old_part)
    summary += f"; retry: {', '.join(steps) or 'nothing new'}; +{len(new_part) + len(rest)} new"
    if dropped > 0:
        summary += f", {dropped} weakest earlier items left out for the token budget"
    return evidence, plan, summary


def _built(items: Iterable[Candidate | Evidence]) -> list[Evidence]:
    """Chosen items as evidence (a candidate is built only once it is chosen)."""
    return [item.evidence() if isinstance(item, Candidate) else item for item in items]


def _linked(
    store: MemoryStore, earlier: Sequence[Evidence], exclude: set[str], people: Sequence[str] = ()
) -> list[Evidence]:
    """Records one typed edge away from what was found (temporal, entity, derived-from, related), each
    with its path: the earlier find's, then the edge; an unedited fact comes as the turn it was derived
    from, like in the search (one more derived-from step)."""
    if not earlier:
        return []
    top = sorted(earlier, key=lambda e: -e.score)[:12]
    by_id = {e.id: e for e in top}
    types = [LinkType.TEMPORAL, LinkType.ENTITY, LinkType.DERIVED_FROM, LinkType.RELATED]
    reached: dict[str, list[PathStep]] = {}  # first edge to each neighbour, in the order the edges come
    for link in store.edges(list(by_id), types):
        start = by_id.get(link.src) or by_id.get(link.dst)
        for other in (link.src, link.dst):
            if start is None or other in by_id or other in reached or other.split(":", 1)[0] not in SEARCHABLE:
                continue
            hop = sum(step.step == "edge" for step in start.path) + 1
            edge = PathStep(step="edge", via=[link.type.value], src=start.id, dst=other, hop=hop)
            reached[other] = [*start.path, edge]
    shown: dict[str, tuple[Record, list[PathStep]]] = {}
    for record in store.get(reached):
        path = reached[record.id]
        unedited_fact = record.kind == "fact" and record.version == 1
        turns = store.get(f"raw:{s}" for s in record.source_ids) if unedited_fact else []
        for turn in turns:
            step = PathStep(step="edge", via=[LinkType.DERIVED_FROM.value], src=record.id, dst=turn.id,
                            hop=path[-1].hop + 1)
            shown.setdefault(turn.id, (turn, [*path, step]))
        if not turns:
            shown.setdefault(record.id, (record, path))
    score = round(min(e.score for e in top) * search.NEIGHBOUR_SHARE, 8)
    linked = []
    for record, path in shown.values():
        if record.status == Status.ACTIVE and record.id not in exclude:
            item = evidence_of(record, score, ["link"], people)
            item.path = path
            linked.append(item)
    return linked


def _dedupe(items: Iterable[ShownT]) -> list[ShownT]:
    seen: set[str] = set()
    out: list[ShownT] = []
    for item in items:
        if item.id not in seen:
            seen.add(item.id)
            out.append(item)
    return out


def _summary(plan: Plan, evidence: Sequence[Evidence], k: int, round_number: int) -> str:
    flags = "".join(str(b) for b in plan.intent)
    window = ""
    if plan.time_window is not None:
        window = f", window {plan.time_window[0]:%Y-%m-%d}..{plan.time_window[1]:%Y-%m-%d}"
    who = f", about {', '.join(plan.participants)}" if plan.participants else ""
    return (
        f"round {round_number}: intent {flags} -> {plan.route}, K={k}{who}{window}; searched "
        f"{', '.join(plan.searched)}; {len(evidence)} items, {context_tokens(evidence)} tokens"
    )
