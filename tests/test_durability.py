"""What no caller can do to a stored memory: lose a turn to a concurrent writer, undo changes
out of order into a state the record never had, or break a namespace by dropping it.

Real Chroma and MiniLM in a temporary folder, offline policies, the public API.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from strata.agents.memory import PENDING, open_segment
from strata.memory.errors import InputError, StrataError
from strata.memory.records import Action, Record, Status
from strata.memory.registry import open_store
from strata.memory.settings import StoreSettings
from strata.memory.store import MemoryStore

from strata.api import Memory
from strata.conversations import load_turns

THREADS = 3
TURNS_PER_THREAD = 15
NAMESPACE = "caroline"


def thread_turn(thread: int, n: int) -> str:
    """A turn only one writer sends, with a fact the offline extractor can read."""
    return f"I visited the museum number {thread * 100 + n} with my friend Ana{thread} yesterday."


def assert_every_turn_once_and_derived(memory: Memory, texts: list[str]) -> None:
    """Each text stored as exactly one raw turn, each turn derived (nothing pending) and in one episode."""
    store = memory.store
    raws = store.all("raw", include_inactive=True)
    assert sorted(r.text for r in raws) == sorted(texts)
    assert len({r.id for r in raws}) == len(texts)
    assert store.ledger.get_state(store.namespace, PENDING, []) == []
    assert open_segment(store).turn_ids == []
    members = [i for e in store.all("episode") for i in e.source_ids]
    assert sorted(members) == sorted(r.dialogue_id for r in raws)  # every turn in exactly one episode


def test_three_threads_adding_turns_without_ids_lose_nothing(data_dir: Path, embedder: object) -> None:
    memory = Memory(NAMESPACE, data_dir=str(data_dir))
    failures: list[BaseException] = []

    def writer(thread: int) -> None:
        try:
            for n in range(TURNS_PER_THREAD):
                memory.add({"speaker": f"Writer{thread}", "text": thread_turn(thread, n)})
        except BaseException as exc:  # reported below: a thread's exception would otherwise vanish
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    memory.end_session()

    texts = [thread_turn(t, n) for t in range(THREADS) for n in range(TURNS_PER_THREAD)]
    assert_every_turn_once_and_derived(memory, texts)
    ids = sorted(int(r.dialogue_id[1:]) for r in memory.store.all("raw"))
    assert ids == list(range(1, THREADS * TURNS_PER_THREAD + 1))  # T1..T45, none given twice
    for raw in memory.store.all("raw"):  # derived: the turn's facts exist and point back to it
        facts = [f for f in memory.store.all("fact") if f.source_ids == [raw.dialogue_id]]
        assert facts, raw.text


def test_a_write_and_a_flush_in_two_threads_take_the_locks_in_one_order(data_dir: Path, embedder: object) -> None:
    """The interleaving that hung a consolidation beside an ingest, forced (tests/lock_order.py):
    both threads finish and both records are stored."""
    script = Path(__file__).with_name("lock_order.py")
    done = subprocess.run([sys.executable, str(script), str(data_dir)], capture_output=True, text=True,
                          timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert done.stdout.split() == ["fact:D1:1:0", "fact:D1:2:0"]


def test_a_consolidation_beside_an_ingest_finishes_and_loses_no_turn(
    data_dir: Path, embedder: object, locomo_dir: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The slow path runs beside ingest (a thread of the app, a scheduled job). Its writes took the
    ledger's lock and then the store's while a turn's flush took them the other way round: the two
    threads waited on each other for ever. The ledger's step is slowed in the consolidating thread
    so that the two writes meet on every run; the threads are daemons, so a deadlock fails the test
    instead of hanging it."""
    from strata.memory.ledger import Ledger

    real = Ledger.log_changes

    def slowed(self: Ledger, *args: object, **kwargs: object) -> object:
        if threading.current_thread().name == "consolidate":
            time.sleep(0.2)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "log_changes", slowed)
    memory = Memory(NAMESPACE, data_dir=str(data_dir))
    conversation = load_turns(locomo_dir / "conv-26.json")
    turns = [turn for session in conversation.sessions for turn in session.turns][:60]
    stored = threading.Event()
    failures: list[BaseException] = []

    def ingest() -> None:
        try:
            for start in range(0, len(turns), 3):
                memory.add(turns[start : start + 3])
        except BaseException as exc:
            failures.append(exc)
        finally:
            stored.set()

    def consolidate() -> None:
        try:
            while not stored.is_set():
                memory.consolidate()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=ingest, name="ingest", daemon=True),
               threading.Thread(target=consolidate, name="consolidate", daemon=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "ingest and consolidation wait on each other"
    assert failures == []
    memory.end_session()
    assert_every_turn_once_and_derived(memory, [turn.text for turn in turns])


# ----------------------------------------------------------------------------- undo order


def home(value: str) -> str:
    return f"Caroline lives in {value}."


@pytest.fixture
def moved_twice(data_dir: Path, embedder: object) -> tuple[MemoryStore, int, int]:
    """A fact updated Boston -> Denver -> Boulder; returns the store and the two change ids."""
    store = open_store(StoreSettings(data_dir=str(data_dir)), NAMESPACE)
    store.add([Record(id="fact:D1:4:0", kind="fact", text=home("Boston"), namespace=NAMESPACE, dialogue_id="D1:4",
                      speaker="Caroline", time=datetime(2023, 5, 8), source_ids=["D1:4"], subject="Caroline",
                      attribute="lives_in", value="Boston")])
    first = store.update("fact:D1:4:0", home("Denver"), "moved", fields={"value": "Denver"})
    second = store.update("fact:D1:4:0", home("Boulder"), "moved again", fields={"value": "Boulder"})
    return store, int(first.id or 0), int(second.id or 0)


def test_undoing_an_older_change_first_is_refused_naming_the_newer(moved_twice: tuple[MemoryStore, int, int]) -> None:
    store, first, second = moved_twice
    rows = len(store.history("fact:D1:4:0"))
    with pytest.raises(InputError) as refused:
        store.undo(first)
    message = str(refused.value)
    assert "\n" not in message and f"undo change {second} first" in message
    assert store.get_one("fact:D1:4:0").text == home("Boulder")  # nothing changed
    assert len(store.history("fact:D1:4:0")) == rows


def test_undoing_newest_first_walks_back_the_path_the_record_took(
    moved_twice: tuple[MemoryStore, int, int],
) -> None:
    store, first, second = moved_twice
    assert store.undo(second).new_text == home("Denver")
    assert store.undo(first).new_text == home("Boston")
    record = store.get_one("fact:D1:4:0")
    assert (record.text, record.value, record.status) == (home("Boston"), "Boston", Status.ACTIVE)
    # every history row starts from the text the row before it left: the path the record really took
    rows = list(reversed(store.history("fact:D1:4:0")))
    assert [r.action for r in rows] == [Action.UPDATE, Action.UPDATE, Action.UNDO, Action.UNDO]
    for before, after in itertools.pairwise(rows):
        assert after.old_text == before.new_text
    with pytest.raises(StrataError):
        store.undo()  # nothing left to undo: a one-line error, not a traceback


def test_a_plain_undo_finds_the_latest_edit_behind_many_later_changes(
    moved_twice: tuple[MemoryStore, int, int],
) -> None:
    """Ingest writes an evolution or a no-op for nearly every turn: a plain undo must still reach the
    latest update however far back it is (it once looked at the newest 1,000 history rows only)."""
    store, first, second = moved_twice
    for n in range(1_050):
        store.record_noop("fact:D1:4:0", "fact", f"looked again {n}", "offline")
    assert store.undo().undoes == second
    assert store.undo().undoes == first
    with pytest.raises(StrataError) as nothing:
        store.undo()
    message = str(nothing.value)
    assert "\n" not in message and "no update or delete is in force" in message and "strata undo N" in message


def test_an_undo_that_chroma_failed_midway_is_taken_back_by_the_next_write(
    moved_twice: tuple[MemoryStore, int, int], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Chroma server that dies inside an undo fails its taking back too. The unit's journal stayed, but
    the process still counted it as its own, so the next unit of work cleared it as done: the ledger said
    undone, Chroma held the record as before, and nothing could mend it. Now the next write takes it back."""
    store, _, second = moved_twice

    def down(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Chroma is down")

    monkeypatch.setattr(store, "_rewrite", down)
    monkeypatch.setattr(store, "_rewrite_all", down)
    with pytest.raises(ConnectionError):
        store.undo()
    monkeypatch.undo()  # Chroma is back; the same process goes on

    store.update("fact:D1:4:0", home("Aspen"), "moved a third time", fields={"value": "Aspen"})

    changes = {c.id: c for c in store.history("fact:D1:4:0")}
    assert not changes[second].undone and [c.action.value for c in changes.values()].count("undo") == 0
    assert store.get(["fact:D1:4:0"])[0].text == home("Aspen")
    assert store.undo().new_text == home("Boulder")  # the history is the path the record took


def test_a_discarded_summary_takes_its_history_along(moved_twice: tuple[MemoryStore, int, int]) -> None:
    """A summary a Refresher edited, then discarded by a consolidation (its topic dissolved): the edit's
    history row went on naming a record that is gone, and every plain undo failed on it."""
    store, _, second = moved_twice
    store.add([Record(id="summary:topic:home", kind="summary", text="Caroline's homes: Boston.", namespace=NAMESPACE,
                      dialogue_id="D1:4", source_ids=["D1:4"])])
    store.update("summary:topic:home", "Caroline's homes: Boston, then Boulder.", "moved")
    assert store.discard("summary", ["summary:topic:home"]) == 1
    assert store.history("summary:topic:home") == []
    assert store.undo().undoes == second  # the latest edit still in force, of a record that is still there


def test_writes_larger_than_one_chroma_batch_are_split(data_dir: Path, embedder: object) -> None:
    """Chroma takes at most 5,461 records a write (embedded): a larger write (a long import, a model
    that returns thousands of facts for one turn) once failed whole, and a staged batch that failed so
    blocked every later write of the namespace."""
    store = open_store(StoreSettings(data_dir=str(data_dir)), NAMESPACE)
    limit = store._write_batch()
    count = limit + 100
    records = [Record(id=f"fact:D1:1:{n}", kind="fact", text=f"Caroline owns book number {n}.",
                      namespace=NAMESPACE, dialogue_id="D1:1", speaker="Caroline", source_ids=["D1:1"])
               for n in range(count)]
    vectors = np.random.default_rng(7).normal(size=(count, 384)).astype(np.float32)
    store.add(records, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    assert store.count("fact") == count
    assert store.discard("fact", [r.id for r in records]) == count
    assert store.count("fact") == 0


# ----------------------------------------------------------------------------- reuse after drop


def test_a_dropped_namespace_can_be_used_again_in_the_same_process(data_dir: Path, embedder: object) -> None:
    memory = Memory(NAMESPACE, data_dir=str(data_dir))
    memory.add([{"speaker": "Caroline", "text": "I moved to Boston last spring.", "dia_id": "D1:1"}])
    other = Memory(NAMESPACE, data_dir=str(data_dir), embedder="local:all-MiniLM-L6-v2", k_r=1)
    assert other.stats()["raw"]["active"] == 1
    memory.drop()
    assert memory.stats()["raw"] == {"active": 0, "superseded": 0, "deleted": 0}
    assert other.stats()["history"] == 0
    memory.add([{"speaker": "Caroline", "text": "I adopted a cat called Miso.", "dia_id": "D1:1"}])
    assert [r.text for r in memory.store.all("raw")] == ["I adopted a cat called Miso."]
    answer = Memory(NAMESPACE, data_dir=str(data_dir)).ask("What is the name of Caroline's cat?")
    assert "raw:D1:1" in [e.id for e in answer.evidence]


# ----------------------------------------------------------------------------- resumed imports


def test_a_resumed_import_does_not_close_a_later_sessions_episode(data_dir: Path, embedder: object) -> None:
    memory = Memory(NAMESPACE, data_dir=str(data_dir))
    session_1 = [{"speaker": "Caroline", "text": f"I painted picture number {n} by the lake.", "dia_id": f"D1:{n}",
                  "time": "2023-05-08T13:56"} for n in range(1, 4)]
    session_2 = [{"speaker": "Melanie", "text": f"I ran race number {n} in the park.", "dia_id": f"D2:{n}",
                  "time": "2023-05-25T13:14"} for n in range(1, 4)]
    memory.add(session_1, end_session=True)
    memory.add(session_2[:2])  # an import interrupted in session 2
    episodes = [e.id for e in memory.store.all("episode")]
    memory.add(session_1, end_session=True)  # the import run again: session 1 is already stored and closed
    assert [e.id for e in memory.store.all("episode")] == episodes == ["episode:D1:1"]
    assert open_segment(memory.store).turn_ids == ["D2:1", "D2:2"]
    memory.add(session_2, end_session=True)
    closed = {e.id: e.source_ids for e in memory.store.all("episode")}
    assert closed == {"episode:D1:1": ["D1:1", "D1:2", "D1:3"], "episode:D2:1": ["D2:1", "D2:2", "D2:3"]}


def test_a_turn_without_an_id_retried_after_its_run_stopped_is_stored_once(data_dir: Path, embedder: object) -> None:
    """A client resending a turn whose run stopped after the turn was written ahead (a crash, a timeout, an
    interrupt never resumed): the turn had no id, so the retry got a new one, and the memory held the turn
    twice, the first copy pending for ever and never derived."""
    from langgraph.checkpoint.memory import InMemorySaver
    from strata.graph.context import Context
    from strata.graph.graph import build_graph

    said = {"speaker": "Ann", "text": "I adopted a greyhound called Pip last week."}
    other = {"speaker": "Ann", "text": "I work night shifts at the bakery on Elm Street."}
    app = build_graph(checkpointer=InMemorySaver())
    context = Context(namespace=NAMESPACE, mode="ingest", data_dir=str(data_dir))
    app.invoke({"turns": [said, other]}, {"configurable": {"thread_id": "stopped"}}, context=context,
               interrupt_after=["memory"])
    memory = Memory(NAMESPACE, data_dir=str(data_dir))
    assert len(memory.store.all("raw")) == 2  # both written ahead, neither derived
    report = memory.add([said, other])
    assert sorted(i for i in report.stored_ids if i.startswith("raw:")) == ["raw:T1", "raw:T2"]
    memory.add(said)  # said again once derived: a new turn
    memory.end_session()
    assert_every_turn_once_and_derived(memory, [said["text"], other["text"], said["text"]])


def test_only_an_inputs_last_turns_are_matched_to_the_last_pending_ones(data_dir: Path, embedder: object) -> None:
    """A retry resends the input whose tail is still pending. A separate turn repeating words of an input
    still being stored, but not its last ones, is a turn of its own (it was merged into that input's)."""
    from langgraph.checkpoint.memory import InMemorySaver
    from strata.graph.context import Context
    from strata.graph.graph import build_graph

    fine = {"speaker": "Ann", "text": "Sounds good!"}
    later = {"speaker": "Ann", "text": "I will bring the tent and two sleeping bags."}
    app = build_graph(checkpointer=InMemorySaver())
    context = Context(namespace=NAMESPACE, mode="ingest", data_dir=str(data_dir))
    app.invoke({"turns": [fine, later]}, {"configurable": {"thread_id": "running"}}, context=context,
               interrupt_after=["memory"])  # both written ahead; the input is still being stored
    memory = Memory(NAMESPACE, data_dir=str(data_dir))
    alone = memory.add(fine)
    assert [i for i in alone.stored_ids if i.startswith("raw:")] == ["raw:T3"]
    retried = memory.add([fine, later])  # the stopped input, sent again: its pending tail keeps its ids
    assert sorted(i for i in retried.stored_ids if i.startswith("raw:")) == ["raw:T1", "raw:T2"]
    memory.end_session()
    assert_every_turn_once_and_derived(memory, [fine["text"], later["text"], fine["text"]])
