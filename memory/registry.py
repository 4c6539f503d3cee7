"""Process-wide cache of open stores, so each graph run does not reopen Chroma.

Graph nodes receive only settings in the runtime context (they must stay
serialisable for the server and Studio); this turns settings into live stores.
"""

from __future__ import annotations

import threading

from strata.memory.chroma import forget_client
from strata.memory.ledger import Ledger, open_ledger
from strata.memory.locks import location_of
from strata.memory.namespaces import check_namespace
from strata.memory.settings import StoreSettings
from strata.memory.store import MemoryStore

_LEDGERS: dict[str, Ledger] = {}
_STORES: dict[tuple[StoreSettings, str], MemoryStore] = {}
_LOCK = threading.Lock()


def open_store(settings: StoreSettings, namespace: str) -> MemoryStore:
    """The memory of `namespace` under `settings`, opened once per process."""
    check_namespace(namespace)
    key = (settings, namespace)
    with _LOCK:
        store = _STORES.get(key)
        if store is None:
            ledger_key = settings.ledger_url or str(settings.ledger_path.resolve())
            ledger = _LEDGERS.get(ledger_key)
            if ledger is None:
                ledger = open_ledger(settings.ledger_path, settings.ledger_url)
                _LEDGERS[ledger_key] = ledger
            store = MemoryStore(settings, namespace, ledger)
            _STORES[key] = store
        return store


def drop_namespace(settings: StoreSettings, namespace: str) -> None:
    """Delete a namespace, and forget every store of it opened here under other settings
    (another embedder, say), which would still point at the deleted collections."""
    where = location_of(settings)
    open_store(settings, namespace).drop()
    with _LOCK:
        for key in [k for k in _STORES if k[1] == namespace and k[0] != settings and location_of(k[0]) == where]:
            del _STORES[key]


def close_all() -> None:
    """Close every ledger and forget every client (tests, CLI exit, restarts)."""
    with _LOCK:
        for ledger in _LEDGERS.values():
            ledger.close()
        for settings, _ in _STORES:
            forget_client(settings)
        _LEDGERS.clear()
        _STORES.clear()
