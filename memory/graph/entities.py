"""Entity nodes from a text: names and noun phrases, normalised (MAGMA 3.2, AdaMem graph memory).

An entity is anything two turns can be "about" across sessions: a person, a
place, an object, an activity, an organisation, an event. Offline we find them
with a part-of-speech lexicon (lemminflect's English word list, shipped in its
PyPI package) instead of a list of expected topics:
- proper names, from `memory.entities.split_entities`, but a capitalised word
  that only opens a sentence ("Woah, ...", "Nah, ...") is not a name unless it
  is a participant or an acronym: a capital letter there is no evidence;
- nouns, singularised by the lexicon ("kids" -> "kid", "books" -> "book"), and
  two-noun compounds ("support group");
- activities: a verb's -ing form used as a noun ("we went camping"), not as a
  progressive ("I'm running late");
- possessed nouns resolved to their owner: "my sister" said by Caroline is
  "Caroline's sister", "your kids" said to Melanie is "Melanie's kid".
Words the lexicon knows only as adverbs, adjectives or interjections, function
words and chat words never become entities. Which nouns are too common to
connect anything is decided later by document frequency (memory/graph/links.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, Field
from strata.memory.entities import (
    CHAT_WORDS,
    MONTH_WORDS,
    PLAIN_WORDS,
    STOPWORDS,
    WEEKDAY_WORDS,
    split_entities,
    wordset,
)
from strata.memory.lemmas import lemmas as _lemmas  # the lexicon lookup the Judge's filter shares
from strata.memory.names import composed

EntityType = Literal["person", "place", "organisation", "object", "activity", "event", "name", "other"]
ENTITY_TYPES: tuple[str, ...] = ("person", "place", "organisation", "object", "activity", "event", "name", "other")

_WORD = re.compile(r"[^\W\d_](?:[^\W\d_]|['’])*")  # letters of any script: "Émile" is never "mile"
_NAME_PART = re.compile(r"(?:[^\W_]|['’])+")
_BE = wordset(
    "am is are was were be been being im i'm you're we're they're he's she's it's isn't aren't wasn't weren't "
    "keep keeps kept stop stopped start started"
)  # "I'm running", "keep going": the -ing form is a verb there, not an activity's name
_FIRST_PERSON = frozenset({"my", "our"})
_SECOND_PERSON = frozenset({"your"})
# Words after which a word the lexicon also knows as a verb or adjective is read as a noun ("the support").
_DETERMINERS = wordset(
    "a an the my your his her our their its this that these those some any every each no another"
)
# After an -ing form, these still close a noun phrase ("went camping with the kids", "running and reading").
_PHRASE_END = wordset("and or with at in on")
_NEVER = STOPWORDS | CHAT_WORDS | PLAIN_WORDS | MONTH_WORDS | WEEKDAY_WORDS


class Mention(BaseModel):
    """One entity a text mentions: `key` joins mentions across records, `label` is how it reads."""

    key: str = Field(..., min_length=1)
    label: str
    type: EntityType = "other"


def _noun(word: str, previous: str, after_noun: bool) -> str | None:
    """The singular of a word used as a noun here, else None.

    A word the lexicon knows only as a noun ("pottery") always is one; a word it
    also knows as a verb or adjective ("support", "check", "real") is a noun
    only in the plural, after a determiner or adjective, or after another noun.
    """
    if len(word) < 3 or word in _NEVER or not word.isalpha():
        return None
    lemmas = _lemmas(word)
    if "NOUN" not in lemmas:
        return None
    singular = lemmas["NOUN"][0]
    if set(lemmas) == {"NOUN"} or singular != word or previous in _DETERMINERS or after_noun:
        return singular
    return singular if previous and _adjective_only(previous) else None


def _activity(word: str, previous: str, following: str) -> str | None:
    """A verb's -ing form used as the name of an activity ("went camping.", "love painting!")."""
    if not word.endswith("ing") or len(word) < 6 or word in _NEVER or previous in _BE | _DETERMINERS:
        return None
    lemmas = _lemmas(word)
    if "VERB" not in lemmas or "ADJ" in lemmas:  # "exciting", "inspiring" describe, they are not done
        return None
    return word if following in ("", *_PHRASE_END) else None


def _adjective_only(word: str) -> bool:
    lemmas = _lemmas(word)
    return bool(lemmas) and set(lemmas) <= {"ADJ"}


def find_mentions(text: str, speaker: str = "", listener: str = "", known: Iterable[str] = ()) -> list[Mention]:
    """The entities of one text, each once, names first (see the module docstring for the rules)."""
    text = composed(text)  # the spelling split_entities cuts names from
    people = [p for p in (speaker, listener, *known) if p]
    participants = {p.lower(): p for p in people}
    found: dict[str, Mention] = {}

    def add(key: str, label: str, kind: EntityType) -> None:
        key = key.strip().lower()
        if key and key not in found:
            found[key] = Mention(key=key, label=label, type=kind)

    names = split_entities(text, people).names
    opening = _sentence_openers(text)
    for name in names:
        single = " " not in name
        if single and name.lower() in opening and name.lower() not in participants and not _acronym(name):
            continue  # only ever seen opening a sentence: an interjection or a common word, not a name
        person = _participant(name, participants)
        add(person or name, person or name, "person" if person else "name")
    name_words = {w.lower() for name in names for w in name.split()}
    tokens = [(m.group().replace("’", "'").lower(), m.start(), m.end()) for m in _WORD.finditer(text)]
    words = [w[:-2] if w.endswith("'s") else w for w, _, _ in tokens]
    previous_noun: tuple[int, str] | None = None
    for i, word in enumerate(words):
        if word in name_words:
            previous_noun = None
            continue
        before = words[i - 1] if i else ""
        joined = i > 0 and text[tokens[i - 1][2] : tokens[i][1]] in (" ", "-")
        following = words[i + 1] if i + 1 < len(words) and text[tokens[i][2] : tokens[i + 1][1]].strip() == "" else ""
        activity = _activity(word, before, following)
        after_noun = previous_noun is not None and previous_noun[0] == i - 1 and joined
        noun = None if activity else _noun(word, before, after_noun or before in name_words)
        if activity is None and noun is None:
            previous_noun = None
            continue
        head = activity or noun or ""
        add(head, head, "activity" if activity else "other")
        owner = _owner(words, i, speaker, listener)
        if owner:
            add(f"{owner}'s {head}", f"{owner}'s {head}", "other")
        if after_noun and noun and previous_noun is not None:
            compound = f"{previous_noun[1]} {noun}"
            add(compound, compound, "other")
        previous_noun = (i, noun) if noun else None
    return list(found.values())


def _participant(name: str, participants: dict[str, str]) -> str:
    """A participant's full name for their name or a short form of it ("Mel" for Melanie), else ""."""
    low = name.lower()
    if low in participants:
        return participants[low]
    matches = [full for key, full in participants.items() if len(low) >= 3 and key.startswith(low)]
    return matches[0] if len(matches) == 1 else ""


def _owner(words: list[str], i: int, speaker: str, listener: str) -> str:
    """Whose thing this is when a possessive determiner precedes it (one adjective may sit between)."""
    for back in (1, 2):
        if i - back < 0:
            return ""
        word = words[i - back]
        if word in _FIRST_PERSON:
            return speaker
        if word in _SECOND_PERSON:
            return listener
        if back == 1 and not _adjective_only(word):
            return ""
    return ""


def _sentence_openers(text: str) -> set[str]:
    """Lower-cased words that appear capitalised only where a sentence starts."""
    openers: set[str] = set()
    inside: set[str] = set()
    for match in re.finditer(r"(^|[.!?:;\"“”(\n]\s*|\s)([^\W\d_](?:[^\W\d_]|['’])*)", text):
        if not match.group(2)[0].isupper():
            continue
        word = match.group(2).replace("’", "'")
        word = (word[:-2] if word.endswith("'s") else word).lower()
        starts = match.group(1) == "" or match.group(1).strip() != ""
        (openers if starts else inside).add(word)
    return openers - inside


def _acronym(word: str) -> bool:
    letters = [c for c in word if c.isalpha()]
    return len(letters) >= 2 and all(c.isupper() for c in letters)


def normalise(name: str, kind: str = "other") -> Mention | None:
    """A model's entity name as a mention: lower-cased key, last word singular ("Art Classes" -> "art class").

    Words of any script count (北京, Müller and Möller stay apart), in their composed spelling."""
    words = [w for w in _NAME_PART.findall(composed(name).replace("’", "'")) if w]
    if not words or all(w.lower() in _NEVER for w in words):
        return None
    last = words[-1].lower()
    lemmas = _lemmas(last)
    if "NOUN" in lemmas:
        words[-1] = lemmas["NOUN"][0]
    label = " ".join(words)
    return Mention(key=label.lower(), label=name.strip(), type=kind if kind in ENTITY_TYPES else "other")  # type: ignore[arg-type]
