"""A change of a single-valued slot keeps history: the older fact is superseded, not rewritten.

Found by audit (runs/audit_refresh/REPORT.md, bug 1): after "I live in Boston" (May) and "I moved to Denver"
(September), May's fact was rewritten to say Denver while still citing May's turn, so "Where did Ann live in
May?" got the new city. Now the older fact keeps its words, is marked superseded with an end (the newer turn's
time), is still found for a question about a time it held and is shown there as past, while a question about
now gets the newer value. Undo, forget, erase, export/import and reopening keep that. Each test runs real
turns offline through the whole graph.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from strata.memory.records import Action, Status
from strata.memory.registry import close_all

from strata import Memory
from strata.cli import main

MAY_FACT = "fact:D1:1:0"
MOVED = datetime(2023, 9, 1, 10, 0)


def said(speaker: str, listener: str, text: str, time: str, dia_id: str) -> dict[str, str]:
    return {"speaker": speaker, "listener": listener, "text": text, "time": time, "dia_id": dia_id}


def moved(memory: Memory) -> None:
    memory.add([said("Ann", "Bob", "I live in Boston.", "2023-05-01T10:00", "D1:1")])
    memory.add([said("Ann", "Bob", "I moved to Denver last week.", "2023-09-01T10:00", "D2:1")])


@pytest.fixture
def memory(data_dir: Path, embedder: Any) -> Iterator[Memory]:
    memory = Memory("moves", data_dir=str(data_dir))
    moved(memory)
    yield memory
    close_all()


def assert_kept(memory: Memory) -> None:
    """May's fact still says what May's turn said, superseded since the move was told."""
    [old] = memory.get([MAY_FACT])
    assert (old.text, old.status, old.source_ids) == ("Ann lives in Boston.", Status.SUPERSEDED, ["D1:1"])
    assert memory.store.valid_until([old]) == {MAY_FACT: MOVED}


def test_a_past_time_question_is_answered_from_the_superseded_fact(memory: Memory) -> None:
    assert_kept(memory)
    answer = memory.ask("Where did Ann live in May 2023?")
    assert answer.answer == "Boston" and answer.cited_ids == ["D1:1"]
    [past] = [e for e in answer.evidence if e.id == MAY_FACT]  # found for the time it held, shown as past
    assert past.until == MOVED and "until 1 September 2023" in past.line
    assert answer.verdict is not None and answer.verdict.action != "Refresh"  # past, not a live conflict
    assert answer.changes == []


def test_a_question_about_now_gets_the_newer_value(memory: Memory) -> None:
    answer = memory.ask("Where does Ann live?")
    assert answer.answer == "Denver" and answer.cited_ids == ["D2:1"]
    assert MAY_FACT not in [e.id for e in answer.evidence]  # no time asked: the superseded fact stays out


def test_the_change_notes_say_what_the_history_says(data_dir: Path, embedder: Any) -> None:
    """Found by audit (runs/audit_docs, item 4): the note of a supersede gave the newer statement as its
    `new_text` (for the persona trait, the raw turn "I live in Denver now, ..."), while `history()` for the
    same change id said the record kept its words and was superseded. An app showing "before / after" from
    the notes misreported what is stored. Now each note is its history row: same texts and statuses, and
    the record that superseded it."""
    memory = Memory("notes", data_dir=str(data_dir))
    memory.add([said("Ann", "Bob", "I live in Boston now.", "2023-05-01T10:00", "D1:1")])
    report = memory.add([said("Ann", "Bob", "I live in Denver now, I moved there from Boston.", "2023-06-01T10:00",
                              "D2:1")])
    edits = [note for note in report.changes if note.action != "noop"]
    assert {note.record_id.split(":")[0] for note in edits} == {"fact", "persona"}  # the fact, and its trait
    rows = {row.id: row for row in memory.history(limit=50)}
    for note in edits:
        row = rows[note.change_id]
        assert (note.record_id, note.old_text, note.new_text) == (row.record_id, row.old_text, row.new_text)
        assert (note.old_status, note.new_status) == (row.old_status, row.new_status)
        [record] = memory.get([note.record_id])
        assert (record.text, record.status) == (note.new_text, note.new_status) == (note.old_text, Status.SUPERSEDED)
        assert note.superseded_by and memory.get([note.superseded_by])  # the newer record, stored
    close_all()


def test_a_question_about_a_period_gets_the_value_said_by_its_end(memory: Memory) -> None:
    """Found by review: with Austin told in November, "in October" got Austin (the best-scoring statement),
    and with only Boston and Denver it got Boston (the raw May turn). The value then is the latest said by the
    period's end, of the statements not superseded before it began."""
    memory.add([said("Ann", "Bob", "I live in Austin now.", "2023-11-01T10:00", "D3:1")])
    for question, city, turn in [("Where did Ann live in June 2023?", "Boston", "D1:1"),
                                 ("Where was Ann living in October 2023?", "Denver", "D2:1"),
                                 ("Where did Ann live in December 2023?", "Austin", "D3:1"),
                                 ("Where does Ann live?", "Austin", "D3:1")]:
        answer = memory.ask(question)
        assert (answer.answer, answer.cited_ids) == (city, [turn]), question


@pytest.mark.parametrize("told", ["Did you hear? I moved to Denver.", "Have you heard? I moved to Denver last week."])
def test_a_turn_that_asks_and_states_a_move_is_read_alike_by_the_judge_and_the_refresher(
    data_dir: Path, embedder: Any, told: str
) -> None:
    """Found by review: the Judge took a turn opening with a question word ("Did you hear?") for a question
    and named no conflict, while the Refresher read it as the statement it is; both now read it by one
    rule (`facts.only_asks`), so the move supersedes May's fact."""
    memory = Memory("told", data_dir=str(data_dir))
    memory.add([said("Ann", "Bob", "I live in Boston.", "2023-05-01T10:00", "D1:1")])
    memory.chat(told, speaker="Ann")
    [old] = memory.get([MAY_FACT])
    assert old.status == Status.SUPERSEDED, told
    close_all()


@pytest.mark.parametrize("told", ["I moved to Denver, did you know?", "I moved to Denver last week, right?",
                                  "Did you hear? I moved to Denver, isn't that great?"])
def test_a_move_told_before_a_tag_question_supersedes_the_older_home(data_dir: Path, embedder: Any, told: str) -> None:
    """Found by review: a statement before a tag question counted as only asked (`slots.in_question` read every
    sentence ending in "?" as a question), so Ann's own move was kept from superseding her own Boston, and the
    Judge named no conflict. A tag now leaves the statement stated: the Judge names it and the Refresher acts."""
    memory = Memory("tagged", data_dir=str(data_dir))
    memory.add([said("Ann", "Bob", "I live in Boston.", "2023-05-01T10:00", "D1:1")])
    answer = memory.chat(told, speaker="Ann")
    assert answer.verdict is not None and answer.verdict.action == "Refresh", told
    assert [MAY_FACT, "new"] in answer.verdict.conflicts
    [old] = memory.get([MAY_FACT])
    assert old.status == Status.SUPERSEDED, told
    # and the offline answer reads the tagged turn as a statement too, not as a question to pass over
    assert "Denver" in memory.ask("Where does Ann live?").answer, told
    close_all()


def test_undoing_the_update_makes_the_older_fact_current_again(memory: Memory) -> None:
    memory.undo()  # the supersession, and the trait retired with it
    [old] = memory.get([MAY_FACT])
    assert (old.text, old.status) == ("Ann lives in Boston.", Status.ACTIVE)
    assert memory.store.valid_until([old]) == {} and "raw:D2:1" not in memory.store.neighbours([MAY_FACT])
    assert [p.status for p in memory.store.all("persona", include_inactive=True) if p.value == "Boston"] == [
        Status.ACTIVE]


def moved_twice(memory: Memory) -> None:
    """Boston (January), Denver (March), Austin (May): each move supersedes the value before."""
    for text, month, turn in [("I live in Boston.", "01", "D1:1"), ("I moved to Denver.", "03", "D2:1"),
                              ("I moved to Austin.", "05", "D3:1")]:
        memory.add([said("Ann", "Bob", text, f"2023-{month}-10T10:00", turn)])


def current_homes(memory: Memory) -> list[str]:
    homes = [f.value for f in memory.store.all("fact") if f.attribute == "lives_in"]
    traits = [p.value for p in memory.store.all("persona") if p.attribute == "lives_in"]
    assert sorted(traits) == sorted(homes)  # a trait stands and falls with its fact
    return sorted(homes)


def test_undoing_an_older_change_of_a_chain_leaves_one_current_value(data_dir: Path, embedder: Any) -> None:
    """Found by review: undoing Boston -> Denver by its id while Denver -> Austin stood made Boston current
    beside Austin: two current values of one slot. Now Boston is superseded by Austin, the value that
    stands, in a change of its own after the undo; history tells both, and the next undo reverses it."""
    memory = Memory("chain", data_dir=str(data_dir))
    moved_twice(memory)
    [first] = [c for c in memory.history(MAY_FACT) if c.action == Action.UPDATE]
    assert current_homes(memory) == ["Austin"]

    undo = memory.undo(first.id)

    assert (undo.undoes, undo.new_status) == (first.id, Status.ACTIVE)  # the undo did what was asked
    assert current_homes(memory) == ["Austin"]
    facts = memory.store.all("fact", include_inactive=True)
    assert sorted(f.text for f in facts) == ["Ann lives in Boston.", "Ann moved to Austin.", "Ann moved to Denver."]
    assert memory.store.valid_until(facts) == {MAY_FACT: datetime(2023, 5, 10, 10, 0),
                                               "fact:D2:1:0": datetime(2023, 5, 10, 10, 0)}
    [settled] = [c for c in memory.history(MAY_FACT) if (c.id or 0) > (undo.id or 0)]
    assert (settled.action, settled.old_status, settled.new_status) == (Action.UPDATE, Status.ACTIVE,
                                                                       Status.SUPERSEDED)
    assert f"after the undo of change {first.id}" in settled.reason and settled.cause == "D3:1"
    for question, city in [("Where does Ann live?", "Austin"), ("Where did Ann live in February 2023?", "Boston"),
                           ("Where did Ann live in April 2023?", "Denver")]:
        assert memory.ask(question).answer == city, question

    again = memory.undo()  # the change the undo led to is undone as any other, and stays undone
    assert again.undoes == settled.id and current_homes(memory) == ["Austin", "Boston"]
    assert memory.ask("Where does Ann live?", refresh=True).answer == "Austin"
    assert current_homes(memory) == ["Austin", "Boston"]  # the Refresher does not make it again
    close_all()


def test_the_command_line_says_what_the_undo_led_to(
    data_dir: Path, embedder: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`strata undo 1` printed "it is active again" and nothing more, though Austin had superseded Boston since."""
    moved_twice(Memory("chain", data_dir=str(data_dir)))
    close_all()
    assert main(["--data-dir", str(data_dir), "--namespace", "chain", "undo", "1"]) == 0
    out = capsys.readouterr().out
    assert "undid change #1 on fact:D1:1:0: it is active again" in out
    [then] = [line for line in out.splitlines() if line.startswith("then change #")]
    assert "fact:D1:1:0 is superseded, superseded by fact:D3:1:0" in then and "makes it active again" in then


def test_undoing_a_chain_newest_first_keeps_what_each_undo_asked(data_dir: Path, embedder: Any) -> None:
    """Undoing Denver -> Austin leaves both current (the user took that change back, and the Refresher does
    not make it again); undoing Boston -> Denver next makes Boston current, and Austin, said later and never
    taken back against Boston, supersedes it, as the Refresher would at the next question that refreshes."""
    memory = Memory("chain", data_dir=str(data_dir))
    moved_twice(memory)
    memory.undo()
    assert current_homes(memory) == ["Austin", "Denver"]
    memory.undo()
    assert current_homes(memory) == ["Austin", "Denver"]
    assert memory.store.valid_until(memory.get([MAY_FACT])) == {MAY_FACT: datetime(2023, 5, 10, 10, 0)}
    memory.undo()  # and that one too
    assert current_homes(memory) == ["Austin", "Boston", "Denver"]
    close_all()


def test_a_request_to_forget_reaches_the_superseded_fact_and_its_undo_gives_it_back_as_it_was(
    memory: Memory,
) -> None:
    memory.add([said("Ann", "Bob", "Please forget where I live.", "2023-09-02T10:00", "D3:1")])
    [old] = memory.get([MAY_FACT])
    assert old.status == Status.DELETED
    [forgot] = [c for c in memory.history(MAY_FACT) if c.action == Action.DELETE]
    assert forgot.old_status == Status.SUPERSEDED
    assert memory.ask("Where did Ann live in May 2023?").answer != "Boston"
    memory.undo()  # the request, with every record it forgot
    assert_kept(memory)


def test_an_erase_settles_the_slot_again_and_the_change_it_made_can_be_undone(data_dir: Path, embedder: Any) -> None:
    """Ann's "You moved to Zorbatown" came between Bob's two statements; erasing Ann took back her supersession
    of Denver, which left Denver and Austin both current."""
    memory = Memory("pair", data_dir=str(data_dir))
    memory.add([said("Bob", "Ann", "I live in Denver.", "2023-05-01T10:00", "D1:1"),
                said("Ann", "Bob", "You moved to Zorbatown last week, near Quillfeather Lane.", "2023-06-01T10:00",
                     "D2:1"),
                said("Bob", "Ann", "I live in Austin now.", "2023-07-01T10:00", "D3:1")])
    memory.erase(about="Ann")
    current = [f.id for f in memory.store.all("fact") if f.attribute == "lives_in"]
    assert current == ["fact:D3:1:0"]
    [denver] = memory.get([MAY_FACT])
    assert denver.status == Status.SUPERSEDED
    assert memory.store.valid_until([denver]) == {MAY_FACT: datetime(2023, 7, 1, 10, 0)}
    assert memory.ask("Where does Bob live?").answer == "Austin"
    assert memory.ask("Where did Bob live in May 2023?").answer == "Denver"
    [settled] = [c for c in memory.history(MAY_FACT) if c.action == Action.UPDATE]
    assert settled.cause == "D3:1"  # made for Bob's turn: erasing it would take this back too
    memory.undo()  # an ordinary change: the latest one, reversed with the trait it retired
    assert memory.get([MAY_FACT])[0].status == Status.ACTIVE
    # and it stays undone: the value its reason names was not read past "; settled again after an erase"
    assert memory.ask("Where does Bob live?", refresh=True).answer == "Austin"
    assert memory.get([MAY_FACT])[0].status == Status.ACTIVE
    close_all()


def test_export_and_import_keep_the_supersession(memory: Memory, tmp_path: Path) -> None:
    copy = Memory("moves", data_dir=str(tmp_path / "copy"))
    copy.import_from(memory.export())
    assert_kept(copy)
    assert copy.ask("Where did Ann live in May 2023?").answer == "Boston"
    assert copy.ask("Where does Ann live?").answer == "Denver"


def test_reopening_keeps_the_supersession(memory: Memory, data_dir: Path) -> None:
    close_all()
    again = Memory("moves", data_dir=str(data_dir))
    assert_kept(again)
    assert again.ask("Where did Ann live in May 2023?").answer == "Boston"
