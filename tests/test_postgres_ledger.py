"""Replicas on one PostgreSQL ledger and one Chroma server, both started for real by the tests.

- the same ledger operations give the same results on SQLite and on PostgreSQL;
- replicas starting together migrate the schema once;
- three replica processes, each with its own local folder: an ingest on one, a
  question on another, an update and an undo on the third, each seen by the
  others at their next read;
- four processes writing 250 turns each into one namespace at once: every turn
  stored once and derived, the temporal chain and derived-from links complete;
- a replica SIGKILLed in the middle of an ingest: another finishes it, and the
  result equals an uninterrupted run (raw turns, facts, derived-from links);
- PostgreSQL stopped and restarted under load: one clear line while it is down,
  then the same process carries on and nothing is missing;
- the LangGraph store's items, put on one replica, read, searched, overwritten and
  deleted on the others.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from conftest import all_at_once
from servers import LOOPBACK, REPO, PostgresServer, ServerProcess, close_child
from strata.memory import snapshots, store_items
from strata.memory.errors import ConfigError, StrataError, UnavailableError
from strata.memory.ledger import EVERY_NAMESPACE, Ledger, open_ledger
from strata.memory.ledger_postgres import _WRITER_SPACE, CONNECT_TIMEOUT, PostgresBackend
from strata.memory.ledger_sql import SCHEMA_VERSION, lock_key
from strata.memory.records import Action, Change, Link, LinkType, Status, chronological_key
from strata.memory.registry import close_all

from strata.api import Memory
from strata.langgraph_store import StrataStore

pytestmark = pytest.mark.slow
QUESTION = "What career is Caroline keen on?"
ANSWER_TURN = "D1:11"


@pytest.fixture
def ledger_url(postgres: PostgresServer) -> str:
    """A fresh database per test."""
    return postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")


def conversation(locomo_dir: Path, name: str, count: int, offset: int = 0) -> list[dict[str, Any]]:
    """The first `count` turns of a LoCoMo conversation as JSON turns; `offset` renumbers their
    sessions (D1:3 -> D<offset+1>:3) so several conversations can share one namespace."""
    from strata.conversations import load_turns

    turns = []
    for turn in islice(load_turns(locomo_dir / name).turns(), count):
        data = turn.model_dump(mode="json", exclude_none=True)
        if offset:
            session, number = (turn.dia_id or "D0:0")[1:].split(":")
            data["dia_id"] = f"D{int(session) + offset}:{number}"
            data["session"] = str(int(session) + offset)
        turns.append(data)
    return turns


class Replica:
    """tests/replica.py in its own process: JSON commands in, JSON replies out."""

    def __init__(self, namespace: str, folder: Path, env: dict[str, str]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.log = folder / "replica.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(REPO / "tests" / "replica.py"), namespace, str(folder)], cwd=REPO, env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
            )
        assert self._reply(180) == {"ready": True}

    def send(self, op: str, **args: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()

    def _reply(self, timeout: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.process.kill()
            raise AssertionError(f"replica gave no reply in {timeout:.0f}s:\n{self.log.read_text()[-3000:]}")
        return dict(json.loads(line))

    def result(self, timeout: float = 600) -> Any:
        reply = self._reply(timeout)
        assert "error" not in reply, reply
        return reply["ok"]

    def result_or_error(self, timeout: float = 600) -> str:
        """The next reply as text: a failed call's one-line error, or the result."""
        reply = self._reply(timeout)
        return str(reply.get("error", reply.get("ok")))

    def call(self, op: str, timeout: float = 600, **args: Any) -> Any:
        self.send(op, **args)
        return self.result(timeout)

    def close(self) -> None:
        close_child(self.process)


@pytest.fixture
def replica_env(offline_env: dict[str, str], chroma: ServerProcess, ledger_url: str) -> dict[str, str]:
    return {**offline_env, "PYTHONPATH": str(REPO), "STRATA_CHROMA_HOST": LOOPBACK,
            "STRATA_CHROMA_PORT": str(chroma.port), "STRATA_LEDGER_URL": ledger_url}


@pytest.fixture
def replicas(tmp_path: Path, replica_env: dict[str, str]) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.close()


def exercise(ledger: Ledger) -> dict[str, Any]:
    """Every ledger operation once, returning what a caller would read back."""
    when = datetime(2023, 5, 8, 13, 56)
    ledger.add_links([Link(namespace="ns", src="raw:D1:2", dst="raw:D1:1", type=LinkType.TEMPORAL),
                      Link(namespace="ns", src="fact:D1:2:0", dst="raw:D1:2", type=LinkType.DERIVED_FROM)])
    ledger.add_links([Link(namespace="ns", src="raw:D1:2", dst="raw:D1:1", type=LinkType.TEMPORAL, weight=0.25)])
    first = ledger.record_change(Change(
        namespace="ns", record_id="fact:D1:2:0", kind="fact", action=Action.UPDATE, old_text="Boston",
        new_text="Denver", new_status=Status.ACTIVE, reason="moved", policy="offline", time=when,
        old_fields={"value": "Boston"}, new_fields={"value": "Denver"}))
    ledger.record_change(Change(
        namespace="ns", record_id="persona:x", kind="persona", action=Action.DELETE, old_text="t", new_text="t",
        new_status=Status.DELETED, reason="with the fact", policy="offline", time=when, follows=first))
    ledger.mark_undone("ns", first)
    for n, (who, text) in enumerate([("Ann", "one"), ("Bo", "two"), ("Ann", "three"), ("Ann", "four"), ("Bo", "five")]):
        ledger.push_working("ns", who, f"D1:{n}", text, when if n != 4 else None, 2)
    ledger.push_working("ns", "Ann", "D1:3", "four again", when, 2)  # already in the window
    ledger.set_state("ns", "open_episode", {"turn_ids": ["D1:1", "D1:2"], "facts": ["é ü 中文"]})
    ledger.set_state("ns", "open_episode", {"turn_ids": ["D1:3"]})
    ledger.log_changes("ns", ["raw:D1:1", "raw:D1:2"])
    ledger.log_changes("ns", ["raw:D1:2"])
    ledger.set_state("gone", "k", 1)
    ledger.log_changes("gone", ["raw:x"])
    claimed = [ledger.claim_state("ns", "mark", "first"), ledger.claim_state("ns", "mark", "second"),
               ledger.claim_state("gone", "mark", "x")]
    ledger.set_state("ns", "flag", {"ids": []})
    ledger.drop_namespace("gone")
    ledger.bump(EVERY_NAMESPACE, "count", 2)
    ledger.set_state("ns", "erased", 2)
    return {
        "claimed": claimed,
        "freshness": [ledger.freshness("ns", "flag", "count"), ledger.freshness("ns", "other", "count"),
                      ledger.freshness("gone", "mark", "count"), ledger.freshness("never", "flag", "nothing")],
        "outdating": [ledger.outdating("ns", "erased", "flag"), ledger.outdating("gone", "erased", "flag"),
                      ledger.outdating("never", "erased", "flag")],
        "history": [c.model_dump(mode="json") for c in ledger.history("ns")],
        "followers": [c.record_id for c in ledger.followers("ns", first)],
        "change": ledger.get_change("ns", first).model_dump(mode="json"),  # type: ignore[union-attr]
        "neighbours": sorted(lk.model_dump_json() for lk in ledger.neighbours("ns", ["raw:D1:1"])),
        "links": ledger.count_links("ns"),
        "working": ledger.working("ns"),
        "state": ledger.get_state("ns", "open_episode"),
        "missing": ledger.get_state("ns", "nothing", "default"),
        "sequence": [ledger.sequence("ns"), ledger.sequence("gone")],
        "changed": [sorted(ledger.changed_since("ns", 0)), ledger.changed_since("ns", 1),
                    ledger.changed_since("gone", 0)],
        "history_count": ledger.count_history("ns"),
    }


def test_sqlite_and_postgres_ledgers_answer_alike(tmp_path: Path, ledger_url: str) -> None:
    on_sqlite, on_postgres = open_ledger(tmp_path / "ledger.sqlite3"), open_ledger(tmp_path, ledger_url)
    try:
        got = exercise(on_postgres)
        assert got == exercise(on_sqlite)
        assert got["working"][0]["text"] == "five" and got["links"] == {"temporal": 1, "derived_from": 1}
    finally:
        on_sqlite.close()
        on_postgres.close()


def test_replicas_of_one_ledger_claiming_a_namespace_at_once_agree_on_its_mark(ledger_url: str) -> None:
    """Each replica claims the namespace's mark before it creates a collection on the Chroma server; racing on
    a new namespace, every one must read back the same mark (the first committed), or they refuse each other."""
    ledgers = [open_ledger(Path("unused"), ledger_url) for _ in range(6)]
    handed = iter(ledgers)
    lock = threading.Lock()

    def claim() -> object:
        with lock:
            ledger = next(handed)
        return ledger.claim_state("fresh", "ledger_mark", uuid.uuid4().hex)

    try:
        assert len(set(all_at_once(claim, len(ledgers)))) == 1
    finally:
        for ledger in ledgers:
            ledger.close()


def test_replicas_starting_together_migrate_once(ledger_url: str) -> None:
    opened = all_at_once(lambda: PostgresBackend(ledger_url), 6)
    assert len(opened) == 6
    with opened[0].read() as session:
        assert session.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    for backend in opened:
        backend.close()


def test_a_writer_of_one_namespace_writing_another_holds_both_locks_across_processes(ledger_url: str) -> None:
    """A writer's block of namespace a that writes namespace b inside it (an app's callback) holds b's
    lock too: it once went on without it, and another process could write b beside it."""
    import psycopg

    def free(conn: Any, namespace: str) -> bool:
        key = (_WRITER_SPACE, lock_key(namespace))
        got = bool(conn.execute("SELECT pg_try_advisory_lock(%s, %s)", key).fetchone()[0])
        if got:
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", key)
        return got

    backend = PostgresBackend(ledger_url)
    try:
        with psycopg.connect(ledger_url, autocommit=True) as other:  # another process's view of the locks
            with backend.namespace_lock("a"):
                with backend.namespace_lock("b"), backend.namespace_lock("b"):
                    assert not free(other, "a") and not free(other, "b")
                assert not free(other, "a") and free(other, "b")
            assert free(other, "a") and free(other, "b")
    finally:
        backend.close()


def test_three_replicas_see_each_others_ingest_update_and_undo(
    locomo_dir: Path, tmp_path: Path, replica_env: dict[str, str], replicas: list[Replica]
) -> None:
    writer, reader, editor = (Replica("shared", tmp_path / name, replica_env) for name in ("a", "b", "c"))
    replicas += [writer, reader, editor]
    for replica in (reader, editor):  # warm mirrors, loaded before anything is stored
        assert ANSWER_TURN not in replica.call("ask", question=QUESTION)["evidence"]
    assert writer.call("add", turns=conversation(locomo_dir, "conv-26.json", 30))["stored"] >= 30
    assert ANSWER_TURN in reader.call("ask", question=QUESTION)["evidence"]

    before = editor.call("get", id="raw:D1:3")
    assert before and "support group" in before["text"]
    edited = "I went to a zeppelin museum yesterday and it was so powerful."
    earlier = reader.call("history", id="raw:D1:3")  # the note's evolutions, written while ingesting
    editor.call("update", id="raw:D1:3", text=edited)
    for replica in (writer, reader):
        assert replica.call("get", id="raw:D1:3")["text"] == edited
        assert replica.call("lexical", kind="raw", query="zeppelin museum")[:1] == ["raw:D1:3"]
    editor.call("undo")
    for replica in (writer, reader, editor):
        assert replica.call("get", id="raw:D1:3") == before
        assert "raw:D1:3" not in replica.call("lexical", kind="raw", query="zeppelin museum")
    # the update and its undo, in the shared history, after what ingest already recorded
    assert len(reader.call("history", id="raw:D1:3")) == len(earlier) + 2
    for replica in (writer, reader, editor):
        assert not (tmp_path / replica.log.parent.name / "ledger.sqlite3").exists()  # no local ledger


def test_langgraph_store_items_put_on_one_replica_are_read_searched_and_deleted_on_the_others(
    tmp_path: Path, replica_env: dict[str, str], replicas: list[Replica]
) -> None:
    """The LangGraph store's item versions live in the shared ledger, so replicas agree on them."""
    first, second, third = (Replica("users/ann", tmp_path / name, replica_env) for name in ("a", "b", "c"))
    replicas += [first, second, third]
    where = ["users", "ann"]
    value = {"text": "Ann prefers a window seat on long flights", "tier": "gold"}
    first.call("put_item", namespace=where, key="seat", value=value)
    diet = "Ann is vegetarian and avoids mushrooms"
    first.call("put_item", namespace=where, key="diet", value={"text": diet})
    assert second.call("get_item", namespace=where, key="seat") == value
    assert third.call("search_item", namespace=where, query="Ann's seat on long flights")[0] == "seat"
    moved = {"text": "Ann now prefers an aisle seat", "tier": "gold"}
    third.call("put_item", namespace=where, key="seat", value=moved)
    assert first.call("get_item", namespace=where, key="seat") == moved
    second.call("delete_item", namespace=where, key="seat")
    for replica in (first, second, third):
        assert replica.call("get_item", namespace=where, key="seat") is None
        assert replica.call("get_item", namespace=where, key="diet") == {"text": diet}
    for replica in (first, second, third):
        assert not (tmp_path / replica.log.parent.name / "ledger.sqlite3").exists()  # no local ledger


@pytest.mark.timeout(1800)
def test_four_processes_writing_250_turns_each_into_one_namespace(
    locomo_dir: Path, tmp_path: Path, replica_env: dict[str, str], replicas: list[Replica], ledger_url: str
) -> None:
    names = ["conv-26.json", "conv-30.json", "conv-41.json", "conv-42.json"]
    batches = [conversation(locomo_dir, name, 250, offset=100 * (n + 1)) for n, name in enumerate(names)]
    store = added_together("crowd", batches, tmp_path, replica_env, replicas, ledger_url, timeout=1700)
    raw = store.all("raw", include_inactive=True)
    expected = {f"raw:{t['dia_id']}" for batch in batches for t in batch}
    assert len(raw) == len(expected) == 1000 and {r.id for r in raw} == expected
    assert store.ledger.get_state("crowd", "pending_derive") == []
    with store.ledger.transaction() as session:
        temporal = session.execute(
            "SELECT src, dst FROM links WHERE namespace = 'crowd' AND type = 'temporal'").fetchall()
        derived = {src for (src,) in session.execute(
            "SELECT src FROM links WHERE namespace = 'crowd' AND type = 'derived_from' AND src LIKE 'fact:%'")}
    # one chain through every turn in the order they were said (the four conversations' dates interleave), each
    # link from a turn said earlier; a turn derived before the turns said just before it also keeps the link it
    # got from the latest turn derived then, which skips them but still runs forward
    said = store.timeline()
    order = {r.id: chronological_key(r) for r in said}
    assert all(order[src] < order[dst] for src, dst in temporal)
    assert set(itertools.pairwise(r.id for r in said)) <= set(temporal) and len(said) == 1000
    facts = {r.id for r in store.all("fact", include_inactive=True)}
    assert facts and facts == derived  # every fact linked to its turn
    derived_turns = {f"raw:{fid.split(':', 1)[1].rsplit(':', 1)[0]}" for fid in facts}
    assert len(derived_turns) > 500  # facts came from turns of all four writers
    assert {tid.split(":")[1][:2] for tid in derived_turns} == {"D1", "D2", "D3", "D4"}


def test_an_input_sent_twice_at_once_beside_another_is_derived_once(
    locomo_dir: Path, tmp_path: Path, replica_env: dict[str, str], replicas: list[Replica], ledger_url: str
) -> None:
    """A client's retry while its first run still works, beside another writer: both runs of the input
    take each turn in, and research and judging run without the lock, so both derived it (two temporal
    successors for a turn, its facts twice). The derive checks first that the turn still waits for it."""
    first = conversation(locomo_dir, "conv-26.json", 40)
    other = conversation(locomo_dir, "conv-30.json", 30, offset=100)
    store = added_together("retried", [first, first, other], tmp_path, replica_env, replicas, ledger_url, timeout=900)
    assert len(store.all("raw")) == 70 and store.ledger.get_state("retried", "pending_derive") == []
    with store.ledger.transaction() as session:
        temporal = session.execute(
            "SELECT src, dst FROM links WHERE namespace = 'retried' AND type = 'temporal'").fetchall()
    assert len(temporal) == 69 and len({src for src, _ in temporal}) == 69  # one chain: no turn has two successors
    facts = store.all("fact", include_inactive=True)
    texts = [(f.dialogue_id, f.text) for f in facts]
    assert facts and len(texts) == len(set(texts))  # no turn's facts twice


def added_together(
    namespace: str, batches: list[list[dict[str, Any]]], tmp_path: Path, replica_env: dict[str, str],
    replicas: list[Replica], ledger_url: str, timeout: float,
) -> Any:
    """Each batch sent to a replica process of its own, all at once; the namespace's store once all are done."""
    replicas += [Replica(namespace, tmp_path / f"w{n}", replica_env) for n in range(len(batches))]
    for replica, batch in zip(replicas, batches, strict=True):
        replica.send("add", turns=batch)
    for replica in replicas:
        replica.result(timeout=timeout)
    return Memory(namespace, data_dir=tmp_path / "check", chroma_host=LOOPBACK,
                  chroma_port=int(replica_env["STRATA_CHROMA_PORT"]), ledger_url=ledger_url).store


def pending_count(url: str, namespace: str) -> int | None:
    import psycopg

    with psycopg.connect(url) as conn:
        try:
            row = conn.execute("SELECT value FROM state WHERE namespace = %s AND key = 'pending_derive'",
                               (namespace,)).fetchone()
        except psycopg.errors.UndefinedTable:  # the replica has not opened its ledger yet
            return None
    return len(json.loads(row[0])) if row else None


def outcome(store: Any) -> dict[str, Any]:
    with store.ledger.transaction() as session:
        derived = session.execute(
            "SELECT src, dst FROM links WHERE namespace = ? AND type = 'derived_from' AND src NOT LIKE 'episode:%'",
            (store.namespace,)).fetchall()
    return {
        "raw": sorted((r.id, r.text) for r in store.all("raw", include_inactive=True)),
        "facts": sorted((r.id, r.text) for r in store.all("fact", include_inactive=True)),
        "derived_from": sorted(tuple(row) for row in derived),
        "pending": store.ledger.get_state(store.namespace, "pending_derive"),
    }


def test_a_replica_killed_mid_ingest_is_finished_by_another(
    locomo_dir: Path, tmp_path: Path, replica_env: dict[str, str], replicas: list[Replica], ledger_url: str
) -> None:
    turns = conversation(locomo_dir, "conv-30.json", 60)
    doomed = Replica("killed", tmp_path / "doomed", replica_env)
    replicas.append(doomed)
    doomed.send("add", turns=turns)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # SIGKILL once the raw turns are written and some are derived
        left = pending_count(ledger_url, "killed")
        if left is not None and 0 < left <= len(turns) - 10:
            break
        time.sleep(0.05)
    os.kill(doomed.process.pid, signal.SIGKILL)
    doomed.process.wait(timeout=30)
    assert 0 < (pending_count(ledger_url, "killed") or 0) < len(turns)  # killed in the middle

    finisher = Replica("killed", tmp_path / "finisher", replica_env)
    reference = Replica("reference", tmp_path / "reference", replica_env)
    replicas += [finisher, reference]
    finisher.call("add", turns=turns)
    reference.call("add", turns=turns)
    port = int(replica_env["STRATA_CHROMA_PORT"])
    check = {ns: Memory(ns, data_dir=tmp_path / "check", chroma_host=LOOPBACK, chroma_port=port,
                        ledger_url=ledger_url).store for ns in ("killed", "reference")}
    finished, uninterrupted = outcome(check["killed"]), outcome(check["reference"])
    assert finished["pending"] == [] and len(finished["raw"]) == len(turns)
    assert finished == uninterrupted


def test_postgres_restarted_under_load(
    locomo_dir: Path, tmp_path: Path, postgres: PostgresServer, chroma: ServerProcess, ledger_url: str,
    replica_env: dict[str, str], replicas: list[Replica],
) -> None:
    turns = conversation(locomo_dir, "conv-26.json", 40)
    bystander = Replica("restart", tmp_path / "bystander", replica_env)
    replicas.append(bystander)
    memory = Memory("restart", data_dir=tmp_path / "replica", chroma_host=LOOPBACK, chroma_port=chroma.port,
                    ledger_url=ledger_url)
    memory.add(turns[:10])
    errors: list[Exception] = []
    answered: list[float] = []
    stop = threading.Event()

    def asker() -> None:
        while not stop.is_set():
            try:
                memory.ask(QUESTION)
                answered.append(time.monotonic())
            except Exception as error:  # every failure is checked below
                errors.append(error)

    def writer() -> None:
        for turn in turns[10:]:
            while not stop.is_set():
                try:
                    memory.add([turn])
                    break
                except Exception as error:  # every failure is checked below
                    errors.append(error)
                    time.sleep(0.5)

    threads = [threading.Thread(target=asker), threading.Thread(target=writer)]
    for thread in threads:
        thread.start()
    try:
        while len(answered) < 2:
            time.sleep(0.1)
        assert bystander.call("get", id="raw:D1:1") is not None  # its connections opened
        postgres.stop()
        time.sleep(CONNECT_TIMEOUT + 3)  # long enough that a caller waiting for a connection gives up
        assert errors, "no call failed while the ledger database was down"
        # a process that sets up no logging (the CLI, a script) says the outage in one line: the pool's
        # own warnings (each lost connection, each failed reconnect) were printed beside it
        bystander.send("get", id="raw:D1:1")
        assert "PostgreSQL ledger" in bystander.result_or_error(60)
        postgres.start(60)
        restarted = time.monotonic()
        threads[1].join(timeout=600)
        deadline = time.monotonic() + 120
        while not [t for t in answered if t > restarted] and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    assert [t for t in answered if t > restarted], "no question was answered after the restart"
    for error in errors:
        assert isinstance(error, UnavailableError), repr(error)
        assert "\n" not in str(error) and "PostgreSQL ledger" in str(error)
    store = memory.store
    assert {r.id for r in store.all("raw")} == {f"raw:{t['dia_id']}" for t in turns}
    assert store.ledger.get_state("restart", "pending_derive") == []
    assert not [line for line in bystander.log.read_text().splitlines() if "connect" in line], \
        bystander.log.read_text()[-2000:]
    assert ANSWER_TURN in memory.ask(QUESTION).evidence_ids()


def test_an_erasure_on_one_replica_is_gone_for_the_others(
    tmp_path: Path, ledger_url: str, chroma: ServerProcess, locomo_dir: Path
) -> None:
    def replica(name: str) -> Memory:
        return Memory("erase-shared", data_dir=tmp_path / name, chroma_host=LOOPBACK, chroma_port=chroma.port,
                      ledger_url=ledger_url)

    first, second = replica("one"), replica("two")
    first.add(conversation(locomo_dir, "conv-26.json", 20))
    assert second.get(["raw:D1:3"]) and [r for r in second.store.all("fact") if "D1:3" in r.source_ids]
    items = [StrataStore(data_dir=tmp_path / name, chroma_host=LOOPBACK, chroma_port=chroma.port,
                         ledger_url=ledger_url) for name in ("one", "two")]
    items[0].put(("erase-shared",), "locker", {"text": "Caroline's locker code is 4471."})
    items[0].put(("erase-shared",), "locker", {"text": "Caroline's locker code is 5582."})
    assert items[1].get(("erase-shared",), "locker") is not None

    report = first.erase(["raw:D1:3", "raw:item:locker"])

    assert "raw:D1:3" in report.erased and report.history >= 1 and report.links >= 1 and report.items == 2
    assert [store.get(("erase-shared",), "locker") for store in items] == [None, None]
    assert store_items.versions(second.store.ledger, "erase-shared", "locker") == []
    assert not report.ledger_compacted and report.in_chroma_log == 0  # the servers compact their own files
    for memory in (first, second):
        assert memory.get(report.erased) == []
        assert not [c for c in memory.history(limit=100_000) if c.record_id in report.erased]
        assert not memory.store.edges(report.erased)
        assert not [r for r in memory.store.all("fact") if "D1:3" in r.source_ids]


def test_an_erasure_on_one_replica_leaves_no_saved_mirror_of_another_holding_it(
    tmp_path: Path, ledger_url: str, chroma: ServerProcess, locomo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by audit: each replica saves its mirrors in its own folder, which an erase on another replica never
    reached: the erased words stayed there until that replica read the namespace and then closed it."""
    monkeypatch.setattr(snapshots, "MIN_RECORDS", 1)  # every mirror is saved

    def replica(name: str, namespace: str = "erase-mirrors") -> Memory:
        return Memory(namespace, data_dir=tmp_path / name, chroma_host=LOOPBACK, chroma_port=chroma.port,
                      ledger_url=ledger_url)

    first, second = replica("one"), replica("two")
    first.add(conversation(locomo_dir, "conv-26.json", 12))
    erased = second.get(["raw:D1:3"])[0].text
    second.store.close()  # saved in its own folder
    assert second.get(["raw:D1:3"]) and holding(tmp_path / "two", erased)

    first.erase(["raw:D1:3"])

    assert holding(tmp_path / "one", erased) == []
    replica("two", "someone-else").retrieve("Who paints?")  # the other's next read, of any namespace
    assert holding(tmp_path / "two", erased) == []
    assert second.get(["raw:D1:3"]) == [] and len(second.store.all("raw")) == 11


def holding(folder: Path, text: str) -> list[str]:
    """The saved mirror files in `folder` whose bytes hold `text` (as JSON writes it)."""
    written = json.dumps(text, ensure_ascii=False)[1:-1].encode()
    return [path.name for path in (folder / "mirrors").glob("*") if written in path.read_bytes()]


def test_a_namespace_dropped_on_one_replica_is_usable_at_once_on_the_others(
    locomo_dir: Path, tmp_path: Path, replica_env: dict[str, str], replicas: list[Replica]
) -> None:
    """The other replicas kept their handles on the dropped collections: each later call failed with
    Chroma's NotFoundError, even once the namespace was written again, until the replica restarted."""
    dropper, other = (Replica("drop-shared", tmp_path / name, replica_env) for name in ("a", "b"))
    replicas += [dropper, other]
    turns = conversation(locomo_dir, "conv-26.json", 10)
    assert dropper.call("add", turns=turns[:5])["stored"] >= 5
    assert other.call("get", id="raw:D1:3") is not None
    dropper.call("drop")
    assert other.call("get", id="raw:D1:3") is None
    assert other.call("add", turns=turns[5:])["stored"] >= 5
    assert dropper.call("get", id="raw:D1:7") is not None
    assert other.call("get", id="raw:D1:7") is not None and other.call("get", id="raw:D1:3") is None


def test_a_laptop_memory_moves_to_the_servers_by_export_and_import(
    tmp_path: Path, ledger_url: str, chroma: ServerProcess, locomo_dir: Path
) -> None:
    """The way from an embedded folder to a deployment: export there, import into a namespace on a Chroma
    server and a PostgreSQL ledger; every replica then reads the same memory, history included."""
    laptop = Memory("on-laptop", data_dir=str(tmp_path / "laptop"))
    laptop.add(conversation(locomo_dir, "conv-26.json", 20))
    laptop.store.delete(laptop.store.all("fact")[0].id, reason="asked to forget")
    document = laptop.export()

    def replica(name: str) -> Memory:
        return Memory("deployed", data_dir=tmp_path / name, chroma_host=LOOPBACK, chroma_port=chroma.port,
                      ledger_url=ledger_url)

    first, second = replica("one"), replica("two")
    report = first.import_from(document)

    assert report.records == len(document.records) and report.links == len(document.links)
    for memory in (first, second):
        moved = memory.export()
        assert sorted(r.id for r in moved.records) == sorted(r.id for r in document.records)
        assert [(c.record_id, c.action) for c in moved.history] == [(c.record_id, c.action) for c in document.history]
        assert memory.retrieve(QUESTION).evidence_ids() == laptop.retrieve(QUESTION).evidence_ids()
    assert second.undo().action.value == "undo" and first.get([document.history[-1].record_id])[0].status.value == (
        "active")


# A replica's erase, killed (as by SIGKILL) right after it wrote the erase's ids to the shared ledger.
KILLED_ERASE = '''
import os, sys
from strata.memory import erasure
from strata.api import Memory

erasure._carry_out = lambda *args, **kwargs: os._exit(9)
Memory(sys.argv[1], data_dir=sys.argv[2]).erase([sys.argv[3]])
'''


def test_an_erase_killed_midway_is_finished_by_the_replicas_that_have_the_namespace_open(
    locomo_dir: Path, tmp_path: Path, replica_env: dict[str, str], replicas: list[Replica], ledger_url: str
) -> None:
    """Found by audit: replicas already open on the namespace never finished it (only a fresh open did) and went
    on serving the erased turn, by id and in keyword search, even after writing to the namespace themselves."""
    reader, writer = (Replica("erase-killed", tmp_path / name, replica_env) for name in ("reader", "writer"))
    replicas += [reader, writer]
    assert writer.call("add", turns=conversation(locomo_dir, "conv-26.json", 10))["stored"] >= 10
    targets = {"raw:D1:3": reader, "raw:D1:5": writer}
    for target, replica in targets.items():  # each replica warm, then a third one killed in an erase
        text = replica.call("get", id=target)["text"]
        assert target in replica.call("lexical", kind="raw", query=text)
        killed = subprocess.run([sys.executable, "-c", KILLED_ERASE, "erase-killed", str(tmp_path / "killed"), target],
                                cwd=REPO, env=replica_env, capture_output=True, text=True, timeout=300)
        assert killed.returncode == 9, killed.stderr[-2000:]
        assert ledger_state(ledger_url, "erase-killed", "erasure_in_progress") is not None
        if replica is writer:  # its next call is a write
            assert replica.call("add", turns=[{"speaker": "Ann", "text": "Another day, another turn."}])["stored"]
        assert replica.call("get", id=target) is None
        assert target not in replica.call("lexical", kind="raw", query=text)
        assert ledger_state(ledger_url, "erase-killed", "erasure_in_progress") is None
    for target in targets:
        assert reader.call("get", id=target) is None and writer.call("get", id=target) is None


def restart_after(monkeypatch: pytest.MonkeyPatch, postgres: PostgresServer, operation: str) -> list[bool]:
    """PostgreSQL restarted once, right after Chroma's next `operation` (`upsert`, `delete`) in this process
    returns: Chroma holds the write, the ledger transaction around it never commits. Returns a flag, set then."""
    from chromadb.api.models.Collection import Collection

    real_operation = getattr(Collection, operation)
    restarted: list[bool] = []

    def then_restart(self: Collection, *args: Any, **kwargs: Any) -> Any:
        result = real_operation(self, *args, **kwargs)
        if not restarted:
            restarted.append(True)
            postgres.restart()
        return result

    monkeypatch.setattr(Collection, operation, then_restart)
    return restarted


def once_back(call: Any, seconds: float = 60) -> Any:
    """`call()`, again while the ledger says it is unavailable (its pool reconnects within seconds)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except UnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


ZED_TURNS = [{"speaker": "Ann", "text": "I moved to Lisbon in March."},
             {"speaker": "Zed", "text": "My bank PIN is 9902 and my locker code is 4471."},
             {"speaker": "Ann", "text": "Lisbon is lovely in spring."}]


def test_an_erase_cut_between_chroma_and_the_commit_is_seen_by_a_warm_replica(
    tmp_path: Path, postgres: PostgresServer, chroma: ServerProcess, ledger_url: str, replica_env: dict[str, str],
    replicas: list[Replica], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by audit: PostgreSQL restarted after Chroma deleted the erased records, before the ledger stamped the
    delete; the retry found nothing left to delete (nor to stamp), so a replica that had the namespace open went on
    serving the PIN, by id, in keyword search and in answers."""
    writer = Memory("erase-cut", data_dir=tmp_path / "writer", chroma_host=LOOPBACK, chroma_port=chroma.port,
                    ledger_url=ledger_url)
    writer.add(ZED_TURNS)
    warm = Replica("erase-cut", tmp_path / "warm", replica_env)
    replicas.append(warm)
    assert "raw:T2" in warm.call("lexical", kind="raw", query="bank PIN 9902 locker")
    restarted = restart_after(monkeypatch, postgres, "delete")
    with pytest.raises(UnavailableError) as cut:
        writer.erase(about="Zed")
    assert restarted
    # half done, which the error said was not: the retry (any next call) finishes it
    assert "nothing was half written" not in str(cut.value) and "half done" in str(cut.value)
    assert [r.id for r in once_back(lambda: writer.get(["raw:T1", "raw:T2"]))] == ["raw:T1"]  # finished first
    assert ledger_state(ledger_url, "erase-cut", "erasure_in_progress") is None
    assert warm.call("get", id="raw:T2") is None
    assert "raw:T2" not in warm.call("lexical", kind="raw", query="bank PIN 9902 locker")
    assert "9902" not in warm.call("ask", question="What is Zed's bank PIN?")["answer"]


def test_a_write_cut_before_its_commit_leaves_no_other_replica_s_change_unread(
    tmp_path: Path, postgres: PostgresServer, chroma: ServerProcess, ledger_url: str, replica_env: dict[str, str],
    replicas: list[Replica], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by audit: the writer's mirror took the change number of a write whose commit failed; another replica's
    next change got that number, and the writer, taking it for its own, served the old text from then on."""
    writer = Memory("stale-cut", data_dir=tmp_path / "writer", chroma_host=LOOPBACK, chroma_port=chroma.port,
                    ledger_url=ledger_url)
    writer.add(ZED_TURNS)
    other = Replica("stale-cut", tmp_path / "other", replica_env)
    replicas.append(other)
    assert other.call("get", id="raw:T1")["text"] == "I moved to Lisbon in March."
    restarted = restart_after(monkeypatch, postgres, "upsert")
    with pytest.raises(UnavailableError):
        writer.add([{"speaker": "Bo", "text": "I bought a red bicycle yesterday."}])
    assert restarted
    deadline = time.monotonic() + 60
    while True:  # its pool reconnects within seconds
        other.send("update", id="raw:T1", text="I moved to Porto in March.")
        reply = other.result_or_error()
        if "unavailable" not in reply or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert once_back(lambda: writer.get(["raw:T1"]))[0].text == "I moved to Porto in March."


def test_a_namespace_whose_first_write_was_cut_is_readable_by_every_replica(
    tmp_path: Path, postgres: PostgresServer, chroma: ServerProcess, ledger_url: str, replica_env: dict[str, str],
    replicas: list[Replica], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by audit: the namespace's mark was claimed inside the first write's transaction, and Chroma's first
    collection took it at once; PostgreSQL restarted before the commit, the retry claimed another, and every other
    replica (this one too, once restarted) was refused the namespace as "written through another ledger"."""
    restarted = restart_after(monkeypatch, postgres, "upsert")
    writer = Memory("first-cut", data_dir=tmp_path / "writer", chroma_host=LOOPBACK, chroma_port=chroma.port,
                    ledger_url=ledger_url)
    with pytest.raises(UnavailableError):
        writer.add(ZED_TURNS)
    assert restarted
    assert once_back(lambda: writer.add(ZED_TURNS)).stored_ids[:1] == ["raw:T1"]
    other = Replica("first-cut", tmp_path / "other", replica_env)
    replicas.append(other)
    assert other.call("get", id="raw:T1") == {"text": "I moved to Lisbon in March.", "status": "active"}
    assert other.call("add", turns=[{"speaker": "Ann", "text": "The tram up the hill was full."}])["stored"]


def test_a_role_that_may_only_read_and_a_database_turned_read_only_are_one_line_each(
    tmp_path: Path, postgres: PostgresServer, chroma: ServerProcess, ledger_url: str
) -> None:
    """Found by audit: a role refused a write on the ledger's tables, and a database back read-only after a restart
    (as a standby after a failover), came out as psycopg tracebacks: only a lost connection was said in one line."""
    import psycopg

    def memory(name: str, url: str) -> Memory:
        return Memory("ro", data_dir=tmp_path / name, chroma_host=LOOPBACK, chroma_port=chroma.port, ledger_url=url)

    owner = memory("owner", ledger_url)
    owner.add([{"speaker": "Ann", "text": "I moved to Lisbon in March."}])
    role = f"reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ledger_url, autocommit=True) as conn:
        for statement in (f"CREATE ROLE {role} LOGIN", f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}",
                          f"GRANT CREATE ON SCHEMA public TO {role}"):  # it may open the ledger and read it
            conn.execute(statement)
    reader = memory("reader", ledger_url.replace(f"{PostgresServer.user}@", f"{role}@"))
    assert [r.text for r in reader.get(["raw:T1"])] == ["I moved to Lisbon in March."]
    turn = [{"speaker": "Ann", "text": "Now I live in Porto."}]
    with pytest.raises(ConfigError) as refused:
        reader.add(turn)
    assert "\n" not in str(refused.value) and "refuses the role of ledger_url" in str(refused.value)

    later = memory("later", ledger_url)
    assert later.get(["raw:T1"])  # its connections opened while the database took writes
    with psycopg.connect(ledger_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{ledger_url.rsplit("/", 1)[1]}" SET default_transaction_read_only = on')
    postgres.restart()  # its connections come back read-only
    said, deadline = "", time.monotonic() + 60
    while "takes no writes" not in said and time.monotonic() < deadline:
        try:
            later.add(turn)
            break
        except UnavailableError as error:  # lost connections first, while its pool reconnects
            said = str(error)
        time.sleep(0.2)
    assert "takes no writes" in said and "\n" not in said and "primary" in said
    assert owner.store.count("raw") == 1  # neither add stored anything


def ledger_state(url: str, namespace: str, key: str) -> Any:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT value FROM state WHERE namespace = %s AND key = %s", (namespace, key)).fetchone()
    return json.loads(row[0]) if row else None


@pytest.fixture
def tiny_tablespace(postgres: PostgresServer) -> Iterator[tuple[str, Path]]:
    """A database whose tables live on a 4 MB tmpfs (root only; skipped elsewhere): its URL and the mount."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small disk needs root")
    import psycopg

    base = Path(tempfile.mkdtemp(prefix="strata-tiny-"))
    base.chmod(0o755)  # the server runs as another user
    disk = base / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()[:200]}")
    name = f"t_{uuid.uuid4().hex[:12]}"
    try:
        shutil.chown(disk, "postgres", "postgres")
        with psycopg.connect(postgres.database_url(), autocommit=True) as conn:
            conn.execute(f"CREATE TABLESPACE {name} LOCATION '{disk}'")
            conn.execute(f'CREATE DATABASE "{name}" TABLESPACE {name}')
        yield postgres.database_url(name), disk
    finally:
        close_all()
        with psycopg.connect(postgres.database_url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f"DROP TABLESPACE IF EXISTS {name}")
        subprocess.run(["umount", "--lazy", str(disk)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_a_full_disk_under_the_postgres_ledger_is_one_line_and_the_same_call_resumes(
    tmp_path: Path, tiny_tablespace: tuple[str, Path]
) -> None:
    """Found by audit: PostgreSQL's "could not extend file ...: No space left on device" (SQLSTATE 53100) is an
    OperationalError, which the ledger said as "the PostgreSQL ledger ... is unavailable ...: retry once the
    database answers again", while it answered. It is one line saying to free space on the database's disk; no
    put is left half stored, and once there is room the same put is stored."""
    url, disk = tiny_tablespace
    store = StrataStore(data_dir=tmp_path / "mem", ledger_url=url)
    noise = [os.urandom(150_000).hex() for _ in range(40)]  # what the database cannot compress
    with pytest.raises(StrataError) as caught:
        for n, text in enumerate(noise):
            store.put(("full",), f"note-{n}", {"text": text})
    message = str(caught.value)
    where = url.rpartition("@")[2]
    assert message.startswith(f"the disk holding the PostgreSQL ledger's database at {where} is full: free space "
                              "there"), message
    failed = f"note-{n}"
    assert store.get(("full",), failed) is None
    subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)  # room made
    store.put(("full",), failed, {"text": noise[n]})
    assert store.get(("full",), failed).value == {"text": noise[n]}  # type: ignore[union-attr]
    ledger = open_ledger(tmp_path / "unused", url)
    try:
        assert [v.key for v in store_items.versions(ledger, "full")] == [f"note-{k}" for k in range(n + 1)]
    finally:
        ledger.close()
