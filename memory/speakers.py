"""Who 'I', 'you' and 'we' are: pronouns rewritten to names, and questions mapped to participants.

A fact read out of context must say whose it is: "I'm keen on counseling" is
useless in a memory shared by two people, "Caroline is keen on counseling" is
not. AMA's Constructor writes facts with the speaker resolved, and AdaMem
resolves which participant a question targets before it retrieves. Both are
done here with word lists and a tokenizer, no model.
"""

from __future__ import annotations

import re
from functools import lru_cache

from strata.memory.entities import CHAT_WORDS, STOPWORDS, wordset
from strata.memory.names import canonical_text, composed, spaceless, unaccented

_TOKEN = re.compile(r"[A-Za-z]+(?:['’][A-Za-z]+)*|\d+|\s+|.", re.DOTALL)

# Verb forms that do not change after a third-person subject.
_MODALS = wordset(
    "can can't cannot could couldn't will won't would wouldn't shall should shouldn't may might must mustn't "
    "did didn't was wasn't had hadn't ought used"
)
_IRREGULAR_PAST = wordset(
    """
    went got gave took made saw came ran had did was were felt thought found told said left met bought brought caught
    taught sought kept slept swept wept built sent spent lent bent meant heard held sold stood understood won lost sat
    fell fed led wrote rode drove spoke broke chose froze woke wore tore swore drew grew knew threw flew blew began
    sang rang drank swam sank shrank ate forgot shot hid bit lit slid dug stuck struck hung swung spun became overcame
    forgave been done gone seen taken given known shown paid laid fought dealt knelt learnt burnt dreamt spelt spilt
    smelt leapt crept shook mistook stole hit put set cut let quit shut hurt cost beat spread split upset cast bet fit
    rid read gotten
    """
)
_PARTICIPLES = wordset("been gone done seen had got gotten made known taken given shown found never already")
_ADVERBS = wordset(
    """
    really just also always still usually often never sometimes actually totally absolutely truly definitely even only
    mostly already finally genuinely kinda sorta now recently currently especially seriously honestly particularly
    personally certainly probably generally normally rarely seldom hardly barely constantly too all both ever
    """
)
_NOT_ADVERBS_LY = frozenset({"apply", "rely", "reply", "supply", "multiply", "comply", "imply", "ally", "fly", "belly"})
_NOT_VERBS = wordset(
    """
    guys two both all alone myself yourself too and or but so the a an to of in on at for with from by about as if than
    then that this these those it its my your our their his her him them me us you we they he she i not no here there
    """
)
_THIRD_PERSON = {
    "am": "is", "are": "is", "were": "was", "have": "has", "do": "does", "go": "goes", "be": "is",
    "don't": "doesn't", "haven't": "hasn't", "aren't": "isn't", "weren't": "wasn't", "ain't": "isn't",
    "wanna": "wants to", "gotta": "has to",
}  # fmt: skip
# A 'you' after these words is a subject ("I think you are", "so glad you got") rather than an object.
_SUBJECT_BEFORE = wordset(
    """
    and but so because cause 'cause that if when as since while though although where how why what who whether until
    unless once or then think thought hope bet guess know knew glad sure wish feel felt mean believe said say seems
    like great awesome amazing cool happy nice good
    """
)
_INVERTED = {
    "are": "is", "were": "was", "have": "has", "do": "does", "don't": "doesn't", "aren't": "isn't",
    "weren't": "wasn't", "haven't": "hasn't", "am": "is",
}  # fmt: skip
_KEEP_YOU_AFTER = frozenset({"thank", "thanks", "bless", "see", "mind"})
_INCLUSIVE_WE = re.compile(
    r"\b(?:you\s+and\s+(?:I|me)|(?:I|me)\s+and\s+you|us\s+two|the\s+two\s+of\s+us"
    r"|just\s+us|our\s+(?:friendship|chats?|conversations?|talks?)|we\s+(?:last\s+)?(?:chatted|talked|spoke)"
    r"|we\s+(?:can|could|should)|let['’]s|catch\s+up)\b",
    re.IGNORECASE,
)
_FAMILY_CUE = re.compile(
    r"\b(?:(?:my|our)\s+(?:kids?|children|family|fam|husband|hubby|wife|partner|son|daughter|parents?|mom|dad)"
    r"|family|fam)\b",
    re.IGNORECASE,
)
_FRIENDS_CUE = re.compile(r"\b(?:my|our)\s+(?:friends?|gang|buddies|crew|group|team|mates|pals)\b", re.IGNORECASE)


@lru_cache(maxsize=1024)
def listener_of(speaker: str, people: tuple[str, ...]) -> str | None:
    """Who is spoken to: in a two-person conversation, whoever is not speaking; nobody known otherwise (a
    greeting's name is small talk when it names the listener; a question ranks thousands of turns)."""
    others = [p for p in people if p != speaker]
    return others[0] if len(others) == 1 else None


def _norm(token: str) -> str:
    return token.lower().replace("’", "'")


def _is_word(token: str) -> bool:
    return token[:1].isalpha()


def _third_person_verb(verb: str) -> str:
    """'love' -> 'loves', 'try' -> 'tries', 'watch' -> 'watches', 'have' -> 'has'; case kept."""
    low = _norm(verb)
    if low in _THIRD_PERSON:
        new = _THIRD_PERSON[low]
    elif low.endswith(("s", "sh", "ch", "x", "z", "o")):
        new = low + "es"
    elif len(low) > 1 and low.endswith("y") and low[-2] not in "aeiou":
        new = low[:-1] + "ies"
    else:
        new = low + "s"
    if "’" in verb:
        new = new.replace("'", "’")
    return new[:1].upper() + new[1:] if verb[:1].isupper() else new


def _keeps_form(word: str) -> bool:
    """True when the word after a subject needs no agreement (past tense, modal, not a verb)."""
    low = _norm(word)
    if low in _THIRD_PERSON:
        return False
    return (
        (not low.isalpha() and "'" not in low)
        or low in _MODALS
        or low in _IRREGULAR_PAST
        or low in _NOT_VERBS
        or (low.endswith("ed") and not low.endswith("eed") and len(low) > 3)
        or low.endswith("n't")
        or (low.endswith("ing") and bool(re.search(r"[aeiouy]", low[:-3])))  # "you thinking": a gerund, not "sing"
    )


def _is_adverb(token: str) -> bool:
    low = _norm(token)
    return low in _ADVERBS or (len(low) > 4 and low.endswith("ly") and low not in _NOT_ADVERBS_LY)


def _next_word(tokens: list[str], i: int) -> int | None:
    """Index of the next word token after i, if only spaces lie between."""
    j = i + 1
    while j < len(tokens) and tokens[j].isspace():
        j += 1
    return j if j < len(tokens) and _is_word(tokens[j]) else None


def _previous_word(tokens: list[str], i: int) -> int | None:
    j = i - 1
    while j >= 0 and tokens[j].isspace():
        j -= 1
    return j if j >= 0 and _is_word(tokens[j]) else None


def _verb_after(tokens: list[str], i: int) -> int | None:
    """The verb after a subject at i, skipping adverbs ('I really, truly love')."""
    j = i + 1
    while j < len(tokens):
        if tokens[j].isspace() or tokens[j] == ",":
            j += 1
            continue
        if _is_word(tokens[j]) and _is_adverb(tokens[j]):
            j += 1
            continue
        break
    return j if j < len(tokens) and _is_word(tokens[j]) else None


def _agree(tokens: list[str], out: list[str], i: int) -> None:
    """Make the verb after a singular subject at i agree with it ('I love' -> '... loves')."""
    j = _verb_after(tokens, i)
    if j is not None and not _keeps_form(tokens[j]):
        out[j] = _third_person_verb(tokens[j])


_WH_WORDS = frozenset({"what", "when", "where", "why", "how", "who", "which", "whom", "whose"})


def _opens_question(tokens: list[str], i: int) -> bool:
    """Is the auxiliary at i inverted ('Have you ...?', 'Why are you ...?') rather than a verb ('to have you')?"""
    previous = _previous_word(tokens, i)
    if previous is None:
        return True
    return _norm(tokens[previous]) in _WH_WORDS


def _would_or_had(tokens: list[str], i: int) -> str:
    """'I'd been' is 'had been'; 'I'd love' is 'would love'."""
    j = _verb_after(tokens, i)
    if j is None:
        return "would"
    low = _norm(tokens[j])
    return "had" if low in _PARTICIPLES or (low.endswith("ed") and low not in ("need", "feed")) else "would"


def _we_names(sentence: str, context: str, speaker: str, listener: str | None) -> tuple[str, str]:
    """Who 'we' and 'our' are.

    Speaker and listener together when the sentence says so ('since we last
    chatted', 'we could', 'you and I'). Otherwise 'we' is the speaker's own
    circle: in chat it is far more often 'my family went camping' than the two
    speakers, and naming the listener there would store a false fact. The turn
    says which circle (family, friends) when it mentions one.
    """
    if listener and _INCLUSIVE_WE.search(sentence):
        return f"{speaker} and {listener}", f"{speaker} and {listener}'s"
    circle = _circle_of(context)
    if circle == "family":
        return f"{speaker}'s family", f"{speaker}'s"
    if circle == "friends":
        return f"{speaker} and {speaker}'s friends", f"{speaker}'s"
    return f"{speaker} and others", f"{speaker}'s"


@lru_cache(maxsize=8)
def _circle_of(context: str) -> str:
    """'family', 'friends' or '': the circle a turn mentions. Read once per turn, not once per sentence:
    every sentence of a turn asks about the same whole turn, and searching it each time made the cost
    of a turn grow with the square of its length."""
    if _FAMILY_CUE.search(context):
        return "family"
    return "friends" if _FRIENDS_CUE.search(context) else ""


def _capitalise_like(original: str, replacement: str) -> str:
    if original[:1].isupper() and replacement[:1].islower():
        return replacement[:1].upper() + replacement[1:]
    return replacement


def to_third_person(text: str, speaker: str, listener: str | None = None, *, context: str | None = None) -> str:
    """Rewrite first- and second-person references as names.

    'I'm keen on counseling' -> 'Caroline is keen on counseling'; 'my kids' ->
    "Melanie's kids"; 'you' -> the listener when known (left alone otherwise).
    `context` is the whole turn when `text` is one sentence of it: it decides
    whether 'we' means the two participants or the speaker's family or friends.
    """
    if not speaker.strip():
        raise ValueError("speaker is empty: give the name of who said the text")
    tokens = _TOKEN.findall(text)
    out = list(tokens)
    we, our = _we_names(text, context or text, speaker, listener)
    for i, token in enumerate(tokens):
        if not _is_word(token):
            continue
        if i + 1 < len(tokens) and tokens[i + 1] == "-":
            continue  # "me-time", "you-know-what": part of a compound
        low = _norm(token)
        replacement = _first_person(tokens, out, i, low, speaker)
        if replacement is None and listener:
            replacement = _second_person(tokens, out, i, low, listener)
        if replacement is None and token != "US":
            replacement = _plural(low, we, our, tokens, i)
        if replacement is not None:
            out[i] = _capitalise_like(token, replacement)
    return "".join(out)


def _first_person(tokens: list[str], out: list[str], i: int, low: str, speaker: str) -> str | None:
    if low == "i":
        previous = _previous_word(tokens, i)
        if previous is not None and _norm(tokens[previous]) == "am":
            out[previous] = _capitalise_like(tokens[previous], "is")
        else:
            _agree(tokens, out, i)
        return speaker
    simple = {"i'm": f"{speaker} is", "i've": f"{speaker} has", "i'll": f"{speaker} will",
              "me": speaker, "myself": speaker, "my": f"{speaker}'s", "mine": f"{speaker}'s"}  # fmt: skip
    if low == "i'd":
        return f"{speaker} {_would_or_had(tokens, i)}"
    return simple.get(low)


def _second_person(tokens: list[str], out: list[str], i: int, low: str, listener: str) -> str | None:
    if low == "you":
        previous = _previous_word(tokens, i)
        after = _next_word(tokens, i)
        before = _norm(tokens[previous]) if previous is not None else ""
        next_low = _norm(tokens[after]) if after is not None else ""
        if before in _KEEP_YOU_AFTER or next_low in ("guys", "all", "both", "two"):
            return None  # thanks, greetings, and 'you' meaning a group we cannot name
        if next_low == "know" and after is not None and _next_word(tokens, after) is None:
            return None  # the filler "you know?"
        if previous is not None and before in _INVERTED and _opens_question(tokens, previous):
            out[previous] = _capitalise_like(tokens[previous], _INVERTED[before])
        elif previous is None or before in _SUBJECT_BEFORE:
            _agree(tokens, out, i)
        return listener
    if low == "you'd":
        return f"{listener} {_would_or_had(tokens, i)}"
    simple = {"you're": f"{listener} is", "you've": f"{listener} has", "you'll": f"{listener} will",
              "your": f"{listener}'s", "yours": f"{listener}'s", "yourself": listener}  # fmt: skip
    return simple.get(low)


def _plural(low: str, we: str, our: str, tokens: list[str], i: int) -> str | None:
    if low == "we'd":
        return f"{we} {_would_or_had(tokens, i)}"
    simple = {"we": we, "us": we, "ourselves": we, "our": our, "ours": our,
              "we're": f"{we} are", "we've": f"{we} have", "we'll": f"{we} will"}  # fmt: skip
    return simple.get(low)


def resolve_participant(question: str, participants: list[str]) -> list[str]:
    """Which participants a question is about, in order of mention (AdaMem's participant resolution).

    Full names, first or last names, possessives ("Caroline's") and nicknames
    that start a name ("Mel" for Melanie, capitalised, three letters or more)
    count. An empty list means the question names nobody.
    """
    found: list[tuple[int, str]] = []
    question = composed(question)  # "Émile" typed as E + a combining accent is still Émile
    lowered = unaccented(canonical_text(question)).replace("’", "'")  # and "Emile", typed without it
    for person in participants:
        name = composed(person).strip()
        if not name:
            continue
        position = _mention(question, lowered, name)
        if position is not None:
            found.append((position, person))
    return [person for _, person in sorted(found, key=lambda item: item[0])]


_QUESTION_WORD = re.compile(r"[^\W\d_](?:[^\W\d_]|['’-])*")  # letters of any script: "Émile", "Zoë", "ÉMILE"


def _mention(question: str, lowered: str, name: str) -> int | None:
    """Where `name` is first mentioned in the question, or None."""
    key = unaccented(canonical_text(name))
    if spaceless(key):  # "李明住在哪里": Chinese and Japanese put no space after a name
        where = lowered.find(key)
        return where if where >= 0 else None
    full = re.search(rf"\b{re.escape(key)}\b", lowered)
    if full:
        return full.start()
    parts = [unaccented(canonical_text(p)) for p in name.split() if len(p) > 1]
    for match in _QUESTION_WORD.finditer(question):
        word = match.group().replace("’", "'")
        bare = re.sub(r"'s?$", "", word)
        low = unaccented(canonical_text(bare))
        if low in parts:
            return match.start()
        if (
            bare[:1].isupper()
            and len(low) >= 3
            and low not in STOPWORDS
            and low not in CHAT_WORDS
            and any(part.startswith(low) for part in parts)
        ):
            return match.start()
    return None
