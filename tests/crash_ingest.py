"""An ingest that kills itself with SIGKILL at a chosen write, run as its own process by
tests/test_crash_safety.py.

Every write of the memory layer is wrapped to report a label before and after
it (`:before`, `:after`): `add:raw` (the write-ahead), `add:batch` (a staged
flush's records), `add:episode` (a session's last episode), `flush`,
`rewrite:<kind>` (an edit's Chroma write), `evolve` (a note evolution),
`refresh:update` / `refresh:supersede` / ... (the Refresher's edits); and ledger
transactions: `ledger:begin`, and `ledger:commit` once the statements are in but
not committed. With a target, the process kills itself at the n-th label
containing it: a deterministic kill point, no timing involved. Without one it
runs to the end and, given a trace file, writes every label it saw.

    python tests/crash_ingest.py DATA_DIR TARGET NTH ingest LOCOMO_FILE SESSIONS [TRACE]
    python tests/crash_ingest.py DATA_DIR TARGET NTH update RECORD_ID TEXT
    python tests/crash_ingest.py DATA_DIR TARGET NTH import EXPORT_FILE

The conversation is the first SESSIONS sessions of the LoCoMo file, then two
short sessions in which Caroline moves, so the Refresher updates a fact.
STRATA_LEDGER_URL chooses the ledger, as everywhere.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from strata.memory.ledger import Ledger
from strata.memory.records import Turn
from strata.memory.store import MemoryStore

from strata.api import Memory
from strata.conversations import LoadedConversation, Session, load_turns
from strata.ingestion import ingest_conversation

NAMESPACE = "conv-26"
MOVES = (  # (session, month, lines): Caroline's home, then her move (a conflict the Refresher settles)
    ("901", 6, ["I live in Boston with my two cats.", "That sounds lovely, Caroline!"]),
    ("902", 7, ["I live in Denver now."]),
)


class KillSwitch:
    """Counts labels as writes happen; kills the process at the n-th one containing the target.

    A target `A>B` kills at the first label containing B after the n-th containing A (such as
    `add:raw:before>ledger:commit`: Chroma holds the raw turns, their transaction is not committed).
    """

    def __init__(self, target: str, nth: int) -> None:
        self.target, _, self.then = target.partition(">")
        self.nth, self.seen, self.armed = nth, 0, False
        self.labels: list[str] = []

    def __call__(self, label: str) -> None:
        self.labels.append(label)
        if self.armed and self.then in label:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.target and self.target in label:
            self.seen += 1
            if self.seen == self.nth:
                if not self.then:
                    os.kill(os.getpid(), signal.SIGKILL)
                self.armed = True


def around(event: KillSwitch, name: Callable[..., str], real: Callable[..., Any]) -> Callable[..., Any]:
    """`real` with a label reported before and after it."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        label = name(*args, **kwargs)
        event(f"{label}:before")
        result = real(*args, **kwargs)
        event(f"{label}:after")
        return result

    return wrapped


def install(event: KillSwitch) -> None:
    """Report every write of the memory layer to `event`."""
    store = MemoryStore
    flushing = threading.local()

    def add_label(_store: MemoryStore, records: Any, *_a: Any, **_k: Any) -> str:
        """`add:batch` for a flush's write, else `add:` and the kinds (`add:raw`, the write-ahead; `add:episode`)."""
        return "add:batch" if getattr(flushing, "on", False) else "add:" + "+".join(sorted({r.kind for r in records}))

    real_flush = store.flush

    def flush(self: MemoryStore) -> int:
        flushing.on = True
        try:
            return real_flush(self)
        finally:
            flushing.on = False

    store.add = around(event, add_label, store.add)  # type: ignore[method-assign]
    store.flush = around(event, lambda *_a, **_k: "flush", flush)  # type: ignore[method-assign]
    store._rewrite = around(event, lambda _s, record, *_a, **_k: f"rewrite:{record.kind}",
                            store._rewrite)  # type: ignore[method-assign]
    store.evolve = around(event, lambda *_a, **_k: "evolve", store.evolve)  # type: ignore[method-assign]
    for edit in ("update", "supersede", "delete", "record_noop"):
        setattr(store, edit, around(event, lambda *_a, _n=edit, **_k: f"refresh:{_n}", getattr(store, edit)))
    real_transaction = Ledger.transaction
    depth = threading.local()

    @contextmanager
    def transaction(self: Ledger) -> Iterator[Any]:
        """An outermost transaction reports `ledger:begin` and `ledger:commit`; one joining it, `ledger:join`."""
        outer = not getattr(depth, "n", 0)
        with real_transaction(self) as session:
            depth.n = getattr(depth, "n", 0) + 1
            try:
                event("ledger:begin" if outer else "ledger:join")
                yield session
                if outer:
                    event("ledger:commit")  # the statements are in, the commit is not
            finally:
                depth.n -= 1

    Ledger.transaction = transaction  # type: ignore[assignment,method-assign]


def conversation(file: Path, sessions: int) -> LoadedConversation:
    loaded = load_turns(file)
    loaded.sessions = loaded.sessions[:sessions]
    for label, month, lines in MOVES:
        when = datetime(2023, month, 1, 10, 0)
        turns = [
            Turn(speaker=("Caroline", "Melanie")[n % 2], listener=("Melanie", "Caroline")[n % 2], text=text,
                 dia_id=f"D{label}:{n + 1}", session=label, time=when)
            for n, text in enumerate(lines)
        ]
        loaded.sessions.append(Session(label=label, time=when, turns=turns))
    return loaded


def main() -> None:
    data_dir, target, nth, command, *args = sys.argv[1:]
    event = KillSwitch(target, int(nth))
    install(event)
    memory = Memory(NAMESPACE, data_dir=data_dir)
    if command == "ingest":
        file, sessions, *trace = args
        ingest_conversation(memory, conversation(Path(file), int(sessions)))
        if trace:
            Path(trace[0]).write_text(json.dumps(event.labels))
    elif command == "update":
        record_id, text = args
        memory.store.update(record_id, text, reason="an edit killed midway", policy="user")
    elif command == "import":
        memory.import_from(Path(args[0]))
    else:
        raise SystemExit(f"unknown command {command!r}: ingest, update or import")


if __name__ == "__main__":
    main()
