"""Where and with what a namespace's records were written, as its ledger records it, and what to say when the
memory that opens it differs.

The SQLite ledger lives in `data_dir` whichever Chroma holds the records: one data folder opened with and
without `chroma_host` (a STRATA_CHROMA_HOST left set in a shell, or missing from a new one) is one ledger
beside two Chromas. The ledger therefore records, with the namespace's first write, the Chroma location
it was written through (`CHROMA_AT`: `location_of`, the server's host and port or the embedded folder's
path), and an opener that finds the namespace's collections where it looks takes that location on (an
earlier version recorded none; a data folder moved, or a server renamed, moves it). An opener that finds
none of them compares: the records are elsewhere, and the line says where, without advising a drop, which
would delete the ledger's half of an intact memory (memory/store.py `_check_halves`, `drop_refusal`).

The ledger also records the embedder that made the namespace's vectors (`EMBEDDER`: its name and their size),
with the first write. Another embedder's vectors of another size failed deep inside numpy or Chroma; of the
same size they were silently mixed with the stored ones in one vector space (every later search ranked
against vectors it has nothing to do with). A namespace of an earlier version takes on the embedder that
first searches or writes it, if its vectors' size fits the stored ones (memory/store.py `check_vectors`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strata.memory.embeddings import embedder_name
from strata.memory.locks import location_of
from strata.memory.settings import StoreSettings

__all__ = ["CHROMA_AT", "EMBEDDER", "EXPLICIT_DROP", "elsewhere_advice", "embedder_mismatch", "location_of", "shown",
           "unrecorded_guess"]

CHROMA_AT = "chroma_location"
"""Ledger state: the Chroma location the namespace's records are written through (`location_of`)."""
EMBEDDER = "embedder"
"""Ledger state: {"name": the embedder's name (`embedder_name`), "dimensions": its vectors' size}."""
SERVER = "chroma://"  # how `location_of` begins a server's location
EXPLICIT_DROP = "Memory.drop(records_elsewhere=True) (`strata drop --yes --records-elsewhere`)"
"""The explicit form of a drop of a namespace whose records this Chroma does not hold (README, "drop")."""


def shown(location: str) -> str:
    """A location as a user reads it: "the Chroma server at host:port" or "the Chroma folder PATH"."""
    if location.startswith(SERVER):
        return f"the Chroma server at {location.removeprefix(SERVER)}"
    return f"the Chroma folder {location}"


def elsewhere_advice(recorded: str, settings: StoreSettings) -> str:
    """How to open a namespace as it was written, from the settings that opened another location."""
    if recorded.startswith(SERVER):
        host, _, port = recorded.removeprefix(SERVER).rpartition(":")
        return (f"set chroma_host to {host} and chroma_port to {port} (STRATA_CHROMA_HOST, STRATA_CHROMA_PORT, "
                "--chroma-host, --chroma-port)")
    if settings.chroma_host and recorded == str(settings.chroma_path.resolve()):
        return "leave chroma_host unset (STRATA_CHROMA_HOST, --chroma-host) to open the data folder's own Chroma"
    return f"open the data folder {Path(recorded).parent} with no chroma_host"


def unrecorded_guess(settings: StoreSettings, server_mark: bool) -> str:
    """Where the records of a namespace written before locations were recorded may be, when it can be told:
    a ledger mark is given only through a server; a data folder may hold an embedded Chroma of its own."""
    if server_mark and not settings.chroma_host:
        return ("the ledger's mark of the namespace says they were written through a Chroma server: set "
                "chroma_host and chroma_port to it (STRATA_CHROMA_HOST, STRATA_CHROMA_PORT)")
    if settings.chroma_host and (settings.chroma_path / "chroma.sqlite3").is_file():
        return (f"the data folder holds an embedded Chroma ({settings.chroma_path}) that may hold them: leave "
                "chroma_host unset (STRATA_CHROMA_HOST, --chroma-host) to open it")
    return "point the memory at the Chroma that holds them (chroma_host, STRATA_CHROMA_HOST) or restore its folder"


def embedder_mismatch(namespace: str, recorded: dict[str, Any], spec: str, dimensions: int | None) -> str:
    """The line for vectors of another embedder than the one a namespace records (`recorded`; without a name
    when an earlier version stored it and only its vectors' size is known)."""
    name, size = recorded.get("name"), recorded.get("dimensions")
    stored = (f"the embedder {name!r} ({size} dimensions)" if name
              else f"an embedder of {size} dimensions (an earlier version did not record which)")
    opened = f"{embedder_name(spec)!r}" + (f" ({dimensions} dimensions)" if dimensions else "")
    how = f"embedder={name!r}" if name else "the embedder that stored it as embedder"
    return (f"the namespace {namespace!r} was stored with {stored}, and this memory names the embedder {opened}: "
            f"open it with {how} (STRATA_EMBEDDER, --embedder), or move it to the new embedder with an export and "
            "an import into a new namespace, which embeds every record again; nothing was changed")
