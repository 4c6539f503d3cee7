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

A name the rule without combining marks accepts is kept exactly as given; one that needs them is stored
in its composed (NFC) spelling, so "josé" typed either way is one namespace.

The name never becomes a path. Its four Chroma collections are
`strata-<slug>-<digest>-<kind>` (`memory/chroma.py`): the slug keeps up to 40 ASCII letters and digits
(other runs of characters become one "-") so a listing stays readable, and the
digest is the first 32 hex digits (128 bits) of the name's SHA-256, so two names never share
a collection; each collection's metadata names its namespace, and a collection naming another is
never opened. (Earlier versions used 8 hex digits of SHA-1, which names could share; such a
collection is renamed when its own namespace opens it.) In the ledger the namespace is a column value,
as given.
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
    labels = value.split(SEPARATOR)
    for label in labels:
        if label in ("", ".", ".."):
            raise InputError(f"the namespace {value[:60]!r} has an empty, '.' or '..' label: use {_RULE}")
    if all(_plain(label) is None for label in labels):
        return value  # as it always was: the name its stored memory is found under never changes
    # Letters with combining marks (Devanagari, Thai, vowelled Arabic, "josé" typed as e + accent): the composed
    # (NFC) spelling, so both ways of typing one name open one memory.
    value = unicodedata.normalize("NFC", value)
    if len(value) > MAX_LENGTH:
        raise InputError(f"the namespace has {len(value)} characters: use {_RULE}")
    for label in value.split(SEPARATOR):
        bad = _with_marks(label)
        if bad is not None:
            raise InputError(f"the namespace {value[:60]!r} contains {bad!r}: use {_RULE}")
    return value


def _plain(label: str) -> str | None:
    """The first character the original rule refuses (letters, digits and `_ - . @ +` only), or None."""
    return next((c for c in label if not (c.isalnum() or c in _LABEL_MARKS)), None)


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
