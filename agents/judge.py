"""The Judge role: Pass, Retry or Refresh on what research found (AMA Judge).

AMA (section 3.4 and appendix C, figure 10) checks the candidates in two steps:
conflicts first (two items asserting incompatible facts about the same entity,
event or time: Refresh), then sufficiency (the entity, place, time or quantity
asked for must be stated at the precision asked, and vague stand-ins such as
"recently" or "home country" do not count: Retry), else Pass. Retry is only for
questions, and only K_r times (AMA's bounded retry); when the budget is spent
the run answers from what it has and says so in a note.

Offline, both checks are rules. Conflicts compare facts slot by slot (the same
subject and a single-valued attribute such as lives_in, works_as, age, or what
someone is when the newer statement announces a change) by the memory layer's
rule for which value is current (`memory.slots`): stored facts a newer stored
fact outdates, and stored facts the incoming statement outdates, read through
the facts `memory.facts` extracts from it; and an explicit request to forget
names the records `memory.forgetting` allows this turn to delete (whose memory
it is, a precise match, a bound). The Refresher settles a group by the same
rule and the forget rule is shared, so an offline Refresh verdict names what
the Refresher then acts on; a refused request or one waiting for a
confirmation is said in the run's notes. Sufficiency reads the
question type and looks for what it needs in the items that cover the
question's content words.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from langgraph.runtime import Runtime
from pydantic import AliasChoices, ConfigDict, Field, field_validator
from strata.agents.common import OFFLINE, classify, decided_offline, format_evidence, input_of, store_of, traced
from strata.agents.llm import ask_json, chat_model, one_of
from strata.graph.context import Context
from strata.graph.routing import refresh_allowed, retry_allowed
from strata.graph.state import MAX_CONFLICT_GROUPS, NEW, Action, Evidence, State, Verdict
from strata.memory.dates import resolve_relative
from strata.memory.entities import (
    CHAT_WORDS,
    MONTH_WORDS,
    PLAIN_WORDS,
    WEEKDAY_WORDS,
    plain_words,
    split_entities,
    stem,
    tokenize,
)
from strata.memory.facts import FactDraft, asks, extract_facts, only_asks
from strata.memory.forgetting import decide
from strata.memory.graph.replies import MAX_LINE_CHARS, Ids, Reply, clipped, weight
from strata.memory.lemmas import forms, text_forms
from strata.memory.names import unaccented
from strata.memory.records import Record, Status, Turn
from strata.memory.slots import announces_change, group_of, outdated_by, outdated_stored, same_slot, slot_of
from strata.memory.speakers import resolve_participant
from strata.memory.store import MemoryStore
from strata.prompts import judge as prompts

MIN_COVERAGE = 0.5  # share of the question's content words an item must hold to count as relevant
MAX_MISSING = 5  # phrases of the model's "missing" kept for the sub-question
MAX_LISTED = 8  # ids a trace line lists before "..."
# The filter never drops the better-scored share of the context: the search's own ranking stands for it.
# Chosen leave-conversations-out from 0.5, 0.7 and 0.9 (docs/evaluation.md): a lower share saves tokens
# but costs recall.
KEEP_SHARE = 0.9

_VAGUE = re.compile(
    r"\b(recently|lately|some ?time|a while|the other day|back then|around then|around that time|somewhere"
    r"|home country|back home|abroad|overseas|a few|a couple|several|some)\b",
    re.IGNORECASE,
)
_NOT_RESOLVABLE = frozenset({"recently", "lately", "some", "a few", "a couple", "several", "a while"})
_YEAR = re.compile(r"\b(19|20)\d{2}\b")
_NUMBER = re.compile(
    r"\b(\d+(?:[.,]\d+)?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen"
    r"|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|hundred|thousand|once|twice|dozen|both|single"
    r"|only child|first|second|third)\b",
    re.IGNORECASE,
)
_PLACE_NOUN = re.compile(
    r"\b(beach|park|lake|mountains?|forest|woods|city|town|village|museum|school|church|library|cafe|restaurant"
    r"|shelter|center|centre|office|hospital|gym|studio|club|camp|campground|farm|garden|river|island|coast"
    r"|countryside|conference|festival|concert|parade|store|shop|market|trail|canyon|desert|zoo|street|state"
    r"|house|apartment|bar|theater|theatre|stadium|hotel|airport|station|university|college|clinic)\b",
    re.IGNORECASE,
)
_PERSON_NOUN = re.compile(
    r"\b(mom|mother|dad|father|parents?|husband|wife|partner|spouse|boyfriend|girlfriend|son|daughter|kids?"
    r"|children|family|friends?|sister|brother|siblings?|grandma|grandmother|grandpa|grandfather|aunt|uncle"
    r"|cousin|mentors?|teacher|coach|colleagues?|coworkers?|boss|neighbou?rs?|team|group|community|doctor"
    r"|therapist|counselor)\b",
    re.IGNORECASE,
)
_LIGHT = frozenset(stem(w) for w in PLAIN_WORDS | CHAT_WORDS)
Need = Literal["time", "place", "number", "name", "content"]


# --- the model's output contract ---------------------------------------------------------------
class ModelVerdict(Reply):
    """AMA's Judge output (figure 10), plus the ids that disagree; lenient where models slip. Its texts are
    cut to a statement's length: they go to the trace, the thread's checkpoints and the next search."""

    model_config = ConfigDict(extra="ignore")

    action: Action = Field(..., validation_alias=AliasChoices("Action", "action", "ACTION", "decision"))
    reason: Annotated[str, clipped(MAX_LINE_CHARS)] = ""
    confidence: float = 0.5
    conflicts: list[list[str]] = Field(default_factory=list)
    irrelevant: Ids = Field(default_factory=list)  # one id as a string; null or anything else as none
    missing: list[Annotated[str, clipped(MAX_LINE_CHARS)]] = Field(default_factory=list)

    @field_validator("missing", mode="before")
    @classmethod
    def _missing(cls, value: object) -> list[str]:
        """What the evidence lacks, as a list of short phrases; one phrase as a string; null or anything
        else as nothing (advisory: a Retry without it still gets a sub-question, from its reason)."""
        items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        said = [v for v in items if isinstance(v, str | int | float) and not isinstance(v, bool)]
        phrases = (" ".join(str(v).split()) for v in said)
        return list(dict.fromkeys(p for p in phrases if p))[:MAX_MISSING]

    @field_validator("action", mode="before")
    @classmethod
    def _action(cls, value: object) -> object:
        return one_of(value, {"pass": "Pass", "retry": "Retry", "refresh": "Refresh"})

    @field_validator("reason", mode="before")
    @classmethod
    def _reason(cls, value: object) -> object:
        return "" if value is None else value if isinstance(value, str) else str(value)

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence(cls, value: object) -> float:
        """Read as every weight a model writes is (`replies.weight`: "0.8", "80%" and 80; 0.5 if unreadable)."""
        return weight(value)

    @field_validator("conflicts", mode="before")
    @classmethod
    def _conflicts(cls, value: object) -> object:
        """A flat list of ids is one group; a single id string is a group of one; null is none."""
        if value is None or value == "":
            return []
        if isinstance(value, str):
            return [[value]]
        if isinstance(value, list):
            if all(isinstance(v, str) for v in value):
                return [list(value)] if value else []
            return [[str(i) for i in v] if isinstance(v, list) else [str(v)] for v in value]
        return value


# --- conflicts ----------------------------------------------------------------------------------
def facts_behind(store: MemoryStore, evidence: Sequence[Evidence]) -> list[Record]:
    """The live facts in the evidence, and those derived from the evidence's raw turns."""
    ids = [e.id for e in evidence if e.kind == "fact"]
    turns = {e.dialogue_id for e in evidence if e.kind == "raw" and e.dialogue_id}
    found = {r.id: r for r in store.get(ids) if r.status == Status.ACTIVE}
    for record in store.facts_from(sorted(turns)):
        found.setdefault(record.id, record)
    return list(found.values())


def incoming_conflicts(
    store: MemoryStore, turn: Turn, drafts: Sequence[FactDraft], facts: Iterable[Record]
) -> list[list[str]]:
    """Stored facts the incoming statement outdates, [id, ..., "new"]: those the Refresher supersedes by it
    or keeps for an undone change (`slots.outdated_by`, the rule it settles the group by)."""
    group = group_of(store, [f for f in facts if any(same_slot(f, d) and announces_change(f.attribute, d.text)
                                                     for d in drafts)])  # read the history of these only
    outdated = [found.record.id for found in outdated_by(group, turn, drafts) if found.acted_on()]
    return [[*dict.fromkeys(outdated), NEW]] if outdated else []


def same_slot_facts(store: MemoryStore, drafts: Sequence[FactDraft]) -> list[Record]:
    """Live facts filling the slots the incoming turn speaks about (an exact lookup backs off retrieval)."""
    slots = {slot_of(d) for d in drafts if d.subject and d.attribute}
    if not slots:
        return []
    return [r for r in store.all("fact") if r.subject and r.attribute and slot_of(r) in slots]


# --- sufficiency --------------------------------------------------------------------------------
def need_of(question: str) -> Need:
    """What the answer must state, from the question type (AMA's entity / place / time / quantity rules)."""
    kind = classify(question)
    return {"when": "time", "where": "place", "how_many": "number", "who": "name"}.get(kind, "content")  # type: ignore[return-value]


def content_words(question: str, participants: Sequence[str]) -> list[str]:
    """The question's content words: no names of participants, no light verbs or chat words, no dates."""
    text = question
    for found in reversed(resolve_relative(question, datetime(2000, 1, 1))):
        text = text[: found.char_start] + " " + text[found.char_end :]
    names = {unaccented(t) for p in participants for t in tokenize(p)}  # "Emile" is a name as "Émile" is
    return [
        w for w in dict.fromkeys(plain_words(text))
        if unaccented(stem(w)) not in names and stem(w) not in _LIGHT and not w.isdigit()
    ]


def coverage(words: Sequence[str], item: Evidence) -> float:
    """Share of the question's words the item holds in some form ("sell" is held by "sold": shared lemmas)."""
    if not words:
        return 1.0
    held = text_forms(f"{item.speaker} {item.text}")
    return sum(bool(forms(w) & held) for w in words) / len(words)


def states_time(item: Evidence) -> bool:
    """An explicit date, or a relative one the item's own date turns into one value ('yesterday')."""
    text = item.text
    anchor = item.local_time() or datetime(2000, 1, 1)
    for found in resolve_relative(text, anchor):
        if not found.approximate and (not found.relative or item.time is not None):
            return True
    return bool(_YEAR.search(text))


def _names_besides(text: str, people: Sequence[str]) -> list[str]:
    """Proper names in a text other than `people` (nicknames included) and calendar words."""
    return [
        n for n in split_entities(text).names
        if n.lower() not in MONTH_WORDS and n.lower() not in WEEKDAY_WORDS and not resolve_participant(n, list(people))
    ]


def states_place(item: Evidence, participants: Sequence[str]) -> bool:
    """A named place or a concrete kind of place; 'home country', 'back home', 'somewhere' do not count."""
    text = _VAGUE.sub(" ", item.text)
    return bool(_names_besides(text, participants)) or bool(_PLACE_NOUN.search(text))


def states_number(item: Evidence) -> bool:
    return bool(_NUMBER.search(_VAGUE.sub(" ", item.text)))


def states_name(item: Evidence, asked: Sequence[str]) -> bool:
    """Someone other than the person asked about: a name, or a person word (mentor, grandma ...)."""
    return bool(_names_besides(item.text, asked)) or bool(_PERSON_NOUN.search(item.text))


def resolved_stand_ins(
    relevant: Sequence[Evidence], evidence: Sequence[Evidence], check: Callable[[Evidence], bool]
) -> list[Evidence]:
    """AMA's one step of inference: a stand-in ("my home country") in a relevant item, made concrete
    by another item that uses the same words with the value ("my home country, Sweden")."""
    phrases = {m.group(0).lower() for e in relevant for m in _VAGUE.finditer(e.text)} - _NOT_RESOLVABLE
    if not phrases:
        return []
    return [e for e in evidence if e not in relevant and any(p in e.text.lower() for p in phrases) and check(e)]


def sufficiency(
    question: str, evidence: Sequence[Evidence], participants: Sequence[str]
) -> tuple[bool, list[str], str, float]:
    """(enough?, what is missing, why, confidence) by AMA's granularity rules, offline."""
    if not evidence:
        return False, ["evidence"], "nothing was found", 0.9
    words = content_words(question, participants)
    scored = sorted(((coverage(words, e), e) for e in evidence), key=lambda pair: -pair[0])
    best = scored[0][0]
    relevant = [e for c, e in scored if c >= MIN_COVERAGE and c > 0] if words else list(evidence)
    if not relevant:
        missing = [w for w in words if not any(forms(w) & text_forms(e.text) for e in evidence)][:5]
        return False, ["content", *missing], f"no item covers the question's words ({best:.0%} at best)", 0.6
    need = need_of(question)
    asked = [p for p in participants if p.lower() in question.lower()]
    checks = {
        "time": lambda e: states_time(e),
        "place": lambda e: states_place(e, participants),
        "number": lambda e: states_number(e),
        "name": lambda e: states_name(e, asked),
        "content": lambda e: True,
    }
    holding = [e for e in relevant if checks[need](e)] or resolved_stand_ins(relevant, evidence, checks[need])
    if not holding:
        return False, [need], f"the items about the question state no {need} at the precision asked", 0.6
    refs = ", ".join(e.dialogue_id or e.id for e in holding[:3])
    what = "its words" if need == "content" else f"its words and a {need}"
    return True, [], f"{len(holding)} item(s) hold {what} ({refs})", round(min(1.0, 0.5 + best / 2), 2)


# --- the filter (AMA's H_r: only what helps the question reaches the answer) ------------------
def irrelevant_items(question: str, evidence: Sequence[Evidence], participants: Sequence[str]) -> list[str]:
    """Ids of items that hold none of the question's content words, are not in the better-scored
    KEEP_SHARE of the context, do not sit next to an item that holds them (an answer often follows
    the turn that asked), and do not make a stand-in of such an item concrete (the sufficiency check's
    one step of inference: "my home country" -> "my home country, Sweden"; the filter used to drop the
    very item a Pass relied on). A question without content words keeps everything."""
    words = content_words(question, participants)
    if not words:
        return []
    best = {e.id for e in sorted(evidence, key=lambda e: -e.score)[: round(len(evidence) * KEEP_SHARE)]}
    holding = [e for e in evidence if coverage(words, e) > 0]
    near = {n for e in holding for n in _adjacent_ids(e)}
    inferred = {e.id for e in resolved_stand_ins(holding, evidence, lambda e: True)}
    return [
        e.id for e in evidence
        if e.id not in best and e.id not in inferred and coverage(words, e) == 0 and (e.dialogue_id or e.id) not in near
    ]


def _adjacent_ids(item: Evidence) -> list[str]:
    """The dialogue ids just before and after a turn (D3:12 -> D3:11, D3:13)."""
    match = re.fullmatch(r"(.*:)(\d+)", item.dialogue_id or "")
    if not match:
        return []
    head, number = match.group(1), int(match.group(2))
    return [f"{head}{number - 1}", f"{head}{number + 1}"]


# --- the names the model was shown ----------------------------------------------------------------
_SHOWN = re.compile(r"^\[([^\]]+)\]")


def _key(name: str) -> str:
    """A name as compared: no brackets, single spaces, case folded ("[D1:1  Fact]" is "d1:1 fact")."""
    return " ".join(re.sub(r"[\[\]]", " ", name).split()).casefold()


def shown_names(evidence: Sequence[Evidence]) -> dict[str, list[str]]:
    """Every name the prompt gives an item, to the ids of all the items it stands for. The context shows an
    item by the label in its line's brackets (`Record.line`: the dialogue id, and the kind unless it is a raw
    turn: "D1:1", "D1:1 fact"; `context_lines` falls back to the item's `label`), never its record id, and a
    turn's facts share one label; the record id is accepted too."""
    names: dict[str, list[str]] = {}
    for e in evidence:
        tag = "" if e.kind == "raw" else f" {e.kind}"
        given = [e.id, f"{e.dialogue_id or e.id}{tag}"]
        shown = _SHOWN.match(e.line or e.label)
        if shown:
            given.append(shown.group(1))
        for name in dict.fromkeys(_key(g) for g in given):
            names.setdefault(name, []).append(e.id)
    return names


def resolve_names(named: Iterable[str], evidence: Sequence[Evidence]) -> tuple[list[str], list[str]]:
    """(the evidence ids the model's names stand for, the names that stand for none). A name is read as
    shown; a bare dialogue id no item is shown by ("D1:1" where only "[D1:1 fact]" lines are) stands for
    every item of that dialogue id: the model left the kind out."""
    names = shown_names(evidence)
    by_dialogue: dict[str, list[str]] = {}
    for e in evidence:
        if e.dialogue_id:
            by_dialogue.setdefault(_key(e.dialogue_id), []).append(e.id)
    ids: list[str] = []
    unknown: list[str] = []
    for name in named:
        found = names.get(_key(name)) or by_dialogue.get(_key(name))
        if found:
            ids += found
        elif name.strip():
            unknown.append(name.strip())
    return list(dict.fromkeys(ids)), list(dict.fromkeys(unknown))


def listed(names: Sequence[str]) -> str:
    """Names for a trace line: the first MAX_LISTED, each cut short (the model's text has no bound)."""
    shown = [n if len(n) <= 40 else n[:39] + "…" for n in names[:MAX_LISTED]]
    return ", ".join(shown) + (" ..." if len(names) > MAX_LISTED else "")


def filtered(
    s: Situation, verdict: Verdict, model_drop: list[str] | None
) -> tuple[list[Evidence], list[str], str]:
    """(kept evidence, dropped ids, policy) for a question; the evidence ids the model's irrelevant names stand
    for (`resolve_names`) when it gave a usable reply."""
    if model_drop is not None:
        dropped, policy = model_drop, verdict.policy
    else:
        dropped, policy = irrelevant_items(s.text, s.evidence, s.participants), OFFLINE
    gone = set(dropped)
    return [e for e in s.evidence if e.id not in gone], dropped, policy


# --- the policies -------------------------------------------------------------------------------
class Situation:
    """What both policies look at: the input, the evidence, and the facts behind them."""

    def __init__(self, state: State, runtime: Runtime[Context]) -> None:
        context = runtime.context
        self.context = context
        self.store = store_of(runtime)
        self.text, self.speaker, self.exclude = input_of(state, context)
        self.evidence = [e for e in state.evidence if e.id not in self.exclude]
        self.turn: Turn | None = None
        if context.mode in ("ingest", "chat") and state.turns and state.cursor < len(state.turns):
            self.turn = state.turns[state.cursor]
        self.question = context.mode in ("ask", "retrieve") or (self.turn is not None and asks(self.text))
        if context.mode == "ingest":
            self.question = False
        self.participants = self.store.participants()
        listener = self.turn.listener or "" if self.turn is not None else ""
        self.forget = decide(self.store, context.mode, self.text, self.speaker, listener, context.owner, self.exclude)
        # whether the input is a stored turn that states (not only a question, not a request to forget): only
        # such a turn can outdate a stored value, by the Refresher's either policy
        self.states = self.turn is not None and not only_asks(self.text) and self.forget is None
        self.drafts: list[FactDraft] = []
        if self.states:
            self.drafts = [d for d in extract_facts(self.turn) if d.attribute]  # (on the speaker's clock)
        self.facts = facts_behind(self.store, self.evidence)
        known = {f.id for f in self.facts}
        self.facts += [f for f in same_slot_facts(self.store, self.drafts) if f.id not in known]


def offline_verdict(s: Situation) -> Verdict:
    if s.forget is not None and s.forget.allowed:
        return Verdict(action="Refresh", reason=s.forget.reason(), confidence=0.9, conflicts=[[*s.forget.allowed, NEW]])
    # a conflict is what the Refresher acts on (`memory.slots`): not a newer value only asked, someone else's
    # word against the subject's own, about a time before the older was said, or said before it
    incoming = incoming_conflicts(s.store, s.turn, s.drafts, s.facts) if s.turn is not None and s.drafts else []
    groups, waiting = settled_now(incoming + outdated_stored(s.store, s.facts))
    if groups:
        return Verdict(
            action="Refresh", reason=_describe_conflicts(groups, s) + waiting, confidence=0.75, conflicts=groups,
        )
    if not s.question:
        why = "a statement: nothing to answer, no conflict with stored facts"
        if s.forget is not None:
            why = s.forget.reason()
        return Verdict(action="Pass", reason=why, confidence=0.8)
    enough, missing, why, confidence = sufficiency(s.text, s.evidence, s.participants)
    return Verdict(action="Pass" if enough else "Retry", reason=why, confidence=confidence, missing=missing)


def settled_now(groups: list[list[str]]) -> tuple[list[list[str]], str]:
    """(the groups the Refresher settles this run, what the reason says of the rest): at most
    `MAX_CONFLICT_GROUPS`, the incoming turn's first, as it is met only now; a conflict between stored facts
    is found again when they are next read."""
    ordered = sorted(groups, key=lambda group: NEW not in group)
    rest = len(ordered) - MAX_CONFLICT_GROUPS
    return ordered[:MAX_CONFLICT_GROUPS], f" ({rest} more group(s) wait for a later run)" if rest > 0 else ""


def _describe_conflicts(groups: list[list[str]], s: Situation) -> str:
    by_id = {f.id: f for f in s.facts}
    parts: list[str] = []
    for group in groups:
        values = [f"{by_id[i].value!r} ({i})" for i in group if i in by_id]
        if NEW in group:
            values.append("the new turn")
        first = next((by_id[i] for i in group if i in by_id), None)
        what = f"{first.subject} {first.attribute}" if first else "same slot"
        parts.append(f"{what}: " + " vs ".join(values))
    return "conflicting facts: " + "; ".join(parts)


def model_verdict(
    s: Situation, offline: Verdict, retry_left: bool = True
) -> tuple[Verdict, list[str] | None, list[str]]:
    """Ask the chat model (AMA's Judge contract); the offline verdict stands in when its reply is unusable.
    Also returns the names the model found irrelevant (None when the offline policy decided) and the names
    in its conflict groups that stand for nothing it was shown (the trace says they were ignored).

    A question with no Retry round left is answered from what was found whatever
    the model would say about sufficiency, so the model is not asked; conflicts
    are still caught by the offline check.
    """
    model = chat_model(s.context)
    if model is None:
        return offline, None, []
    if s.question and not retry_left:
        return offline.model_copy(update={"policy": decided_offline("no Retry round left")}), None, []
    new_facts = "\n".join(f"- {d.text} ({d.subject} | {d.attribute} | {d.value})" for d in s.drafts) or "(none)"
    when = s.turn.local_time() if s.turn is not None else None  # on the speaker's clock, as the facts prompt
    user = prompts.JUDGE_USER.format(
        mode=s.context.mode, now=when.strftime("%Y-%m-%d %H:%M") if when else "unknown",
        evidence=format_evidence(s.evidence), new_facts=new_facts, speaker=s.speaker or "user", text=s.text,
    )
    parsed, _, policy = ask_json(model, prompts.JUDGE_SYSTEM, user, ModelVerdict, s.context)
    if parsed is None:
        return offline.model_copy(update={"policy": policy}), None, []
    action: Action = parsed.action
    reason = parsed.reason.strip() or "model decision"
    if action == "Retry" and not s.question:
        action, reason = "Pass", f"{reason} (not a question: Retry does not apply)"
    conflicts: list[list[str]] = []
    ignored: list[str] = []
    if action == "Refresh":
        groups, ignored, unstated = _valid_groups(parsed.conflicts, s)
        conflicts, waiting = settled_now(groups) if groups else (offline.conflicts, "")
        reason += waiting
        if unstated:
            reason += " ('new' left out: a question states no newer value)"
    missing: list[str] = []
    if action == "Retry":  # what the sub-question searches for: the model's words, else the rule's, else its reason
        missing = parsed.missing or offline.missing or ([parsed.reason.strip()] if parsed.reason.strip() else [])
    verdict = Verdict(
        action=action, reason=reason, confidence=parsed.confidence, conflicts=conflicts, missing=missing,
        policy=policy,
    )
    return verdict, list(parsed.irrelevant), ignored


def _valid_groups(groups: list[list[str]], s: Situation) -> tuple[list[list[str]], list[str], bool]:
    """(groups as record ids, names that stand for nothing shown, whether "new" was left out). A name is read
    as the prompt showed it (`resolve_names`: "D1:1" is the turn, "D1:1 fact" every fact shown so); a stored
    fact behind the evidence counts by its record id. A raw turn brings the live facts drawn from it: the
    Refresher never rewrites a turn, so a conflict the model sees in a turn is settled on its facts; not on a
    request to forget, where a forgotten turn takes its facts along (the Refresher's `follow_turn`). Groups
    left without a stored id are dropped. Not any record of the namespace: text the model read (a stored turn,
    the incoming one) could name another person's fact for the Refresher to rewrite, one it never saw. For a
    question "new" is left out, and a group needs records of two stored turns: the Refresher takes a question
    for no newer value and leaves such a group as it is (a request to forget acts on its group either way)."""
    kinds = {e.id: (e.kind, e.dialogue_id) for e in s.evidence}
    past = {e.id for e in s.evidence if e.until is not None}
    behind = {f.id for f in s.facts}
    facts_of: dict[str, list[str]] = {}
    for f in s.facts:
        for dia in f.source_ids:
            facts_of.setdefault(dia, []).append(f.id)
    side = {e.id: e.dialogue_id or e.id for e in s.evidence} | {f.id: f.dialogue_id or f.id for f in s.facts}
    asking = not s.states and s.forget is None
    valid: list[list[str]] = []
    ignored: list[str] = []
    unstated = False
    for group in groups:
        ids: list[str] = []
        for raw_id in group:
            name = str(raw_id).strip()
            if name.lower() == NEW or name in s.exclude:
                if asking:  # a question outdates nothing: the Refresher would leave the group alone
                    unstated = True
                else:
                    ids.append(NEW)
                continue
            found, unknown = resolve_names([name], s.evidence)
            if not found and name in behind:
                found, unknown = [name], []
            ignored += unknown
            for record_id in found:
                if record_id in past and s.forget is None:  # shown for a time it held: not a live conflict
                    ignored.append(name)
                    continue
                ids.append(record_id)
                kind, dia = kinds.get(record_id, ("fact", ""))
                if kind == "raw" and dia and s.forget is None:
                    ids += facts_of.get(dia, [])
        ids = list(dict.fromkeys(ids))
        sides = {side.get(i, i) for i in ids if i != NEW}
        if sides and (not asking or len(sides) > 1):  # without the turn, a conflict is between two stored turns
            valid.append(ids)
    return valid, list(dict.fromkeys(ignored)), unstated


# --- the node ---------------------------------------------------------------------------------
def judge(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Decide Pass / Retry / Refresh on the evidence for the current input."""
    context = runtime.context
    situation = Situation(state, runtime)
    offline = offline_verdict(situation)
    verdict, model_ids, ignored = model_verdict(situation, offline, retry_allowed(state, context))
    notes = list(state.notes)
    if situation.forget is not None:
        notes.append(situation.forget.reason())
    retry_next = verdict.action == "Retry" and retry_allowed(state, context)
    if verdict.action == "Retry" and not retry_next:
        outcome = "returning" if context.mode == "retrieve" else "answering from"
        notes.append(f"Retry budget K_r={context.k_r} used up: {outcome} what was found")
    summary = f"{verdict.action} ({verdict.confidence:.2f}): {verdict.reason}"
    if verdict.conflicts:
        summary += " | conflicts: " + "; ".join(", ".join(g) for g in verdict.conflicts)
    update: dict[str, Any] = {"verdict": verdict, "notes": notes}
    if context.judge_filter and situation.question and context.mode != "ingest":
        named = resolve_names(model_ids, situation.evidence) if model_ids is not None else None
        kept, dropped, policy = filtered(situation, verdict, named[0] if named is not None else None)
        if dropped:
            update["evidence"] = kept
            summary += f" | filter ({policy}): {len(dropped)} irrelevant item(s) left out ({listed(dropped)}); "
            summary += f"{len(kept)} kept"
        if named is not None:
            ignored += named[1]
    if ignored:  # the model named what it was not shown: said, not silently dropped
        summary += f" | ignored ids the evidence does not hold: {listed(list(dict.fromkeys(ignored)))}"
    update["trace"] = traced(state, "judge", verdict.policy, summary)
    refreshing = verdict.action == "Refresh" and refresh_allowed(context)
    if verdict.action == "Refresh" and not refreshing and context.mode in ("ask", "retrieve"):
        notes.append("conflict reported, memory unchanged: a read changes memory only with refresh_on_read")
    if context.mode == "retrieve" and not refreshing and not retry_next:
        update["stage"] = "done"
    return update

