"""Which stored value of a slot is current, and writing that decision through the store.

A slot is a subject and a single-valued attribute (where Ann lives, what Bob
works as; what someone is counts when the newer statement itself announces a
change, `announces_change`). AMA (section 3.4) updates the outdated value to the
latest one; here is that rule for the facts already stored: of two facts of one
slot with different values, the one said later supersedes the older (`stored_conflicts`),
unless the user undid that same change, the older is its subject's own word and
the newer only a question or someone else's, or the newer tells of a time well
before the older was said (`kept_because`). A decision is applied through the
store (`apply`), so it lands in the ledger's history and can be undone, and a
persona trait goes with the fact it came from (`follow_persona`).

The same rule decides what an incoming statement outdates (`outdated_by`): a
stored fact of the slot the turn fills with another value, unless it was said
after the turn or one of the reasons above keeps it.

It lives in the memory layer, not in a role, because more than one place
decides a slot: the Judge (agents/judge.py) names as a conflict exactly what
this rule changes or keeps for an undone change (`outdated_stored`,
`outdated_by` with `acted_on`), and the Refresher (agents/refresher.py) settles
what the Judge named by it; an erase (memory/erasure.py) decides a slot again
from the facts that stay (`settle_again`), and so does an undo that makes a fact
current again (`undo`, which `Memory.undo` calls). The roles import it from here; this
module knows no role and no graph state.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from strata.memory.errors import NotFoundError
from strata.memory.facts import FactDraft, asks_sentence, comparable, single_valued, split_sentences, told_as_past
from strata.memory.names import same_name
from strata.memory.records import OFFLINE, Action, Change, ChangeNote, Record, Status, Turn, id_numbers
from strata.memory.store import MemoryStore

UNDONE = "the user undid this same change"  # how a no-op that keeps an undo standing starts
_VALUE_TAIL = re.compile(r"\s+(?:now|currently|these days|anymore|any more|at the moment|instead)$", re.IGNORECASE)
# Words in the newer statement that announce a change of state.
CHANGE_CUE = re.compile(
    r"\b(now|no longer|anymore|any more|moved|changed|switched|instead|actually|currently|these days|quit|"
    r"not .{1,30} anymore)\b",
    re.IGNORECASE,
)
_CHANGING = frozenset({"is_a"})  # attributes that hold several values, one of which a change cue replaces
SETTLED = "; settled again after "  # what a change `settle_again` made adds to its reason, then after what
# the new value a change's reason names: "lives_in 'Boston' -> 'Austin'", and "...; settled again after an erase"
_NEW_VALUE = re.compile(rf"->\s*(['\"])(.+)\1(?:{re.escape(SETTLED)}[^'\"]*)?\s*$")


@dataclass
class Group:
    """One conflict group: the stored records in it, and whether the incoming turn is part of it."""

    records: list[Record]
    has_new: bool
    unknown: list[str] = field(default_factory=list)  # ids the Judge named that are not live records
    said: dict[str, datetime | None] = field(default_factory=dict)  # record id -> when its turn was said
    asked: set[str] = field(default_factory=set)  # facts whose value their turn only asked about
    undone: dict[str, set[str]] = field(default_factory=dict)  # record id -> new values of its changes undone
    newer: list[Record] = field(default_factory=list)  # the incoming turn's stored records: its facts, its turn

    def said_key(self, record: Record) -> tuple[datetime, tuple[int, ...]]:
        """When a record was said, to order statements of one value: its turn's time, then the dialogue id
        (D1:9 before D1:10 at one session time). Not the fact's own time, which is when the event was ("I
        moved to Denver last year", said in June, is newer than "I live in Boulder", said in May)."""
        return self.said.get(record.id) or datetime.min, id_numbers(record.dialogue_id)


@dataclass
class Step:
    """One planned edit, applied through the store so it is recorded and undoable."""

    action: Literal["update", "supersede", "delete", "noop"]
    record: Record
    reason: str
    new_text: str = ""
    by: Record | None = None  # the newer record that supersedes this one


def group_of(
    store: MemoryStore, records: list[Record], has_new: bool = False, unknown: list[str] | None = None,
    dia_id: str = "",
) -> Group:
    """A conflict group with what decides it: when each record's turn was said, whether the turn only asked
    the value, the changes to its records that the user undid, and the stored records of the incoming turn
    `dia_id` ('' for none: a question, or no incoming turn), which supersede an older value it replaces."""
    turns = {r.dialogue_id: r for r in store.get(f"raw:{r.dialogue_id}" for r in records)}
    said = {r.id: turns[r.dialogue_id].time if r.dialogue_id in turns else r.time for r in records}
    asked = {r.id for r in records if r.dialogue_id in turns and in_question(r.value, turns[r.dialogue_id].text)}
    newer: list[Record] = []
    if dia_id:
        newer = [*store.facts_from([dia_id]), *store.get([f"raw:{dia_id}"])]
    return Group(records=records, has_new=has_new, unknown=unknown or [], said=said, asked=asked,
                 undone=undone_values(store, records), newer=newer)


def in_question(value: str, text: str) -> bool:
    """Whether a turn names this value only in questions ("You live in Denver now, right?"): asked, not said.
    A statement before a tag is said ("I moved to Denver, did you know?"), as the facts read it
    (`facts.asks_sentence`)."""
    if not value:
        return False
    holding = [s for s in split_sentences(text) if comparable(value) in comparable(s)]
    return bool(holding) and all(asks_sentence(s) for s in holding)


def undone_values(store: MemoryStore, records: Sequence[Record]) -> dict[str, set[str]]:
    """The new values of the changes to these records that the user undid (the value a rewrite wrote, or the
    one its reason names after "->"): the Refresher does not make a change again that was taken back."""
    undone: dict[str, set[str]] = {}
    for record in records:
        for change in store.history(record.id, limit=1_000):
            if not change.undone or change.action != Action.UPDATE:
                continue
            named = _NEW_VALUE.search(change.reason)
            values = {named.group(2) if named else ""}
            if change.new_fields.get("value") != change.old_fields.get("value"):
                values.add(change.new_fields.get("value") or "")
            undone.setdefault(record.id, set()).update(_plain(v) for v in values if v)
    return undone


def acted_on(step: Step) -> bool:
    """Whether the Refresher does something with this step: changes the record, or records that the user
    undid that same change (a no-op kept in history so the undo is seen to stand)."""
    return step.action != "noop" or step.reason.startswith(UNDONE)


def outdated_stored(store: MemoryStore, facts: Sequence[Record]) -> list[list[str]]:
    """Per slot, the ids of the stored facts a newer stored fact outdates, then the newer one's: the groups
    on which the offline plan (`stored_conflicts`) changes a fact or records an undone change, so the Judge
    names as a conflict only what the Refresher then acts on. Only slots held by two facts are looked up."""
    groups: list[list[str]] = []
    for members in by_slot(facts).values():
        if len(members) < 2 or not any(announces_change(r.attribute, r.text) for r in members):
            continue  # nothing to settle: no reading of the group's history needed
        group = group_of(store, members)
        older = [step.record.id for step in stored_conflicts(group) if acted_on(step)]
        if older:  # one slot: every pair has the same newest
            groups.append([*older, same_slot_pairs(group)[0][1].id])
    return groups


def stored_conflicts(group: Group) -> list[Step]:
    """Two stored facts, same subject and single-valued attribute, different values: the one said later wins."""
    steps: list[Step] = []
    for older, newest in same_slot_pairs(group):
        if not disagree(older, newest.value) or not _replaces(comparable(older.attribute), newest.text, older, newest):
            continue
        change = f"{older.attribute} {older.value!r} -> {newest.value!r}"
        kept = kept_because(group, older, newest.value, newest.time_end or newest.time, newest.id in group.asked,
                            newest.speaker)
        if kept:
            steps.append(Step("noop", older, f"{kept}: left as it is ({change} by {newest.id})"))
            continue
        when = newest.said_on("later")
        steps.append(Step("supersede", older, f"superseded by {newest.id} ({when}): {change}",
                          new_text=newest.text, by=newest))
    return steps


def kept_because(
    group: Group, older: Record, value: str, when: datetime | None, asked: bool, speaker: str | None,
) -> str:
    """Why a newer value may not replace an older record ('' when it may): the user undid this same change;
    the older is its subject's own statement and the newer only a question or someone else's word (`speaker`
    None: not checked); or the newer tells of a time before the older was said (a past event, not a change)."""
    if _plain(value) in group.undone.get(older.id, set()):
        return f"{UNDONE} to {older.id}"
    own = bool(older.subject and older.speaker and same_name(older.speaker, older.subject))
    if own and (asked or (speaker is not None and not same_name(speaker or "", older.subject))):
        newer = "only asked" if asked else f"only {speaker}'s word"
        return f"{older.subject} said it of themselves; the newer value is {newer}"
    said = group.said.get(older.id)
    if told_as_past(when, said):
        return f"the newer statement is about {when:%Y-%m-%d}, well before the older was said ({said:%Y-%m-%d})"
    return ""


@dataclass
class Outdated:
    """A stored fact whose slot the incoming statement fills with another value, and why it stays ('' when
    the newer value replaces it)."""

    record: Record
    draft: FactDraft
    value: str  # the new value, without the words that only announced the change
    kept: str

    def acted_on(self) -> bool:
        """Whether the Refresher changes the fact, or records that the user undid this same change."""
        return not self.kept or self.kept.startswith(UNDONE)


def outdated_by(group: Group, turn: Turn, drafts: Sequence[FactDraft]) -> list[Outdated]:
    """The group's stored facts an incoming statement (`turn`, read as `drafts`) gives another value of the
    same slot, where the statement replaces the older value (`announces_change`, as between stored facts);
    not a fact said after the turn (a backfill of older talk). Each says why it stays, if it does
    (`kept_because`: another person's statement is taken, a question's is not). One draft per fact."""
    found: list[Outdated] = []
    for record in group.records:
        if record.kind == "raw" or not (record.subject and record.attribute and record.value):
            continue
        for draft in drafts:
            value = value_of(draft)
            if not same_slot(record, draft) or not disagree(record, value):
                continue
            if not announces_change(record.attribute, draft.text):
                continue
            if said_later(group.said_key(record), turn):
                continue
            kept = kept_because(group, record, value, draft.time_end or draft.time,
                                in_question(draft.value, turn.text), None)
            found.append(Outdated(record, draft, value, kept))
            break
    return found


def said_later(stored: tuple[datetime, tuple[int, ...]], turn: Turn) -> bool:
    """Whether a stored statement was said after the incoming turn: by time when both have one (at one time,
    by dialogue id); an undated turn is taken as the newer, as it arrives now."""
    when, numbers = stored
    if turn.time is None or when == datetime.min:
        return False
    if when != turn.time:
        return when > turn.time
    return numbers > id_numbers(turn.dia_id or "")


def _plain(value: str) -> str:
    """A value as compared with an undone one: without the words that only announced the change."""
    return comparable(_VALUE_TAIL.sub("", value).strip() or value)


def already_consistent(group: Group) -> set[str]:
    """Ids of same-slot records that agree already: the older one's text was brought up to the newer value.

    An update rewrites a fact's text but not its stored `value`, so the two can
    still look different by value; there is nothing to decide and nothing to record.
    """
    settled: set[str] = set()
    for older, newest in same_slot_pairs(group):
        old, new = comparable(older.value), comparable(newest.value)
        if old != new and new in comparable(older.text):
            settled.update((older.id, newest.id))
    return settled


def same_slot_pairs(group: Group) -> list[tuple[Record, Record]]:
    """(older, newest) for facts sharing a subject and attribute, oldest first by when they were said."""
    pairs: list[tuple[Record, Record]] = []
    for members in by_slot(group.records).values():
        ordered = sorted(members, key=lambda r: (group.said_key(r), r.version, r.id))
        pairs += [(older, ordered[-1]) for older in ordered[:-1]]
    return pairs


def by_slot(records: Sequence[Record]) -> dict[tuple[str, str], list[Record]]:
    """The facts with a value, by the slot they fill (raw turns state no slot)."""
    slots: dict[tuple[str, str], list[Record]] = {}
    for record in records:
        if record.kind != "raw" and record.subject and record.attribute and record.value:
            slots.setdefault(slot_of(record), []).append(record)
    return slots


def value_of(draft: FactDraft) -> str:
    """The new value without the words that only announced the change ("nurse now" -> "nurse")."""
    return _VALUE_TAIL.sub("", draft.value).strip() or draft.value


def _replaces(attribute: str, newer_text: str, older: Record, newer: Record) -> bool:
    if older.time and newer.time and older.time == newer.time and older.dialogue_id == newer.dialogue_id:
        return False  # said in the same breath: two values that hold together
    return announces_change(attribute, newer_text)


def announces_change(attribute: str, statement: str) -> bool:
    """Whether a newer statement of this attribute replaces the older value: a single-valued one always;
    what someone is ("is_a") when the statement itself announces a change ("Caroline is a nurse now").
    Not any attribute with a cue: a person likes, does and is (glad, busy) many things at once, and on
    LoCoMo (conv-30) "Jon is currently reading ..." superseded 16 of Jon's other "is" facts. Not the cue
    anywhere in the turn: "Now the hard work starts. I'm truly grateful ..." outdates nothing."""
    return single_valued(attribute) or (comparable(attribute).replace(" ", "_") in _CHANGING
                                        and bool(CHANGE_CUE.search(statement)))


def slot_of(item: FactDraft | Record) -> tuple[str, str]:
    """The slot a fact or a statement fills, as compared: its subject and attribute without wording."""
    return comparable(item.subject), comparable(item.attribute)


def same_slot(record: Record, draft: FactDraft | Record) -> bool:
    return slot_of(record) == slot_of(draft)


def disagree(record: Record, value: str) -> bool:
    """Different values that do not contain each other, and not already what the record says."""
    old, new = comparable(record.value), comparable(value)
    if not old or not new or old == new or old in new or new in old:
        return False
    return new not in comparable(record.text)


def apply(store: MemoryStore, step: Step, policy: str, follows: int | None = None, cause: str = "") -> ChangeNote:
    """One step through the store: history first, then the record (undoable by its change id). `cause`: the
    stored turn it was made for, whose erase takes it back."""
    record = step.record
    if step.action == "update":
        change = store.update(record.id, step.new_text, step.reason, policy, follows=follows, cause=cause)
        return note_of(change, "update")
    if step.action == "supersede" and step.by is not None:
        change = store.supersede(record.id, step.by.id, step.reason, policy, follows=follows, cause=cause)
        return note_of(change, "update", superseded_by=step.by.id)
    if step.action == "delete":
        change = store.delete(record.id, step.reason, policy, follows=follows, cause=cause)
        return note_of(change, "delete")
    change = store.record_noop(record.id, record.kind, step.reason, policy, cause)
    # a no-op's history row keeps no text: the note says what the record still holds
    return ChangeNote(action="noop", record_id=record.id, old_text=record.text, new_text=record.text,
                      old_status=record.status, new_status=record.status, reason=step.reason,
                      change_id=change.id, policy=policy)


def note_of(change: Change, action: Literal["update", "delete"], superseded_by: str = "") -> ChangeNote:
    """The caller's note of an edit, from its history row: the same texts and statuses under the same id, so a
    change note and `history()` never tell one change two ways (a superseded fact's note used to give the
    newer statement as its new text, which the record never held)."""
    return ChangeNote(action=action, record_id=change.record_id, old_text=change.old_text, new_text=change.new_text,
                      old_status=change.old_status, new_status=change.new_status, superseded_by=superseded_by,
                      reason=change.reason, change_id=change.id, policy=change.policy)


def traits_of(store: MemoryStore, fact: Record, superseded: bool = False) -> list[Record]:
    """Live persona traits distilled from this fact: same turn, participant, attribute and value; with
    `superseded`, those retired with it too (a request to forget reaches what is no longer current)."""
    if fact.kind != "fact" or not fact.attribute:
        return []
    kept = (Status.ACTIVE, Status.SUPERSEDED) if superseded else (Status.ACTIVE,)
    return [
        p for p in store.all("persona", include_inactive=superseded)
        if p.status in kept and p.attribute == fact.attribute and comparable(p.value) == comparable(fact.value)
        and p.participant == (fact.subject or fact.speaker) and set(p.source_ids) & set(fact.source_ids)
    ]


def follow_persona(
    store: MemoryStore, step: Step, policy: str, lead: int | None, cause: str = ""
) -> list[ChangeNote]:
    """A trait may not outlive the fact it came from: when the fact is updated, superseded or deleted,
    the trait is retired too, in a change that follows the fact's (`lead`), so undoing the fact's
    change restores the trait. The turn that brought the new value adds the new trait when derived."""
    notes: list[ChangeNote] = []
    source = f"the fact it came from ({step.record.id})"
    for trait in traits_of(store, step.record, superseded=step.action == "delete"):
        if step.action == "delete":
            follow = Step(action="delete", record=trait, reason=f"{source} was deleted")
        else:  # superseded by the newer record, or by the fact as the update rewrote it (not as it was)
            by = step.by or (store.get_one(step.record.id) if step.action == "update" else step.record)
            follow = Step(action="supersede", record=trait, reason=f"{source} was updated", by=by)
        notes.append(apply(store, follow, policy, lead, cause))
    return notes


def settle_again(
    store: MemoryStore, fact_ids: Sequence[str], policy: str = OFFLINE, after: str = "an erase",
    touching: Collection[str] = (),
) -> list[ChangeNote]:
    """Decide again which value of a slot is current, from the facts that remain: after an erase took back
    what a turn in between had changed (Ann's "you moved to Zorbatown" superseded Bob's "I live in Denver",
    and his later "I live in Austin now" superseded hers), both of his values were active; after an undo
    (`undo`). The slots of `fact_ids` are settled by the rule for two stored facts (`stored_conflicts`, with
    its guards): the one said later supersedes the others; with `touching`, only where one of those facts is
    the older or the newer. Each change is made for the newer fact's turn (its `cause`), so an erase of that
    turn takes it back in turn; nothing changes when a slot holds one value."""
    slots = {slot_of(r) for r in store.get(fact_ids) if r.kind == "fact" and r.subject and r.attribute}
    notes: list[ChangeNote] = []
    held = by_slot(store.all("fact"))  # every fact once, not once per slot
    with store.edits():
        for slot in sorted(slots):
            members = held.get(slot, [])
            if len(members) < 2:
                continue
            for step in stored_conflicts(group_of(store, members)):
                if step.action == "noop" or step.by is None:
                    continue
                if touching and not {step.record.id, step.by.id} & set(touching):
                    continue
                step.reason += f"{SETTLED}{after}"
                note = apply(store, step, policy, cause=step.by.dialogue_id)
                notes += [note, *follow_persona(store, step, policy, note.change_id, step.by.dialogue_id)]
    return notes


def undo(store: MemoryStore, change_id: int | None = None) -> Change:
    """Undo a change (`MemoryStore.undo`), then decide again the slots of the facts it made current, by the
    rule the Refresher applies (`settle_again`). Undoing "Boston superseded by Denver" while Denver had since
    been superseded by Austin made Boston current beside Austin: two current values, and a question about
    now could be answered with either. Now Boston is superseded by Austin, the value that stands, in a
    change of its own after the undo, itself undoable (an undone change is not made again: `kept_because`).
    So undoing the newest change of a chain first leaves both its values current, as asked. Returns the
    undo's own row."""
    with store.edits():  # the undo and what it settles stand or fall together
        try:
            rows = store.undo_rows(change_id)
        except NotFoundError:
            if change_id is not None and store.ledger.was_erased(store.namespace, change_id):
                raise NotFoundError(f"change {change_id} of namespace {store.namespace!r} was erased for good, with "
                                    "the record it changed or made (`erase`): nothing is left to undo") from None
            raise
        current = [row.record_id for row in rows if row.kind == "fact" and row.new_status == Status.ACTIVE
                   and (row.old_status != Status.ACTIVE or row.old_text != row.new_text)]  # not a note's tags
        if current:
            settle_again(store, current, after=f"the undo of change {rows[-1].undoes}", touching=current)
    return rows[-1]
