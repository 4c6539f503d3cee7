"""One spelling per name and per word, whatever the keyboard: the Unicode rules every comparison shares.

The same name reaches memory in several byte sequences: "José" typed on a Mac
(NFD, "e" + combining accent) and on Windows (NFC, "é"), with a no-break space
copied from a web page, a zero-width space or byte-order mark from a file,
full-width letters from a CJK input method, "STRAUSS" for "Strauß". Erasing,
exporting or forgetting "about" a person must find every spelling, or records
of that person survive an erasure. So names are compared by `canonical_name`
and stored as `clean_name` gives them; text is searched as `canonical_text`
gives it, and split into words by the patterns here (letters and digits of any
script; a run of CJK or Thai characters, which has no spaces, by characters).
"""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import cache, lru_cache

# Scripts written without spaces between words: Han, kana, Thai, Lao, Khmer, Myanmar.
SPACELESS = (
    "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\U00020000-\U0003134f"
)
SPACELESS_RUN = re.compile(f"[{SPACELESS}]+")
_DOTTED_I = re.compile("i\u0307")  # "İ".casefold() is "i" + a combining dot: "İsmail" must meet "ismail"


# What a reader never sees on its own: format characters (zero-width space, word joiner, byte-order mark, soft
# hyphen), controls, combining marks with nothing to combine with (U+034F, variation selectors), separators; and
# the fillers some scripts draw as nothing (Hangul's, Braille's blank pattern).
_UNSEEN = frozenset({"Cf", "Cc", "Mn", "Me", "Zs", "Zl", "Zp"})
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def blank(text: str) -> bool:
    """Whether `text` shows nothing: no character a reader can see. The one test of an empty question or turn
    (`str.strip()` keeps U+200B, so a question of zero-width spaces retrieved the whole namespace)."""
    for char in text:
        if "!" <= char <= "~":  # printable ASCII: most text ends here at its first character
            return False
        if not (char.isspace() or unicodedata.category(char) in _UNSEEN or char in _FILLERS):
            return False
    return True


@lru_cache(maxsize=65_536)
def clean_name(name: str) -> str:
    """A name as it is stored: composed (NFC), without invisible format characters (zero-width space,
    byte-order mark), single spaces; its letters otherwise as written."""
    composed = unicodedata.normalize("NFC", name)
    visible = "".join(c for c in composed if unicodedata.category(c) != "Cf")
    return " ".join(visible.split())


def composed(text: str) -> str:
    """Text as written, composed (NFC) and without invisible format characters: what names are cut from."""
    if text.isascii():
        return text
    return "".join(c for c in unicodedata.normalize("NFC", text) if unicodedata.category(c) != "Cf")


@lru_cache(maxsize=65_536)
def canonical_text(text: str) -> str:
    """Text as comparisons read it: compatibility-composed (NFKC: full-width letters are letters),
    without format characters, case-folded ("Strauß" reads "strauss"), curly apostrophes straight."""
    if text.isascii():
        return text.lower()
    folded = unicodedata.normalize("NFKC", text).casefold()
    folded = unicodedata.normalize("NFKC", "".join(c for c in folded if unicodedata.category(c) != "Cf"))
    return _DOTTED_I.sub("i", folded).replace("’", "'").replace("‘", "'")


@lru_cache(maxsize=65_536)
def canonical_name(name: str) -> str:
    """The key two spellings of one name share: "José" (NFC or NFD), "JOSÉ", "Ann\u00a0Lee" and "Ann Lee",
    "Ａｎｎ" and "Ann", "Strauß" and "STRAUSS", "İsmail" and "ismail". '' for a name of no letters."""
    return " ".join(canonical_text(name).split())


_ACCENTS = re.compile("[\u0300-\u036f]")  # the combining accents of Latin, Greek and Cyrillic letters


@lru_cache(maxsize=65_536)
def unaccented(text: str) -> str:
    """Text without the accents of Latin, Greek and Cyrillic letters ("émile" -> "emile", "zoë" -> "zoe"): how
    a question typed on a keyboard without them still names a participant. Marks that are letters' vowels
    (Devanagari, Thai) stay. For finding who is meant, never for erasing: two names may differ by an accent."""
    if text.isascii():
        return text
    return unicodedata.normalize("NFC", _ACCENTS.sub("", unicodedata.normalize("NFD", text)))


def names_in(text: str, name: str) -> bool:
    """Whether `text` names `name`: its words in a row, in any case or Unicode spelling, a possessive too
    ("Ann's", "ANN’S"), never inside a longer word ("Anne", "Annual" do not name Ann). A name in a script
    written without spaces is found inside its run of characters. Accents count: "Zoe" is not "Zoë"."""
    key = canonical_name(name)
    folded = canonical_text(text)
    wanted = word_pattern().findall(key)
    if not wanted or wanted[0] not in folded:  # most texts: no need to split them into words
        return False
    if any(spaceless(word) for word in wanted):
        return "".join(wanted) in "".join(word_pattern().findall(folded))
    words = word_pattern().findall(folded)  # "ann's" is "ann" and "s": the possessive is its own word
    size = len(wanted)
    return any(words[i : i + size] == wanted for i in range(len(words) - size + 1))


def same_name(a: str, b: str) -> bool:
    """Whether two non-empty names are one spelling of the same name."""
    key = canonical_name(a)
    return bool(key) and key == canonical_name(b)


@cache
def marks() -> str:
    """A regex character class body of every combining mark (category M): in Devanagari, Thai or vowelled
    Arabic a word goes on through its marks, which `str.isalnum` and the regex `\\w` do not count."""
    ranges: list[tuple[int, int]] = []
    for code in range(sys.maxunicode + 1 if sys.maxunicode < 0x40000 else 0x40000):
        if unicodedata.category(chr(code)).startswith("M"):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)


@cache
def word_pattern() -> re.Pattern[str]:
    """Words of any script in canonical text: a run of spaceless-script characters, or letters and digits
    (marks included) of other scripts; underscores and punctuation separate words."""
    return re.compile(f"[{SPACELESS}]+|(?:(?![{SPACELESS}])[^\\W_]|[{marks()}])+")


def spaceless(word: str) -> bool:
    """Whether a word is (starts with) a character of a script written without spaces."""
    return bool(SPACELESS_RUN.match(word))


def character_grams(run: str) -> list[str]:
    """A spaceless run as search terms: each character and each pair of neighbours, in order
    ("钢琴课" -> 钢, 钢琴, 琴, 琴课, 课): a question's word then meets the text's without a dictionary."""
    grams: list[str] = []
    for i, char in enumerate(run):
        grams.append(char)
        if i + 1 < len(run):
            grams.append(run[i : i + 2])
    return grams
