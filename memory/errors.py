"""Errors a user can act on: each message is one line that says what to do."""

from __future__ import annotations


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
