"""Errors a user can act on: each message is one line that says what to do."""

from __future__ import annotations

import reprlib


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


def check_utf8(value: str, what: str) -> str:
    """Text that can be stored and embedded, or an `InputError` naming where it is not: a lone surrogate
    (what undecodable bytes of a command line become) cannot be written as UTF-8, and the tokenizer
    refuses it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InputError(f"{what} holds {value[error.start]!r} at character {error.start + 1}, which is not text "
                         "(undecodable bytes?): a lone surrogate; give it as UTF-8") from None
    return value


def shown_value(value: object, width: int = 60) -> str:
    """A value as one short line, for error messages (never fails, never spans lines)."""
    try:
        text = reprlib.repr(value)
    except Exception:
        text = f"a {type(value).__name__}"
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."
