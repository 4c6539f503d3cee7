"""Atomic facts from one turn, offline: the Memory role's policy when no model is configured.

AMA's Constructor turns each utterance into facts that are atomic (one relation
each), self-contained (names instead of pronouns, absolute instead of relative
dates) and drawn from the current turn only; an apposition ("my friend John")
becomes a fact of its own. This module does the same with sentence and clause
splitting, word lists and regexes: chit-chat, greetings and questions carry no
proposition and are dropped, the rest is rewritten in the third person with its
dates resolved. Where a fact matches a common pattern ("<S> lives in <O>",
"<S>'s favorite color is <V>") it also gets subject / attribute / value, which
is what conflict detection and persona distillation compare.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, time, timedelta
from functools import lru_cache
from typing import NamedTuple

from pydantic import BaseModel, Field
from strata.memory.dates import ResolvedDate, resolve_relative
from strata.memory.entities import CHAT_WORDS, PLAIN_WORDS, STOPWORDS, extract_entities, split_entities, wordset
from strata.memory.moments import MaybeUtcTime, utc
from strata.memory.names import SPACELESS, spaceless
from strata.memory.records import Turn, photo_subject
from strata.memory.speakers import to_third_person


class FactDraft(BaseModel):
    """One atomic fact before it is stored as a `Record` of kind 'fact'."""

    text: str = Field(..., min_length=1, description="Self-contained: names and absolute dates resolved.")
    subject: str = Field("", description="Who or what the fact is about.")
    attribute: str = Field("", description="Normalised predicate key ('lives_in', 'favorite_color'), if recognised.")
    value: str = Field("", description="The object of that predicate.")
    time: MaybeUtcTime = Field(None, description="Start of the date the fact states or resolves, if any.")
    time_end: MaybeUtcTime = Field(None, description="Last day of that date's period (a week, a month ...).")
    source_ids: list[str] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list)


# --- word lists ----------------------------------------------------------------------------

_RELATION_NOUNS = wordset(
    """
    friend friends buddy pal bestie sister brother sibling mom mother mum dad father parent parents husband wife
    partner spouse boyfriend girlfriend fiance fiancee son daughter kid child baby cousin aunt uncle niece
    nephew grandma grandmother grandpa grandfather granny grandson granddaughter neighbor neighbour colleague
    coworker boss mentor mentee teacher coach student roommate classmate teammate therapist doctor dog cat puppy
    pup kitten pet horse bunny rabbit hamster bird parrot fish turtle pig snake lizard country city town
    hometown state school company team band club book song movie show game restaurant store shop business
    """
)
_PETS = wordset(
    "dog dogs cat cats puppy puppies pup pups kitten kittens pet pets horse horses bunny bunnies rabbit rabbits "
    "hamster hamsters bird birds parrot parrots fish turtle turtles pig pigs snake snakes lizard lizards"
)
_CHILDREN = wordset("kid kids child children son sons daughter daughters baby babies")
_PRONOUNS = wordset("i me my mine myself you your yours yourself we us our ours ourselves he she it they them")
_QUESTION_MARKS = ("?", "？", "؟")
_LATIN = re.compile(r"[A-Za-z]")
_ABBREVIATIONS = wordset("mr mrs ms dr st vs etc e.g i.e jr sr prof")
_PAST_VERBS = wordset(
    """
    went took made saw came ran gave bought brought caught taught built sent spent met left told found wrote rode drove
    spoke broke chose drew grew threw flew began sang drank swam ate shot hid dug hung won lost sold held
    """
)

# --- sentences and clauses -----------------------------------------------------------------

# A full-width or Arabic stop ends a sentence too; Chinese and Japanese put no space after one.
_SENTENCE_END = re.compile(r"(?<=[.!?؟])[\"”')\]]*\s+|(?<=[。！？])[」』\"”')\]）]*\s*|\n+")
_HARD_SPLIT = re.compile(r"\s*;\s*|\s+[-–—]+\s+|\s*[—–]\s*|-{2,}\s*|(?<=[a-z])-\s+(?=[A-Za-z])")
_SUBJECT_WORDS = (
    r"(?:I|I['’]m|I['’]ve|I['’]d|I['’]ll|we|we['’]re|we['’]ve|we['’]d|we['’]ll|you|you['’]re|you['’]ve|he|she|they"
    r"|they['’]re|it|it['’]s|this|that|there)"
)
_SOFT_SPLIT = re.compile(
    rf",?\s+(?:and|but|so)\s+(?:then\s+)?(?={_SUBJECT_WORDS}\b)|,\s+(?:and|but|so)\s+(?=(?:my|our|his|her|their)\b)"
)
# "and" + a past-tense verb: irregular ones by list, regular ones when an object follows ("and painted a mural";
# "happy and excited about" stays whole).
_PAST_SPLIT = re.compile(
    r",?\s+and\s+(?:then\s+)?(?=(?:" + "|".join(sorted(_PAST_VERBS)) + r")\b"
    r"|[a-z]{3,}ed\s+(?:a|an|the|my|our|his|her|their|some|it|them|this|that|these|those|\d+)\b)"
)
_LEADING_SUBJECT = re.compile(r"^(I|we|you|he|she|they|[A-Z][a-z]+)\b(?!['’])")
# How a question opens (not "Can't wait", whose "can" is followed by an apostrophe).
QUESTION_START = re.compile(
    r"^\s*(?:do|does|did|are|is|was|were|have|has|had|can|could|would|will|should|shall|what|when|where|who|whom"
    r"|whose|why|how|which|any|anything|wanna|want)\b(?!['’])",
    re.IGNORECASE,
)
# A tag question: a statement, then a short tail that only asks the listener to agree or to react. Set off by a
# comma, the tail is an auxiliary before a pronoun ("did you know", "isn't that great", "have you") or words that
# name nothing ("right", "you know", "and you"); without a comma only a negative inverted tag ("isn't it") or a
# particle ("right", "huh") is read so, as "... the thought that matters right?" is written in chat.
_AUX = r"(?:do|does|did|is|are|was|were|am|have|has|had|can|could|will|would|should|shall|must|might|may|need)"
_NEGATED_AUX = rf"(?:{_AUX}n['’]?t|can['’]?t|won['’]?t|shan['’]?t|ain['’]?t)"
_TAG_PRONOUN = r"(?:I|you|ya|he|she|it|we|they|that|this|there|one)"
_INVERTED_TAG = re.compile(
    rf"(?:{_NEGATED_AUX}|{_AUX}(?:\s+not)?)\s+{_TAG_PRONOUN}(?:\s+[^\W\d_]+(?:['’][^\W\d_]+)?){{0,2}}", re.I
)
_BARE_TAG = re.compile(
    rf"\s(?:{_NEGATED_AUX}\s+{_TAG_PRONOUN}(?:\s+[^\W\d_]+){{0,2}}|right|huh|eh|innit)$", re.I
)
_TAG_PARTICLES = wordset("huh eh innit ya y'know")  # words of a tag the word lists do not hold
_QUESTION_WORD = re.compile(r"\b(?:what|when|where|who|whom|whose|why|how|which)\b", re.I)
# What opens a clause that depends on another: "If I move, will you visit?" states no move.
_SUBORDINATE = re.compile(
    r"^(?:if|unless|since|because|although|though|while|once|whether|before|after|until|as\s+soon\s+as"
    r"|in\s+case)\b", re.I,
)
_ABOUT_LISTENER = re.compile(r"^(?:you|ya|your|yours)\b", re.I)
_FILLER = re.compile(
    r"^(?:(?:wow+|woah+|whoa+|gosh|geez|hey+|hi|hello|oh+|ah+|aw+|yeah+|yep|yup|nope|ok|okay|haha+|lol|omg|woo+hoo+"
    r"|yay+|hmm+|um+|uh+"
    r"|btw|by\s+the\s+way|anyway|thanks|thank\s+you|cheers)(?:\s+(?:so\s+much|a\s+lot|again|too))?\b[\s,!.:;~-]*"
    r"|(?:yes|no|sure|right|true|totally|absolutely|definitely|exactly|congrats|congratulations|well|indeed|agreed"
    r"|of\s+course)\s*[,!.]+\s*"
    r"|(?:and|but|also|so|plus)\s*,?\s+)+",
    re.IGNORECASE,
)
_EVALUATIVE = (
    r"(?:great|cool|awesome|amazing|fun|nice|good|lovely|wonderful|beautiful|fantastic|incredible|interesting|sweet"
    r"|stunning|gorgeous|special|perfect|brilliant|impressive|inspiring|powerful|rewarding|adorable|cute|hilarious"
    r"|funny|exciting|fab|epic|neat)"
)
# Reactions to what the other person said: they praise or thank, they state nothing new.
_REACTION = re.compile(
    r"^(?:(?:that|this|it)(?:['’]s|\s+is|\s+was)?\s+)?(?:sounds|sound|looks|look|seems|seem)\b"
    r"|^(?:so\s+|really\s+)?(?:love|loving|lovin['’]?|glad|proud\s+of|congrats|congratulations|wishing|appreciate"
    r"|take\s+care|talk\s+(?:to\s+you\s+)?soon|good\s+luck|keep\s+(?:it\s+)?up|here['’]s\s+to|cheers\s+to"
    r"|hope\s+(?:you|your|all|it|that|to\s+see)|what\s+an?|how\s+"
    + _EVALUATIVE
    + r"|long\s+time\s+no|miss(?:ed)?\s+you|have\s+(?:a\s+(?:great|good|nice|wonderful)|fun)|stay\s+safe|spill"
    r"|highly\s+recommend|see\s+you|catch\s+you)\b"
    r"|\bkeep\s+(?:you|ya|me|us)\s+posted\b"
    r"|^(?:so\s+|really\s+|super\s+|very\s+)?" + _EVALUATIVE + r"\b(?!\s+(?:at|for|to)\b)"
    r"|^(?:that|this|these|those|your|it)\b[^.]{0,40}?\b(?:is|are|was|were|looks?|sounds?|seems?|['’]s)\s+"
    r"(?:so\s+|really\s+|super\s+|just\s+|totally\s+|pretty\s+|very\s+)*" + _EVALUATIVE + r"\W*$",
    re.IGNORECASE,
)
_ING_ADJECTIVES = wordset(
    """
    exciting interesting amazing inspiring relaxing refreshing rewarding challenging encouraging touching heartwarming
    fulfilling enlightening charming stunning boring annoying surprising fascinating calming soothing thrilling loving
    caring amusing confusing depressing disappointing embarrassing exhausting frightening frustrating overwhelming
    promising satisfying shocking terrifying tiring welcoming nerve everything something nothing anything
    """
)
_FINITE = re.compile(
    r"\b(?:is|are|was|were|am|has|have|had|makes?|made|helps?|gives?|brings?|keeps?|means?|feels?|does|do|did|will"
    r"|would|can|could|should|might|must)\b|\w['’](?:s|re|ve|ll|d)\b",
    re.IGNORECASE,
)
# "Nice to meet you", "Great to hear that ...": a subjectless evaluation of meeting or hearing from the listener,
# a greeting; what follows the verb may still state something. Other verbs carry the fact ("Amazing to
# graduate last week!")
_EVALUATIVE_TO = re.compile(
    rf"^(?:so\s+|really\s+|super\s+|very\s+)?{_EVALUATIVE}\s+to\s+(?:meet|see|hear|talk|chat|catch\s+up)\b",
    re.IGNORECASE,
)
_THANKS_FOR = re.compile(r"^(?:thanks|thank\s+you)(?:\s+so\s+much)?\s+for\b", re.IGNORECASE)


def split_sentences(text: str) -> list[str]:
    """Sentences of a turn; a full stop after 'Mr', 'Dr', 'e.g' does not end one."""
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        before = text[start : match.start()].rstrip(".!?\"”')] ")
        last_word = before.rsplit(None, 1)[-1].lower() if before.split() else ""
        if text[match.start() - 1 : match.start()] == "." and last_word in _ABBREVIATIONS:
            continue
        piece = text[start : match.start()].strip()
        if piece:
            sentences.append(piece)
        start = match.end()
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def _word_count(text: str) -> int:
    """Words of any script; in Chinese, Japanese or Thai, written without spaces, each character counts."""
    return sum(len(w) if spaceless(w) else 1 for w in _LETTERS.findall(text))


def split_clauses(sentence: str) -> list[str]:
    """Clauses that each carry one proposition: on ';' and dashes always, on 'and'/'but'/'so'
    only before a new subject ('..., and I went'), or before a past-tense verb with the subject
    carried over ('I ran a race and raised money' -> 'I ran a race' | 'I raised money')."""
    clauses: list[str] = []
    for part in _HARD_SPLIT.split(sentence):
        pieces = _split_on(part, _SOFT_SPLIT)
        for piece in pieces:
            clauses.extend(_split_past(piece))
    return [c.strip(" ,") for c in clauses if c.strip(" ,")]


def _split_on(text: str, pattern: re.Pattern[str]) -> list[str]:
    pieces: list[str] = []
    start = 0
    for match in pattern.finditer(text):
        left = text[start : match.start()]
        if _word_count(left) >= 3:  # "my kids and I" stays whole
            pieces.append(left)
            start = match.end()
    pieces.append(text[start:])
    return pieces


def _split_past(clause: str) -> list[str]:
    match = _PAST_SPLIT.search(clause)
    subject = _LEADING_SUBJECT.match(_FILLER.sub("", clause).strip())
    if not match or not subject or _word_count(clause[: match.start()]) < 3:
        return [clause]
    return [clause[: match.start()], f"{subject.group(1)} {clause[match.end() :]}"]


# --- cleaning ------------------------------------------------------------------------------


_LETTERS = re.compile(rf"[{SPACELESS}]+|(?:(?![{SPACELESS}])[^\W\d_])+")  # letters of any script
_WORDS = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")
_THANKED = re.compile(r"^\W*(?:\w+\W+)?(?:thanks|thank\s+you)\b", re.IGNORECASE)
_LEAD_NAME = re.compile(r"^([A-Z][a-z]+)\s*[,!.]+\s*")
_ONLY_NAME = re.compile(r"([A-Z][a-z]+)\s*[,!.]*")
_TAIL_NAME = re.compile(r",\s*([A-Z][a-z]+)\s*([.!?]*)$")


def _is_vocative(word: str, listener: str | None) -> bool:
    """'Mel' or 'Melanie' addressed to Melanie."""
    if not listener or not word[:1].isupper():
        return False
    low = word.lower()
    return any(low == part or (len(low) >= 3 and part.startswith(low)) for part in listener.lower().split())


def _clean(clause: str, listener: str | None) -> str:
    """Strip interjections and the listener's name when addressed (a tag question goes with its sentence,
    `stated_before_tag`)."""
    text = clause.strip()
    thanked = bool(_THANKED.match(text))
    for _ in range(3):
        before = text
        text = _FILLER.sub("", text).strip()
        lead = _LEAD_NAME.match(text)
        if lead and _is_vocative(lead.group(1), listener):
            text = text[lead.end() :]
        only = _ONLY_NAME.fullmatch(text)
        if only and _is_vocative(only.group(1), listener):
            text = ""
        if text == before:
            break
    tail = _TAIL_NAME.search(text)
    if tail and _is_vocative(tail.group(1), listener):
        text = text[: tail.start()] + tail.group(2)
    if thanked and re.match(r"^for\b", text, re.IGNORECASE):
        return ""  # "Thanks, Mel, for the tip": gratitude, not a fact
    if thanked and re.fullmatch(r"an?\s+\w+\W*", text, re.IGNORECASE):
        return ""  # "Thanks a bunch!", "Thanks a million": how much thanks, not a thing
    return text.strip(" ,")


def _restore_subject(clause: str) -> str:
    """Chat drops the subject ('Gonna continue my edu', 'Researching adoption agencies'): put 'I' back."""
    first = re.match(r"[A-Za-z]+", clause)
    if not first:
        return clause
    word = first.group().lower()
    rest = clause[first.end() :]
    if word in ("gonna", "wanna"):
        return f"I'm {word}{rest}" if word == "gonna" else f"I {word}{rest}"
    if word == "been":
        return f"I've been{rest}" if _been_by_someone(rest) else f"It's been{rest}"
    second = re.match(r"\s+([a-z]+)", rest)
    gerund_subject = bool(second and re.search(r"[^s]s$", second.group(1)))  # "Painting looks like ..."
    if (
        _is_participle(word)
        and word not in CHAT_WORDS
        and not gerund_subject
        and not _FINITE.search(clause)
        and not _PARTICIPLE_OPENER.match(clause)
    ):
        return f"I'm {word}{rest}"
    return clause


def _is_participle(word: str) -> bool:
    """An -ing form of a verb ('volunteering'), not an -ing adjective ('exciting') or pronoun ('something')."""
    return word.endswith("ing") and len(word) > 4 and word.lower() not in _ING_ADJECTIVES


# "Growing up, I saw ...", "Taking your advice, I'm ...": the -ing phrase before the comma modifies a clause with
# a subject of its own, it is no subjectless "(I'm) growing up"
_PARTICIPLE_OPENER = re.compile(rf"^[^,]+,\s*{_SUBJECT_WORDS}\b")


def _been_by_someone(rest: str) -> bool:
    """Whether a subjectless 'Been ...' drops 'I've': someone has been somewhere or doing something ('Been only
    to Rome', 'Been busy volunteering', 'Been practicing'); otherwise it is the time or the state of things that
    has been ('Been a busy week', 'Been ages', 'Been hectic for me'). Read up to the clause's first comma."""
    for word in re.findall(r"[A-Za-z]+", rest.split(",", 1)[0])[:3]:
        low = word.lower()
        if low in ("a", "an", "the"):
            return False  # a noun phrase follows: 'a while', 'a long road', 'quite a ride'
        if low == "to" or _is_participle(low):
            return True
    return False


def _content_words(text: str, listener: str | None, speaker: str) -> list[str]:
    words = _WORDS.findall(text)
    content = []
    for word in words:
        low = word.lower().removesuffix("'s").removesuffix("’s")
        if "'" in low or "’" in low or low in STOPWORDS or low in CHAT_WORDS or low in PLAIN_WORDS or low in _PRONOUNS:
            continue
        if _is_vocative(word, listener) or low == speaker.lower():
            continue
        content.append(low)
    return content


def _is_chitchat(clause: str, listener: str | None, speaker: str) -> bool:
    """No proposition: thanks, greetings, evaluations ('That's so cool!'), reactions ('Sounds great')."""
    if _REACTION.match(clause) or _THANKS_FOR.match(clause):
        return True
    opener = _EVALUATIVE_TO.match(clause)  # "Nice to meet you!": only what follows the verb may state something
    return not _content_words(clause[opener.end():] if opener else clause, listener, speaker)


@lru_cache(maxsize=65_536)
def without_small_talk(text: str, speaker: str, listener: str | None = None) -> str:
    """The turn without its small-talk sentences (greetings, thanks, praise, reactions), for a context to show.

    Small talk is 18% of LoCoMo's turn tokens, and leaving it out shortens the turns by
    16% (a turn of nothing else stays whole): a context holds more of what was said in
    the same budget. What the turn states or asks stays word for word (the answer often
    follows a question); a turn that is nothing but small talk is returned whole. The test for
    a sentence is the one that keeps small talk out of facts (`_is_chitchat`).
    """
    sentences = split_sentences(text)
    kept = [s for s in sentences if not _small_talk(s, speaker, listener)]
    if not kept or len(kept) == len(sentences):
        return text
    return " ".join(kept)


def _small_talk(sentence: str, speaker: str, listener: str | None) -> bool:
    if sentence.rstrip().endswith(_QUESTION_MARKS):
        return False
    clauses = (_clean(raw, listener) for raw in split_clauses(sentence))
    return all(not clause or _is_chitchat(clause, listener, speaker) for clause in clauses)


def only_asks(text: str) -> bool:
    """Whether a turn asks and states nothing of its own: it ends with a question mark, opens as a question
    ("Do you still live in Boston?") and none of its sentences is a statement before a tag ("Did you hear? I
    moved to Denver, right?" states a move). The Judge and the Refresher read a turn by it."""
    stripped = text.strip()
    if not (stripped.endswith(_QUESTION_MARKS) and QUESTION_START.match(stripped)):
        return False
    return all(asks_sentence(s) for s in split_sentences(stripped) if _ends_asking(s))


def stated_before_tag(sentence: str) -> str | None:
    """The statement a sentence makes before a tag question ("I moved to Denver, did you know?" -> "I moved to
    Denver"; "We adopted a puppy, isn't that great?"), None when it is no such sentence. The tag is short (four
    words at most) and asks nothing of its own: no question word, no name or other content ("Where did you
    move, Denver?" asks). What comes before it is a main clause that states: it does not open as a question
    or as a clause that depends on another ("If I move, will you visit?"), it has two words at least, and
    one of them is no name or function word ("Hi Melanie and Caroline, are you ok?" states nothing)."""
    if not _ends_asking(sentence):
        return None
    body = sentence.rstrip().rstrip("\"”')]").rstrip().rstrip("".join(_QUESTION_MARKS)).rstrip()
    head, comma, tail = body.rpartition(",")
    if not (comma and _is_tag(tail.strip())):
        bare = _BARE_TAG.search(body)
        if bare is None:
            return None
        head = body[: bare.start()]
    head = head.rstrip(" ,-–—")
    main = _FILLER.sub("", head).strip(" ,")
    if _word_count(main) < 2 or QUESTION_START.match(main) or _SUBORDINATE.match(main):
        return None
    if not any(w.islower() and w not in STOPWORDS for w in _WORDS.findall(main)):
        return None  # names only: "Hi Melanie and Caroline, are you ok?" addresses them
    return head


def _is_tag(tail: str) -> bool:
    words = tail.split()
    if not 1 <= len(words) <= 4 or _QUESTION_WORD.search(tail):
        return False
    if _INVERTED_TAG.fullmatch(tail):
        return True
    plain = [w for w in words if w.lower().strip(".!") not in _TAG_PARTICLES]
    return len(words) <= 3 and not _content_words(" ".join(plain), None, "")


def asks_sentence(sentence: str) -> bool:
    """Whether a sentence asks: it ends with a question mark and is no statement before a tag
    (`stated_before_tag`), except a statement about the listener, whose tag asks them to confirm what only
    they know ("You live in Denver now, right?" asks Bob; its value is only asked, `slots.in_question`)."""
    if not _ends_asking(sentence):
        return False
    statement = stated_before_tag(sentence)
    return statement is None or bool(_ABOUT_LISTENER.match(_FILLER.sub("", statement).strip(" ,")))


def _ends_asking(sentence: str) -> bool:
    """Whether a sentence ends with a question mark (before a closing quote or bracket)."""
    return sentence.rstrip().rstrip("\"”')]").rstrip().endswith(_QUESTION_MARKS)


def asks(text: str) -> bool:
    """Whether a turn asks something to answer: it ends with a question mark, or opens as a question and does
    not end as a statement does ("where do you live" typed without one; not "Do you know I moved.")."""
    stripped = text.strip()
    return stripped.endswith(_QUESTION_MARKS) or (bool(QUESTION_START.match(stripped))
                                                   and not stripped.endswith((".", "!")))


def _is_question(clause: str, sentence_is_question: bool) -> bool:
    return clause.rstrip().endswith(_QUESTION_MARKS) or (sentence_is_question and bool(QUESTION_START.match(clause)))


# --- dates ---------------------------------------------------------------------------------

_AS_SUBJECT = re.compile(r"['’]s\b|\s+(?:is|was|were|are|has|had|will|would|seemed|felt)\b", re.IGNORECASE)
_PREPOSITION_BEFORE = re.compile(r"\b(?:since|until|till|from|by|before|after|of|for|in|on|during|over)\s*$", re.I)


def _resolve_dates(clause: str, anchor: datetime | None) -> tuple[str, ResolvedDate | None]:
    """Replace each relative date by its absolute phrase ('yesterday' -> 'on 7 May 2023'); where the
    expression is a subject ('Last night was amazing') keep it and add the label in brackets."""
    if anchor is None:
        return clause, None
    found = resolve_relative(clause, anchor)
    for date_found in reversed(found):
        if not date_found.relative:
            continue
        start, end = date_found.char_start, date_found.char_end
        if _AS_SUBJECT.match(clause, end):
            clause = f"{clause[:end]} ({date_found.label}){clause[end:]}"
            continue
        phrase = date_found.adverbial
        first, _, rest = phrase.partition(" ")
        if first in ("on", "in") and rest and _PREPOSITION_BEFORE.search(clause[:start]):
            phrase = rest
        if not clause[:start].strip():
            phrase = phrase[:1].upper() + phrase[1:]
        clause = clause[:start] + phrase + clause[end:]
    return clause, (found[0] if found else None)


# --- subject / attribute / value ------------------------------------------------------------

# A name starts with a capital, or with a letter beyond ASCII ("Émile", "李明"): `_valid_subject` then keeps only
# a participant or a name the text shows as one.
_NAME_START = r"(?:[A-Z]|(?=[^\W\d_a-z])[^\x00-\x7f])"
_NAME = rf"{_NAME_START}[\w’'-]*(?:\s+(?:and|&)\s+{_NAME_START}[\w’'-]*)?"
# Before the subject: a dated opener ("On 8 May 2023, ...") and a discourse or present-time adverbial
# ("Actually I live in Boulder now", "These days I work at ..."), which leave the relation as it is.
_OPENER = (
    r"(?:actually|now|currently|nowadays|these\s+days|at\s+the\s+moment|right\s+now|as\s+of\s+now|for\s+now"
    r"|honestly|well|so|anyway|still|by\s+the\s+way|in\s+fact|oh|also)"
)
_LEAD = rf"^(?:(?:On|In|During)\s[^,]{{3,60}}?\d{{4}},?\s+)?(?:(?i:{_OPENER}),?\s+)*"
_ADV = r"(?:\s+(?:really|also|still|now|currently|always|just|actually|absolutely|totally|truly|definitely|even|only"
_ADV += r"|recently|finally|usually|already|mostly|so|genuinely|particularly|especially))*"
_VALUE_CUT = re.compile(
    r"\s+(?:because|since|so\s+that|which|who|when|while|after|before|but|and\s+then|until|as\s+well)\b|\s*[,;(:]"
    r"|\s+[-–—]\s+"
)
_ROLE_CUT = re.compile(r"\s+(?:at|for|in|with|on)\b")
_PLACE_CUT = re.compile(r"\s+(?:with|and|for|to|since|because|where|now)\b")
_DATE_TAIL = re.compile(r"\s+(?:on|in|during|around)\s+(?:the\s+)?[^,]*?\d{4}\s*$")
# After a value: words that only say the value holds now ("nurse now"); the value is what comes before.
_NOW_TAIL = re.compile(
    r"\s+(?:now|currently|these\s+days|nowadays|at\s+the\s+moment|right\s+now|anymore|any\s+more|instead)$",
    re.IGNORECASE,
)

_PREDICATES: tuple[tuple[str, str, bool], ...] = (
    # (regex after the subject, attribute, is the value a place or organisation)
    (r"(?:lives|live|is\s+living|has\s+been\s+living|resides)\s+in\s+", "lives_in", True),
    (r"(?:has\s+)?moved\s+(?:back\s+)?(?:from\s+.+?\s+)?to\s+", "lives_in", True),
    (r"lived\s+in\s+", "lived_in", True),
    (r"(?:works|work|is\s+working|has\s+been\s+working)\s+as\s+", "works_as", False),
    (r"(?:works|work|is\s+working|has\s+been\s+working)\s+(?:at|for)\s+", "works_at", True),
    (r"(?:is\s+(?:originally\s+)?from|comes\s+from|grew\s+up\s+in)\s+", "from", True),
    (
        r"(?:likes|enjoys|is\s+into|is\s+(?:a\s+)?(?:big\s+|huge\s+)?fan\s+of|is\s+keen\s+on|is\s+passionate\s+about"
        r"|is\s+interested\s+in|prefers)\s+",
        "likes",
        False,
    ),
    (r"(?:loves|adores)\s+", "loves", False),
    (r"(?:hates|dislikes|doesn['’]t\s+like|does\s+not\s+like|can['’]t\s+stand)\s+", "dislikes", False),
    (r"(?:plays)\s+(?:the\s+)?", "plays", False),
    (r"(?:studies|is\s+studying|majors\s+in|majored\s+in)\s+", "studies", False),
    (r"is\s+(?=\d{1,3}\s+years?\s+old)", "age", False),
    (
        r"(?:has\s+got|has|owns)\s+(?!(?:\w+ly\s+|always\s+|never\s+|just\s+|already\s+|also\s+|still\s+)?"
        r"(?:been|had|to|got|gotten|done|made|seen|known|come|gone|taken|given|found)\b|a\s+lot\b|lots\b)",
        "has",
        False,
    ),
    (r"(?:is|was|are|were)\s+", "is", False),
)
_PREDICATE_RES = [
    (re.compile(rf"{_LEAD}(?P<s>{_NAME}){_ADV}\s+{verb}(?P<v>.+)$"), attribute, place)
    for verb, attribute, place in _PREDICATES
]
_POSSESSIVE_RE = re.compile(
    rf"{_LEAD}(?P<s>{_NAME})['’]s\s+(?P<a>(?:[a-z]+\s+){{0,2}}?[a-z]+)\s+(?:is|was)\s+(?P<v>.+)$"
)


def comparable(text: str) -> str:
    """A fact's subject, attribute or value as conflicts and persona traits compare it: lower case,
    punctuation as spaces, hyphens as underscores, single spaces ("Zorbatown." is "zorbatown")."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower().replace("-", "_")).split())


def _normalise_key(words: str) -> str:
    words = re.sub(r"\b(?:favourite|fave|fav)\b", "favorite", words.lower())
    return re.sub(r"[^a-z0-9]+", "_", words).strip("_")


def _value(raw: str, place: bool) -> str:
    value = _VALUE_CUT.split(_DATE_TAIL.sub("", raw.strip(" .!?")), maxsplit=1)[0]
    if place:
        value = _PLACE_CUT.split(value, maxsplit=1)[0]
    value = _NOW_TAIL.sub("", _DATE_TAIL.sub("", value))
    value = re.sub(r"^(?:a|an)\s+", "", value.strip(), flags=re.IGNORECASE)
    return value.strip(" .!?\"'")


def _valid_subject(subject: str, text: str, known: tuple[str, ...]) -> bool:
    """A participant or a name the text shows as one, not a capitalised common word ('It', 'Veggies', 'Pottery')."""
    names = {name.lower() for name in split_entities(text, known).names} | {k.lower() for k in known if k}
    return all(part.lower() in names for part in re.split(r"\s+(?:and|&)\s+", subject))


def _has_content(value: str) -> bool:
    return any(w.lower() not in STOPWORDS for w in re.findall(r"[^\W_]+", value))  # 北京 and Genève are content


def relation_of(text: str, known: tuple[str, ...] = ()) -> tuple[str, str, str]:
    """(subject, attribute, value) for the common patterns conflict detection compares, else ('', '', '').

    `known` names (the participants) are accepted as subjects even where a
    capital letter alone would not show a name.
    """
    sentence = text.strip().rstrip(".!?")
    possessive = _POSSESSIVE_RE.match(sentence)
    if possessive and _valid_subject(possessive.group("s"), sentence, known):
        value = _value(possessive.group("v"), False)
        attribute = _normalise_key(possessive.group("a"))
        if _has_content(value) and attribute:
            return possessive.group("s"), attribute, value
    for pattern, attribute, place in _PREDICATE_RES:
        match = pattern.match(sentence)
        if not match:
            continue
        if not _valid_subject(match.group("s"), sentence, known):
            return "", "", ""
        value = _value(match.group("v"), place)
        if not _has_content(value):
            continue
        attribute = _refine(attribute, match.group("v").strip(), value)
        if attribute in ("works_as", "is_a"):
            value = _ROLE_CUT.split(value, maxsplit=1)[0]
        return match.group("s"), attribute, value
    return "", "", ""


def _refine(attribute: str, raw: str, value: str) -> str:
    """'has' -> 'has_pets' / 'has_children'; 'is' -> 'is_a' (a role or kind) or 'doing' (an activity)."""
    words = value.lower().split()
    if attribute == "is" and re.match(r"(?:a|an|one)\s", raw, re.IGNORECASE):
        return "is_a"
    if attribute == "has":
        if any(w in _PETS for w in words[:4]):
            return "has_pets"
        if any(w in _CHILDREN for w in words[:3]):
            return "has_children"
    if attribute == "is" and words and words[0].endswith("ing") and len(words[0]) >= 5:
        return "doing" if words[0] not in _ING_ADJECTIVES else attribute
    return attribute


# --- appositions ---------------------------------------------------------------------------

_PROPER = r"[A-Z][A-Za-z]+(?:\s+(?:of\s+the\s+|of\s+)?[A-Z][A-Za-z]+)*"
_CLOSES = r"(?=\s*(?:[.,;!?)]|$))"
_APPOSITIONS = (
    # my friend John / my best friend John
    re.compile(r"\b(?P<det>[Mm]y|[Oo]ur)\s+(?P<rel>(?:[a-z]+\s+)?[a-z]+)\s+(?P<name>[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)\b"),
    # my home country, Sweden.
    re.compile(rf"\b(?P<det>[Mm]y|[Oo]ur)\s+(?P<rel>(?:[a-z]+\s+){{0,2}}[a-z]+),\s+(?P<name>{_PROPER}){_CLOSES}"),
    # Oscar, my guinea pig.
    re.compile(
        rf"(?:^|(?<=[\s,;:(]))(?P<name>[A-Z][a-z]+),\s+(?P<det>[Mm]y|[Oo]ur)\s+(?P<rel>(?:[a-z]+\s+){{0,2}}[a-z]+){_CLOSES}"
    ),
    # another cat named Bailey
    re.compile(
        r"\b(?P<det>[Mm]y|[Oo]ur|[Aa]n?|[Aa]nother)\s+(?P<rel>(?:[a-z]+\s+){0,2}?[a-z]+)\s+(?:named|called)\s+(?P<name>"
        + _PROPER
        + r")"
    ),
)
_FIRST_PERSON_HAS = re.compile(r"\b(?:I|we)\s+(?:\w+\s+)?(?:got|have|has|adopted|own|bought|found|rescued)\b", re.I)


class _Apposition(NamedTuple):
    text: str
    subject: str
    attribute: str
    value: str
    match: re.Match[str]
    standalone: bool  # "Oscar, my guinea pig.": may be all the clause says


def _appositions(clause: str, speaker: str, listener: str | None) -> list[_Apposition]:
    """Each apposition naming something: 'my friend John' -> "John is Caroline's friend." (AMA)."""
    found: list[_Apposition] = []
    for index, pattern in enumerate(_APPOSITIONS):
        for match in pattern.finditer(clause):
            rel = " ".join(match.group("rel").split())
            name = match.group("name")
            last = rel.split()[-1]
            if (
                last in STOPWORDS
                or last in CHAT_WORDS
                or _is_vocative(name.split()[0], listener)
                or name.split()[0].lower() in STOPWORDS
                or name.split()[0].lower() in CHAT_WORDS
                or (index in (0, 2) and last not in _RELATION_NOUNS)
            ):
                continue
            det = match.group("det").lower()
            if det in ("my", "our") or _FIRST_PERSON_HAS.search(clause[: match.start()]):
                text = f"{name} is {speaker}'s {rel}."
                found.append(_Apposition(text, speaker, _normalise_key(rel), name, match, index in (1, 2)))
            else:
                article = "an" if rel[:1] in "aeiou" else "a"
                found.append(_Apposition(f"{name} is {article} {rel}.", name, "is_a", rel, match, index in (1, 2)))
    return found


# --- the whole turn ------------------------------------------------------------------------


def _finish(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip(" ,;:-–—")
    text = re.sub(r"[!.]+$", "", text).rstrip()
    if not text:
        return ""
    return text[:1].upper() + text[1:] + ("" if text.endswith(("。", "！")) else ".")


def _caption_fact(turn: Turn) -> FactDraft | None:
    caption = (turn.image_caption or "").strip().rstrip(".")
    if not caption:
        return None
    subject = photo_subject(caption)
    text = f"{turn.speaker} shared a photo of {subject}."
    return FactDraft(
        text=text,
        subject=turn.speaker,
        source_ids=[turn.dia_id] if turn.dia_id else [],
        entities=extract_entities(text, (turn.speaker,)),
    )


def _at(found: ResolvedDate | None) -> tuple[datetime | None, datetime | None]:
    if found is None:
        return None, None
    return datetime.combine(found.start, time.min), datetime.combine(found.end, time.min)


def _default_subject(text: str, speaker: str, listener: str | None) -> str:
    for person in (speaker, listener):
        if person and re.search(rf"\b{re.escape(person)}\b", text):
            return person
    return speaker


def extract_facts(
    turn: Turn, anchor: datetime | None = None, listener: str | None = None, participants: Sequence[str] = ()
) -> list[FactDraft]:
    """The atomic facts of one turn (AMA's Constructor facts, offline).

    `anchor` is the session date that relative dates resolve against (the
    turn's own time, on its speaker's clock, when not given); `listener`
    resolves 'you' (the turn's listener when not given); `participants` (the
    conversation's other speakers) are recognised as names in the facts'
    entities where they open a sentence ("Ann told Bob ..."), as the speaker
    and listener are. Questions, greetings
    and chit-chat give no fact; a shared photo gives "<speaker> shared a photo
    of ...".
    """
    anchor = anchor or turn.local_time()
    listener = listener or turn.listener
    speaker = turn.speaker
    known = (speaker, listener or "")
    names = (*known, *participants)  # the names a fact's entities keep wherever they stand
    sources = [turn.dia_id] if turn.dia_id else []
    drafts: list[FactDraft] = []
    seen: set[str] = set()

    def add(draft: FactDraft) -> None:
        key = draft.text.lower()
        if key not in seen:
            seen.add(key)
            drafts.append(draft)

    for sentence in split_sentences(turn.text):
        statement = stated_before_tag(sentence)  # "I moved to Denver, did you know?" states the move
        if statement is not None:
            sentence = f"{statement}."
        sentence_is_question = statement is None and sentence.rstrip().endswith(_QUESTION_MARKS)
        for raw_clause in split_clauses(sentence):
            clause = _clean(raw_clause, listener)
            if (
                _word_count(clause) < 2
                or _is_question(clause, sentence_is_question)
                or _is_chitchat(clause, listener, speaker)
            ):
                continue
            dated, found = _resolve_dates(_restore_subject(clause), anchor)
            when, until = _at(found)
            covered = False
            for text, subject, attribute, value, match, standalone in _appositions(dated, speaker, listener):
                named = extract_entities(text, (*names, value if attribute != "is_a" else subject))
                add(FactDraft(text=text, subject=subject, attribute=attribute, value=value, time=when,
                              time_end=until, source_ids=sources, entities=named))  # fmt: skip
                rest = dated[: match.start()] + dated[match.end() :]
                covered = covered or (standalone and not _content_words(rest, listener, speaker))
            if covered:
                continue
            text = _finish(to_third_person(dated, speaker, listener, context=turn.text))
            if not text:
                continue
            if not _LATIN.search(text):  # no English pronoun was rewritten ("我搬到了杭州"): say whose words these are
                text = f"{speaker}: {text}"
            subject, attribute, value = relation_of(text, known)
            add(
                FactDraft(
                    text=text,
                    subject=subject or _default_subject(text, speaker, listener),
                    attribute=attribute,
                    value=value,
                    time=when,
                    time_end=until,
                    source_ids=sources,
                    entities=extract_entities(text, names),
                )
            )
    caption = _caption_fact(turn)
    if caption is not None:
        add(caption)
    return drafts


# Attribute words of properties that hold one value at a time: a different newer value replaces the old one.
# Past forms ("lived_in") are left out on purpose: a person has lived in many places.
_SINGLE_VALUED = frozenset((
    "live", "lives", "living", "home", "location", "based", "resides", "address", "job", "work", "works", "working",
    "occupation", "employer", "career", "profession", "title", "role", "age", "status", "relationship", "married",
    "spouse", "partner", "engaged", "name", "birthday", "born", "favorite", "favourite", "count", "number", "price",
    "cost", "salary", "scheduled", "appointment", "deadline", "school", "major", "city", "country", "phone", "email",
))


# "last month" or "last year" place an event only roughly: an event is history, not a newer value, when it ended
# more than this before the statement it would replace was said ("I moved to Denver in 2015" after "I live in
# Boston" in 2023); "I moved to Denver last month" said three weeks after "I live in Boston" is a move
PAST_MARGIN = timedelta(days=365)


def told_as_past(event: datetime | None, said: datetime | None) -> bool:
    """Whether a statement's event ended well before another statement was said (`PAST_MARGIN`)."""
    if event is None or said is None:
        return False
    return utc(event) < utc(said) - PAST_MARGIN


def single_valued(attribute: str) -> bool:
    """Whether a property holds one value at a time (lives_in, works_as, age ...), unlike likes or hobbies."""
    return any(part in _SINGLE_VALUED for part in re.split(r"[^a-z]+", attribute.lower()) if part)
