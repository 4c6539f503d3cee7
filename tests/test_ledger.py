"""The ledger and the change sequence, on the embedded SQLite backend (no server needed).

Migrations run once even when several openers race, and bring an earlier
ledger up to date without losing a row; every write, update, delete, undo
and purge bumps the namespace's change sequence; a second store over the same
folder (a separate mirror, as in another process) sees another's update and
undo at its next read, reloading only those records and never rebuilding its
BM25 index; a wrong or unreachable `ledger_url` is one line that says what to do.
The same operations on PostgreSQL are compared in tests/test_postgres_ledger.py.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import all_at_once
from servers import LOOPBACK, free_port
from strata.memory import store as store_module
from strata.memory.bm25 import BM25Index
from strata.memory.erasure import apply_erasure, plan_erasure
from strata.memory.errors import ConfigError, UnavailableError
from strata.memory.ledger import Ledger, open_ledger
from strata.memory.ledger_sql import SCHEMA_VERSION, SqliteBackend
from strata.memory.records import Action, Change, Link, LinkType, Record, Turn, raw_record
from strata.memory.registry import close_all
from strata.memory.settings import StoreSettings
from strata.memory.store import MemoryStore

from strata.api import Memory

WHEN = datetime(2023, 5, 8, 13, 56)
TURNS = [
    Turn(speaker="Caroline", text="I went to a LGBTQ support group yesterday and it was so powerful.", dia_id="D1:3",
         time=WHEN),
    Turn(speaker="Melanie", text="I'm painting a lake sunrise for my art class this week.", dia_id="D1:4", time=WHEN),
    Turn(speaker="Caroline", text="I'm keen on counseling or working in mental health.", dia_id="D1:5", time=WHEN),
]


def records(namespace: str) -> list[Record]:
    return [raw_record(turn, namespace) for turn in TURNS]


def open_store(folder: Path, namespace: str = "ns") -> MemoryStore:
    """A store with a ledger of its own: what a second process would have."""
    settings = StoreSettings(data_dir=str(folder))
    return MemoryStore(settings, namespace, Ledger(SqliteBackend(settings.ledger_path)))


def test_migrations_run_once_when_openers_race(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    opened = all_at_once(lambda: open_ledger(path), 6)
    assert len(opened) == 6
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    for ledger in opened:
        ledger.close()


def test_a_ledger_of_an_earlier_version_is_migrated_without_losing_rows(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    with sqlite3.connect(path) as conn:  # the tables as an earlier version wrote them
        conn.executescript("""
            CREATE TABLE history (id INTEGER PRIMARY KEY AUTOINCREMENT, namespace TEXT NOT NULL,
                record_id TEXT NOT NULL, kind TEXT NOT NULL, action TEXT NOT NULL, old_text TEXT NOT NULL,
                new_text TEXT NOT NULL, old_status TEXT NOT NULL, new_status TEXT NOT NULL, reason TEXT NOT NULL,
                policy TEXT NOT NULL, time TEXT NOT NULL, undone INTEGER NOT NULL DEFAULT 0, undoes INTEGER,
                old_fields TEXT NOT NULL DEFAULT '{}', new_fields TEXT NOT NULL DEFAULT '{}');
            CREATE TABLE working (namespace TEXT NOT NULL, participant TEXT NOT NULL, seq INTEGER NOT NULL,
                dia_id TEXT NOT NULL, text TEXT NOT NULL, time TEXT, PRIMARY KEY (namespace, participant, seq));
            INSERT INTO history (namespace, record_id, kind, action, old_text, new_text, old_status, new_status,
                reason, policy, time) VALUES ('ns', 'fact:D1:3:0', 'fact', 'delete', 'a', 'a', 'active', 'deleted',
                'old row', 'user', '2023-05-08T13:56:00');
            INSERT INTO working VALUES ('ns', 'Melanie', 1, 'D1:2', 'second', '2023-05-08T13:56:00');
            INSERT INTO working VALUES ('ns', 'Caroline', 1, 'D1:1', 'first', '2023-05-08T13:56:00');
        """)
    ledger = open_ledger(path)
    assert [c.reason for c in ledger.history("ns")] == ["old row"]
    assert [w["text"] for w in ledger.working("ns")] == ["second", "first"]  # arrival order kept
    ledger.push_working("ns", "Caroline", "D1:3", "third", WHEN, 8)
    assert [w["text"] for w in ledger.working("ns")] == ["second", "first", "third"]
    assert ledger.sequence("ns") == (0, 0)
    with sqlite3.connect(path) as conn:  # one record's history is read by its index, not the namespace's rows
        plan = " ".join(str(r) for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM history WHERE namespace = 'ns' AND record_id = 'x'").fetchall())
    assert "history_record" in plan
    ledger.close()


def test_the_histories_of_many_records_are_read_together_oldest_first(tmp_path: Path) -> None:
    ledger = open_ledger(tmp_path / "ledger.sqlite3")
    ids = [f"fact:D{i}:1:0" for i in range(900)]  # more than one statement binds
    for round_ in range(2):
        for record_id in ids:
            ledger.record_change(Change(namespace="ns", record_id=record_id, kind="fact", action=Action.UPDATE,
                                        old_text=f"{record_id} v{round_}", new_text=f"{record_id} v{round_ + 1}"))
    ledger.record_change(Change(namespace="other", record_id=ids[0], kind="fact", action=Action.DELETE))
    wanted = ids[::2]
    found = ledger.histories("ns", wanted)
    assert [c.id for c in found] == sorted(c.id for c in found)
    assert {c.namespace for c in found} == {"ns"}  # another namespace's row of the same id stays out
    assert sorted((c.record_id, c.new_text) for c in found) == sorted(
        (i, f"{i} v{n}") for i in wanted for n in (1, 2))
    assert ledger.histories("ns", []) == []
    ledger.close()


def test_the_links_of_many_records_are_read_in_statements_sqlite_can_bind(tmp_path: Path) -> None:
    """A link query binds each id three times: the links of 11,000 superseded facts (a windowed question reads
    them all) made one statement of 33,000 variables, over SQLite's usual limit of 32,766 (999 on older
    builds). Read in parts, each link still comes once, also one whose two ends fall in different parts."""
    ledger = open_ledger(tmp_path / "ledger.sqlite3")
    ids = [f"fact:D{i}:1:0" for i in range(1_000)]
    chain = [Link(namespace="ns", src=a, dst=b, type=LinkType.SUPERSEDES) for a, b in zip(ids[1:], ids, strict=False)]
    ledger.add_links(chain)
    ledger.add_links([Link(namespace="other", src=ids[1], dst=ids[0], type=LinkType.SUPERSEDES)])
    with ledger.reading() as session:
        connection = getattr(session, "conn", session)
        if hasattr(connection, "setlimit"):  # as an older SQLite build would bind
            connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
    found = ledger.neighbours("ns", ids, [LinkType.SUPERSEDES])
    assert sorted((k.src, k.dst) for k in found) == sorted((k.src, k.dst) for k in chain)  # each once, no other ns
    ledger.close()


def test_every_kind_of_write_bumps_the_change_sequence(data_dir: Path, embedder: Any) -> None:
    store = open_store(data_dir)
    ledger = store.ledger
    store.add(records("ns"))
    assert ledger.sequence("ns") == (1, 0)
    assert sorted(ledger.changed_since("ns", 0)) == ["raw:D1:3", "raw:D1:4", "raw:D1:5"]
    store.update("raw:D1:4", "I'm painting a harbour at dawn for my art class.", reason="test")
    store.delete("raw:D1:5", reason="test")
    assert ledger.sequence("ns")[0] == 3
    assert sorted(ledger.changed_since("ns", 1)) == ["raw:D1:4", "raw:D1:5"]
    store.undo()  # the delete
    assert ledger.changed_since("ns", 3) == ["raw:D1:5"]
    store.delete("raw:D1:5", reason="test")
    assert store.purge() == 1
    assert ledger.sequence("ns")[0] == 6 and ledger.changed_since("ns", 5) == ["raw:D1:5"]
    assert ledger.sequence("other") == (0, 0)  # per namespace
    store.drop()
    seq, reset = ledger.sequence("ns")
    assert seq == reset == 7 and ledger.changed_since("ns", 0) == []
    ledger.close()


def test_a_second_mirror_sees_an_update_and_an_undo_without_a_rebuild(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reader = open_store(data_dir), open_store(data_dir)
    writer.add(records("ns"))
    assert reader.lexical("raw", "painting lake", 3)[0][0] == "raw:D1:4"
    built: list[BM25Index] = []

    class CountingIndex(BM25Index):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(store_module, "BM25Index", CountingIndex)
    fetched: list[Any] = []
    collection = reader._collections["raw"]
    real_get = collection.get
    monkeypatch.setattr(collection, "get", lambda *a, **k: fetched.append(k.get("ids")) or real_get(*a, **k))

    change = writer.update("raw:D1:4", "I'm painting a harbour at dawn for my art class.", reason="test")
    assert reader.get_one("raw:D1:4").text.startswith("I'm painting a harbour")
    assert [rid for rid, _ in reader.lexical("raw", "harbour", 3)] == ["raw:D1:4"]
    assert reader.lexical("raw", "lake", 3) == []
    writer.undo(change.id)
    assert "lake sunrise" in reader.get_one("raw:D1:4").text
    assert [rid for rid, _ in reader.lexical("raw", "lake", 3)] == ["raw:D1:4"]
    writer.delete("raw:D1:5", reason="test")
    assert "raw:D1:5" not in {r.id for r in reader.all("raw")}
    assert fetched == [["raw:D1:4"], ["raw:D1:4"], ["raw:D1:5"]]  # only what changed, one read per change
    assert built == []  # the BM25 index was updated in place, never rebuilt
    assert reader.ledger.sequence("ns")[0] == reader._seen == 4
    writer.ledger.close()
    reader.ledger.close()


def fail_the_commit_after(monkeypatch: pytest.MonkeyPatch, ledger: Ledger, operation: str) -> list[bool]:
    """The next ledger transaction in which Chroma ran `operation` (`upsert`, `delete`) fails at its commit,
    once Chroma took the write: what a database restarting between the two does. Returns a flag, set when it
    failed."""
    from chromadb.api.models.Collection import Collection

    took: list[str] = []
    real_operation = getattr(Collection, operation)

    def recorded(self: Collection, *args: Any, **kwargs: Any) -> Any:
        result = real_operation(self, *args, **kwargs)
        took.append(operation)
        return result

    monkeypatch.setattr(Collection, operation, recorded)
    real_transaction = ledger.backend.transaction
    failed: list[bool] = []

    @contextmanager
    def transaction() -> Iterator[Any]:
        outer = not ledger.backend.in_transaction()
        if outer:
            took.clear()
        with real_transaction() as session:
            yield session
            if outer and took and not failed:  # raised inside: the transaction rolls back
                failed.append(True)
                raise UnavailableError("the ledger database restarted before the commit")

    monkeypatch.setattr(ledger.backend, "transaction", transaction)
    return failed


def test_a_write_whose_commit_failed_leaves_the_mirror_where_the_ledger_is(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by audit: the mirror took the records and the change number before the commit. The number rolled
    back went to the next writer (another replica's update); the writer took that change for its own, never
    read it, and served the old text (an erased fact too) until it restarted."""
    writer, other = open_store(data_dir), open_store(data_dir)
    writer.add(records("ns")[:2])
    assert len(writer.all("raw")) == len(other.all("raw")) == 2
    failed = fail_the_commit_after(monkeypatch, writer.ledger, "upsert")
    with pytest.raises(UnavailableError):
        writer.add(records("ns")[2:])
    assert failed and writer._seen == writer.ledger.sequence("ns")[0] == 1
    assert writer.get(["raw:D1:5"]) == []  # not served: the ledger never recorded it
    other.update("raw:D1:4", "I'm painting a harbour at dawn for my art class.", reason="test")  # change 2 again
    assert writer.get_one("raw:D1:4").text.startswith("I'm painting a harbour")
    assert [rid for rid, _ in writer.lexical("raw", "lake sunrise", 3)] == []
    writer.add(records("ns")[2:])  # the retry writes the turn again, and records it
    assert other.get(["raw:D1:5"]) and writer._seen == writer.ledger.sequence("ns")[0] == 3
    writer.ledger.close()
    other.ledger.close()


def test_an_input_whose_write_ahead_failed_at_the_commit_is_stored_once_by_its_retry(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mirror no longer takes a write whose commit failed; the retry of an input of turns without ids still
    finds the turns it wrote ahead (in Chroma) and gives them their ids again, not new ones beside them."""
    memory = Memory("ns", data_dir=data_dir)
    turns = [{"speaker": "Ann", "text": f"Day {day} of my trip to Lisbon was sunny."} for day in range(3)]
    failed = fail_the_commit_after(monkeypatch, memory.store.ledger, "upsert")
    with pytest.raises(UnavailableError):
        memory.add(turns)
    assert failed
    assert [t.split(":")[1] for t in memory.add(turns).stored_ids if t.startswith("raw:")] == ["T1", "T2", "T3"]
    close_all()
    store = Memory("ns", data_dir=data_dir).store
    assert sorted(r.id for r in store.all("raw")) == ["raw:T1", "raw:T2", "raw:T3"]
    assert store.ledger.get_state("ns", "pending_derive") == []


def test_an_erase_whose_commit_failed_after_chroma_deleted_is_seen_by_every_mirror(
    data_dir: Path, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by audit: the erase's delete from Chroma was never stamped, and its retry, which read the
    records from a mirror that had already let them go (or from Chroma, on a fresh open), found nothing to
    stamp; a mirror that had the namespace open (another replica's) served the erased turn until it
    restarted."""
    writer, warm = open_store(data_dir), open_store(data_dir)
    writer.add(records("ns"))
    assert [rid for rid, _ in warm.lexical("raw", "painting lake sunrise", 3)][:1] == ["raw:D1:4"]
    failed = fail_the_commit_after(monkeypatch, writer.ledger, "delete")
    with pytest.raises(UnavailableError):
        apply_erasure(writer, plan_erasure(writer, ["raw:D1:4"]))
    assert failed and writer.state("erasure_in_progress")
    fresh = open_store(data_dir)  # the next call opens the namespace afresh; its first read finishes the erase
    assert [r.id for r in fresh.get(["raw:D1:3", "raw:D1:4"])] == ["raw:D1:3"] and not fresh.state(
        "erasure_in_progress")
    for store in (warm, writer, fresh):
        assert store.get(["raw:D1:4"]) == [] and "raw:D1:4" not in {r.id for r in store.all("raw")}
        assert "raw:D1:4" not in [rid for rid, _ in store.lexical("raw", "painting lake sunrise", 3)]
        assert store._seen == store.ledger.sequence("ns")[0]
        store.ledger.close()


def test_incremental_bm25_ranks_as_a_fresh_build() -> None:
    texts = {f"d{i}": f"turn {i} about {'lakes' if i % 3 else 'museums'} and painting number {i % 5}"
             for i in range(60)}
    incremental = BM25Index()
    for doc_id, text in texts.items():
        incremental.add(doc_id, text)
    for i in range(0, 60, 4):
        incremental.remove(f"d{i}")
    for i in range(1, 60, 8):
        texts[f"d{i}"] = f"rewritten {i}: a harbour at dawn"
        incremental.add(f"d{i}", texts[f"d{i}"])
    fresh = BM25Index()
    for doc_id, text in texts.items():
        if int(doc_id[1:]) % 4:
            fresh.add(doc_id, text)
    for query in ("museums painting", "harbour dawn", "lakes number 3"):
        scored, expected = dict(incremental.search(query, 100)), dict(fresh.search(query, 100))
        assert scored.keys() == expected.keys() and scored == pytest.approx(expected)
    assert len(incremental) == len(fresh)


_RANK_IN_CHILD = """
import json, sys
from strata.conversations import load_turns
from strata.memory.bm25 import BM25Index
index = BM25Index()
for turn in load_turns(sys.argv[1]).turns():
    index.add(turn.dia_id, turn.text)
print(json.dumps([index.search(q, 60) for q in sys.argv[2:]]))
"""


def test_bm25_ranks_the_same_in_every_process(locomo_dir: Path) -> None:
    """A query's words are summed in its own order, not a set's (whose order a process's hash seed
    decides): equal scores would otherwise sum to different last digits and swap ranks between runs."""
    questions = ["What did Melanie and her kids do at the beach and the museum?",
                 "How did Caroline feel about the support group and the parade?",
                 "When did Melanie paint the sunrise over the lake with her family?"]
    runs = []
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", _RANK_IN_CHILD, str(locomo_dir / "conv-26.json"), *questions],
            env=env, capture_output=True, text=True, check=True, timeout=120,
        )
        runs.append(json.loads(done.stdout))
    assert all(len(ranked) == 60 for ranked in runs[0])
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://me@localhost/strata", "must be a PostgreSQL URL"),
        ("postgresql://me@localhost:notaport/strata", "STRATA_LEDGER_URL"),
    ],
)
def test_a_wrong_ledger_url_is_a_one_line_config_error(data_dir: Path, url: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Memory("ns", data_dir=data_dir, ledger_url=url).add("I moved to Lisbon last spring.")
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_an_unreachable_ledger_database_is_a_one_line_config_error(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = free_port()
    url = f"postgresql://strata:s3cret@{LOOPBACK}:{closed}/strata"
    with pytest.raises(ConfigError) as raised:
        Memory("ns", data_dir=data_dir, ledger_url=url).ask("Where do I live?")
    message = str(raised.value)
    assert "\n" not in message and f"{LOOPBACK}:{closed}/strata" in message and "STRATA_LEDGER_URL" in message
    assert "s3cret" not in message  # the password never reaches a log
    monkeypatch.setenv("STRATA_LEDGER_URL", url)  # the same from the environment, as on a server
    with pytest.raises(ConfigError, match="PostgreSQL ledger"):
        Memory("ns", data_dir=data_dir).add("I moved to Lisbon last spring.")
    assert not (data_dir / "ledger.sqlite3").exists()  # never fell back to a local ledger


@pytest.mark.parametrize("password", ["Tr0ub4dor@horse", "pa%zzSecretTail", "abc/SecretTail", "abc SecretTail",
                                      "abc@127.0.0.1:1/SecretTail"])
def test_a_password_the_url_does_not_escape_never_reaches_the_error(data_dir: Path, password: str) -> None:
    """Found by audit: an unescaped '@' or '/' put the rest of the password in the host or database name shown,
    and PostgreSQL's own text quoted the token it could not read (a '%' or a space): the password, whole."""
    url = f"postgresql://strata:{password}@{LOOPBACK}:{free_port()}/strata"
    with pytest.raises(ConfigError) as raised:
        Memory("ns", data_dir=data_dir, ledger_url=url).stats()
    message = str(raised.value)
    assert "\n" not in message and "STRATA_LEDGER_URL" in message
    assert not [part for part in ("Secret", "Tail", "horse", password) if part in message], message


def test_psycopg_s_own_records_never_reach_stderr_beside_the_one_line_error() -> None:
    """Found by audit: a multi-row ledger write on a lost connection printed psycopg's "error ignored terminating
    <psycopg.Pipeline [BAD]>" to stderr beside the one-line error; only the pool's records were silenced."""
    program = ("import logging, strata.memory.ledger_postgres; "
               "logging.getLogger('psycopg').warning('error ignored terminating pipeline: the connection is lost'); "
               "logging.getLogger('psycopg.pool').warning('error connecting in strata-ledger')")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    shown = ("import logging, strata.memory.ledger_postgres; logging.basicConfig(); "  # an app's own handler sees them
             "logging.getLogger('psycopg').warning('seen by the app')")
    assert "seen by the app" in subprocess.run([sys.executable, "-c", shown], capture_output=True, text=True,
                                               timeout=120).stderr


def test_langgraph_store_items_written_beside_a_version_2_ledger_are_kept(data_dir: Path, embedder: Any) -> None:
    """The LangGraph store used to keep its item table in the ledger file through its own connection;
    a data folder from then is migrated to the ledger's own table with its items intact."""
    from strata.langgraph_store import StrataStore

    path = data_dir / "ledger.sqlite3"
    StrataStore(data_dir=str(data_dir)).put(("ann",), "seat", {"text": "Ann prefers a window seat"})
    close_all()
    with sqlite3.connect(path) as conn:  # as the earlier adapter left it: its own table, schema version 2
        conn.execute("UPDATE schema_version SET version = 2")
    ledger = open_ledger(path)  # migrated to the current version on open
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    ledger.close()
    items = StrataStore(data_dir=str(data_dir))
    assert items.get(("ann",), "seat").value == {"text": "Ann prefers a window seat"}
    items.put(("ann",), "seat", {"text": "Ann now prefers the aisle"})
    assert items.get(("ann",), "seat").value == {"text": "Ann now prefers the aisle"}
    assert [hit.key for hit in items.search(("ann",), query="aisle seat")] == ["seat"]


def test_the_working_window_keeps_the_latest_turns_said_not_the_latest_sent(tmp_path: Path) -> None:
    """A window of two: older talk backfilled after today's pushed today's turns out (it dropped by arrival)."""
    ledger = open_ledger(tmp_path / "ledger.sqlite3")
    june = datetime(2023, 6, 10, 10, 0)
    for i, when in enumerate([june, june + timedelta(minutes=1), datetime(2023, 5, 1, 9), datetime(2023, 5, 1, 10)]):
        ledger.push_working("ns", "Ann", f"D{i}:1", f"turn {i}", when, 2)
    assert [w["text"] for w in ledger.working("ns")] == ["turn 0", "turn 1"]
    ledger.push_working("ns", "Ann", "D9:1", "undated", None, 2)  # no time: taken as the earliest, so it goes
    ledger.push_working("ns", "Ann", "D5:1", "later", june + timedelta(days=1), 2)
    assert [w["text"] for w in ledger.working("ns")] == ["turn 1", "later"]
    with ledger.transaction() as session:  # rows an imported document gave no arrival (its format allows it)
        session.execute("INSERT INTO working (namespace, participant, seq, dia_id, text, time, arrival) "
                        "VALUES ('ns', 'Ann', 99, 'D8:1', 'imported', ?, NULL)",
                        ((june + timedelta(days=2)).isoformat(),))
    ledger.push_working("ns", "Ann", "D6:1", "latest", june + timedelta(days=3), 2)
    assert [w["text"] for w in ledger.working("ns")] == ["imported", "latest"]
    ledger.close()
