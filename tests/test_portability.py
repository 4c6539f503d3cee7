"""Export and import (memory/portability.py) on real LoCoMo turns, in embedded memory folders.

A memory exported and imported elsewhere is the same memory: every record (tombstoned
ones too), link, history entry, working-memory turn, state value and store item; the
same evidence for the same questions; an undo that still works. One person's copy holds
only what is theirs. A wrong import writes nothing and says so in one line.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import offline_environment
from strata.memory.errors import InputError
from strata.memory.names import names_in
from strata.memory.portability import MemoryDocument
from strata.memory.registry import close_all

from strata import Memory
from strata.conversations import load_turns
from strata.langgraph_store import StrataStore

TURNS = 60
QUESTIONS = ["When did Caroline go to the LGBTQ support group?", "What did Melanie paint recently?",
             "What is Caroline's identity?", "What did Caroline research?"]


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory, locomo_dir: Path, embedder: Any) -> Path:
    """The TURNS turns ingested and consolidated, and one store item, once for the whole file; the folder
    closed, so each test gets its own copy."""
    folder = tmp_path_factory.mktemp("portability") / "source"
    with offline_environment():
        memory = Memory("conv-26", data_dir=str(folder))
        memory.add([t for s in load_turns(locomo_dir / "conv-26.json").sessions for t in s.turns][:TURNS])
        memory.consolidate()
        StrataStore(data_dir=str(folder)).put(("conv-26",), "pet", {"text": "Melanie has a cat"})
        close_all()
    return folder


@pytest.fixture
def memory(ingested: Path, tmp_path: Path) -> Memory:
    shutil.copytree(ingested, tmp_path / "source")
    return Memory("conv-26", data_dir=str(tmp_path / "source"))


def _contents(document: MemoryDocument) -> tuple[Any, ...]:
    """What a document holds, without what depends on where it lives (namespace, history ids)."""
    records = sorted((r.model_dump(mode="json", exclude={"namespace"}) for r in document.records),
                     key=lambda r: r["id"])
    links = sorted((link.src, link.dst, link.type.value, link.weight) for link in document.links)
    history = [(c.record_id, c.action.value, c.old_text, c.new_text, c.old_fields, c.new_fields, c.reason, c.undone)
               for c in document.history]
    items = [(i.key, i.value, i.text) for i in document.items]
    return records, links, history, [w.model_dump() for w in document.working], document.state, items


def test_an_exported_memory_imported_elsewhere_is_the_same_memory(memory: Memory, tmp_path: Path) -> None:
    deleted = memory.store.all("fact")[3]
    memory.store.delete(deleted.id, reason="a request to forget")
    memory.undo()
    memory.store.delete(deleted.id, reason="asked again")  # history with an undo, and a tombstone
    document = memory.export()
    assert {r.kind for r in document.records} == {"raw", "fact", "episode", "persona", "summary"}
    assert document.links and document.working and document.items and "entity_catalogue" in document.state
    (tmp_path / "memory.json").write_text(document.model_dump_json())

    moved = Memory("moved", data_dir=str(tmp_path / "target"))
    report = moved.import_from(tmp_path / "memory.json")

    assert report.records == len(document.records) and report.history == len(document.history)
    again = moved.export()
    assert _contents(again) == _contents(document)
    undone = [c for c in again.history if c.undoes is not None]
    assert undone and all(moved.store.ledger.get_change("moved", c.undoes) is not None for c in undone)
    for question in QUESTIONS:
        assert moved.retrieve(question).evidence_ids() == memory.retrieve(question).evidence_ids(), question
    assert moved.undo().record_id == deleted.id and moved.get([deleted.id])[0].status.value == "active"
    item = StrataStore(data_dir=str(tmp_path / "target")).get(("moved",), "pet")
    assert item is not None and item.value == {"text": "Melanie has a cat"}


def test_a_persons_copy_holds_only_what_is_theirs(memory: Memory) -> None:
    copy = memory.export(about="Caroline")
    assert copy.about == "Caroline" and copy.records and not copy.links and not copy.items
    said = {r.id for r in memory.store.all("raw") if r.speaker == "Caroline"}
    assert said <= {r.id for r in copy.records}
    caroline_turns = {r.dialogue_id for r in memory.store.all("raw") if r.speaker == "Caroline"}
    for record in copy.records:  # said by her, about her, naming her (not a turn of Melanie's), or from her turns
        assert "Caroline" in (record.speaker, record.subject, record.participant) or (
            set(record.source_ids) & caroline_turns) or (record.kind != "raw" and names_in(record.text, "Caroline")), (
            record.id)
    assert {c.record_id for c in copy.history} <= {r.id for r in copy.records}
    held = [w for w in memory.export().working if w.dia_id in caroline_turns]  # her words in the working memory
    assert held and copy.working == held


def test_a_wrong_import_writes_nothing_and_says_so_in_one_line(memory: Memory, tmp_path: Path) -> None:
    document = memory.export()
    (tmp_path / "not-json.json").write_text("{nope")
    damaged = json.loads(document.model_dump_json())
    damaged["records"][0]["status"] = "sideways"
    twice = json.loads(document.model_dump_json())
    twice["records"].append(twice["records"][0])  # one id twice: Chroma would refuse it halfway
    working_twice = json.loads(document.model_dump_json())
    working_twice["working"].append(working_twice["working"][0])
    renamed = json.loads(document.model_dump_json())
    renamed["records"][0]["id"] = "bogus"  # no kind: no collection holds it, and every later write stumbled on it
    rekinded = json.loads(document.model_dump_json())
    rekinded["records"][0]["kind"] = "fact"  # raw:... stored among the facts
    surrogate = json.loads(document.model_dump_json())
    next(r for r in surrogate["records"] if r["kind"] == "fact")["value"] = "\ud800"  # Chroma's metadata refuses it
    nul = json.loads(document.model_dump_json())  # found by review: on PostgreSQL every later edit then failed
    nul["records"][0]["text"] = "my locker code \x00 4711"
    nul_history = json.loads(document.model_dump_json())
    nul_history["history"][0]["reason"] += "\x00"
    bad_state = json.loads(document.model_dump_json())
    bad_state["state"]["entity_catalogue"] = "x"  # every later ingest read it as a dict
    journal = json.loads(document.model_dump_json())  # an unfinished edit's journal, acted on at the next open:
    journal["state"]["edit_journal"] = [{"change": 1, "undid": 2, "records": [], "created": [], "links": []}]
    erasing = json.loads(document.model_dump_json())  # an unfinished erase's, likewise
    erasing["state"]["erasure_in_progress"] = {"ids": ["raw:D1:1"]}
    nan_weight = json.loads(document.model_dump_json())  # valid to Python's json; the ledger refused it mid-write
    nan_weight["links"][0]["weight"] = float("nan")
    huge_seq = json.loads(document.model_dump_json())  # more than a ledger column holds
    huge_seq["working"][0]["seq"] = 2**63
    follows_later = json.loads(document.model_dump_json())  # renumbered in order: the pointer became None
    assert len(follows_later["history"]) > 1
    follows_later["history"][0]["follows"] = follows_later["history"][-1]["id"]
    wrong: list[Any] = [
        memory.export(about="Caroline"),  # a person's copy, not a backup
        {**json.loads(document.model_dump_json()), "version": 9},
        {**json.loads(document.model_dump_json()), "version": "1"},
        {"format": "something-else"},
        damaged,
        twice,
        working_twice,
        renamed,
        rekinded,
        surrogate,
        nul,
        nul_history,
        bad_state,
        journal,
        erasing,
        nan_weight,
        huge_seq,
        follows_later,
        "[" * 100_000 + "]" * 100_000,  # nested deeper than Python's reader goes
        [1, 2],
        tmp_path / "missing.json",
        tmp_path / "not-json.json",
        str(tmp_path),  # a folder
    ]
    target = Memory("target", data_dir=str(tmp_path / "target"))
    for bad in wrong:
        with pytest.raises(InputError) as error:
            target.import_from(bad)
        assert "\n" not in str(error.value) and str(error.value)
    assert target.stats()["raw"]["active"] == 0 and target.stats()["history"] == 0
    with pytest.raises(InputError, match="a newer strata wrote it: upgrade strata"):
        target.import_from({**json.loads(document.model_dump_json()), "version": 2})
    with pytest.raises(InputError, match="not empty"):
        memory.import_from(document)  # into a namespace that holds a memory already
    assert len(memory.export().records) == len(document.records)


@pytest.mark.slow  # many fresh processes: kept out of the default run's ten minutes
def test_export_and_import_from_the_command_line(memory: Memory, tmp_path: Path, offline_env: dict[str, str]) -> None:
    from strata.memory.registry import close_all

    close_all()  # an embedded folder is one process's at a time
    file = tmp_path / "out" / "memory.json"
    source = [sys.executable, "-m", "strata", "--data-dir", str(tmp_path / "source"), "--namespace", "conv-26"]
    target = [sys.executable, "-m", "strata", "--data-dir", str(tmp_path / "cli"), "--namespace", "moved"]
    wrote = subprocess.run([*source, "export", "--out", str(file)], capture_output=True, text=True, env=offline_env,
                           timeout=300)
    assert wrote.returncode == 0 and "records" in wrote.stdout, wrote.stderr
    ledger = tmp_path / "source" / "ledger.sqlite3"
    for own in (ledger, ledger.with_name("ledger.sqlite3-wal"), tmp_path / "source" / "chroma" / "m.json"):
        refused = subprocess.run([*source, "export", "--out", str(own)], capture_output=True, text=True,
                                 env=offline_env, timeout=300)  # the memory's own files are never written over
        assert refused.returncode == 2 and "would replace the memory's own" in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    assert sqlite3.connect(ledger).execute("SELECT COUNT(*) FROM links").fetchone()[0] > 0
    beside = tmp_path / "source" / "chroma-backup.json"  # a name that only begins like one of its files
    assert subprocess.run([*source, "export", "--out", str(beside)], capture_output=True, text=True,
                          env=offline_env, timeout=300).returncode == 0 and beside.is_file()
    done = subprocess.run([*target, "import", str(file)], capture_output=True, text=True, env=offline_env, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("imported "), done.stderr
    twice = subprocess.run([*target, "import", str(file)], capture_output=True, text=True, env=offline_env,
                           timeout=300)
    assert twice.returncode == 2 and len(twice.stderr.strip().splitlines()) == 1 and "not empty" in twice.stderr
    moved = Memory("moved", data_dir=str(tmp_path / "cli"))
    assert _contents(moved.export()) == _contents(MemoryDocument.model_validate_json(file.read_text()))


def test_the_async_twins_and_the_export_as_text(memory: Memory, tmp_path: Path) -> None:
    document = asyncio.run(memory.aexport())
    report = asyncio.run(Memory("moved", data_dir=str(tmp_path / "async")).aimport_from(document))
    assert report.records == len(document.records)
    as_text = Memory("text", data_dir=str(tmp_path / "async")).import_from(document.model_dump_json())
    assert as_text.records == len(document.records)


def test_an_import_that_fails_halfway_leaves_the_namespace_empty(
    memory: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after the records reached Chroma (here in the last step) takes them back: the namespace is
    empty again and the next import writes it all (a killed process: tests/test_crash_safety.py)."""
    from strata.memory import store_items

    document = memory.export()
    target = Memory("moved", data_dir=str(tmp_path / "target"))

    def dies(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("killed")

    monkeypatch.setattr(store_items, "insert_version", dies)
    with pytest.raises(RuntimeError):
        target.import_from(document)
    assert target.stats()["raw"]["active"] == 0 and target.stats()["history"] == 0
    monkeypatch.undo()

    report = target.import_from(document)

    assert report.records == len(document.records)
    assert _contents(target.export()) == _contents(document)


def test_a_namespace_an_import_has_not_finished_is_neither_read_nor_written_until_it_is(
    memory: Memory, tmp_path: Path
) -> None:
    """A killed import leaves its mark: whatever is read there is part of a memory, and what is written would
    go with the next import, which starts again from nothing. So both are refused, in one line, until an
    import finishes (tests/test_crash_safety.py kills a real one)."""
    from strata.memory.store import IMPORTING

    document = memory.export()
    target = Memory("moved", data_dir=str(tmp_path / "target"))
    target.add([{"speaker": "Bob", "text": "Placeholder.", "dia_id": "Z1:1"}])
    target.drop()
    target.store.add(document.records[:3])  # part of the memory written, as a killed import leaves it
    target.store.ledger.set_state("moved", IMPORTING, document.exported_at.isoformat())
    for call in (lambda: target.add([{"speaker": "Bob", "text": "I adopted a cat.", "dia_id": "B1:1"}]),
                 lambda: target.ask("What did Bob adopt?"), lambda: target.retrieve("What did Bob adopt?"),
                 lambda: target.chat("I adopted a cat.", speaker="Bob"), target.undo, target.consolidate,
                 lambda: target.get(["raw:D1:1"]), target.stats, target.history, target.graph, target.export,
                 lambda: target.erasure_plan(about="Caroline")):
        with pytest.raises(InputError, match="has not finished") as error:
            call()
        assert "\n" not in str(error.value) and "import again" in str(error.value) and "wait for it" in str(error.value)
    assert target.store.get(["raw:B1:1"]) == []  # (direct access: the calls above refuse)

    report = target.import_from(document)  # the next import writes it all

    assert report.records == len(document.records) and _contents(target.export()) == _contents(document)
    assert target.retrieve(QUESTIONS[0]).evidence


def _namespace_holds(memory: Memory) -> tuple[int, int, int, int]:
    """Records, links, history rows and working-memory rows of a memory's namespace, read from the stores."""
    store, ns = memory.store, memory.store.namespace
    with store.ledger.reading() as session:
        working = session.execute("SELECT COUNT(*) FROM working WHERE namespace = ?", (ns,)).fetchone()[0]
    return (sum(store.count(kind) for kind in ("raw", "fact", "episode", "persona", "summary")),
            sum(store.ledger.count_links(ns).values()), store.ledger.count_history(ns), int(working))


def test_an_import_naming_records_it_does_not_hold_is_refused_and_writes_nothing(
    memory: Memory, tmp_path: Path
) -> None:
    """An export without its records imported 'successfully' and left a namespace no command could use nor a
    later import repair; links, history and working memory naming a missing record went in without a word."""
    document = json.loads(memory.export().model_dump_json())
    assert any(link["dst"].startswith("entity:") for link in document["links"])  # a node, not a record: imported
    no_records = {key: value for key, value in document.items() if key != "records"}
    ghost_link = json.loads(json.dumps(document))
    ghost_link["links"].append({"namespace": "conv-26", "src": "raw:GHOST", "dst": "raw:D1:1", "type": "temporal",
                                "weight": 1.0})
    ghost_change = json.loads(json.dumps(document))
    ghost_change["history"][0]["record_id"] = "raw:GHOST"
    ghost_turn = json.loads(json.dumps(document))
    ghost_turn["working"].append({**ghost_turn["working"][0], "seq": 999, "dia_id": "GHOST", "text": "never said"})
    link_twice = json.loads(json.dumps(document))
    link_twice["links"].append(link_twice["links"][0])  # stored once: the report said one more than it wrote
    target = Memory("target", data_dir=str(tmp_path / "target"))
    for bad, says in ((no_records, "no records"), (ghost_link, "raw:GHOST"), (ghost_change, "raw:GHOST"),
                      (ghost_turn, "GHOST"), (link_twice, "twice")):
        with pytest.raises(InputError, match=says) as error:
            target.import_from(bad)
        assert "\n" not in str(error.value) and "nothing was imported" in str(error.value)
        assert _namespace_holds(target) == (0, 0, 0, 0)
    report = target.import_from(document)  # the namespace is still empty and usable: the real export goes in
    assert (report.records, report.links, report.history, report.working) == _namespace_holds(target)
    assert target.stats()["history"] == len(document["history"])


def test_a_memory_after_a_purge_and_an_erase_still_moves(memory: Memory, tmp_path: Path) -> None:
    """What a real memory holds is never refused: a purge keeps the links, history and working-memory rows of
    the tombstones it removes; an erase takes its records' rows along. The report counts what was stored."""
    turn = memory.store.all("raw")[-1]
    memory.store.delete(turn.id, reason="a request to forget")
    assert memory.store.purge() == 1
    memory.erase([memory.store.all("raw")[5].id])
    document = memory.export()
    held = {r.id for r in document.records}
    assert turn.id not in held and any(c.record_id == turn.id for c in document.history)

    moved = Memory("moved", data_dir=str(tmp_path / "target"))
    report = moved.import_from(document)

    assert (report.records, report.links, report.history, report.working) == _namespace_holds(moved)
    assert _contents(moved.export()) == _contents(document)


def test_an_undo_imported_names_the_change_it_undid_by_its_new_id(memory: Memory, tmp_path: Path) -> None:
    """History ids are renumbered on import; an undo's reason ('undo of change 18') named the old id, which
    `strata undo` then did not find (or found another change of that number)."""
    fact = memory.store.all("fact")[3]
    memory.store.delete(fact.id, reason="a request to forget")
    memory.undo()
    document = memory.export()
    undo = next(c for c in document.history if c.undoes is not None)
    assert undo.reason == f"undo of change {undo.undoes}"

    moved = Memory("moved", data_dir=str(tmp_path / "source"))  # the same ledger: new ids, after the source's
    moved.import_from(document)

    undos = [c for c in moved.export().history if c.undoes is not None]
    assert undos and all(c.reason == f"undo of change {c.undoes}" for c in undos)
    assert {c.undoes for c in undos}.isdisjoint({c.undoes for c in document.history if c.undoes is not None})
    assert all(moved.store.ledger.get_change("moved", int(c.undoes or 0)) is not None for c in undos)


@pytest.mark.parametrize("counter", [None, 0])
def test_an_import_numbers_the_next_turn_past_the_stored_ones(
    memory: Memory, tmp_path: Path, counter: int | None
) -> None:
    """An export's state is optional: without its turn counter (or with it behind), the next turn without an id
    was given a stored turn's id (T1) and refused."""
    from strata.memory.turn_ids import TURN_COUNTER

    memory.add([{"speaker": "Caroline", "text": "I started learning the cello."},
                {"speaker": "Melanie", "text": "That sounds lovely."}])  # raw:T1, raw:T2
    document = json.loads(memory.export().model_dump_json())
    assert document["state"][TURN_COUNTER] == 2
    if counter is None:
        del document["state"][TURN_COUNTER]
    else:
        document["state"][TURN_COUNTER] = counter
    moved = Memory("moved", data_dir=str(tmp_path / "target"))
    moved.import_from(document)
    assert moved.store.state(TURN_COUNTER) == 2

    moved.add([{"speaker": "Caroline", "text": "My teacher is patient."}])

    assert [r.text for r in moved.get(["raw:T3"])] == ["My teacher is patient."]
    assert [r.text for r in moved.get(["raw:T1"])] == ["I started learning the cello."]


def test_an_ablation_runs_consolidated_turns_travel_with_the_export(
    tmp_path: Path, locomo_dir: Path, embedder: Any
) -> None:
    """A memory consolidated with causal links off keeps its own list of done turns; the export left it out,
    so the imported copy's first consolidation with the same settings did every turn again."""
    turns = [t for s in load_turns(locomo_dir / "conv-26.json").sessions for t in s.turns][:30]
    source = Memory("ablated", data_dir=str(tmp_path / "source"), causal_links=False)
    source.add(turns)
    assert source.consolidate().turns == len(turns)
    document = source.export()
    assert any(key.endswith(":entity") for key in document.state)  # the entity-only run's list
    copy = Memory("ablated", data_dir=str(tmp_path / "copy"), causal_links=False)
    copy.import_from(document)
    assert copy.consolidate().turns == source.consolidate().turns == 0
