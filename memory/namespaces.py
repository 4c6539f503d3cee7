"""What a namespace may be called, and how the name maps to storage.

A namespace says whose memory a run reads and writes: a user id, an agent, a
conversation. The rule, checked wherever a namespace enters (the runtime
context, hence the API, the CLI, Studio and the server, and the store registry):

- 1 to `MAX_LENGTH` characters;
- one or more labels joined by "/" (`users/ann`: the LangGraph store's namespace
  tuples and a multi-conversation ingest use it);
- a label is letters or digits of any script (with their combining marks: प्रिया, สมศักดิ์, مُحَمَّد),
  or `_ - . @ +`, and is not `.` or `..`;
- nothing else: no spaces, control characters, NUL bytes or backslashes.

A name is stored in its composed (NFC) spelling, so every canonically equal way of typing it is one
namespace: "josé" with é or with e + accent, Hangul as syllables or as conjoining jamo (how macOS file
names and some input methods give it), Å as U+00C5 or as the Angstrom sign U+212B, क़ as U+0958 or as
क + nukta. NFC, not NFD: it is what most keyboards and web forms send, the form the W3C's character model
asks of text on the web, and what names needing combining marks were always stored under, so none of
those moves. Not NFKC: it would also merge compatibility characters (full-width "ａnn" and "ann", "ﬁ" and
"fi"), which an app's ids keep apart; case stays too. Earlier versions kept a name of letters and digits
byte for byte: a memory stored so under a spelling that is not composed opens under the composed one as
long as no memory has that spelling (memory/registry.py `stored_name`).

The name never becomes a path. Its four Chroma collections are
`strata-<slug>-<digest>-<kind>` (`memory/chroma.py`): the slug keeps up to 40 ASCII letters and digits
(other runs of characters become one "-") so a listing stays readable, and the
digest is the first 32 hex digits (128 bits) of the name's SHA-256, so two names never share
a collection; each collection's metadata names its namespace, and a collection naming another is
never opened. (Earlier versions used 8 hex digits of SHA-1, which names could share; such a
collection is renamed when its own namespace opens it.) In the ledger the namespace is a column value.
"""

from __future__ import annotations

import unicodedata

from strata.memory.errors import InputError

MAX_LENGTH = 128  # well above any user or conversation id; Chroma names stay short whatever the length
SEPARATOR = "/"
_LABEL_MARKS = frozenset("_-.@+")
_RULE = "letters, digits and _ - . @ +, labels joined by '/', at most 128 characters (e.g. 'ann' or 'users/ann')"


def check_namespace(value: object) -> str:
    """The namespace itself when it follows the rule; an `InputError` of one line otherwise."""
    if not isinstance(value, str):
        raise InputError(f"the namespace must be text, not {type(value).__name__}: use {_RULE}")
    if not value:
        raise InputError(f"the namespace is empty: name whose memory this is, with {_RULE}")
    if len(value) > MAX_LENGTH:
        raise InputError(f"the namespace has {len(value)} characters: use {_RULE}")
    for label in value.split(SEPARATOR):
        if label in ("", ".", ".."):
            raise InputError(f"the namespace {value[:60]!r} has an empty, '.' or '..' label: use {_RULE}")
    # The composed (NFC) spelling, so every way of typing one name opens one memory (see the module's doc).
    value = unicodedata.normalize("NFC", value)
    if len(value) > MAX_LENGTH:
        raise InputError(f"the namespace has {len(value)} characters: use {_RULE}")
    for label in value.split(SEPARATOR):
        bad = _with_marks(label)
        if bad is not None:
            raise InputError(f"the namespace {value[:60]!r} contains {bad!r}: use {_RULE}")
    return value


def _with_marks(label: str) -> str | None:
    """The first character refused when a combining mark may follow a letter, a digit or another mark."""
    previous = ""
    for c in label:
        if not (c.isalnum() or c in _LABEL_MARKS or mark_after(previous, c)):
            return c
        previous = c
    return None


def mark_after(previous: str, c: str) -> bool:
    """Whether `c` is a combining mark a label keeps: one that follows a letter, a digit or another mark."""
    return unicodedata.category(c).startswith("M") and (previous.isalnum() or _is_mark(previous))


def _is_mark(c: str) -> bool:
    return len(c) == 1 and unicodedata.category(c).startswith("M")
