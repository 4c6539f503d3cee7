"""Process-wide cache of open stores, so each graph run does not reopen Chroma.

Graph nodes receive only settings in the runtime context (they must stay
serialisable for the server and Studio); this turns settings into live stores.

One process may serve many namespaces (one per user of an agent app). An open
store holds its records and their BM25 index in memory, so only the
`max_open_stores()` most recently used stay open; the least recently used one
is closed when another opens (a store with writes still staged, an ingest in
progress, is never the one closed). Reopening a closed namespace reads it again
from Chroma and the ledger.
"""

from __future__ import annotations

import logging
import os
import threading
import unicodedata
from collections import OrderedDict

from strata.memory import chroma, embeddings, locks, run_gate
from strata.memory.chroma import forget_client, open_clients
from strata.memory.ledger import Ledger, open_ledger
from strata.memory.locks import location_of
from strata.memory.namespaces import check_namespace
from strata.memory.settings import StoreSettings, max_open_stores
from strata.memory.store import ERASING, MemoryStore

LOG = logging.getLogger(__name__)

_LEDGERS: dict[str, Ledger] = {}
_SPELLINGS: dict[str, dict[str, list[str]]] = {}  # ledger -> composed name -> spellings an earlier version stored
_STORES: OrderedDict[tuple[StoreSettings, str], MemoryStore] = OrderedDict()
_LOCK = threading.Lock()
_LEDGERS_LOCK = threading.Lock()


def open_store(settings: StoreSettings, namespace: str) -> MemoryStore:
    """The memory of `namespace` under `settings`, opened once per process (while recently used): the
    namespace's composed spelling, or the one an earlier version stored it under (`stored_name`)."""
    namespace = check_namespace(namespace)
    key = (settings, namespace)
    with _LOCK:
        store = _STORES.get(key)
        if store is not None:
            _STORES.move_to_end(key)
            return store
    stored = stored_name(settings, namespace)  # a ledger read, outside the registry's lock
    with _LOCK:
        store = _STORES.get(key)
        if store is not None:
            _STORES.move_to_end(key)
            return store
        store = _open(settings, stored, key)
    store.recover()  # edits a killed writer left half done (memory/journal.py), outside the registry's lock
    if not store.read_only and store.state(ERASING):
        try:
            with store.writing():  # which finishes an erase stopped midway before anything reads what it erased
                pass
        except BaseException:
            with _LOCK:  # not left open half erased: the next open tries again
                if _STORES.get(key) is store:
                    del _STORES[key]
            raise
    return store


def stored_name(settings: StoreSettings, namespace: str) -> str:
    """The spelling the memory of a (composed) namespace is stored under: the name itself, unless nothing is
    stored under it and an earlier version, which kept a name of letters and digits byte for byte, stored a
    canonically equal one otherwise (Hangul as conjoining jamo, the Angstrom sign: memory/namespaces.py).
    That memory opens, rather than an empty one beside it. The ledger's names are read once per process
    (`_spellings`); a spelling found is used only while it is still stored. Where an earlier version kept
    several spellings of one name apart, the composed one (else the first) opens and the log names the
    others, which stay stored: `MemoryStore(settings, spelling, ledger)` opens one as it is, to export it."""
    ledger = ledger_for(settings)
    others = [name for name in _spellings(ledger).get(namespace, ()) if _stored(ledger, name)]
    if not others:
        return namespace
    composed_too = _stored(ledger, namespace)
    chosen = namespace if composed_too else others[0]
    if composed_too or len(others) > 1:
        LOG.warning("the namespace %r is stored under other spellings too (%s), which an earlier version kept "
                    "apart: %r opens; the others stay stored, and MemoryStore(settings, spelling, ledger) opens "
                    "one as it is, to export it", namespace, ", ".join(map(ascii, others)), chosen)
    return chosen


def _spellings(ledger: Ledger) -> dict[str, list[str]]:
    """The ledger's stored names that are not composed, by their composed spelling (read once per process:
    this version composes every name it writes)."""
    with _LEDGERS_LOCK:
        found = _SPELLINGS.get(ledger.where)
    if found is None:
        found = {}
        for name in ledger.live_namespaces():
            composed = unicodedata.normalize("NFC", name)
            if composed != name:
                found.setdefault(composed, []).append(name)
        with _LEDGERS_LOCK:
            _SPELLINGS[ledger.where] = found
    return found


def _stored(ledger: Ledger, namespace: str) -> bool:
    """Whether the namespace was written since its last drop."""
    seq, reset = ledger.sequence(namespace)
    return seq > reset


def ledger_for(settings: StoreSettings) -> Ledger:
    """The process's one ledger for these settings (a SQLite file, or a PostgreSQL pool)."""
    with _LEDGERS_LOCK:
        ledger_key = settings.ledger_url or str(settings.ledger_path.resolve())
        ledger = _LEDGERS.get(ledger_key)
        if ledger is None:
            ledger = open_ledger(settings.ledger_path, settings.ledger_url)
            _LEDGERS[ledger_key] = ledger
        return ledger


def _open(settings: StoreSettings, namespace: str, key: tuple[StoreSettings, str]) -> MemoryStore:
    """A new store of `namespace`, registered (the caller holds the registry's lock)."""
    store = MemoryStore(settings, namespace, ledger_for(settings))
    _STORES[key] = store
    _close_idle(max_open_stores())
    return store


def open_count() -> int:
    """How many namespaces are open in this process."""
    with _LOCK:
        return len(_STORES)


def _close_idle(bound: int) -> None:
    """Close the least recently used stores beyond `bound`, skipping any with writes still staged."""
    for key in list(_STORES):
        if len(_STORES) <= bound:
            return
        store = _STORES[key]
        if store.has_staged():
            continue
        del _STORES[key]
        store.close()


def set_aside(store: MemoryStore) -> None:
    """Forget a store an erase failed inside (its Chroma server stopped answering, say): its mirrors may
    still hold what the erase had begun to remove. The next call opens the namespace afresh, and opening
    finishes the erase (or fails in one line) before anything reads it."""
    with _LOCK:
        for key in [k for k, open_ in _STORES.items() if open_ is store]:
            del _STORES[key]


def drop_namespace(settings: StoreSettings, namespace: str, records_elsewhere: bool = False) -> None:
    """Delete a namespace, and forget every store of it opened here under other settings
    (another embedder, say), which would still point at the deleted collections."""
    where = location_of(settings)
    open_store(settings, namespace).drop(records_elsewhere)
    with _LOCK:
        for key in [k for k in _STORES if k[1] == namespace and k[0] != settings and location_of(k[0]) == where]:
            del _STORES[key]


def close_all() -> None:
    """Close every store (saving its large mirrors), every ledger, and forget every client (tests,
    CLI exit, restarts)."""
    with _LOCK, _LEDGERS_LOCK:  # the registry's order: stores, then ledgers (see `_open`)
        for store in _STORES.values():
            store.close()
        for ledger in _LEDGERS.values():
            ledger.close()
        # every client (each store opened one), not only those of the stores still open: one whose stores
        # were closed as idle or dropped holds the folder too, which is handed over only once all are gone
        for settings in open_clients():
            forget_client(settings)
        _LEDGERS.clear()
        _STORES.clear()
        _SPELLINGS.clear()


def _forget_after_fork() -> None:
    """A forked child (gunicorn --preload, multiprocessing's fork) inherits the parent's open stores,
    ledgers, Chroma systems, embedders and folder locks, none of which works in it: the child hung at its first
    read. All are forgotten without being closed (the parent still uses them, and a SQLite connection
    closed in the child could end the parent's journal); the child opens the memory afresh."""
    global _LOCK, _LEDGERS_LOCK
    _LOCK, _LEDGERS_LOCK = threading.Lock(), threading.Lock()
    chroma.INHERITED.append((dict(_STORES), dict(_LEDGERS), embeddings.forget_after_fork()))
    _STORES.clear()
    _LEDGERS.clear()
    _SPELLINGS.clear()
    chroma.forget_after_fork()
    locks.forget_after_fork()
    run_gate.forget_after_fork()


os.register_at_fork(after_in_child=_forget_after_fork)
