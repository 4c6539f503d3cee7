"""Where the memory lives: an embedded Chroma folder or a Chroma server; a SQLite or PostgreSQL ledger.

Read from the runtime context first, then from `STRATA_*` environment
variables, so Studio, the server, the CLI and an embedding app can all set it.
"""

from __future__ import annotations

import asyncio
import errno
import math
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator
from strata.memory.embeddings import DEFAULT_EMBEDDER
from strata.memory.errors import ConfigError, shown_value
from strata.memory.private_files import make_private_folder

DEFAULT_DATA_DIR = ".strata"
LEDGER_NAME = "ledger.sqlite3"


def check_folder(value: str, name: str = "data_dir") -> str:
    """A memory folder's name as given, or a `ConfigError` of one line: empty, a NUL byte or characters
    the file system cannot encode cannot name a folder."""
    if not value.strip():
        raise ConfigError(f"setting {name} is empty: name the memory folder (e.g. {name}='.strata')")
    try:
        value.encode("utf-8")  # Chroma's engine takes UTF-8 paths only (undecodable bytes come as surrogates)
    except UnicodeError:
        raise ConfigError(f"setting {name} {value!r} is not UTF-8 text (undecodable bytes?), which Chroma needs "
                          "in a path: name another folder") from None
    if "\x00" in value:
        raise ConfigError(f"setting {name} {value!r} holds a NUL character: name another folder")
    return value


def outside_chroma(folder: str) -> str:
    """The folder, or a one-line `ConfigError` when it is (or lies inside) another memory's Chroma folder
    (`chroma/` beside a ledger): a rebuild of that folder after an erase deletes every folder in it that no
    collection names, a memory's included. An app's own Chroma folder is never rebuilt from here."""
    for place in (Path(folder), *Path(folder).parents):
        try:
            inside = place.name == "chroma" and (place / "chroma.sqlite3").is_file() and (
                place.parent / LEDGER_NAME).is_file()
        except OSError:  # a name too long, or a folder this process may not look into
            inside = False
        if inside:
            raise ConfigError(f"the memory folder {folder} is or lies inside the Chroma folder {place} of another "
                              "memory, whose rebuilds delete what they do not know: name a folder outside it")
    return folder


def real_folder(name: str) -> str:
    """A folder's one real path (`~` expanded, relative and `..` parts and links resolved): the same folder
    named two ways must open one Chroma client and one ledger, never two over the same files.

    A relative name is taken from the working directory, read without a blocking call when on a running
    event loop: there it is the one this module was imported in. A server's loop (`langgraph dev`'s
    blockbuster) refuses `os.getcwd()`, and the README's `make serve` has no STRATA_DATA_DIR, so every run
    and every /strata/* route resolved `.strata` there and failed with a BlockingError.

    A loop of symbolic links is a one-line `ConfigError` (Python 3.11 raises RuntimeError for it, 3.13 an
    OSError; either one reached the command line as a traceback)."""
    path = Path(name).expanduser()
    try:
        return str((path if path.is_absolute() else Path(_working_dir(), path)).resolve())
    except (OSError, RuntimeError) as error:
        why = "a loop of symbolic links" if isinstance(error, RuntimeError) or getattr(
            error, "errno", None) == errno.ELOOP else (error.strerror or type(error).__name__)
        raise ConfigError(f"the memory folder {name} cannot be found ({why}): fix the link or name another "
                          "folder as data_dir") from None


_IMPORT_DIR = os.getcwd()  # the working directory a server's loop resolves relative folders against


def _working_dir() -> str:
    """The working directory now, or, on a running event loop, the one read at import (a process that
    changes directory, as a test does, resolves against the new one off the loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return os.getcwd()
    return _IMPORT_DIR


class StoreSettings(BaseModel):
    """Everything needed to open the stores of one data folder or server."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # a misspelt setting must not pass for the default

    data_dir: str = Field(DEFAULT_DATA_DIR, description="Folder for embedded Chroma and the ledger.")
    chroma_host: str | None = Field(None, description="Chroma server host; embedded Chroma when empty.")
    chroma_port: int = Field(8000, ge=1, le=65535)
    chroma_ssl: bool = False
    chroma_auth_header: str | None = Field(
        None, description="Optional 'Header-Name: value' sent to the Chroma server (e.g. an API token)."
    )
    ledger_url: str | None = Field(
        None, description="PostgreSQL URL of the ledger every replica shares; SQLite in data_dir when empty."
    )
    embedder: str = DEFAULT_EMBEDDER

    @field_validator("data_dir", mode="before")
    @classmethod
    def _folder_as_text(cls, value: object) -> object:
        """A `Path` names the folder as well as a string does (`Memory` takes either)."""
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("chroma_host", "chroma_auth_header", "ledger_url")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        """An empty value (an unset environment variable passed on) means the default, as `None` does:
        "" as the Chroma host is embedded Chroma to every reader, not a server named ""."""
        return value if value and value.strip() else None

    @field_validator("data_dir")
    @classmethod
    def _usable_folder(cls, value: str) -> str:
        return outside_chroma(real_folder(check_folder(value)))

    @property
    def ledger_path(self) -> Path:
        return Path(self.data_dir).expanduser() / LEDGER_NAME

    @property
    def chroma_path(self) -> Path:
        return Path(self.data_dir).expanduser() / "chroma"

    def headers(self) -> dict[str, str]:
        if not self.chroma_auth_header:
            return {}
        name, _, value = self.chroma_auth_header.partition(":")
        return {name.strip(): value.strip()}


def env_default(name: str, fallback: str | None = None) -> str | None:
    """A `STRATA_<NAME>` environment variable, or the fallback."""
    value = os.environ.get(f"STRATA_{name.upper()}")
    return value if value not in (None, "") else fallback


def env_number(name: str, default: float, minimum: float, *, whole: bool = False, unit: str = "") -> float:
    """A numeric `STRATA_<NAME>` setting at least `minimum`, or the default; a wrong value is a one-line
    `ConfigError` naming the variable and what to give (one rule for every numeric process setting)."""
    raw = env_default(name)
    if raw is None:
        return default
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < minimum:  # nan compares false: a wait without end
        kind = "a whole number" if whole else "a number"
        suffix = f" {unit}" if unit else ""
        raise ConfigError(
            f"STRATA_{name.upper()}={raw!r}: give {kind} of at least {minimum:g}{suffix} (default {default:g})"
        )
    return value


DEFAULT_MAX_OPEN_STORES = 64
"""Open namespaces kept per process (STRATA_MAX_OPEN_STORES overrides it). A store of a LoCoMo-sized
conversation mirrors a few MB; 64 of them stay well inside a worker's memory, and a namespace in
active use is the most recently used, so it is not the one closed (memory/registry.py)."""


def max_open_stores() -> int:
    """The bound on open namespaces, from STRATA_MAX_OPEN_STORES or the default."""
    return int(env_number("max_open_stores", DEFAULT_MAX_OPEN_STORES, 1, whole=True))


def folder_is_read_only(folder: Path) -> bool:
    """True when the memory folder exists but this process may not write in it (a read-only mount,
    permissions); creates the folder, private (`make_private_folder`), when it does not exist. An
    unusable path is a `ConfigError`."""
    try:
        make_private_folder(folder)
    except OSError as exc:
        reason = "a file is in the way" if isinstance(exc, FileExistsError | NotADirectoryError) else exc.strerror
        try:
            there = folder.is_dir()
        except OSError:  # a name too long for the file system
            there = False
        if not there:
            raise ConfigError(f"cannot use {shown_value(str(folder), 200)} as the memory folder ({reason}): point "
                              "data_dir (STRATA_DATA_DIR) at a folder") from None
    if not folder.is_dir():
        raise ConfigError(f"the memory folder {shown_value(str(folder), 200)} is a file: point data_dir "
                          "(STRATA_DATA_DIR) at a folder")
    ledger = folder / LEDGER_NAME
    for place, need in ((folder, os.R_OK | os.X_OK), (ledger, os.R_OK)):
        if not os.access(place, need) and (place is folder or os.path.lexists(place)):
            raise ConfigError(f"this user may not read {_owned(place)}: run strata as its owner, or give this user "
                              f"read{' and search (r-x)' if place is folder else ' (r)'} permission on it, and write "
                              "(w) to store in it") from None
    return not os.access(folder, os.W_OK) or (ledger.exists() and not os.access(ledger, os.W_OK))


def _owned(path: Path) -> str:
    """A path with its owner and mode, as a permission error should name them: 'the memory folder /m (owner
    ann, mode 700)'. A folder strata makes is its user's only (0700), so another user meets this."""
    what = "the memory folder" if path.name != LEDGER_NAME else "the memory's ledger"
    try:
        status = path.stat()
    except OSError:
        return f"{what} {path}"
    try:
        import pwd

        owner = pwd.getpwuid(status.st_uid).pw_name
    except (ImportError, KeyError):  # no such account (a copied folder), or no pwd (Windows)
        owner = f"uid {status.st_uid}"
    return f"{what} {path} (owner {owner}, mode {status.st_mode & 0o777:o})"
