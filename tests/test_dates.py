"""Session stamps, relative dates and question time windows, checked on LoCoMo conv-26.

Each relative expression below is a real turn; the expected label is worked out
by hand from that session's date (e.g. session 2 is Thursday 25 May 2023, so
"last Saturday" is 20 May).
"""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
from strata.memory.dates import (
    DateReadError,
    ResolvedDate,
    parse_datetime,
    resolve_relative,
    time_window,
    with_absolute_dates,
)
from strata.memory.moments import read_time
from strata.memory.records import Record, chronological_key
from strata.memory.timeline import Timeline

from strata.api import Memory


def _sessions(locomo_dir: Path) -> dict[int, tuple[str, list[dict[str, Any]]]]:
    """Session number -> (date_time, turns); only `session_N` and `session_N_date_time` are read."""
    raw = json.loads((locomo_dir / "conv-26.json").read_text(encoding="utf-8"))
    sessions: dict[int, tuple[str, list[dict[str, Any]]]] = {}
    number = 1
    while f"session_{number}" in raw:
        sessions[number] = (raw[f"session_{number}_date_time"], raw[f"session_{number}"])
        number += 1
    return sessions


@pytest.fixture(scope="module")
def conv26(locomo_dir: Path) -> dict[str, tuple[datetime, str]]:
    """dia_id -> (session date, turn text)."""
    turns: dict[str, tuple[datetime, str]] = {}
    for stamp, session in _sessions(locomo_dir).values():
        anchor = parse_datetime(stamp)
        assert anchor is not None, stamp
        for turn in session:
            turns[turn["dia_id"]] = (anchor, turn["text"])
    return turns


def _resolved(conv26: dict[str, tuple[datetime, str]], dia_id: str, expression: str) -> ResolvedDate:
    anchor, text = conv26[dia_id]
    found = {r.expression: r for r in resolve_relative(text, anchor)}
    assert expression in found, f"{dia_id}: {expression!r} not found in {sorted(found)}"
    return found[expression]


# --- parse_datetime ---------------------------------------------------------------------------


def test_parses_every_conv26_session_stamp(locomo_dir: Path) -> None:
    sessions = _sessions(locomo_dir)
    assert len(sessions) == 19
    parsed = {n: parse_datetime(stamp) for n, (stamp, _) in sessions.items()}
    assert parsed[1] == datetime(2023, 5, 8, 13, 56)
    assert parsed[4] == datetime(2023, 6, 27, 10, 37)
    assert parsed[16] == datetime(2023, 9, 13, 0, 9)  # "12:09 am" is just after midnight
    assert all(moment is not None for moment in parsed.values())
    ordered = [parsed[n] for n in sorted(parsed)]
    assert ordered == sorted(ordered)  # sessions are in time order


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2023-05-08", datetime(2023, 5, 8)),
        ("2023-05-08T13:56", datetime(2023, 5, 8, 13, 56)),
        ("2023-05-08 13:56:00", datetime(2023, 5, 8, 13, 56)),
        ("10:37 am on 27 June, 2023", datetime(2023, 6, 27, 10, 37)),
        ("12:30 pm on 1 July, 2023", datetime(2023, 7, 1, 12, 30)),
        ("8 May 2023", datetime(2023, 5, 8)),
        ("May 8, 2023", datetime(2023, 5, 8)),
    ],
)
def test_parse_datetime_formats(text: str, expected: datetime) -> None:
    assert parse_datetime(text) == expected


def test_parse_datetime_converts_offsets_to_naive_utc() -> None:
    """One convention for stored times (memory/moments.py): the instant in UTC, without an offset."""
    assert parse_datetime("2023-05-08T13:56:00Z") == datetime(2023, 5, 8, 13, 56)
    assert parse_datetime("2023-05-08T15:56:00+02:00") == datetime(2023, 5, 8, 13, 56)


@pytest.mark.parametrize("text", ["", "   ", "soon", "13:00 pm on 8 May, 2023", "1:56 pm on 31 June, 2023"])
def test_parse_datetime_rejects_unreadable(text: str) -> None:
    assert parse_datetime(text) is None


def test_an_offset_past_the_calendar_says_so_and_digits_read_as_the_number_they_spell() -> None:
    """'9999-12-31T23:59-05:00' is readable but falls in the year 10000 in UTC: the caller is told that, in one
    line, not that the text cannot be read (parse_datetime itself still gives None, as its callers expect).
    The text "0" is read as the number 0 is; a year alone is no instant."""
    for sent in ("9999-12-31T23:59-05:00", "0001-01-01T00:00+05:00"):
        assert parse_datetime(sent) is None
        with pytest.raises(ValueError, match="outside the years 1 to 9999") as caught:
            read_time(sent)
        assert "\n" not in str(caught.value)
    assert read_time("0") == read_time(0) == datetime(1970, 1, 1)
    assert read_time(86400) == datetime(1970, 1, 2) and read_time("1683626400") == read_time(1683626400)
    assert read_time("20230508") == datetime(2023, 5, 8)  # a date in ISO's basic form stays a date
    with pytest.raises(ValueError, match="a year alone") as caught:
        read_time("2023")
    assert "\n" not in str(caught.value)
    for mistyped in ("20231301", "202305", "230508", "12", "86400"):  # read as seconds, they were dates in 1970
        with pytest.raises(ValueError, match="nine digits"):
            read_time(mistyped)


# --- resolve_relative on real turns -------------------------------------------------------------


def test_yesterday_in_session_1_is_7_may_2023(conv26: dict[str, tuple[datetime, str]]) -> None:
    anchor, text = conv26["D1:3"]
    assert text.startswith("I went to a LGBTQ support group yesterday")
    found = resolve_relative(text, anchor)
    assert len(found) == 1
    yesterday = found[0]
    assert text[yesterday.char_start : yesterday.char_end] == "yesterday"
    assert (yesterday.start, yesterday.end) == (date(2023, 5, 7), date(2023, 5, 7))
    assert yesterday.granularity == "day"
    assert yesterday.label == "7 May 2023"
    assert yesterday.relative and not yesterday.approximate


def test_with_absolute_dates_appends_the_label(conv26: dict[str, tuple[datetime, str]]) -> None:
    anchor, text = conv26["D1:3"]
    rewritten = with_absolute_dates(text, anchor)
    assert rewritten == "I went to a LGBTQ support group yesterday (7 May 2023) and it was so powerful."
    assert with_absolute_dates(rewritten, anchor) == rewritten  # annotating twice changes nothing


@pytest.mark.parametrize(
    ("dia_id", "expression", "label", "start", "end", "granularity"),
    [
        # session 1, Mon 8 May 2023
        ("D1:14", "last year", "2022", date(2022, 1, 1), date(2022, 12, 31), "year"),
        # session 2, Thu 25 May 2023
        ("D2:1", "last Saturday", "the Saturday before 25 May 2023", date(2023, 5, 20), date(2023, 5, 20), "day"),
        ("D2:7", "next month", "June 2023", date(2023, 6, 1), date(2023, 6, 30), "month"),
        # session 3, Fri 9 June 2023: the previous calendar week through yesterday
        ("D3:1", "last week", "the week before 9 June 2023", date(2023, 5, 29), date(2023, 6, 8), "week"),
        ("D3:1", "three years ago", "2020", date(2020, 1, 1), date(2020, 12, 31), "year"),
        # session 4, Tue 27 June 2023
        ("D4:5", "ten years ago", "2013", date(2013, 1, 1), date(2013, 12, 31), "year"),
        ("D4:13", "Last Friday", "the Friday before 27 June 2023", date(2023, 6, 23), date(2023, 6, 23), "day"),
        # session 6, Thu 6 July 2023
        ("D6:4", "Yesterday", "5 July 2023", date(2023, 7, 5), date(2023, 7, 5), "day"),
        # session 7, Wed 12 July 2023
        ("D7:1", "two days ago", "10 July 2023", date(2023, 7, 10), date(2023, 7, 10), "day"),
        # session 8, Sat 15 July 2023: "Last Fri" is the day before
        ("D8:2", "Last Fri", "the Friday before 15 July 2023", date(2023, 7, 14), date(2023, 7, 14), "day"),
        # session 9, Mon 17 July 2023
        ("D9:1", "two weekends ago", "two weekends before 17 July 2023", date(2023, 7, 8), date(2023, 7, 9), "week"),
        ("D9:2", "Last weekend", "the weekend before 17 July 2023", date(2023, 7, 15), date(2023, 7, 16), "week"),
        ("D9:6", "last month", "June 2023", date(2023, 6, 1), date(2023, 6, 30), "month"),
        ("D9:12", "Next month", "August 2023", date(2023, 8, 1), date(2023, 8, 31), "month"),
        # session 10, Thu 20 July 2023
        ("D10:3", "last Tues", "the Tuesday before 20 July 2023", date(2023, 7, 18), date(2023, 7, 18), "day"),
        # session 11, Mon 14 August 2023
        ("D11:1", "Last night", "13 August 2023", date(2023, 8, 13), date(2023, 8, 13), "day"),
        # session 12, Thu 17 August 2023
        ("D12:16", "this summer", "summer 2023", date(2023, 6, 1), date(2023, 8, 31), "month"),
        # session 17, Fri 13 October 2023
        ("D17:8", "Last month", "September 2023", date(2023, 9, 1), date(2023, 9, 30), "month"),
        # session 18, Fri 20 October 2023
        (
            "D18:1",
            "this past weekend",
            "the weekend before 20 October 2023",
            date(2023, 10, 14),
            date(2023, 10, 15),
            "week",
        ),
        # session 19, Sun 22 October 2023
        ("D19:1", "last Friday", "the Friday before 22 October 2023", date(2023, 10, 20), date(2023, 10, 20), "day"),
        ("D19:2", "yesterday", "21 October 2023", date(2023, 10, 21), date(2023, 10, 21), "day"),
    ],
)
def test_relative_dates_in_conv26(
    conv26: dict[str, tuple[datetime, str]],
    dia_id: str,
    expression: str,
    label: str,
    start: date,
    end: date,
    granularity: str,
) -> None:
    found = _resolved(conv26, dia_id, expression)
    assert found.label == label
    assert (found.start, found.end) == (start, end)
    assert found.granularity == granularity
    assert found.relative


def test_approximate_expressions_are_flagged(conv26: dict[str, tuple[datetime, str]]) -> None:
    guitar = _resolved(conv26, "D15:21", "about five years ago")  # 28 August 2023
    assert guitar.approximate and guitar.label == "2018"
    parade = _resolved(conv26, "D8:17", "a few weeks ago")  # 15 July 2023
    assert parade.approximate
    assert parade.label == "a few weeks before 15 July 2023"
    assert parade.start < date(2023, 7, 1) < parade.end < date(2023, 7, 15)


def test_figure_of_speech_is_not_a_date(conv26: dict[str, tuple[datetime, str]]) -> None:
    anchor, text = conv26["D3:16"]
    assert "feels like just yesterday" in text
    assert resolve_relative(text, anchor) == []


def test_turns_without_time_words_resolve_nothing(conv26: dict[str, tuple[datetime, str]]) -> None:
    for dia_id in ("D1:1", "D1:4", "D1:11", "D13:3"):
        anchor, text = conv26[dia_id]
        assert resolve_relative(text, anchor) == [], dia_id


def test_offsets_point_at_the_expression(conv26: dict[str, tuple[datetime, str]]) -> None:
    checked = 0
    for anchor, text in conv26.values():
        for found in resolve_relative(text, anchor):
            assert text[found.char_start : found.char_end] == found.expression
            assert found.start <= found.end
            checked += 1
    assert checked >= 50  # conv-26 is full of relative dates


# --- resolve_relative on constructed sentences ----------------------------------------------------

ANCHOR = datetime(2023, 7, 12, 16, 33)  # a Wednesday


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("We went to Paris in May.", "May 2023"),  # the latest May at or before the session
        ("We went to Rome in September.", "September 2022"),
        ("I'll visit Paris in September.", "September 2023"),  # plans look forward
        ("I'm going to Oslo in March.", "March 2024"),
        ("I moved here in early March.", "early March 2023"),
        ("We met last May.", "May 2023"),
        ("The fair is next June.", "June 2024"),
        ("Back in 2019 I lived in Rome.", "2019"),
        ("It was cold last winter.", "winter 2022-2023"),
        ("I got married 2 years ago.", "2021"),
        ("See you next Friday!", "the Friday after 12 July 2023"),
        ("I saw him on June 5.", "5 June 2023"),
        # no year, told in the present tense: the next one, not the last
        ("My daughter Emma turns 7 on June 5.", "5 June 2024"),
        ("I have a dentist appointment on August 2.", "2 August 2023"),
        ("My birthday is in May.", "May 2024"),
        ("The festival starts in September.", "September 2023"),
        ("I'm so excited for June 5!", "5 June 2024"),  # "excited" is an adjective here, not a past
        ("I have visited Rome in September.", "September 2022"),
        ("We used to camp in August.", "August 2022"),
        # a bare weekday after "on": the one before when told in the past, the one after otherwise
        ("We adopted a cat on Saturday.", "the Saturday before 12 July 2023"),
        ("I have a game on Saturday.", "the Saturday after 12 July 2023"),
        ("We met on Friday, 7 July.", "7 July 2023"),  # the date after the weekday says which
        # "left" may be an adjective, but not after a name; "so excited" is one
        ("Raj left the team on Friday, so I'm doing it myself now.", "the Friday before 12 July 2023"),
        ("I'm so excited for the party on Friday!", "the Friday after 12 July 2023"),
        ("the day before yesterday", "10 July 2023"),
        ("It rained this morning.", "12 July 2023"),
    ],
)
def test_constructed_expressions(text: str, label: str) -> None:
    found = resolve_relative(text, ANCHOR)
    assert [f.label for f in found] == [label]


def test_the_week_before_stands_alone_or_refers_to_a_noun() -> None:
    alone = resolve_relative("The week before, I was in Rome.", ANCHOR)
    assert [f.label for f in alone] == ["the week before 12 July 2023"]
    assert resolve_relative("The week before my birthday was rough.", ANCHOR) == []


def test_habitual_and_lowercase_weekdays_are_not_dates() -> None:
    assert resolve_relative("I go swimming on Sundays.", ANCHOR) == []
    assert resolve_relative("Call me on monday or so.", ANCHOR) == []


@pytest.mark.parametrize(
    ("conversation", "dia_id", "session", "day"),
    [
        # LoCoMo's gold: "The Friday before 10July, 2022." and "Januarty 5, 2024" (7 January was a Sunday)
        ("conv-42", "D17:1", "2:34 pm on 10 July, 2022", date(2022, 7, 8)),
        ("conv-43", "D28:1", "5:24 pm on 7 January, 2024", date(2024, 1, 5)),
    ],
)
def test_on_a_weekday_in_real_turns(locomo_dir: Path, conversation: str, dia_id: str, session: str, day: date) -> None:
    raw = json.loads((locomo_dir / f"{conversation}.json").read_text(encoding="utf-8"))
    number = dia_id[1:].split(":")[0]
    assert raw[f"session_{number}_date_time"] == session
    text = next(t["text"] for t in raw[f"session_{number}"] if t["dia_id"] == dia_id)
    anchor = parse_datetime(session)
    assert anchor is not None
    found = [f for f in resolve_relative(text, anchor) if f.expression == "Friday"]
    assert [(f.start, f.end) for f in found] == [(day, day)]


def test_lowercase_may_and_sat_are_not_dates() -> None:
    assert resolve_relative("You may come in may if you like.", ANCHOR) == []
    assert resolve_relative("I last sat on that bench.", ANCHOR) == []


def test_absolute_years_are_found_but_not_annotated() -> None:
    text = "I started in 2016 and left in 2020."
    found = resolve_relative(text, ANCHOR)
    assert [(f.expression, f.relative, f.granularity) for f in found] == [
        ("2016", False, "year"),
        ("2020", False, "year"),
    ]
    assert with_absolute_dates(text, ANCHOR) == text


def test_resolve_relative_needs_an_anchor() -> None:
    with pytest.raises(DateReadError, match="anchor"):
        resolve_relative("yesterday", None)  # type: ignore[arg-type]


# --- time_window --------------------------------------------------------------------------------


def _day_window(first: date, last: date) -> tuple[datetime, datetime]:
    return datetime(first.year, first.month, first.day), datetime(last.year, last.month, last.day, 23, 59, 59, 999999)


@pytest.mark.parametrize(
    ("question", "window"),
    [
        ("What did Caroline do in May 2023?", _day_window(date(2023, 5, 1), date(2023, 5, 31))),
        ("What happened on 8 May 2023?", _day_window(date(2023, 5, 8), date(2023, 5, 8))),
        ("What did Melanie paint on May 8, 2023?", _day_window(date(2023, 5, 8), date(2023, 5, 8))),
        ("Did Melanie paint in 2022?", _day_window(date(2022, 1, 1), date(2022, 12, 31))),
        ("What did they do between May and July 2023?", _day_window(date(2023, 5, 1), date(2023, 7, 31))),
        # the benchmark's own period names read back
        ("What did Caroline do the week before 9 June 2023?", _day_window(date(2023, 5, 29), date(2023, 6, 8))),
        ("Where was Melanie the Sunday before 25 May 2023?", _day_window(date(2023, 5, 21), date(2023, 5, 21))),
    ],
)
def test_time_window_from_absolute_dates(question: str, window: tuple[datetime, datetime]) -> None:
    assert time_window(question, None) == window
    assert time_window(question, datetime(2023, 10, 22)) == window  # `now` does not move absolute dates


def test_time_window_needs_now_for_year_less_dates() -> None:
    question = "What did Caroline do during June?"
    assert time_window(question, None) is None
    assert time_window(question, datetime(2023, 10, 22)) == _day_window(date(2023, 6, 1), date(2023, 6, 30))
    last_week = time_window("What did Melanie do last week?", datetime(2023, 10, 22))
    assert last_week == _day_window(date(2023, 10, 9), date(2023, 10, 21))


def test_time_window_is_none_without_a_date() -> None:
    assert time_window("When did Caroline go to the LGBTQ support group?", datetime(2023, 10, 22)) is None
    assert time_window("What is Melanie's favorite book?", None) is None


# --- the calendar's edges -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "anchor"),
    [
        ("Next year I will retire.", datetime(9999, 12, 31, 23, 59, 59)),  # .NET's DateTime.MaxValue
        ("See you tomorrow!", datetime(9999, 12, 31)),
        ("This winter is cold.", datetime(9999, 12, 20)),  # winter 9999 ends in February 10000
        ("Last month I moved to Denver.", datetime(1, 1, 1)),  # DateTime.MinValue
        ("Last winter was cold.", datetime(1, 1, 20)),
        ("My locker code is May 0000, don't tell.", ANCHOR),
        ("I'll love you until 999 decades from now.", ANCHOR),
        ("I'll come back in 999 decades.", ANCHOR),
    ],
)
def test_dates_outside_the_calendar_are_left_unresolved(text: str, anchor: datetime) -> None:
    """A date before year 1 or after 9999 cannot be held: the expression stays as said, nothing raises."""
    assert resolve_relative(text, anchor) == []
    assert with_absolute_dates(text, anchor) == text


def test_dates_at_the_calendar_edges_that_exist_still_resolve() -> None:
    assert [f.label for f in resolve_relative("This summer is hot.", datetime(9999, 7, 1))] == ["summer 9999"]
    assert [f.label for f in resolve_relative("I moved last week.", datetime(1, 1, 20))] == [
        "the week before 20 January 1"
    ]
    assert time_window("What happened in May 0000?", None) is None
    end_of_time = time_window("What did Ann paint this year?", datetime(9999, 12, 31, 23, 59, 59))
    assert end_of_time == _day_window(date(9999, 1, 1), date(9999, 12, 31))


def test_a_memory_holding_placeholder_times_keeps_answering(tmp_path: Path) -> None:
    """Apps send .NET's DateTime.MinValue and MaxValue for unknown times. Their turns are stored, and once a
    9999 turn makes "now" the last instant of the calendar, windowed questions still answer (the search's
    mention lag and the reader's window bonus stop at the calendar's end)."""
    memory = Memory("edges", data_dir=str(tmp_path))
    memory.add([{"speaker": "Ann", "text": "Last month I moved to Denver.", "time": "0001-01-01T00:00:00"}])
    memory.add([{"speaker": "Ann", "text": "Next year I will retire.", "time": "9999-12-31T23:59:59"}])
    memory.add([{"speaker": "Ann", "text": "My locker code is May 0000, don't tell.", "time": "2023-05-08T10:00Z"}])
    memory.add([{"speaker": "Ann", "text": "I painted a lake at the weekend.", "time": "2023-05-08T10:01Z"}])
    assert len(memory.store.all("raw")) == 4
    for question in ("What did Ann paint last week?", "What did Ann paint this year?", "What happened in May 0000?",
                     "What did Ann do in December 9999?"):
        assert memory.ask(question).answer


# --- dates without a year ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "anchor", "day"),
    [
        ("My birthday is on February 29.", datetime(2023, 5, 10), date(2024, 2, 29)),  # the next one
        ("My birthday is on February 29.", datetime(2024, 5, 10), date(2028, 2, 29)),
        ("I was born on 29 February.", datetime(2023, 5, 10), date(2020, 2, 29)),  # the last one
        ("We married on February 29.", datetime(2101, 3, 1), date(2096, 2, 29)),  # 2100 is no leap year
        ("My birthday is on February 29.", datetime(2024, 1, 10), date(2024, 2, 29)),
    ],
)
def test_a_leap_day_without_a_year_takes_the_nearest_leap_year(text: str, anchor: datetime, day: date) -> None:
    assert [(f.start, f.end) for f in resolve_relative(text, anchor)] == [(day, day)]


def test_a_day_no_year_has_is_not_a_date() -> None:
    assert resolve_relative("The report is due on April 31.", ANCHOR) == []


# --- "in two weeks" ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expression", "first", "last"),
    [
        ("In two weeks I fly to Tokyo.", "In two weeks", date(2023, 7, 24), date(2023, 7, 30)),
        ("In three days I start my new job.", "In three days", date(2023, 7, 15), date(2023, 7, 15)),
        ("I'll move in a month.", "in a month", date(2023, 8, 1), date(2023, 8, 31)),
        ("We're going to Rome in about a week.", "in about a week", date(2023, 7, 17), date(2023, 7, 23)),
        ("I hope to retire in 10 years.", "in 10 years", date(2033, 1, 1), date(2033, 12, 31)),
        ("I'll be thirty in two years' time.", "in two years' time", date(2025, 1, 1), date(2025, 12, 31)),
    ],
)
def test_in_a_count_of_units_said_of_plans(text: str, expression: str, first: date, last: date) -> None:
    """'in two weeks' of something to come is two weeks after the session, like 'two weeks from now'."""
    found = resolve_relative(text, ANCHOR)
    assert [(f.expression, f.start, f.end) for f in found] == [(expression, first, last)]


@pytest.mark.parametrize(
    "text",
    [
        "I did it in two days.",  # told in the past: how long it took
        "I finished the puzzle in three days!",
        "Rome wasn't built in a day so keep pushing on",  # conv-30 D18:3
        "Haven't talked in a few days, wanted to let you know I joined a travel club",  # conv-43 D21:1
        "I read a book in a week.",  # the present: a habit's duration
        "I'm going to see him for the first time in three years.",  # how long since, not when
        "I'll be there twice in two weeks.",
        # a word of plans elsewhere in the sentence does not make a past duration a date
        "Work is going great, I learned to knit in two weeks.",
        "I want to say I finished the marathon in three days.",
        "I will tell you, I wrote the whole book in a month.",
    ],
)
def test_in_a_count_of_units_as_a_duration_is_no_date(text: str) -> None:
    assert resolve_relative(text, ANCHOR) == []


# --- undated turns on the timeline -----------------------------------------------------------------


def _turn(dia_id: str, moment: datetime | None) -> Record:
    return Record(id=f"raw:{dia_id}", kind="raw", text="hi", namespace="ns", dialogue_id=dia_id, speaker="Ann",
                  time=moment, source_ids=[dia_id])


def test_undated_turns_sort_first_even_before_1970() -> None:
    """An undated turn sorted at epoch 0, after every turn before 1970: one made "now" None (the wall clock
    then stood in) in a memory of 1969 letters."""
    landing, bicycle = _turn("L1", datetime(1969, 7, 20, 20, 17)), _turn("L2", datetime(1969, 7, 10, 10))
    undated, epoch = _turn("L3", None), _turn("L4", datetime(1970, 1, 1))
    assert sorted([landing, undated, epoch, bicycle], key=chronological_key) == [undated, bicycle, landing, epoch]
    timeline = Timeline()
    for turn in (landing, bicycle):
        timeline.put(turn)
    assert timeline.latest_time() == datetime(1969, 7, 20, 20, 17)
    timeline.put(undated)
    assert timeline.latest_time() == datetime(1969, 7, 20, 20, 17)
    assert [r.id for r in timeline.records()] == ["raw:L3", "raw:L2", "raw:L1"]
    timeline.put(epoch)  # a turn at the very start of 1970 is dated, not undated
    assert timeline.latest_time() == datetime(1970, 1, 1)
    only_undated = Timeline()
    only_undated.put(undated)
    assert only_undated.latest_time() is None


def test_a_store_item_put_now_does_not_move_a_memorys_now() -> None:
    """A LangGraph store item is stamped when an app puts it: counted as a turn, one put made "now" the wall
    clock of a memory replayed from 2023, and "last week" meant this week."""
    from strata.memory.records import Record
    from strata.memory.store_items import ITEM_PREFIX

    timeline = Timeline()
    timeline.put(_turn("D1:1", datetime(2023, 5, 9, 10)))
    timeline.put(Record(id=f"{ITEM_PREFIX}prefs", kind="raw", text="likes tea", namespace="ns",
                        dialogue_id="item:prefs", time=datetime(2026, 11, 27)))
    assert timeline.latest_time() == datetime(2023, 5, 9, 10)
    timeline.put(_turn("D1:2", datetime(2023, 5, 10, 9)))
    assert timeline.latest_time() == datetime(2023, 5, 10, 9)
