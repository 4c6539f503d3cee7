"""Names, keywords and BM25 tokens from plain text, without a model or a lexicon.

MAGMA's entity graph and A-MEM's keyword notes link records that mention the
same thing; AdaMem backs dense search off to keywords. All three need the same
cheap answer to "what is this text about", so it lives here once: capitalised
names (multiword proper nouns kept whole), salient lowercase words, and the
token stream the BM25 index uses, which must match between documents and queries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

from pydantic import BaseModel, Field
from strata.memory.names import (
    canonical_text,
    character_grams,
    clean_name,
    composed,
    marks,
    spaceless,
    word_pattern,
)


def wordset(words: str) -> frozenset[str]:
    """A word list written as one whitespace-separated string (easier to read and edit)."""
    return frozenset(words.split())


# Function words: never a keyword, never a BM25 token. Contraction fragments are
# listed because the tokenizer splits "don't" into "don" and "t".
STOPWORDS: frozenset[str] = wordset(
    """
    a about above after again against all almost along already also although always am among an and another any
    anybody anyone anything anyway anywhere are around as at away be became because become been before being below
    beside besides between both but by can cannot could did do does doing done down during each either else enough
    even ever every everybody everyone everything everywhere few for from further get gets getting got gotten had has
    have having he her here hers herself him himself his how however i if in into is it its itself just least less
    let lets like lot lots many may maybe me might mine more most much must my myself near neither never no nobody none
    nor not nothing now of off often on once one only onto or other others otherwise our ours ourselves out over own
    per perhaps quite rather same shall she should since so some somebody someone something sometimes somewhat
    somewhere such than that the their theirs them themselves then there these they this those though through thus
    to together too toward towards under until up upon us very via was we well were what whatever when whenever where
    wherever whether which while who whoever whole whom whose why will with within without would yet you your yours
    yourself yourselves
    im ive id ill youre youve youd youll hes shes its were weve wed well theyre theyve theyd theyll thats theres
    whats whos hows lets isnt arent wasnt werent dont doesnt didnt havent hasnt hadnt wont wouldnt cant couldnt
    shouldnt mustnt ain don doesn didn isn aren wasn weren hasn haven hadn won wouldn couldn shouldn mustn ll ve re
    s t d m o y
    """
)

# Chat words: interjections, evaluations and conversational verbs. They carry no
# proposition on their own ("Wow, that's so cool!"), so they are not salient
# keywords, not names when capitalised, and a sentence made only of them is
# chit-chat. They stay in BM25 tokens: a question may use them.
CHAT_WORDS: frozenset[str] = wordset(
    """
    hey hi hello bye goodbye wow oh ah aw aww awww ooh yeah yes yep yup yay woohoo nope no ok okay hmm um uh haha lol
    omg btw thanks thank congrats congratulations cheers please sorry welcome sure totally definitely absolutely
    exactly indeed agree agreed right true truly really super pretty kinda sorta gonna wanna gotta great cool awesome
    amazing nice wonderful lovely beautiful stunning gorgeous fantastic fabulous incredible impressive inspiring sweet
    fun funny hilarious cute glad good bad best better brilliant excellent perfect special powerful rewarding
    meaningful enlightening emotional refreshing fulfilling epic neat wild crazy insane blast tough hard easy
    sounds sound looks look seems seem feels feel guess hope wish mean means meant say said tell told know knew think
    thought see saw hear heard talk talking chat chatting catch share sharing keep going get got glad happy stuff
    things thing way lot much bit kind sort yeah well also still even
    """
)

# Common verbs and time words: frequent in any chat, so never salient keywords
# (the dates themselves are resolved by memory.dates).
PLAIN_WORDS: frozenset[str] = wordset(
    """
    went go goes going gone took take takes taking taken make makes making made gave give gives giving given come
    comes coming came want wants wanted need needs needed love loves loved loving like likes liked try tries tried
    trying start starts started starting use used find found felt help helps helped helping done doing seen keep
    kept left leave told bought brought began begin happen happened happening wait waiting having being become
    yesterday today tomorrow tonight last next ago week weeks weekend weekends month months year years day days
    time times morning night evening afternoon recently lately soon later earlier
    """
)

MONTH_WORDS: frozenset[str] = wordset(
    "january february march april may june july august september october november december"
)
WEEKDAY_WORDS: frozenset[str] = wordset("monday tuesday wednesday thursday friday saturday sunday")

# Initials written with dots ("U.S.", "J.K.") are one word, not a run of one-letter names.
_WORD = re.compile(r"(?:[A-Za-z]\.){2,}|[A-Za-z][A-Za-z0-9]*(?:['’][A-Za-z]+)*\+?|\d+(?:st|nd|rd|th)?")
_TOKEN = re.compile(r"[a-z0-9]+")
_PREFIXED_NAME = re.compile(r"[^\W\d_]['’][^\W\d_]")  # O'Brien, D'Angelo, N'Golo: a name, not a contraction
_POSSESSIVE = re.compile(r"['’]s\b|(?<=s)['’](?=\s|$)")
_OPENERS = frozenset('.!?:;"“”(\n')
_ADVERB_SUFFIX = ("ly",)
_NOT_NAME_SUFFIXES = ("ing", "ed", "ly", "tion", "sion", "ness", "ment", "ity", "ful", "ous", "ive", "ies", "es", "s")
_NAME_CONNECTORS = frozenset({"of", "the", "de", "van", "von", "da", "del", "la", "le"})


class Entities(BaseModel):
    """What a text mentions: proper names as written, salient words lowercased."""

    names: list[str] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


def stem(word: str) -> str:
    """A light suffix stemmer (plural -s, -ing, -ed, final -e) so 'hiking', 'hiked' and 'hikes' meet."""
    w = word
    if len(w) > 4 and w.endswith(("ies", "ied")):
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    if len(w) > 5 and w.endswith("ing"):
        w = _undouble(w[:-3])
    elif len(w) > 4 and w.endswith("ed") and not w.endswith("eed"):
        w = _undouble(w[:-2])
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    return w


def _undouble(w: str) -> str:
    if len(w) > 2 and w[-1] == w[-2] and w[-1] not in "lsz":
        return w[:-1]
    return w


def plain_words(text: str) -> list[str]:
    """A text's words lowercased, possessives and stopwords removed, not yet stemmed; repeats kept.

    Words of any script count, case-folded and NFKC-composed ("José" typed either way is "josé", never
    "jos"); a run of Chinese, Japanese or Thai, written without spaces, gives its characters and pairs
    of characters (`character_grams`). ASCII text takes the plain path: the same words, faster."""
    if text.isascii():
        lowered = _POSSESSIVE.sub("", text.lower()).replace("'", "")
        return [t for t in _TOKEN.findall(lowered) if t not in STOPWORDS and (len(t) > 1 or t.isdigit())]
    lowered = _POSSESSIVE.sub("", canonical_text(text)).replace("'", "")
    words: list[str] = []
    for t in word_pattern().findall(lowered):
        if spaceless(t):
            words.extend(character_grams(t))
        elif t not in STOPWORDS and (len(t) > 1 or t.isdigit()):
            words.append(t)
    return words


def tokenize(text: str) -> list[str]:
    """BM25 tokens: the plain words, stemmed; repeats kept (term frequency)."""
    return [stem(t) for t in plain_words(text)]


def keywords(text: str) -> list[str]:
    """The distinct BM25 tokens of a text, in order of first appearance."""
    return list(dict.fromkeys(tokenize(text)))


def _sentence_starts(text: str, matches: list[re.Match[str]]) -> list[bool]:
    """For each word, whether it opens a sentence (text start, or after . ! ? : ; a quote or a line break)."""
    starts: list[bool] = []
    previous_end = 0
    for index, match in enumerate(matches):
        gap = text[previous_end : match.start()]
        starts.append(index == 0 or any(c in _OPENERS for c in gap))
        previous_end = match.end()
    return starts


def _bare(word: str) -> str:
    """A word without its possessive ending or trailing plus sign ("Caroline's" -> "Caroline", "LGBTQ+" -> "LGBTQ")."""
    word = word.replace("’", "'")
    if word.endswith("'s"):
        word = word[:-2]
    return word.rstrip("'+")


@cache
def _any_script_word() -> re.Pattern[str]:
    """`_WORD` for text beyond ASCII: the same shape, with letters (and their marks) of any script."""
    letter, mark = r"[^\W\d_]", f"[{marks()}]"
    return re.compile(
        rf"(?:{letter}\.){{2,}}|{letter}(?:[^\W_]|{mark})*(?:['’]{letter}(?:{letter}|{mark})*)*\+?|\d+(?:st|nd|rd|th)?"
    )


def _words_of(text: str) -> tuple[str, list[re.Match[str]]]:
    """The text (composed, without invisible format characters, when it is not ASCII) and its words."""
    if text.isascii():
        return text, list(_WORD.finditer(text))
    text = composed(text)
    return text, list(_any_script_word().finditer(text))


def _capitalised(word: str) -> bool:
    return word[:1].isupper()


def _excluded(word: str) -> bool:
    low = word.lower()
    if "'" in low and not _prefixed_name(word):  # I'm, I've, That's: a contraction is never a name
        return True
    return low in STOPWORDS or low in CHAT_WORDS or low in MONTH_WORDS or low in WEEKDAY_WORDS


def _prefixed_name(word: str) -> bool:
    """'O'Brien', 'D'Angelo': one capital, an apostrophe, a capitalised word ('I'M' and 'I'Ll' are not)."""
    word = word.replace("’", "'")
    return (
        bool(_PREFIXED_NAME.match(word))
        and word[0].isupper()
        and word[2].isupper()
        and any(c.islower() for c in word[3:])
    )


def _acronym(word: str) -> bool:
    letters = [c for c in word if c.isalpha()]
    return len(letters) >= 2 and all(c.isupper() for c in letters)


def _grow_name(
    text: str, matches: list[re.Match[str]], i: int, known: frozenset[str], opens: list[bool]
) -> tuple[list[str], int]:
    """Extend the name at matches[i] over adjacent capitalised words ("Sara Bareilles", "Lord of the Rings",
    "Mary-Kate": a hyphen joins a name's parts as a space does).

    A known name (a participant) is never glued to its neighbours, and a
    sentence-initial word that looks like a verb or adverb never starts a name.
    """
    first = _bare(matches[i].group())
    parts = [first]
    if first.lower() in known or (opens[i] and first.lower().endswith(("ing", "ed", "ly"))):
        return parts, i + 1
    j = i + 1
    while j < len(matches) and not matches[j - 1].group().replace("’", "'").endswith("'s"):
        hyphen = text[matches[j - 1].end() : matches[j].start()] == "-"
        k = j
        while not hyphen and k < len(matches) and matches[k].group().lower() in _NAME_CONNECTORS and k - j < 2:
            k += 1
        if k >= len(matches) or not (
            hyphen or all(text[matches[n - 1].end() : matches[n].start()] == " " for n in range(j, k + 1))
        ):
            break
        candidate = _bare(matches[k].group())
        if not _capitalised(candidate) or _excluded(candidate) or not candidate[:1].isalpha():
            break
        if candidate.lower() in known:
            break
        parts.extend([*(matches[n].group() for n in range(j, k)), candidate])
        j = k + 1
    return parts, j


def split_entities(text: str, known: Iterable[str] = ()) -> Entities:
    """Names and keywords of a text (see the module docstring for why both).

    `known` names (the participants) are recognised even at the start of a
    sentence, where a capital letter is otherwise weak evidence of a name.
    """
    known_names = frozenset(clean_name(name).lower() for name in known if name)
    text, matches = _words_of(text)
    opens = _sentence_starts(text, matches)
    bares = [_bare(m.group()) for m in matches]
    capital_inside = {b.lower() for b, first in zip(bares, opens, strict=True) if not first and _capitalised(b)}
    names: list[str] = []
    name_words: set[str] = set()
    i = 0
    while i < len(matches):
        m = matches[i]
        word = bares[i]
        if not _capitalised(word) or _excluded(word) or not word[:1].isalpha():
            i += 1
            continue
        parts, j = _grow_name(text, matches, i, known_names, opens)
        accepted = True
        if len(parts) == 1 and opens[i]:
            # Sentence-initial capitals are weak evidence: keep acronyms, vocatives and
            # words the text also capitalises elsewhere; drop likely common words.
            follow = text[m.end() : m.end() + 1]
            accepted = (
                word.lower() in known_names
                or _acronym(word)
                or word.lower() in capital_inside
                or (follow == "," and not word.lower().endswith(_NOT_NAME_SUFFIXES))
            )
        if accepted:
            name = text[m.start() : matches[j - 1].start()] + parts[-1]  # as written between its words
            if name not in names:
                names.append(name)
            name_words.update(p.lower() for p in parts)
        i = max(j, i + 1)
    seen_stems: set[str] = set()
    salient: list[str] = []
    for bare in bares:
        word = bare.lower()
        if (
            len(word) < 4
            or not word.isalpha()
            or spaceless(word)
            or word in name_words
            or word in STOPWORDS
            or word in CHAT_WORDS
            or word in PLAIN_WORDS
            or word in MONTH_WORDS
            or word in WEEKDAY_WORDS
            or (word.endswith(_ADVERB_SUFFIX) and len(word) > 5)
            or (word.endswith("ed") and len(word) > 5)
        ):
            continue
        key = stem(word)
        if key not in seen_stems:
            seen_stems.add(key)
            salient.append(word)
    return Entities(names=names, keywords=salient)


def extract_entities(text: str, known: Iterable[str] = ()) -> list[str]:
    """Names first (as written), then salient keywords (lowercased): the record's entity list."""
    found = split_entities(text, known)
    return [*found.names, *found.keywords]
