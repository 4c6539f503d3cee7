"""An ingest killed with SIGKILL at chosen writes, each time run again, ends exactly where an
uninterrupted ingest ends.

The ingest runs in a subprocess (tests/crash_ingest.py: the `ingest_conversation` the CLI
uses, a LoCoMo slice and a move that the Refresher settles, offline). Every write of the
memory layer reports a label, and the process kills itself at the n-th label of a given
kind: deterministic kill points, no sleeps. After each kill the same ingest runs again,
and the next kill lands further on, so the kills march through the whole run: before,
during and after the raw write, during derivation and the staged flush, during the
graph's note evolutions, and inside the Refresher's update. At the end, compared with
an uninterrupted ingest of the same conversation: every turn stored once and in exactly
one episode, the same records (notes and evolved tags included), links of every type
(research's `related` findings up to near-ties, see RELATED_SHARE) and history, nothing
pending or half applied, and the store opens and answers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from crash_ingest import NAMESPACE, conversation
from servers import REPO, PostgresServer
from strata.agents.memory import PENDING, open_segment
from strata.memory.journal import EDIT_JOURNAL
from strata.memory.records import KINDS, Action
from strata.memory.registry import close_all

from strata.api import Memory
from strata.ingestion import ingest_conversation

PROCESS_TIMEOUT = 600
# `related` links record what a turn's light search found (two lists agreeing on a raw turn), so a near-tie in
# that ranking may fall either way when the ingest is split across processes, which batch their embeddings
# differently: the same sessions ingested by two processes, with no crash at all, already move one of ~100.
# Up to this share of them may differ; every other link type, record and history row must be equal.
RELATED_SHARE = 0.02
QUESTION = "When did Caroline go to the LGBTQ support group?"
ANSWER_TURN = "D1:3"

# (label, n): the run kills itself at the n-th write whose label contains `label` (crash_ingest.py), counted
# from the start of that run; `A>B` at the first B after the n-th A. A run after a kill skips what is stored and
# redoes the rest, so the plan marches through the ingest: conv-26 sessions 1 and 2 (S1, S2: one batch each),
# then the two short sessions of Caroline's move, whose second turn makes the Refresher update.
KILL_PLAN: list[tuple[str, int]] = [
    ("ledger:commit", 1),  # S1: the pending marks, not committed (before the raw write)
    ("add:raw:before", 1),  # pending marked, raw turns not written
    ("add:raw:before>ledger:commit", 1),  # during the raw write: in Chroma, its transaction not committed
    ("add:raw:after", 1),  # raw turns written, nothing derived
    ("evolve:before>ledger:commit", 3),  # derivation: an evolution's history row and journal entry, uncommitted
    ("rewrite:raw:after", 4),  # an evolution's history committed, its record staged, the batch not written
    ("add:batch:before", 1),  # S1 derived and staged, the batch not written
    ("add:batch:before>ledger:commit", 1),  # the batch's records in Chroma, their transaction not committed
    ("add:batch:after", 1),  # the batch's records written, its links, state and pending marks not
    ("add:episode:before", 1),  # S1's last episode, before it is written
    ("add:episode:after", 1),  # that episode written, the open segment not cleared
    ("add:raw:after", 1),  # S2: raw turns written
    ("evolve:after", 6),  # in the middle of S2's evolutions
    ("rewrite:raw:before", 10),  # an evolution's history row committed, its record not yet rewritten
    ("add:batch:after", 1),  # S2's batch records written, its links and state not
    ("add:episode:after", 1),  # S2's last episode written, the open segment not cleared
    ("rewrite:fact:before", 1),  # the move: the Refresher's history row committed, the fact not rewritten
    ("rewrite:fact:after", 1),  # the fact rewritten, the persona trait not yet retired
    ("rewrite:persona:before", 1),  # the update redone; the trait's history row committed, Chroma not
    ("refresh:supersede:after>add:batch:before", 1),  # the refresh done and cleared, the turn not derived
]
QUICK_SESSIONS, SESSIONS = 1, 2
QUICK_PLAN: list[tuple[str, int]] = [
    ("add:batch:after", 1),  # the derived records in Chroma, their links, state and pending marks not
    ("rewrite:raw:after", 3),  # an evolution's history committed, its record staged, the batch not written
    ("rewrite:fact:after", 1),  # the Refresher's update in Chroma, the persona trait not yet retired
]


def run_ingest(data_dir: Path, env: dict[str, str], file: Path, sessions: int, target: str, nth: int
               ) -> subprocess.CompletedProcess[str]:
    return run_script(data_dir, env, target, nth, "ingest", str(file), str(sessions))


def run_script(data_dir: Path, env: dict[str, str], target: str, nth: int, *args: str
               ) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(REPO / "tests" / "crash_ingest.py"), str(data_dir), target, str(nth), *args]
    return subprocess.run(command, cwd=REPO, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=PROCESS_TIMEOUT)


def snapshot(data_dir: Path) -> dict[str, Any]:
    """Every record as stored, every link, the history, what is left pending or open, and an answer."""
    memory = Memory(NAMESPACE, data_dir=str(data_dir))
    store = memory.store
    records = {kind: sorted((r.model_dump(mode="json") for r in store.all(kind, include_inactive=True)),
                            key=lambda r: r["id"]) for kind in KINDS}
    with store.ledger.backend.read() as session:
        links = sorted(tuple(row) for row in session.execute(
            "SELECT src, dst, type, weight FROM links WHERE namespace = ?", (NAMESPACE,)).fetchall())
    changes = list(reversed(store.history(limit=100_000)))
    found = {
        "records": records, "links": links,
        "history": [(c.record_id, c.action.value, c.old_text, c.new_text, c.new_status.value, c.new_fields, c.undone)
                    for c in changes],
        "pending": store.state(PENDING, []), "open": open_segment(store).turn_ids,
        "journal": store.state(EDIT_JOURNAL, []),
        "state": {key: store.state(key) for key in ("last_raw", "entity_catalogue")},
        "answer": memory.ask(QUESTION).evidence_ids(),
    }
    found["history_agrees"] = history_agrees(changes, {r["id"]: r for kind in KINDS for r in records[kind]})
    close_all()
    return found


def history_agrees(changes: list[Any], records: dict[str, dict[str, Any]]) -> list[str]:
    """Records whose latest change in history does not leave them as they are stored (empty when all agree)."""
    latest: dict[str, Any] = {}
    for change in changes:
        if change.action != Action.NOOP:
            latest[change.record_id] = change
    wrong: list[str] = []
    for record_id, change in latest.items():
        record = records.get(record_id)
        tags = json.loads(change.new_fields.get("tags", "null")) if change.action == Action.EVOLVE else None
        if record is None or record["text"] != change.new_text or record["status"] != change.new_status.value or (
            tags is not None and record["tags"] != tags
        ):
            wrong.append(record_id)
    return wrong


def crash_and_resume(tmp_path: Path, locomo_dir: Path, env: dict[str, str], sessions: int,
                     plan: list[tuple[str, int]]) -> None:
    file = locomo_dir / "conv-26.json"
    ingest_conversation(Memory(NAMESPACE, data_dir=str(tmp_path / "uninterrupted")), conversation(file, sessions))
    baseline = snapshot(tmp_path / "uninterrupted")
    assert any(c[1] == "update" for c in baseline["history"]), "the slice no longer makes the Refresher update"

    crashed = tmp_path / "crashed"
    outcomes = [run_ingest(crashed, env, file, sessions, target, nth) for target, nth in plan]
    missed = [(point, o.returncode, o.stderr[-2000:]) for point, o in zip(plan, outcomes, strict=True)
              if o.returncode != -9]
    assert not missed, f"runs not killed where planned (the plan ran past the ingest, or it failed): {missed}"
    ingest_conversation(Memory(NAMESPACE, data_dir=str(crashed)), conversation(file, sessions))  # the same add again
    after = snapshot(crashed)

    assert baseline["history_agrees"] == [] and ANSWER_TURN in baseline["answer"]
    problems = differences(after, baseline)
    print(f"{len(plan)} kills; differences from the uninterrupted ingest: {problems or 'none'}")
    assert problems == []


def differences(after: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """Every way the resumed memory differs from the uninterrupted one (empty when it does not)."""
    found: list[str] = []
    raws = after["records"]["raw"]
    if not len(raws) == len({r["id"] for r in raws}) == len(baseline["records"]["raw"]):
        found.append(f"{len(raws)} raw turns stored, {len(baseline['records']['raw'])} expected once each")
    members = sorted(i for e in after["records"]["episode"] for i in e["source_ids"])
    if members != sorted(r["dialogue_id"] for r in raws):
        doubled = sorted({i for i in members if members.count(i) > 1})
        missing = sorted({r["dialogue_id"] for r in raws} - set(members))
        found.append(f"turns not in exactly one episode: in several {doubled}, in none {missing}")
    for key in ("pending", "open", "journal"):
        if after[key]:
            found.append(f"{key} left: {after[key]}")
    if after["history_agrees"]:
        found.append(f"records whose history does not end where they are: {after['history_agrees']}")
    for kind in KINDS:
        mine, theirs = ({r["id"]: r for r in side["records"][kind]} for side in (after, baseline))
        changed = sorted(i for i in mine.keys() | theirs.keys() if mine.get(i) != theirs.get(i))
        if changed:
            found.append(f"{len(changed)} {kind} records differ: {changed[:5]}")
    for link_type in sorted({link[2] for side in (after, baseline) for link in side["links"]}):
        mine, theirs = ({k for k in side["links"] if k[2] == link_type} for side in (after, baseline))
        allowed = int(RELATED_SHARE * len(theirs)) if link_type == "related" else 0
        if len(mine - theirs) > allowed or len(theirs - mine) > allowed:
            found.append(f"{link_type} links: {len(mine - theirs)} extra, {len(theirs - mine)} missing")
        elif mine != theirs:
            print(f"{link_type} links: {len(mine - theirs)} of {len(theirs)} differ (within {RELATED_SHARE:.0%})")
    if after["history"] != baseline["history"]:
        found.append(f"history: {len(after['history'])} rows, {len(baseline['history'])} in the uninterrupted run")
    if after["state"] != baseline["state"]:
        found.append("link-tracking state differs")
    if after["answer"] != baseline["answer"]:
        found.append(f"the answer's evidence differs: {after['answer']} against {baseline['answer']}")
    return found


@pytest.mark.slow
@pytest.mark.timeout(3600)  # 20 processes, each loading the embedder and Chroma
def test_an_ingest_killed_at_twenty_writes_ends_as_an_uninterrupted_one(
    tmp_path: Path, locomo_dir: Path, offline_env: dict[str, str], embedder: object
) -> None:
    crash_and_resume(tmp_path, locomo_dir, offline_env, SESSIONS, KILL_PLAN)


@pytest.mark.timeout(1200)  # three processes: well under a minute on idle cores
def test_an_ingest_killed_at_three_writes_ends_as_an_uninterrupted_one(
    tmp_path: Path, locomo_dir: Path, offline_env: dict[str, str], embedder: object
) -> None:
    crash_and_resume(tmp_path, locomo_dir, offline_env, QUICK_SESSIONS, QUICK_PLAN)


# ----------------------------------------------------------------------------- one edit, on either ledger

# An update killed between its steps: (kill point, what the crash left).
EDIT_KILLS = [
    "rewrite:fact:before",  # the history row and journal entry committed, the record not rewritten
    "rewrite:fact:before>ledger:commit",  # the record rewritten in Chroma, its change-sequence stamp not committed
    "rewrite:fact:after",  # the record rewritten, the journal not cleared
]
MOVED = "Caroline lives in Denver."


def killed_edits_are_taken_back(data_dir: Path, env: dict[str, str], **settings: str) -> None:
    """Each killed update leaves, once the memory is opened again, the record as it was and no history row;
    the same update then runs once, with one row."""
    memory = Memory(NAMESPACE, data_dir=str(data_dir), **settings)
    memory.add({"speaker": "Caroline", "text": "I live in Boston with my two cats.", "dia_id": "D1:1",
                "time": "2023-05-08T13:56"})
    fact = next(f for f in memory.store.all("fact") if f.value == "Boston")
    close_all()  # the folder is the subprocess's now
    for target in EDIT_KILLS:
        killed = run_script(data_dir, env, target, 1, "update", fact.id, MOVED)
        assert killed.returncode == -9, (target, killed.stderr[-2000:])
        store = Memory(NAMESPACE, data_dir=str(data_dir), **settings).store  # opening it takes the edit back
        assert store.get_one(fact.id) == fact, target
        assert [c.action for c in store.history()] == [], target
        assert store.state(EDIT_JOURNAL, []) == [], target
        close_all()
    store = Memory(NAMESPACE, data_dir=str(data_dir), **settings).store
    change = store.update(fact.id, MOVED, reason="moved", policy="user")
    assert store.get_one(fact.id).text == MOVED and store.get_one(fact.id).version == fact.version + 1
    assert [c.id for c in store.history()] == [change.id] and store.state(EDIT_JOURNAL, []) == []


def test_an_edit_killed_midway_is_taken_back_on_the_sqlite_ledger(
    data_dir: Path, offline_env: dict[str, str], embedder: object
) -> None:
    killed_edits_are_taken_back(data_dir, offline_env)


@pytest.mark.slow
def test_an_edit_killed_midway_is_taken_back_on_the_postgres_ledger(
    data_dir: Path, offline_env: dict[str, str], embedder: object, postgres: PostgresServer
) -> None:
    url = postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")
    killed_edits_are_taken_back(data_dir, {**offline_env, "STRATA_LEDGER_URL": url}, ledger_url=url)


# (label, n) for an import (memory/portability.py), as above, counted from the start of each run (a run after a
# kill first drops what the killed one wrote): the import's mark in the ledger, its records, its one ledger
# transaction for the rest.
IMPORT_KILLS: list[tuple[str, int]] = [
    ("ledger:commit", 1),  # the first run: the mark that an import is under way, not committed
    ("add:>ledger:commit", 1),  # the records in Chroma, their change sequence not committed
    ("add:", 2),  # the records written (`add:...:after`), links, history and state not
    ("add:>ledger:commit", 2),  # links, history, working memory, state and items in, not committed
]


@pytest.mark.timeout(1200)  # four killed processes, then the import that finishes in this one
def test_an_import_killed_at_any_step_is_written_whole_by_the_next(
    tmp_path: Path, locomo_dir: Path, offline_env: dict[str, str], embedder: object
) -> None:
    source = Memory("source", data_dir=str(tmp_path / "source"))
    ingest_conversation(source, conversation(locomo_dir / "conv-26.json", QUICK_SESSIONS))
    document = source.export()
    file = tmp_path / "export.json"
    file.write_text(document.model_dump_json())
    target = tmp_path / "target"
    for label, nth in IMPORT_KILLS:
        killed = run_script(target, offline_env, label, nth, "import", str(file))
        assert killed.returncode == -9, f"{label} #{nth} was never reached: {killed.stderr[-1500:]}"
    Memory(NAMESPACE, data_dir=str(target)).import_from(file)  # the next import, in this process: only a killed
    close_all()  # one needs a process of its own; the export below reads the folder opened afresh
    moved = Memory(NAMESPACE, data_dir=str(target)).export()
    assert sorted(r.model_dump_json(exclude={"namespace"}) for r in moved.records) == sorted(
        r.model_dump_json(exclude={"namespace"}) for r in document.records)
    assert sorted((x.src, x.dst, x.type) for x in moved.links) == sorted((x.src, x.dst, x.type) for x in document.links)
    assert [(c.record_id, c.action) for c in moved.history] == [(c.record_id, c.action) for c in document.history]
    assert moved.state == document.state and moved.working == document.working
    close_all()
