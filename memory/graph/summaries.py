"""Summary records: topics regrouped across sessions and persona aspects per participant (AdaMem).

AdaMem turns fine-grained episodic memory into reusable higher-level memories:
keys linked to their nearest peer form merge groups, and each group is
rewritten as a topic-centric or aspect-centric summary. Offline, the keys are
the entity graph's nodes: an entity mentioned in several sessions is a topic;
two entities whose mention sets mostly coincide ("support" and "support
group") are one group. Each topic becomes one `summary` record that cites
every turn it summarises, and says who did what, when, from the facts of those
turns (names and dates already resolved). Per participant, the activities they
speak of doing and the aspects of their persona traits (memory/persona.py)
become `summary` records too, so "What activities has Melanie done?" is one
record, not twenty turns.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Sequence

from pydantic import BaseModel, Field
from strata.memory.episodes import as_sentence
from strata.memory.persona import aspect_of
from strata.memory.records import Link, LinkType, Record, chronological_key

# A topic needs at least this many turns, from at least two sessions (one session's topic is its episode).
MIN_TOPIC_TURNS = 3
# An entity named in more than this share of the turns is the conversation's backdrop (its
# participants, "time"), not a topic of it.
MAX_TOPIC_SHARE = 0.2
# Two entities whose turn sets overlap this much (Jaccard) are one topic.
MERGE_OVERLAP = 0.5
_HYPHEN_SPACES = re.compile(r"\s*-\s*")  # 'Mary - Ann', 'Mary- Ann': a hyphen typed with spaces
MAX_LINES = 40  # a summary lists at most this many items; it cites every turn regardless


class Group(BaseModel):
    """Turns regrouped under one heading, before they are written as a summary."""

    id: str
    heading: str
    aspect: str = "topic"
    participant: str = ""
    turn_ids: list[str] = Field(default_factory=list)  # raw record ids, chronological


def topic_groups(mentions: dict[str, list[str]], types: dict[str, str], raw: dict[str, Record]) -> list[Group]:
    """Entities named in several sessions, merged when their turns mostly coincide (AdaMem's merge groups)."""
    common = max(MIN_TOPIC_TURNS, int(MAX_TOPIC_SHARE * len(raw)))
    keys = []
    for key, ids in mentions.items():
        turns = [i for i in dict.fromkeys(ids) if i in raw]
        sessions = {raw[i].session for i in turns}
        if MIN_TOPIC_TURNS <= len(turns) <= common and len(sessions) >= 2 and types.get(key, "") != "person":
            keys.append(key)
    sets = {k: {i for i in mentions[k] if i in raw} for k in keys}
    parent = {k: k for k in keys}

    def find(k: str) -> str:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for k in keys:  # each key joins its most overlapping peer, when they overlap enough
        best, score = None, 0.0
        for other in keys:
            if other == k:
                continue
            jaccard = len(sets[k] & sets[other]) / len(sets[k] | sets[other])
            if jaccard > score:
                best, score = other, jaccard
        if best is not None and score >= MERGE_OVERLAP:
            parent[find(k)] = find(best)
    members: dict[str, list[str]] = defaultdict(list)
    for k in keys:
        members[find(k)].append(k)
    groups: list[Group] = []
    for names in members.values():
        names.sort(key=lambda k: (-len(sets[k]), k))
        turns = sorted(set().union(*(sets[k] for k in names)), key=lambda i: chronological_key(raw[i]))
        groups.append(Group(id=f"summary:topic:{_slug(names[0])}", heading=" / ".join(names[:3]),
                            turn_ids=turns))
    return sorted(groups, key=lambda g: g.id)


def persona_groups(activities: dict[str, dict[str, list[str]]], facts: Sequence[Record],
                   raw: dict[str, Record]) -> list[Group]:
    """Per participant: the activities they speak of in their own turns, and each persona aspect of their facts."""
    groups: list[Group] = []
    for participant, by_activity in sorted(activities.items()):
        turns = sorted({i for ids in by_activity.values() for i in ids if i in raw},
                       key=lambda i: chronological_key(raw[i]))
        if turns:
            groups.append(Group(id=f"summary:persona:{_slug(participant)}:activities", aspect="activities",
                                participant=participant, heading=f"{participant}'s activities: "
                                + ", ".join(sorted(by_activity)), turn_ids=turns))
    aspects: dict[tuple[str, str], set[str]] = defaultdict(set)
    for fact in facts:
        aspect = aspect_of(fact.attribute)
        who = fact.subject or fact.speaker
        if aspect is None or who != fact.speaker:
            continue
        for source in fact.source_ids:
            if f"raw:{source}" in raw:
                aspects[(who, aspect)].add(f"raw:{source}")
    for (participant, aspect), ids in sorted(aspects.items()):
        turns = sorted(ids, key=lambda i: chronological_key(raw[i]))
        groups.append(Group(id=f"summary:persona:{_slug(participant)}:{aspect}", aspect=aspect,
                            participant=participant, heading=f"{participant}'s {aspect}", turn_ids=turns))
    return groups


def narrate(group: Group, raw: dict[str, Record], facts_by_turn: dict[str, list[Record]]) -> str:
    """Offline text of a summary: the heading, then who did what and when, one item per turn, from its facts."""
    lines: list[str] = []
    for rid in group.turn_ids[:MAX_LINES]:
        turn = raw[rid]
        said = [f.text for f in facts_by_turn.get(turn.dialogue_id, [])] or [f"{turn.speaker}: {turn.text}"]
        day = turn.local_time()
        when = day.strftime("%-d %B %Y") if day else "undated"
        lines.append(f"{when} [{turn.dialogue_id}]: {' '.join(as_sentence(s) for s in said[:2])}")
    more = len(group.turn_ids) - MAX_LINES
    tail = f" (and {more} more turns)" if more > 0 else ""
    return f"{group.heading}.\n" + "\n".join(lines) + tail


def summary_record(group: Group, text: str, title: str, namespace: str, raw: dict[str, Record],
                   policy: str) -> Record:
    first = raw[group.turn_ids[0]]
    last = raw[group.turn_ids[-1]]
    speakers = list(dict.fromkeys(raw[i].speaker for i in group.turn_ids))
    return Record(
        id=group.id, kind="summary", text=text, namespace=namespace, dialogue_id=first.dialogue_id,
        session=first.session, speaker=group.participant or ", ".join(speakers), time=first.time,
        time_end=last.time, source_ids=[raw[i].dialogue_id for i in group.turn_ids], title=title,
        participant=group.participant, aspect=group.aspect, policy=policy, utc_offset=first.utc_offset,
    )


def summary_links(namespace: str, record: Record) -> list[Link]:
    return [Link(namespace=namespace, src=record.id, dst=f"raw:{d}", type=LinkType.DERIVED_FROM)
            for d in record.source_ids]


def group_digest(group: Group, raw: dict[str, Record], facts_by_turn: dict[str, list[Record]]) -> str:
    """What a summary was written from: its heading, its turns and the facts they have now (a Refresher
    update, or its undo, changes what the summary should say). Unchanged digest, unchanged summary
    (consolidation skips it)."""
    told = [f"{f.id}={f.text}" for rid in group.turn_ids
            for f in sorted(facts_by_turn.get(raw[rid].dialogue_id, []), key=lambda f: f.id)]
    return hashlib.sha1("|".join([group.heading, *group.turn_ids, *told]).encode()).hexdigest()[:12]


def _slug(text: str) -> str:
    """A name or topic as a part of an id: lower case, its words joined by '-', and a hyphen of its own
    doubled, so that two participants never share a summary ('mary-ann' is Mary Ann, 'mary--ann' Mary-Ann).
    Spaces around a hyphen are a typing slip, not a word: 'Mary - Ann' and 'Mary- Ann' are Mary-Ann (read as
    words, 'Mary- Ann' and 'Mary -Ann' were one id that neither Mary-Ann nor 'Mary - Ann' had)."""
    joined = _HYPHEN_SPACES.sub("-", text.lower().replace("'", ""))
    return "-".join(word.replace("-", "--") for word in joined.split())[:60]
