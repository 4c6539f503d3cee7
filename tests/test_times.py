"""Times in every form a caller sends end up as one convention: naive UTC.

A time with an offset used to be stored as sent, and the next question on the
namespace failed comparing it with the naive times around it. These tests send
`Z`, `+02:00`, epoch seconds and milliseconds, naive ISO and LoCoMo stamps, through
the API and the CLI, and ask after each; and they open a store written before the
rule (one record with an offset among naive ones) and ask it too.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from strata.memory.moments import read_time
from strata.memory.records import Record, Turn
from strata.memory.registry import close_all

from strata.api import Memory
from strata.cli import main

NAIVE = datetime(2023, 5, 9, 10, 0)


@pytest.mark.parametrize(
    ("sent", "stored"),
    [
        ("2023-05-09T10:00:00Z", NAIVE),
        ("2023-05-09T12:00:00+02:00", NAIVE),
        ("2023-05-09T10:00:00", NAIVE),
        (1683626400, NAIVE),
        (1683626400.0, NAIVE),
        (1683626400000, NAIVE),  # milliseconds, as JavaScript's Date.now() gives
        ("1683626400", NAIVE),
        ("10:00 am on 9 May, 2023", NAIVE),
        (datetime(2023, 5, 9, 3, 0, tzinfo=timezone(timedelta(hours=-7))), NAIVE),
        (None, None),
        ("  ", None),
    ],
)
def test_every_form_becomes_naive_utc(sent: object, stored: datetime | None) -> None:
    assert read_time(sent) == stored
    assert Turn(speaker="Ann", text="hi", time=sent).time == stored


@pytest.mark.parametrize("sent", [True, float("nan"), 10**30, "next blue moon", [2023, 5, 9]])
def test_unreadable_times_are_refused_with_one_line(sent: object) -> None:
    with pytest.raises(ValueError) as caught:
        read_time(sent)
    assert "\n" not in str(caught.value)


@pytest.fixture(scope="module")
def mixed_memory(tmp_path_factory: pytest.TempPathFactory) -> Memory:
    """One namespace fed a naive time, a Z time, an offset time and an epoch number."""
    memory = Memory("times", data_dir=str(tmp_path_factory.mktemp("times")))
    memory.add([{"speaker": "Ann", "text": "I adopted a cat named Miso.", "time": "2023-05-08T09:00:00"}])
    memory.add([{"speaker": "Ann", "text": "I moved to Denver yesterday.", "time": "2023-05-09T10:00:00Z"}])
    memory.add([{"speaker": "Ann", "text": "I started a pottery class.", "time": "2023-05-10T12:00:00+02:00"}])
    memory.add([{"speaker": "Ann", "text": "I ran a half marathon today.", "time": 1683792000}])
    return memory


def test_questions_work_after_each_form(mixed_memory: Memory) -> None:
    answer = mixed_memory.ask("Where did Ann move?")
    assert "raw:T2" in [e.id for e in answer.evidence] or "T2" in answer.evidence_ids()
    assert mixed_memory.ask("When did Ann run a half marathon?").answer
    assert mixed_memory.retrieve("What class did Ann start?").evidence
    raw = mixed_memory.store.all("raw")
    assert sorted(r.time for r in raw) == [
        datetime(2023, 5, 8, 9), datetime(2023, 5, 9, 10), datetime(2023, 5, 10, 10), datetime(2023, 5, 11, 8)
    ]
    assert all(r.time.tzinfo is None for kind in ("raw", "fact") for r in mixed_memory.store.all(kind) if r.time)
    # "yesterday" said at 10:00 UTC on 9 May is 8 May
    assert any("8 May 2023" in f.text for f in mixed_memory.store.all("fact"))
    assert mixed_memory.history() is not None


def test_a_store_that_already_holds_an_offset_keeps_working(tmp_path: Path) -> None:
    """A record written before the convention (its time carries +00:00) is read back as naive UTC."""
    memory = Memory("old", data_dir=str(tmp_path))
    memory.add([{"speaker": "Bo", "text": "I bought a red kayak.", "time": "2023-05-01T08:00:00"}])
    store = memory.store
    old = Record.model_construct(
        **{**Record(id="raw:OLD1", kind="raw", text="I sold my old bike.", namespace="old").model_dump(),
           "dialogue_id": "OLD1", "speaker": "Bo", "source_ids": ["OLD1"],
           "time": datetime(2023, 5, 2, 8, 0, tzinfo=UTC)}
    )
    store.add([old])
    raw = store._collections["raw"].get(ids=["raw:OLD1"], include=["metadatas"])
    assert raw["metadatas"][0]["time"].endswith("Z"), "the test must store an offset as older versions did"
    close_all()
    reopened = Memory("old", data_dir=str(tmp_path))
    answer = reopened.ask("What did Bo sell?")
    assert "OLD1" in answer.evidence_ids()
    assert reopened.get(["raw:OLD1"])[0].time == datetime(2023, 5, 2, 8, 0)
    reopened.add([{"speaker": "Bo", "text": "I painted the kayak blue.", "time": "2023-05-03T08:00:00+01:00"}])
    assert reopened.ask("What colour is Bo's kayak?").evidence


def test_cli_ingests_offsets_and_epochs_then_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    turns = [
        {"speaker": "Cy", "text": "I joined a choir.", "time": "2023-06-01T18:00:00Z", "dia_id": "D1:1"},
        {"speaker": "Di", "text": "I took up climbing.", "time": "2023-06-01T20:30:00+02:00", "dia_id": "D1:2"},
        {"speaker": "Cy", "text": "We sang at the town hall.", "time": 1685728800, "dia_id": "D1:3"},
    ]
    file = tmp_path / "turns.json"
    file.write_text(json.dumps(turns), encoding="utf-8")
    where = ["--data-dir", str(tmp_path / "mem"), "--namespace", "cli-times"]
    assert main([*where, "ingest", str(file)]) == 0
    assert main([*where, "ask", "Where did the choir sing?"]) == 0
    out = capsys.readouterr().out
    assert "D1:3" in out
    assert main([*where, "history"]) == 0
