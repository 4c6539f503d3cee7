"""The speaker's clock: a time sent with an offset keeps it, and the days a turn names are that speaker's days.

At 20:00 in Denver (-06:00) it is already 02:00 the next day in UTC. Stored as
UTC alone, "I went hiking yesterday" said that evening became a hike on the day
it was said, and the turn was told under the next day's heading.
"""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from langgraph.runtime import Runtime
from strata.agents.common import evidence_of
from strata.agents.memory import open_segment
from strata.agents.research import _in_utc
from strata.agents.working import working
from strata.graph.context import Context
from strata.graph.state import Plan, State, validate_turns
from strata.memory.errors import ConfigError, InputError
from strata.memory.graph.export import namespace_graph
from strata.memory.records import Turn, raw_record

from strata import Memory

EVENING = "2023-05-08T20:00:00-06:00"  # 02:00 on 9 May in UTC


def test_a_turn_keeps_the_offset_its_time_was_sent_with() -> None:
    turn = Turn(speaker="Ann", text="hi", time=EVENING)
    assert (turn.time, turn.utc_offset, turn.local_time()) == (
        datetime(2023, 5, 9, 2, 0), -360, datetime(2023, 5, 8, 20, 0))
    assert Turn(speaker="Ann", text="hi", time="2023-05-08T20:00:00Z").utc_offset is None  # UTC: as before
    assert Turn(speaker="Ann", text="hi", time=1683597600).utc_offset is None  # epoch seconds name no clock
    given = Turn(speaker="Ann", text="hi", time="2023-05-09T02:00:00Z", utc_offset=-360)  # a JavaScript client
    assert given.local_time() == datetime(2023, 5, 8, 20, 0)
    assert Turn(speaker="Ann", text="hi", time="2023-05-08T20:00+05:30").utc_offset == 330


def test_an_offset_past_any_clock_is_one_line(data_dir: Path) -> None:
    with pytest.raises(InputError, match=r"^turn 1: utc_offset: .*1080"):
        validate_turns([{"speaker": "Ann", "text": "hi", "utc_offset": 5000}])
    memory = Memory("u", data_dir=str(data_dir))
    with pytest.raises(InputError) as refused:
        memory.add([{"speaker": "Ann", "text": "hi", "utc_offset": "west"}])
    assert "\n" not in str(refused.value)


def test_yesterday_is_the_speakers_yesterday(data_dir: Path) -> None:
    memory = Memory("u", data_dir=str(data_dir))
    memory.add([
        {"speaker": "Ann", "text": "I went hiking yesterday at Pikes Peak.", "time": EVENING},
        {"speaker": "Bob", "text": "Which trail did you take?", "time": "2023-05-08T20:01:00-06:00"},
    ])
    facts = [r.text for r in memory.store.all("fact")]
    assert "Ann went hiking on 7 May 2023 at Pikes Peak." in facts, facts  # not 8 May, the UTC day
    found = memory.retrieve("When did Ann go hiking?")
    turn = next(e for e in found.evidence if e.id == "raw:T1")
    assert turn.day() == "8 May 2023" and "2023-05-08" in turn.label  # told under the day it was said there
    assert memory.ask("When did Ann go hiking?").answer == "7 May 2023"
    copy = Memory("copy", data_dir=str(data_dir))
    copy.import_from(memory.export())
    assert copy.store.get_one("raw:T1").utc_offset == -360  # an export keeps the clock
    times = {node.id: node.time for node in namespace_graph(memory.store).nodes}
    assert times["raw:T1"] == "2023-05-08T20:00:00-06:00", times  # the graph a person reads: their evening


def test_an_evening_chat_is_one_day_on_the_speakers_clock(data_dir: Path) -> None:
    """Turns that name no session start a new episode each day: the speaker's day, not UTC's."""
    memory = Memory("u", data_dir=str(data_dir))
    memory.add([
        {"speaker": "Ann", "text": "I adopted a puppy named Coco today.", "time": "2023-05-08T17:30:00-06:00"},
        {"speaker": "Ann", "text": "Coco already chewed my slippers.", "time": "2023-05-08T21:00:00-06:00"},
    ])
    assert open_segment(memory.store).turn_ids == ["T1", "T2"]  # 23:30 and 03:00 UTC: one evening in Denver
    memory.add([{"speaker": "Ann", "text": "Coco slept through the night.", "time": "2023-05-09T08:00:00-06:00"}])
    assert open_segment(memory.store).turn_ids == ["T3"]
    [episode] = memory.store.all("episode")
    assert episode.text.startswith("On 8 May 2023") and episode.utc_offset == -360, episode.text


def test_a_question_window_is_read_in_the_speakers_days() -> None:
    """'On 1 May' asked of a memory said in Denver spans 1 May there: turns said from 06:00 UTC to 05:59 the
    next day, and facts dated '1 May' by their words (that day already, at its midnight)."""
    plan = Plan(query="q", time_window=(datetime(2023, 5, 1), datetime(2023, 5, 1, 23, 59, 59)))
    assert _in_utc(plan, -360).time_window == (datetime(2023, 5, 1), datetime(2023, 5, 2, 5, 59, 59))
    assert _in_utc(plan, 120).time_window == (datetime(2023, 4, 30, 22), datetime(2023, 5, 1, 23, 59, 59))
    assert _in_utc(plan, None).time_window == plan.time_window
    assert _in_utc(plan, -360).days == _in_utc(plan, 120).days == (date(2023, 5, 1), date(2023, 5, 1))
    winter = Plan(query="q", time_window=(datetime(2024, 1, 10), datetime(2024, 1, 10, 23, 59, 59)))
    denver = ZoneInfo("America/Denver")  # January is -07:00 there, whatever the clock of the latest turn (May)
    assert _in_utc(winter, -360, denver).time_window == (datetime(2024, 1, 10), datetime(2024, 1, 11, 6, 59, 59))


def test_the_reader_prefers_what_was_said_in_the_question_s_days_on_the_speaker_s_clock(data_dir: Path) -> None:
    """The reader's window bonus compares the speaker's days with the days the question names. Compared with
    the UTC-widened window, a day more at one end counted: in Denver a turn said in the evening eight days
    after "1 May" (06:00 UTC the next day on), in Sydney one said eight days before "10 May"."""
    for clock, day, near, far in ((-360, 1, "2023-05-09T20:00-06:00", "2023-05-25T20:00-06:00"),
                                  (600, 10, "2023-05-02T08:00+10:00", "2023-05-25T08:00+10:00")):
        asked = f"What did Ann bake on {day} May?"
        plan = _in_utc(Plan(query=asked, time_window=(datetime(2023, 5, day), datetime(2023, 5, day, 23, 59, 59))),
                       clock)
        evidence = [evidence_of(raw_record(Turn(speaker="Ann", text=text, dia_id=dia_id, time=when), "u"))
                    for dia_id, text, when in (("T1", "I baked sourdough bread.", near),
                                               ("T2", "I baked a carrot cake.", far))]
        state = State(question=asked, evidence=evidence, stage="asking", plan=plan)
        out = working(state, Runtime(context=Context(namespace="u", data_dir=str(data_dir), mode="ask")))
        assert out["cited_ids"] == ["T2"], (clock, out["answer"])  # neither in the week around it: the newer


def test_a_fact_dated_by_its_words_is_found_in_a_window_of_that_day(data_dir: Path) -> None:
    memory = Memory("u", data_dir=str(data_dir))
    memory.add([{"speaker": "Ann", "text": "I went hiking yesterday at Pikes Peak.", "time": "2023-05-08T12:00-06:00"},
                {"speaker": "Ann", "text": "My legs still hurt.", "time": "2023-05-08T12:05-06:00"}])
    fact = memory.store.get_one("fact:T1:0")
    assert (fact.text, fact.time, fact.utc_offset) == (
        "Ann went hiking on 7 May 2023 at Pikes Peak.", datetime(2023, 5, 7), None)  # that day already
    day = Plan(query="q", time_window=(datetime(2023, 5, 7), datetime(2023, 5, 7, 23, 59, 59)))
    window = _in_utc(day, memory.store.latest_turn().utc_offset).time_window  # as Research reads "on 7 May"
    assert [i for i, _ in memory.store.lexical("fact", "hiking Pikes Peak", 10, window)] == ["fact:T1:0"]


def test_a_memory_s_time_zone_is_the_clock_of_turns_sent_in_utc(data_dir: Path) -> None:
    """A JavaScript app sends `toISOString()` (UTC, 'Z'): the memory's `timezone` says whose clock it was,
    with daylight saving (-06:00 in May, -07:00 in January); a turn's own offset still wins."""
    memory = Memory("u", data_dir=str(data_dir), timezone="America/Denver")
    memory.add([
        {"speaker": "Ann", "text": "I went hiking yesterday at Pikes Peak.", "time": "2023-05-09T02:00:00Z"},
        {"speaker": "Ann", "text": "I went skiing yesterday at Vail.", "time": "2024-01-10T03:00:00Z"},
        {"speaker": "Ann", "text": "I flew to Paris yesterday.", "time": "2024-02-01T20:00:00+01:00"},
    ])
    raw = {r.dialogue_id: r.utc_offset for r in memory.store.all("raw")}
    assert raw == {"T1": -360, "T2": -420, "T3": 60}
    facts = " ".join(r.text for r in memory.store.all("fact"))
    assert "7 May 2023" in facts and "8 January 2024" in facts and "31 January 2024" in facts, facts


def test_a_turn_sent_without_a_time_is_said_now_on_the_memorys_clock(data_dir: Path) -> None:
    """`strata chat`: no time, so the time is now, and the memory's time zone is its clock too."""
    memory = Memory("u", data_dir=str(data_dir), timezone="America/Denver")
    memory.add([{"speaker": "Ann", "text": "I went hiking yesterday."}])
    assert memory.store.get_one("raw:T1").utc_offset in (-360, -420)  # daylight saving or not, as today is


def test_an_unknown_time_zone_is_one_line(data_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"no time zone is called 'Mars/Olympus'.*IANA"):
        Memory("u", data_dir=str(data_dir), timezone="Mars/Olympus").add([{"speaker": "Ann", "text": "hi"}])
