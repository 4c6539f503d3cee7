"""The offline Judge and Refresher leave alone what is not a newer statement of the subject's own.

Found by audit (runs/audit_refresh/REPORT.md): another person's tag question superseded the subject's own
words; a change the user undid was made again on the next turn; a move told as past ("in 2015") replaced the
current home. Each test ingests real turns offline through the whole graph. (The older fact is still rewritten
in place by a newer statement: what an erase takes back depends on it, see tests/test_erasure.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from strata.memory.records import Action, Status
from strata.memory.registry import close_all
from strata.memory.slots import UNDONE

from strata import Memory


@pytest.fixture
def memory(data_dir: Path, embedder: Any) -> Iterator[Memory]:
    yield Memory("safety", data_dir=str(data_dir))
    close_all()


def said(speaker: str, listener: str, text: str, time: str, dia_id: str) -> dict[str, str]:
    return {"speaker": speaker, "listener": listener, "text": text, "time": time, "dia_id": dia_id}


def edits(memory: Memory, record_id: str) -> list[Any]:
    """The changes in force or undone on a record, not the no-ops."""
    return [c for c in memory.history(record_id, limit=100) if c.action in (Action.UPDATE, Action.DELETE)]


def test_someone_elses_tag_question_does_not_supersede_the_subjects_own_words(memory: Memory) -> None:
    memory.add([said("Bob", "Ann", "I live in Boston.", "2023-05-01T10:00", "D1:1"),
                said("Ann", "Bob", "You live in Denver now, right?", "2023-06-01T10:00", "D2:1"),
                said("Bob", "Ann", "Haha, no. I'm still a big fan of hiking though.", "2023-06-01T10:01", "D2:2")])
    [home] = memory.get(["fact:D1:1:0"])
    assert home.status == Status.ACTIVE and home.text == "Bob lives in Boston."
    assert edits(memory, "fact:D1:1:0") == []


def test_a_change_the_user_undid_is_not_made_again(memory: Memory) -> None:
    memory.add([said("Ann", "Bob", "I live in Boston.", "2023-05-01T10:00", "D1:1"),
                said("Ann", "Bob", "I live in Denver now.", "2023-06-01T10:00", "D2:1")])
    assert memory.get(["fact:D1:1:0"])[0].status == Status.SUPERSEDED  # by the newer turn, its words kept
    memory.undo()
    assert memory.get(["fact:D1:1:0"])[0].status == Status.ACTIVE
    memory.add([said("Ann", "Bob", "Honestly I love living in Boston, the food is great.", "2023-06-02T10:00",
                     "D3:1")])
    [home] = memory.get(["fact:D1:1:0"])
    assert home.status == Status.ACTIVE and home.text == "Ann lives in Boston."
    [change] = edits(memory, "fact:D1:1:0")  # the undone one, not made again
    assert change.undone
    assert any(c.action == Action.NOOP and c.reason.startswith(UNDONE) for c in memory.history("fact:D1:1:0"))


def test_a_move_told_as_past_does_not_replace_the_current_home(memory: Memory) -> None:
    memory.add([said("Ann", "Bob", "I live in Boston.", "2023-05-01T10:00", "D1:1"),
                said("Ann", "Bob", "I moved to Denver in 2015 for college.", "2023-06-01T10:00", "D2:1"),
                said("Ann", "Bob", "Honestly I love living in Boston, the food is great.", "2023-06-02T10:00",
                     "D3:1")])
    [home] = memory.get(["fact:D1:1:0"])
    assert home.status == Status.ACTIVE and home.text == "Ann lives in Boston."
    assert edits(memory, "fact:D1:1:0") == []


@pytest.mark.parametrize(
    ("request_to_forget", "how"),
    [
        ("Please forget where Bob lives.", "chat"),  # not Ann's memory to forget: refused
        ("Please forget my zebra named Quillfeather.", "chat"),  # nothing matches
        ("Can you forget where I live?", "ask"),  # a question never deletes, even with refresh
    ],
)
def test_a_request_that_deletes_nothing_still_settles_the_conflict_the_judge_named(
    data_dir: Path, embedder: Any, request_to_forget: str, how: str
) -> None:
    """Found by review: beside a request to forget, the Refresher read every group as the request's, so a
    request that deleted nothing left the stored conflict the Judge had named as it was ("2 left as they
    were"), named again on every later turn. The group is now settled as for any other turn."""
    unsettled = Memory("pending", data_dir=str(data_dir), refresher=False)  # stored, the slot not yet settled
    unsettled.add([said("Ann", "Bob", "I live in Boston.", "2023-05-01T10:00", "D1:1"),
                   said("Bob", "Ann", "I live in Austin.", "2023-05-01T10:01", "D1:2"),
                   said("Ann", "Bob", "I live in Denver now.", "2023-09-01T10:00", "D2:1")])
    close_all()
    memory = Memory("pending", data_dir=str(data_dir))
    answer = memory.chat(request_to_forget, speaker="Ann") if how == "chat" else memory.ask(request_to_forget,
                                                                                            refresh=True)
    assert answer.verdict is not None and ["fact:D1:1:0", "fact:D2:1:0"] in answer.verdict.conflicts
    [boston] = memory.get(["fact:D1:1:0"])
    assert boston.status == Status.SUPERSEDED  # what the Judge named, the Refresher acted on
    assert [c for c in memory.history(limit=100) if c.action == Action.DELETE] == []  # and forgot nothing
    close_all()
