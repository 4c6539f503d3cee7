"""A process of its own for the run gate's tests across processes (tests/test_run_gate.py,
tests/test_gate_across_processes.py): JSON commands in on stdin, JSON events out on stdout; `Worker`
starts one and reads it.

    python tests/gate_worker.py DATA_DIR CHROMA_HOST CHROMA_PORT LEDGER_URL

(LEDGER_URL "" for the data folder's SQLite ledger; CHROMA_HOST "" for an embedded folder.) Every command
names its namespace ("namespace"):

- {"op": "take", "run": "a", "kind": "store", "async": false}: "waiting", then "in" once the namespace's gate lets
  run "a" in (with an async one, "ticks": how often the loop ran meanwhile); held until {"op": "let_go",
  "run": "a"} ("out"); {"op": "erase_inside", "run": "a"} takes the gate as an erase from inside run "a"
  ("inside in"), until {"op": "let_go", "run": "a"} ("inside out");
- {"op": "add", "turns": [...]}, {"op": "erase", "ids": [...]}: the `Memory` calls ("added", "erased");
  {"op": "drop"}: `Memory.drop`, in a thread of its own ("dropped" once it returns);
- {"op": "ask_on_thread", "thread": ..., "question": ...}: a question run by the graph with the data
  folder's checkpointer, stopped once its research step is saved ("midway") until {"op": "go"}, then
  "asked";
- {"op": "call", "call": "undo" | "end_session" | "consolidate" | "import" | "put" | "ask_refreshing"}: one writing
  entry point of the namespace ("import" copies the namespace "source" in, "put" is a `StrataStore` put), in a
  thread of its own: "called" (with "call") once it returns, or "error";
- {"op": "write", "run": "w"}: the namespace's per-step write lock (`MemoryStore.writing`) held in a thread of its
  own, "in" once taken, until {"op": "let_go", "run": "w"} ("out");
- a failure is "error" with its one line (and "type").
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from strata.memory.errors import StrataError
from strata.memory.registry import close_all
from strata.memory.run_gate import RunGate

from strata.api import Memory

_OUT = threading.Lock()


def emit(event: str, **fields: Any) -> None:  # ("run" names the run it is about)
    with _OUT:
        print(json.dumps({"event": event, "at": time.time(), **fields}), flush=True)


def failed(error: BaseException, run: str = "") -> None:
    emit("error", error=str(error), type=type(error).__name__, run=run)


def hold(gate: RunGate, kind: str, orders: queue.Queue[str], run: str) -> None:
    """A run holding the gate in this thread until told to let go (or to erase from inside it)."""
    try:
        with gate.holding(kind):  # type: ignore[arg-type]
            emit("in", run=run)
            while orders.get() != "let_go":
                with gate.holding("close"):  # an erase inside the run (an on_turn callback's)
                    emit("inside in", run=run)
                    orders.get()
                emit("inside out", run=run)
    except StrataError as error:
        failed(error, run)
        return
    emit("out", run=run)


def hold_async(gate: RunGate, kind: str, orders: queue.Queue[str], run: str) -> None:
    """A run on an event loop (a server's), counting how often the loop ran while it waited."""
    async def waited() -> None:
        ticks = 0
        waiting = True

        async def ticker() -> None:
            nonlocal ticks
            while waiting:
                ticks += 1
                await asyncio.sleep(0.01)

        counting = asyncio.create_task(ticker())
        try:
            async with gate.holding_async(kind):  # type: ignore[arg-type]
                waiting = False
                await counting
                emit("in", ticks=ticks, run=run)
                await asyncio.to_thread(orders.get)
        except StrataError as error:
            failed(error, run)
            return
        finally:
            waiting = False
        emit("out", run=run)

    asyncio.run(waited())


def write(memory: Memory, orders: queue.Queue[str], run: str) -> None:
    """A step of a writer: the namespace's write lock, held until told to let go."""
    try:
        with memory.store.writing():
            emit("in", run=run)
            orders.get()
    except StrataError as error:
        failed(error, run)
        return
    emit("out", run=run)


def call(memory: Memory, settings: dict[str, Any], command: dict[str, Any]) -> None:
    """One writing entry point of the namespace, other than a run of the graph."""
    from strata.langgraph_store import StrataStore

    name = command["call"]
    try:
        if name == "import":
            memory.import_from(Memory(command["source"], **settings).export())
        elif name == "put":
            StrataStore.from_memory(memory).put(tuple(memory.namespace.split("/")), "note", {"text": "tea at four"})
        elif name == "ask_refreshing":
            memory.ask("Where does Ann live?", refresh=True)
        else:
            getattr(memory, name)()
    except StrataError as error:
        failed(error, name)
        return
    emit("called", call=name)


def drop(memory: Memory) -> None:
    try:
        memory.drop()
    except StrataError as error:
        failed(error, "drop")
        return
    emit("dropped")


def ask_on_thread(memory: Memory, data_dir: str, command: dict[str, Any], go: threading.Event) -> None:
    from strata.graph import build_graph

    from strata.checkpoint import sqlite_checkpointer

    context = memory.context("ask")
    try:
        with sqlite_checkpointer(data_dir) as saver:
            runs = build_graph(checkpointer=saver).stream(
                {"question": command["question"]}, {"configurable": {"thread_id": command["thread"]}},
                context=context)
            for update in runs:
                if "research" in update and not go.is_set():
                    emit("midway")
                    go.wait(600)
    except StrataError as error:
        failed(error)
        return
    emit("asked")


def main() -> None:
    data_dir, host, port, ledger_url = sys.argv[1:5]
    settings: dict[str, Any] = {"data_dir": data_dir}
    if host:
        settings |= {"chroma_host": host, "chroma_port": int(port)}
    if ledger_url:
        settings["ledger_url"] = ledger_url
    memories: dict[str, Memory] = {}
    runs: dict[str, queue.Queue[str]] = {}
    go = threading.Event()
    emit("ready")
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        try:
            name = command.get("namespace", "")
            memory = memories.get(name) or memories.setdefault(name, Memory(name or None, **settings))
            if op == "take":
                run = command["run"]
                runs[run] = queue.Queue()
                emit("waiting", run=run)
                body = hold_async if command.get("async") else hold
                threading.Thread(target=body, args=(memory.gate(), command["kind"], runs[run], run)).start()
            elif op == "write":
                runs[command["run"]] = queue.Queue()
                threading.Thread(target=write, args=(memory, runs[command["run"]], command["run"])).start()
            elif op == "call":
                threading.Thread(target=call, args=(memory, settings, command)).start()
            elif op in ("erase_inside", "let_go"):
                runs[command["run"]].put(op)
            elif op == "add":
                emit("added", stored=len(memory.add(command["turns"]).stored_ids))
            elif op == "drop":
                threading.Thread(target=drop, args=(memory,)).start()
            elif op == "erase":
                emit("erased", threads=memory.erase(command["ids"]).threads)
            elif op == "ask_on_thread":
                go.clear()
                threading.Thread(target=ask_on_thread, args=(memory, data_dir, command, go)).start()
            elif op == "go":
                go.set()
            else:
                raise ValueError(f"unknown op {op!r}")
        except StrataError as error:
            failed(error)
    close_all()


class Worker:
    """This script in a process of its own, read line by line by a thread (so a wait has a bound)."""

    def __init__(self, data_dir: Path, env: Mapping[str, str], chroma_host: str = "", chroma_port: int = 0,
                 ledger_url: str = "") -> None:
        self.log = data_dir.parent / f"worker-{time.monotonic_ns()}.log"
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        path = os.pathsep.join(p for p in (str(Path(__file__).parents[1]), env.get("PYTHONPATH", "")) if p)
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, __file__, str(data_dir), chroma_host, str(chroma_port), ledger_url],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                env={**env, "PYTHONPATH": path},
            )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.expect("ready", timeout=120)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put("")

    def send(self, op: str, **args: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()

    def expect(self, event: str, run: str | None = None, timeout: float = 60) -> dict[str, Any]:
        """The next event, which must be `event` (about `run`)."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            line = None
        said = json.loads(line) if line else None
        if said is None or said["event"] != event or (run is not None and said.get("run") != run):
            got = "nothing in time" if line is None else "the end of its output" if not line else said
            raise AssertionError(f"expected {event!r}, got {got}\n{self.log.read_text()[-3000:]}")
        return dict(said)

    def quiet(self, seconds: float) -> None:
        """Nothing said for `seconds` (a run that waits)."""
        try:
            line = self._lines.get(timeout=seconds)
        except queue.Empty:
            return
        raise AssertionError(f"expected a wait, got {line.strip() or 'the end of its output'}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def close(self) -> None:
        from servers import close_child  # (the test side only: the worker's own process never needs it)

        close_child(self.process)


if __name__ == "__main__":
    main()
