"""A direct write and a flush of the same namespace in two threads, at the interleaving that once
hung them, run as its own process by tests/test_durability.py (a deadlock there would hang every
test after it; a process is stopped by a timeout instead).

A flush holds the store's lock and then opens ledger transactions. A direct write (the slow
path's summaries, an edit) opened its ledger transaction first and then took the store's lock.
Here the write waits inside the ledger's step until the flush holds the store's lock. The process
prints the stored fact ids and exits 0 when both finish, exits 1 when they wait on each other.

    python tests/lock_order.py DATA_DIR
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from strata.memory.ledger import Ledger
from strata.memory.records import Record
from strata.memory.registry import open_store
from strata.memory.settings import StoreSettings
from strata.memory.store import MemoryStore

NAMESPACE = "caroline"


def fact(n: int) -> Record:
    return Record(id=f"fact:D1:{n}:0", kind="fact", text=f"Caroline lives in town {n}.", namespace=NAMESPACE,
                  dialogue_id=f"D1:{n}", speaker="Caroline", source_ids=[f"D1:{n}"])


def main(data_dir: str) -> int:
    store = open_store(StoreSettings(data_dir=data_dir), NAMESPACE)
    in_ledger, flushing = threading.Event(), threading.Event()
    real_log, real_resolve = Ledger.log_changes, MemoryStore._resolve

    def log_changes(self: Ledger, *args: object, **kwargs: object) -> object:
        if threading.current_thread().name == "writer":
            in_ledger.set()
            flushing.wait(timeout=2)  # with one lock order the flush cannot start meanwhile: go on
        return real_log(self, *args, **kwargs)  # type: ignore[arg-type]

    def resolve(self: MemoryStore, *args: object, **kwargs: object) -> object:
        flushing.set()  # flush calls it holding the store's lock, before its ledger transactions
        return real_resolve(self, *args, **kwargs)  # type: ignore[arg-type]

    Ledger.log_changes = log_changes  # type: ignore[method-assign]
    MemoryStore._resolve = resolve  # type: ignore[method-assign]
    store.stage([fact(1)])
    failures: list[BaseException] = []

    def guarded(step: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                step()
            except BaseException as exc:  # reported below: a thread's exception would otherwise vanish
                failures.append(exc)
        return run

    def flush_once_the_writer_is_in_the_ledger() -> None:
        in_ledger.wait(timeout=10)
        store.flush()

    threads = [threading.Thread(target=guarded(lambda: store.add([fact(2)])), name="writer", daemon=True),
               threading.Thread(target=guarded(flush_once_the_writer_is_in_the_ledger), name="flush", daemon=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    if any(thread.is_alive() for thread in threads):
        print("the write and the flush wait on each other", flush=True)
        return 1
    if failures:
        print(f"failed: {failures!r}", flush=True)
        return 1
    print(" ".join(sorted(r.id for r in store.all("fact"))), flush=True)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1])
    sys.stdout.flush()
    import os

    os._exit(code)  # daemon threads may hold the locks: leave without closing the stores
