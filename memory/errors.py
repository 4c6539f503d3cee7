"""Errors a user can act on: each message is one line that says what to do."""

from __future__ import annotations

import errno
import reprlib
import shutil
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit


class StrataError(ValueError):
    """Base of every error the project raises for a user to fix."""


class ConfigError(StrataError):
    """A setting is missing or wrong (model, embedder, Chroma host, data folder)."""


class InputError(StrataError):
    """The input to a run is unusable (empty text, unknown mode, bad turn)."""


class NotFoundError(StrataError):
    """A record or change that was asked for does not exist in this namespace."""


class UnavailableError(StrataError):
    """A server the memory relies on (the shared ledger database) stopped answering mid-run."""


class DiskFullError(ConfigError):
    """The disk a memory writes to (or its database's) has no room left: freed, the same call resumes."""


# How a full disk shows: SQLite's SQLITE_FULL (code 13), as sqlite3 and Chroma's InternalError say it ("(code: 13)
# database or disk is full"), or ENOSPC as Rust says it (Chroma's index files).
_DISK_FULL = ("database or disk is full", "No space left on device", "(os error 28)")
DISK_FULL_SQLSTATE = "53100"
"""PostgreSQL's disk_full class (psycopg's `DiskFull`): "could not extend file ...", "could not write ..."."""
# Free bytes under which a database's error in `folder` is taken for a full disk: Chroma's engine may lose the
# cause on its way up ("Error in compaction: Failed to apply logs to the metadata segment").
NEARLY_FULL = 4 * 2**20


def disk_full(error: BaseException, folder: str | Path | None = None) -> bool:
    """Whether `error` is the disk a memory is written to running out of space: something a user fixes (by
    freeing space), unlike a bug, so it is said in one line (`disk_full_message`), not as a traceback. With
    `folder` (where the memory is kept on this machine), a database error there while its disk is nearly full
    is one too, whatever its text."""
    if isinstance(error, StrataError):  # already one line, saying what to do
        return False
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if getattr(error, "sqlstate", None) == DISK_FULL_SQLSTATE:  # in whatever language the server speaks
        return True
    if any(sign in str(error) for sign in _DISK_FULL):
        return True
    if isinstance(error, sqlite3.Error):  # opened on a full disk, SQLite says "disk I/O error" (its WAL index)
        unclear = (getattr(error, "sqlite_errorcode", 0) or 0) & 0xFF == sqlite3.SQLITE_IOERR
    else:
        unclear = type(error).__module__.startswith("chromadb")
    return unclear and folder is not None and _free_bytes(Path(folder)) < NEARLY_FULL


def _free_bytes(folder: Path) -> int:
    """Free space on the disk holding `folder` (or its nearest existing parent); unknown counts as plenty."""
    for place in (folder, *folder.parents):
        try:
            return shutil.disk_usage(place).free
        except OSError:
            continue
    return NEARLY_FULL


def disk_full_message(where: object) -> str:
    """What to do when the disk holding `where` is full. Writes are ordered so that a run cut off by one keeps
    what it stored and the same run, repeated, resumes (the ledger commits only what Chroma holds)."""
    return (f"the disk holding {where} is full: free space there and run the same command (or call) again; "
            "what is stored is kept, and the run picks up where this one stopped")


def unstorable(value: str) -> str | None:
    """Why `value` cannot be stored as text, or None: a NUL, which PostgreSQL cannot hold in text (refused on
    every ledger alike, so an app behaves the same on both), or a lone surrogate (what undecodable bytes of a
    command line become), which cannot be written as UTF-8 and which the tokenizer refuses."""
    if "\x00" in value:
        return f"holds a NUL character (\\x00) at character {value.index(chr(0)) + 1}: remove it"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        return (f"holds {value[error.start]!r} at character {error.start + 1}, which is not text "
                "(undecodable bytes?): a lone surrogate; give it as UTF-8")
    return None


def check_text(value: str, what: str) -> str:
    """Text that can be stored and embedded, or an `InputError` naming where it is not (`unstorable`)."""
    problem = unstorable(value)
    if problem is not None:
        raise InputError(f"{what} {problem}")
    return value


def first_unstorable(value: object, where: tuple[str, ...] = ()) -> str | None:
    """What the first text inside a JSON-like value (a field name or a string, at any depth) that cannot be
    stored is, where it is, and why (`unstorable`), or None. Imports and store values are checked whole before
    anything is written, so one bad text never leaves half a write."""
    at = f" at {'.'.join(where)}" if where else ""
    if isinstance(value, str):
        problem = unstorable(value)
        return None if problem is None else f"the text{at} {problem}"
    if isinstance(value, dict):
        for key, item in value.items():
            problem = unstorable(key) if isinstance(key, str) else None
            if problem is not None:
                return f"the field name {shown_value(key, 30)}{at} {problem}"
            found = first_unstorable(item, (*where, one_line(str(key), 30)))  # a field name, as a path's part
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for number, item in enumerate(value):
            found = first_unstorable(item, (*where, str(number)))
            if found:
                return found
    return None


def one_line(text: str, width: int) -> str:
    """`text` as one line of at most `width` characters, for error messages."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def shown_value(value: object, width: int = 60) -> str:
    """A value as one short line, for error messages (never fails, never spans lines)."""
    try:
        text = reprlib.repr(value)
    except Exception:
        text = f"a {type(value).__name__}"
    return one_line(text, width)


def not_http_url(url: str) -> str | None:
    """Why `url` is not an http(s) URL with a host, in words that quote none of it, or None when it is one. A
    value that is not a URL may be a secret pasted in the wrong place (an API key as base_url, a token as
    its host), so a message names what is wrong with it and never shows it: it printed the key before."""
    text = url.strip()
    scheme, sep, _ = text.partition("://")
    if not sep:
        return "it does not start with http:// or https://"
    if scheme.lower() not in ("http", "https"):
        return "it starts with another scheme than http:// or https://"
    if not urlsplit(text).netloc:
        return "no host follows its http(s)://"
    return None
