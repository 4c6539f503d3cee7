"""Entity nodes from a text: names and noun phrases, normalised (MAGMA 3.2, AdaMem graph memory).

An entity is anything two turns can be "about" across sessions: a person, a
place, an object, an activity, an organisation, an event. Offline we find them
with a part-of-speech lexicon (lemminflect's English word list, shipped in its
PyPI package) instead of a list of expected topics:
- proper names, from `memory.entities.split_entities`, but a capitalised word
  that only opens a sentence ("Woah, ...", "Nah, ...") is not a name unless it
  is a participant or an acronym: a capital letter there is no evidence; and a
  capitalised single word the lexicon knows as a noun ("my Mom", "Books") is
  that noun, so case changes neither its key nor its owner;
- nouns, singularised by the lexicon ("kids" -> "kid", "books" -> "book"), and
  two-noun compounds ("support group"); an adjective with degrees (longer)
  that describes a noun after it ("a long day", "a safe and loving home") is
  not a head, and an -s form right after its subject is a verb ("Time flies");
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

from lemminflect import getAllInflections
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
# Singular subjects: an -s form after them is a verb ("that stands out", "it keeps me going"), never a plural.
_SUBJECTS = wordset("he she it this that who")
_CLAUSE_MARKS = frozenset('.!?,;:"“”(\n')
_NEVER = STOPWORDS | CHAT_WORDS | PLAIN_WORDS | MONTH_WORDS | WEEKDAY_WORDS


class Mention(BaseModel):
    """One entity a text mentions: `key` joins mentions across records, `label` is how it reads."""

    key: str = Field(..., min_length=1)
    label: str
    type: EntityType = "other"


def _noun(word: str, licensed: bool, verb_slot: bool) -> str | None:
    """The singular of a word used as a noun here, else None.

    A word the lexicon knows only as a noun ("pottery") always is one; a word it
    also knows as a verb or adjective ("support", "check", "real") is a noun
    only in the plural or when `licensed` (after a determiner, an adjective or
    another noun). An -s form that is also a verb's ("stands", "flies") is that
    verb in a `verb_slot`, where a plural cannot stand.
    """
    if len(word) < 3 or word in _NEVER or not word.isalpha():
        return None
    lemmas = _lemmas(word)
    if "NOUN" not in lemmas:
        return None
    singular = lemmas["NOUN"][0]
    if singular in STOPWORDS:  # "ones", "others": the plural of a function word is one too
        return None
    plural = singular != word
    if plural and verb_slot and word.endswith("s") and any(v != word for v in lemmas.get("VERB", ())):
        return None
    return singular if set(lemmas) == {"NOUN"} or plural or licensed else None


def _verb_slot(words: list[str], gaps: list[str], i: int) -> bool:
    """Whether words[i] stands where a verb's -s form does and a plural noun does not: right after a
    singular subject ("that stands out"; "Wow, time flies": a bare noun opening its clause) or an
    adverb ("really stands out")."""
    if i == 0 or gaps[i - 1].strip():
        return False  # "Totally! Pets make us happy": no subject across punctuation
    before = words[i - 1]
    lemmas = _lemmas(before)
    opens_clause = i == 1 or bool(set(gaps[i - 2]) & _CLAUSE_MARKS)
    return (
        before in _SUBJECTS
        or (set(lemmas) == {"ADV"} and before not in STOPWORDS)  # "in", "to" are adverbs to the lexicon too
        or (opens_clause and before in _NEVER - STOPWORDS and set(lemmas) & {"NOUN", "ADJ"} == {"NOUN"})
    )


def _modifier(words: list[str], i: int, continues: list[bool]) -> bool:
    """Whether words[i] is an adjective describing a noun later in its phrase rather than heading it:
    "a long day", "a real difference", "a safe and loving home" are about a day, a difference, a home.
    Only an adjective with degrees (longer, safer) counts: a noun the lexicon also lists as an adjective
    has none, and in "a video game" or "the living room" it is part of the thing's name."""
    return bool(getAllInflections(words[i], upos="ADJ").get("JJR")) and _describes(words, i, continues)


def _describes(words: list[str], i: int, continues: list[bool]) -> bool:
    """Whether a noun follows words[i] in its phrase, past "and" or "or" and another adjective."""
    if not continues[i]:
        return False
    after = words[i + 1]
    if after in ("and", "or"):
        return continues[i + 1] and "ADJ" in _lemmas(words[i + 2]) and _describes(words, i + 2, continues)
    lemmas = _lemmas(after)
    if after.endswith("ing") and "VERB" in lemmas:  # "a plane flying": the -ing form says what the plane does
        return False
    return after not in STOPWORDS and bool({"NOUN", "ADJ"} & set(lemmas))


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


def _common_noun(word: str) -> str:
    """The singular a capitalised single word stands for when the lexicon knows it as a noun ("Mom", "Books"),
    else "": a capital letter inside a sentence does not make "my Mom" someone else than "my mom"."""
    lemmas = _lemmas(word)
    singular = lemmas["NOUN"][0] if "NOUN" in lemmas else ""
    return "" if singular in _NEVER else singular


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

    opening = _sentence_openers(text)
    name_words: set[str] = set()
    common: dict[str, str] = {}  # a capitalised word read as the noun it is: "mom" -> "mom", "books" -> "book"
    for name in split_entities(text, people).names:
        parts = _NAME_PART.findall(name.lower())  # split as `normalise` splits: "Mary-Kate" is "mary kate" there too
        single = len(parts) == 1
        person = _participant(name, participants)
        if single and name.lower() in opening and not person and not _acronym(name):
            name_words.update(parts)
            continue  # only ever seen opening a sentence: an interjection or a common word, not a name
        noun = "" if person or not single or _acronym(name) else _common_noun(parts[0])
        if noun:
            common[parts[0]] = noun
            continue
        add(person or " ".join(parts), person or name, "person" if person else "name")
        name_words.update(parts)
    tokens = [(m.group().replace("’", "'"), m.start(), m.end()) for m in _WORD.finditer(text)]
    words = [w.lower()[:-2] if w.endswith("'s") else w.lower() for w, _, _ in tokens]
    capital = [w[0].isupper() for w, _, _ in tokens]
    gaps = [text[tokens[i][2] : tokens[i + 1][1]] for i in range(len(tokens) - 1)]
    continues = [not w.endswith("'s") and gap.strip() == "" for (w, _, _), gap in zip(tokens, gaps, strict=False)]
    continues.append(False)
    modifiers: set[int] = set()
    previous_noun: tuple[int, str] | None = None
    for i, word in enumerate(words):
        if word in name_words:
            previous_noun = None
            continue
        before = words[i - 1] if i else ""
        joined = i > 0 and gaps[i - 1] in (" ", "-")
        following = words[i + 1] if i + 1 < len(words) and gaps[i].strip() == "" else ""
        after_noun = previous_noun is not None and previous_noun[0] == i - 1 and joined
        licensed = (
            after_noun or before in _DETERMINERS or before in name_words or i - 1 in modifiers
            or (bool(before) and _adjective_only(before))
        )
        if capital[i] and word in common:
            activity, noun = None, common[word]
        else:
            activity = _activity(word, before, following)
            noun = None if activity else _noun(word, licensed, _verb_slot(words, gaps, i))
            if noun and not after_noun and _modifier(words, i, continues):
                modifiers.add(i)
                previous_noun = (i, noun)  # not an entity itself, but the first word of a compound ("living room")
                continue
        if activity is None and noun is None:
            previous_noun = None
            continue
        head = activity or noun or ""
        add(head, head, "activity" if activity else "other")
        owner = _owner(words, i, speaker, listener, modifiers)
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


def _owner(words: list[str], i: int, speaker: str, listener: str, modifiers: set[int]) -> str:
    """Whose thing this is when a possessive determiner precedes it (one adjective may sit between:
    "my favorite book" is the speaker's book)."""
    for back in (1, 2):
        if i - back < 0:
            return ""
        word = words[i - back]
        if word in _FIRST_PERSON:
            return speaker
        if word in _SECOND_PERSON:
            return listener
        if back == 1 and not (_adjective_only(word) or i - 1 in modifiers):
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
