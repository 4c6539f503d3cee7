"""Which namespaces exist at one location, so a misspelt one is told apart from a new one.

A read of a name never written creates nothing and reads as an empty memory: right for an app's new user,
wrong for a backup of a misspelt namespace, which wrote an empty export and said it had (`strata export`,
`Memory.export()`), and for `stats`, `history` or a `drop` listing that printed zeros. Those refuse a
namespace that does not exist (`MemoryStore.exists`) in one line naming the namespaces that do.
"""

from __future__ import annotations

from strata.memory.chroma import open_client
from strata.memory.ledger import Ledger
from strata.memory.provenance import CHROMA_AT, location_of
from strata.memory.records import KINDS
from strata.memory.reindex import REBUILT_SUFFIX
from strata.memory.settings import StoreSettings
from strata.memory.store import LEDGER_MARK, MemoryStore

SHOWN = 20  # namespaces a refusal names; the rest are counted


def chroma_namespaces(settings: StoreSettings, ledger: Ledger, only: str | None = None) -> set[str]:
    """The namespaces the memory graph wrote on this Chroma (`only`: that one, if so). On a shared server, only
    those this ledger writes: another app's, with a ledger of its own, is not this memory's to list (opening
    it is refused)."""
    marks: dict[str, set[object]] = {}
    for collection in open_client(settings).list_collections():
        metadata = getattr(collection, "metadata", None) or {}
        if collection.name.endswith(REBUILT_SUFFIX):
            continue  # a rebuild's copy (memory/reindex.py), not a namespace of its own
        name = metadata.get("namespace")
        if metadata.get("kind") in KINDS and isinstance(name, str) and only in (None, name):
            marks.setdefault(name, set()).add(metadata.get("ledger"))
    if settings.chroma_host is None:
        return set(marks)
    held = ({only: ledger.get_state(only, LEDGER_MARK)} if only is not None
            else ledger.states_of(LEDGER_MARK))  # one query, however many namespaces the server holds
    return {name for name, found in marks.items() if not (found - {None}) or found - {None} == {held.get(name)}}


def stored_namespaces(settings: StoreSettings, ledger: Ledger) -> list[str]:
    """The namespaces at this location: those this Chroma holds, and those the ledger wrote since their last
    drop through this Chroma (or through one it did not record: an earlier version's)."""
    here = location_of(settings)
    written = ledger.states_of(CHROMA_AT)
    names = {name for name in ledger.live_namespaces() if written.get(name) in (None, here)}
    return sorted(names | chroma_namespaces(settings, ledger))


def unknown_namespace(store: MemoryStore) -> str:
    """The start of a refusal of a namespace that does not exist: where it was looked for, and what is there."""
    settings = store.settings
    place = (f"the Chroma server at {settings.chroma_host}:{settings.chroma_port}" if settings.chroma_host
             else f"the data folder {settings.data_dir}")
    names = stored_namespaces(settings, store.ledger)
    listed = ", ".join(repr(name) for name in names[:SHOWN]) + (
        f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
    there = f"the namespaces there are {listed}" if names else "it holds no namespace yet"
    return f"there is no namespace {store.namespace!r} in {place} ({there})"
