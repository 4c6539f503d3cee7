"""Dates in conversation: reading session stamps and resolving relative expressions.

Speakers say "yesterday" and "last Saturday"; a memory that keeps only those
words loses the date once the session is over. AMA's Constructor writes facts
with absolute times, and the LoCoMo gold answers state dates the same way
("7 May 2023", "the week before 9 June 2023", "2022"), so each relative
expression is resolved once, at write time, against the session date, and
labelled in that style. Questions get the converse: a date they mention becomes
the retrieval time filter (the design's "dates in the question become a time
filter"; MAGMA's temporal anchoring).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field
from strata.memory.entities import wordset
from strata.memory.lemmas import past_form, past_tense
from strata.memory.moments import from_iso, utc

Granularity = Literal["day", "week", "month", "year"]

MONTH_NAMES = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

_MONTH_INDEX: dict[str, int] = {name.lower(): i for i, name in enumerate(MONTH_NAMES, 1)} | {
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7,
    "aug": 8, "sep": 9, "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}  # fmt: skip
_WEEKDAY_INDEX: dict[str, int] = {name.lower(): i for i, name in enumerate(WEEKDAY_NAMES)} | {
    "mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4, "sat": 5, "sun": 6,
}  # fmt: skip
# Words that are months or weekdays only when capitalised ("may" is a verb, "sat" a verb).
_NEEDS_CAPITAL = frozenset(
    {
        "may",
        "march",
        "mar",
        "jan",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "feb",
        "apr",
        "mon",
        "wed",
        "sat",
        "sun",
    }
)
_NUMBERS: dict[str, int] = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "couple": 2,
    "few": 3,
    "several": 4,
}
_VAGUE_NUMBERS = frozenset({"couple", "few", "several"})
_SEASON_START = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}

_MONTH_RE = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)"
)
_WEEKDAY_RE = (
    r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|tues|tue|thurs|thur|thu|mon|wed|fri|sat|sun)"
)
_SEASON_RE = r"(?:summer|winter|spring|autumn|fall)"
_COUNT_RE = (
    r"(?:\d{1,3}|a\s+couple(?:\s+of)?|couple\s+of|a\s+few|few|several|an?|one|two|three|four|five|six|seven|eight|nine"
    r"|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty)"
)
_FUTURE = re.compile(
    r"\b(?:will|won['’]t|shall|gonna|going\s+to|plan(?:s|ned|ning)?\s+to|planning|hope\s+to|hoping\s+to|want\s+to"
    r"|wanna|would\s+like\s+to|looking\s+forward|can['’]?t\s+wait|cannot\s+wait|upcoming|coming\s+up|intend"
    r"|scheduled|about\s+to|(?:am|are|is|['’]m|['’]re)\s+going)\b|\w['’]ll\b",
    re.IGNORECASE,
)
_SENTENCE_BREAK = re.compile(r"[.!?;\n]")
_CLAUSE_BREAK = re.compile(r"[.!?;,\n]")


class DateReadError(ValueError):
    """A date string that cannot be read; the message says which formats work."""


class ResolvedDate(BaseModel):
    """One time expression found in a text, resolved to a calendar period."""

    expression: str = Field(..., description="The span as written, e.g. 'last Saturday'.")
    char_start: int = Field(..., ge=0, description="Offset of the span's first character in the text.")
    char_end: int = Field(..., ge=0, description="Offset just past the span's last character.")
    start: date = Field(..., description="First day of the period.")
    end: date = Field(..., description="Last day of the period (inclusive).")
    granularity: Granularity
    label: str = Field(..., description="How the benchmark writes it: '7 May 2023', 'the week before 9 June 2023'.")
    adverbial: str = Field(..., description="A phrase that can stand in for the span: 'on 7 May 2023', 'in 2022'.")
    relative: bool = Field(True, description="False for dates stated absolutely ('in 2022', '8 May 2023').")
    approximate: bool = Field(False, description="'a few days ago', 'about five years ago'.")

    def window(self) -> tuple[datetime, datetime]:
        """The period as datetimes: the first instant of `start` to the last instant of `end`."""
        return datetime.combine(self.start, time.min), datetime.combine(self.end, time.max)


class _Period(NamedTuple):
    first: date
    last: date
    granularity: Granularity
    label: str
    adverbial: str
    relative: bool = True
    approximate: bool = False
    span: tuple[int, int] | None = None  # override of the match's span (to leave out a preposition)


# --- labels and calendar helpers ----------------------------------------------------------


def day_label(day: date) -> str:
    """'7 May 2023': the benchmark's way of writing a day."""
    return f"{day.day} {MONTH_NAMES[day.month - 1]} {day.year}"


def _month_label(year: int, month: int) -> str:
    return f"{MONTH_NAMES[month - 1]} {year}"


def _month_range(year: int, month: int) -> tuple[date, date]:
    return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


def _shift_month(year: int, month: int, by: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + by
    return index // 12, index % 12 + 1


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _year_range(year: int) -> tuple[date, date]:
    return date(year, 1, 1), date(year, 12, 31)


def _season_range(season: str, year: int) -> tuple[date, date]:
    """Meteorological seasons (northern hemisphere); winter `year` runs from December `year` to February."""
    first_month = _SEASON_START[season]
    last_year, last_month = _shift_month(year, first_month, 2)
    return date(year, first_month, 1), _month_range(last_year, last_month)[1]


def _season_label(season: str, year: int) -> str:
    return f"winter {year}-{year + 1}" if season == "winter" else f"{season} {year}"


def _is_future(text: str, start: int, end: int) -> bool:
    """Does the sentence around text[start:end] speak of the future (plans, 'will', 'next')?"""
    return bool(_FUTURE.search(_sentence_around(text, start, end)))


def _sentence_around(text: str, start: int, end: int, breaks: re.Pattern[str] = _SENTENCE_BREAK) -> str:
    """The sentence (or, with `_CLAUSE_BREAK`, the clause) that holds text[start:end]."""
    left = max((m.end() for m in breaks.finditer(text, 0, start)), default=0)
    right_match = breaks.search(text, end)
    return text[left : right_match.start() if right_match else len(text)]


def _told_in_past(sentence: str) -> bool:
    """Does the sentence tell of the past (a verb in the simple past, "ago")? A past form that is also an
    adjective counts unless a linking word comes before it: "Raj left the team", not "I'm so excited"."""
    if re.search(r"\b(?:ago|yesterday|last|used\s+to|had)\b", sentence, re.IGNORECASE):
        return True
    words = [word.lower().replace("’", "'") for word in re.findall(r"[A-Za-z'’]+", sentence)]
    return any(past_tense(word) or (past_form(word) and before not in _LINKING)
               for before, word in zip(["", *words[:-1]], words, strict=True))


# Words after which a past participle is an adjective ("so excited", "I'm married", "got tired").
_LINKING = wordset(
    """am is are was were be been being i'm you're we're they're he's she's it's that's feel feels felt get gets
    got getting seem seems seemed look looks so very really too pretty super quite more most totally completely"""
)


def _upcoming(text: str, start: int, end: int) -> bool:
    """A date without a year in a sentence about plans, or in the present tense ("Emma turns 7 on June 12",
    "my birthday is in May") is the next one; one told in the past is the latest one."""
    sentence = _sentence_around(text, start, end)
    return bool(_FUTURE.search(sentence)) or not _told_in_past(sentence)


def _capital_ok(word: str) -> bool:
    """'May', 'Sat', 'Mar' count as dates only when capitalised."""
    return word.lower().rstrip(".") not in _NEEDS_CAPITAL or word[:1].isupper()


def _count(words: str) -> tuple[int, bool]:
    """('two' -> 2, exact), ('a few' -> 3, approximate)."""
    key = words.lower().split()
    key = [k for k in key if k not in ("a", "of")] or ["a"]
    word = key[-1]
    if word.isdigit():
        return int(word), False
    return _NUMBERS[word], word in _VAGUE_NUMBERS


def _spoken(words: str) -> str:
    return " ".join(words.lower().split())


# --- rules: one regex and one resolver each -----------------------------------------------

_Resolver = Callable[[re.Match[str], date | None, str], _Period | None]
_RULES: list[tuple[re.Pattern[str], _Resolver]] = []


def _rule(pattern: str) -> Callable[[_Resolver], _Resolver]:
    def register(resolver: _Resolver) -> _Resolver:
        _RULES.append((re.compile(pattern, re.IGNORECASE), resolver))
        return resolver

    return register


def _day(day: date, relative: bool = True, approximate: bool = False) -> _Period:
    return _Period(day, day, "day", day_label(day), f"on {day_label(day)}", relative, approximate)


_DAY_OFFSETS = {
    "the day before yesterday": -2, "the day after tomorrow": 2, "yesterday": -1, "today": 0, "tonight": 0,
    "tomorrow": 1, "last night": -1, "this morning": 0, "this afternoon": 0, "this evening": 0, "earlier today": 0,
}  # fmt: skip


@_rule(r"\b(?:the\s+day\s+before\s+yesterday|the\s+day\s+after\s+tomorrow|yesterday|today|tonight|tomorrow"
       r"|last\s+night|this\s+(?:morning|afternoon|evening))\b")  # fmt: skip
def _day_word(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    if anchor is None:
        return None
    if re.search(r"\blike\s+(?:just\s+|only\s+)?$", text[: m.start()], re.IGNORECASE):
        return None  # "feels like just yesterday": a figure of speech, not a date
    return _day(anchor + timedelta(days=_DAY_OFFSETS[_spoken(m.group())]))


@_rule(r"\bthe\s+other\s+day\b")
def _other_day(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    if anchor is None:
        return None
    label = f"a few days before {day_label(anchor)}"
    return _Period(anchor - timedelta(days=7), anchor - timedelta(days=2), "week", label, label, approximate=True)


@_rule(
    r"\b(?:(?P<q>about|around|almost|nearly|over|roughly|approximately|maybe|probably|like)\s+)?"
    rf"(?P<n>{_COUNT_RE})\s+(?:more\s+)?(?P<u>day|night|week|weekend|month|year|decade)s?"
    r"\s+(?P<dir>ago|back|from\s+now)\b"
)
def _units_ago(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    if anchor is None:
        return None
    sign = 1 if m.group("dir").lower().startswith("from") else -1
    return _units_away(m, anchor, sign)


# "in two weeks", "in about a month": a count of units from the session on, as "two weeks from now" says it.
_IN_UNITS = (
    r"\bin\s+(?:(?P<q>about|around|roughly|approximately|maybe|like)\s+)?"
    rf"(?P<n>{_COUNT_RE})\s+(?:more\s+)?(?P<u>day|week|weekend|month|year|decade)s?\b(?:['’]\s*time\b)?"
)
# Before "in": the count is how long since something last happened ("for the first time in two years",
# "twice in three days"), not a date.
_SINCE_LAST = re.compile(r"\b(?:times?|once|twice|ever|first|only)\s*$", re.IGNORECASE)


@_rule(_IN_UNITS + r"(?!\s+(?:ago|back|from\s+now|old|of)\b)")
def _in_units(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    """'in two weeks' said of plans ("I'll move in a month", "In three days I start my new job") is that long
    after the session. Told of the past, or in the present within a sentence, it is mostly a duration ("I
    did it in two days", "I read a book in a week"): left alone, as a duration has no date to give."""
    if anchor is None or _SINCE_LAST.search(text, 0, m.start()):
        return None
    sentence_start = max((b.end() for b in _SENTENCE_BREAK.finditer(text, 0, m.start())), default=0)
    opens = not text[sentence_start : m.start()].strip(" \t\"'“‘(")
    # the clause it is in, not the sentence: "Work is going great, I learned to knit in two weeks" is past
    clause = _sentence_around(text, m.start(), m.end(), _CLAUSE_BREAK)
    if _told_in_past(clause) or not (_FUTURE.search(clause) or opens):
        return None
    return _units_away(m, anchor, 1)


def _units_away(m: re.Match[str], anchor: date, sign: int) -> _Period:
    """`n` units before (sign -1) or after (+1) the anchor, from a match with groups `n`, `u` and `q`."""
    n, vague = _count(m.group("n"))
    approximate = vague or bool(m.group("q"))
    unit = m.group("u").lower()
    side = "after" if sign > 0 else "before"
    spoken = _spoken(m.group("n"))
    if unit in ("day", "night"):
        if vague:
            near, far = (anchor + timedelta(days=2), anchor + timedelta(days=7))
            if sign < 0:
                near, far = anchor - timedelta(days=7), anchor - timedelta(days=2)
            label = f"{spoken} days {side} {day_label(anchor)}"
            return _Period(near, far, "week", label, label, approximate=True)
        return _day(anchor + timedelta(days=sign * n), approximate=approximate)
    if unit == "week":
        if vague:
            lo, hi = (anchor - timedelta(days=35), anchor - timedelta(days=10))
            if sign > 0:
                lo, hi = anchor + timedelta(days=10), anchor + timedelta(days=35)
            label = f"{spoken} weeks {side} {day_label(anchor)}"
            return _Period(lo, hi, "month", label, label, approximate=True)
        monday = _monday(anchor + timedelta(days=sign * 7 * n))
        label = f"the week {side} {day_label(anchor)}" if n == 1 else f"{spoken} weeks {side} {day_label(anchor)}"
        adverbial = f"in {label}" if n == 1 else label
        return _Period(monday, monday + timedelta(days=6), "week", label, adverbial, approximate=approximate)
    if unit == "weekend":
        saturday = _last_saturday(anchor) if sign < 0 else _next_saturday(anchor)
        saturday += timedelta(days=sign * 7 * (n - 1))
        label = f"the weekend {side} {day_label(anchor)}" if n == 1 else f"{spoken} weekends {side} {day_label(anchor)}"
        adverbial = f"on {label}" if n == 1 else label
        return _Period(saturday, saturday + timedelta(days=1), "week", label, adverbial, approximate=approximate)
    if unit == "month":
        if vague:
            lo = _month_range(*_shift_month(anchor.year, anchor.month, sign * (5 if sign < 0 else 2)))[0]
            hi = _month_range(*_shift_month(anchor.year, anchor.month, sign * (2 if sign < 0 else 5)))[1]
            label = f"{spoken} months {side} {_month_label(anchor.year, anchor.month)}"
            return _Period(lo, hi, "month", label, label, approximate=True)
        year, month = _shift_month(anchor.year, anchor.month, sign * n)
        return _month_period(year, month, approximate=approximate)
    years = n * (10 if unit == "decade" else 1)
    if vague:
        lo_year, hi_year = sorted(
            (
                anchor.year + sign * 2 * (10 if unit == "decade" else 1),
                anchor.year + sign * 5 * (10 if unit == "decade" else 1),
            )
        )
        label = f"{spoken} {unit}s {side} {anchor.year}"
        return _Period(date(lo_year, 1, 1), date(hi_year, 12, 31), "year", label, label, approximate=True)
    return _year_period(anchor.year + sign * years, approximate=approximate or unit == "decade")


def _month_period(year: int, month: int, relative: bool = True, approximate: bool = False) -> _Period:
    first, last = _month_range(year, month)
    label = _month_label(year, month)
    adverbial = f"around {label}" if approximate else f"in {label}"
    return _Period(first, last, "month", label, adverbial, relative, approximate)


def _year_period(year: int, relative: bool = True, approximate: bool = False) -> _Period:
    first, last = _year_range(year)
    adverbial = f"around {year}" if approximate else f"in {year}"
    return _Period(first, last, "year", str(year), adverbial, relative, approximate)


def _last_saturday(anchor: date) -> date:
    """Saturday of the most recent weekend that is over (not the one the anchor falls in)."""
    saturday = anchor - timedelta(days=(anchor.weekday() - 5) % 7)
    return saturday - timedelta(days=7) if anchor.weekday() >= 5 else saturday


def _next_saturday(anchor: date) -> date:
    """Saturday of the first weekend that starts after the anchor."""
    return anchor + timedelta(days=(5 - anchor.weekday()) % 7 or 7)


_RELATION_WORDS = {
    "last": "last", "this past": "last", "the past": "past", "past": "past", "the last": "past", "this": "this",
    "next": "next", "this coming": "next", "the coming": "next", "the following": "next",
}  # fmt: skip


@_rule(
    r"\b(?P<rel>this\s+past|the\s+past|the\s+last|past|last|this\s+coming|the\s+coming|the\s+following|this|next)\s+"
    rf"(?P<u>week|weekend|month|year|{_SEASON_RE}|{_WEEKDAY_RE}|{_MONTH_RE})\b\.?"
)
def _relative_unit(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    if anchor is None or not _capital_ok(m.group("u")):
        return None
    relation = _RELATION_WORDS[_spoken(m.group("rel"))]
    return _relative_period(relation, m.group("u").lower(), anchor)._replace(span=(m.start(), m.end("u")))


_WEEKDAY_NAME_RE = "|".join(WEEKDAY_NAMES)  # full names only: "on the sun", "on wed" are other words


@_rule(rf"\bon\s+(?P<w>{_WEEKDAY_NAME_RE})\b(?!\s*,?\s*(?:the\s+)?(?:\d|{_MONTH_RE}\b))")
def _on_weekday(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    """'on Friday' with no date after it: the latest Friday before the session when told in the past
    ("On Friday, I got great news"), the next one when told of plans or in the present."""
    weekday = m.group("w")
    if anchor is None or not weekday[:1].isupper():
        return None
    relation = "next" if _upcoming(text, m.start(), m.end()) else "last"
    period = _weekday_period(_WEEKDAY_INDEX[weekday.lower()], anchor, relation)
    return period._replace(span=(m.start("w"), m.end("w")))


def _relative_period(relation: str, unit: str, anchor: date) -> _Period:
    """`relation` ('last', 'past', 'this', 'next') applied to a unit, weekday, month or season name."""
    when = day_label(anchor)
    if unit == "week":
        if relation == "past":
            first, last, label = anchor - timedelta(days=7), anchor - timedelta(days=1), f"the week before {when}"
        elif relation == "last":
            # "last week" means the previous calendar week or the past seven days: cover both.
            first, last = _monday(anchor) - timedelta(days=7), anchor - timedelta(days=1)
            label = f"the week before {when}"
        elif relation == "this":
            first, last, label = _monday(anchor), _monday(anchor) + timedelta(days=6), f"the week of {when}"
        else:
            first = _monday(anchor) + timedelta(days=7)
            last, label = first + timedelta(days=6), f"the week after {when}"
        return _Period(first, last, "week", label, f"in {label}")
    if unit == "weekend":
        if relation in ("last", "past"):
            saturday, label = _last_saturday(anchor), f"the weekend before {when}"
        elif relation == "this" and anchor.weekday() >= 5:
            saturday, label = anchor - timedelta(days=anchor.weekday() - 5), f"the weekend of {when}"
        else:
            saturday, label = _next_saturday(anchor), f"the weekend after {when}"
        return _Period(saturday, saturday + timedelta(days=1), "week", label, f"on {label}")
    if unit == "month":
        if relation == "past":
            label = f"the month before {when}"
            return _Period(anchor - timedelta(days=30), anchor - timedelta(days=1), "month", label, f"in {label}")
        shift = {"last": -1, "this": 0, "next": 1}[relation]
        return _month_period(*_shift_month(anchor.year, anchor.month, shift))
    if unit == "year":
        if relation == "past":
            label = f"the year before {when}"
            return _Period(anchor - timedelta(days=365), anchor - timedelta(days=1), "year", label, f"in {label}")
        return _year_period(anchor.year + {"last": -1, "this": 0, "next": 1}[relation])
    if unit in _SEASON_START:
        return _season_period(unit, _season_year(unit, anchor, relation))
    if unit in _WEEKDAY_INDEX:
        return _weekday_period(_WEEKDAY_INDEX[unit], anchor, relation)
    month = _MONTH_INDEX[unit]
    if relation in ("last", "past"):
        year = anchor.year if month < anchor.month else anchor.year - 1
    elif relation == "next":
        year = anchor.year if month > anchor.month else anchor.year + 1
    else:
        year = anchor.year
    return _month_period(year, month)


def _weekday_period(weekday: int, anchor: date, relation: str) -> _Period:
    """'last Saturday': the most recent Saturday before the anchor, labelled as the benchmark does."""
    name = WEEKDAY_NAMES[weekday]
    when = day_label(anchor)
    if relation in ("last", "past"):
        day = anchor - timedelta(days=(anchor.weekday() - weekday) % 7 or 7)
        label = f"the {name} before {when}"
    elif relation == "next":
        day = anchor + timedelta(days=(weekday - anchor.weekday()) % 7 or 7)
        label = f"the {name} after {when}"
    else:
        day = _monday(anchor) + timedelta(days=weekday)
        label = day_label(day) if day == anchor else f"the {name} {'before' if day < anchor else 'after'} {when}"
    return _Period(day, day, "day", label, f"on {label}")


def _season_year(season: str, anchor: date, relation: str) -> int:
    """Which year's `season` a relation picks, counting a season by the year it starts in."""
    ranges: dict[int, tuple[date, date]] = {}
    for year in range(anchor.year - 2, anchor.year + 2):
        try:
            ranges[year] = _season_range(season, year)
        except ValueError:  # outside the calendar: winter 9999 ends in the year 10000
            continue
    if relation in ("last", "past"):
        return max(year for year, (_, last) in ranges.items() if last < anchor)
    if relation == "next":
        return min(year for year, (first, _) in ranges.items() if first > anchor)
    if relation == "future":  # a bare "in the summer" said of plans
        return min(year for year, (_, last) in ranges.items() if last >= anchor)
    if relation == "past-or-current":
        return max(year for year, (first, _) in ranges.items() if first <= anchor)
    containing = [year for year, (first, last) in ranges.items() if first <= anchor <= last]
    if containing:
        return containing[0]
    return anchor.year - 1 if season == "winter" and anchor.month <= 2 else anchor.year


def _season_period(season: str, year: int, relative: bool = True) -> _Period:
    first, last = _season_range(season, year)
    label = _season_label(season, year)
    return _Period(first, last, "month", label, f"in {label}", relative)


_FOLLOWS_FREELY = re.compile(r"\s*(?:$|[.,;:!?)\]\-–—]|(?:and|but|so|too|then|when|as|I|we|he|she|they)\b)")


@_rule(r"\bthe\s+(?P<u>day|week|weekend|month|year)\s+(?P<d>before|after)\b")
def _the_unit_before(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    """'the week before' on its own means the week before now; before a noun it is relative to that noun."""
    if anchor is None or not _FOLLOWS_FREELY.match(text, m.end()):
        return None
    unit, after = m.group("u").lower(), m.group("d").lower() == "after"
    if unit == "day":
        return _day(anchor + timedelta(days=1 if after else -1))
    return _relative_period("next" if after else "last", unit, anchor)


@_rule(
    r"\b(?P<prep>in|during|since|until|till|by|from|through|around|before|after|over)\s+"
    rf"(?:(?P<mod>early|mid|late)[\s-]+)?(?P<m>{_MONTH_RE})\b(?!\.?\s*,?\s*(?:\d|of\b))"
)
def _bare_month(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    """'in May': the latest May at or before the session, or the next one when the sentence speaks of plans."""
    if anchor is None or not _capital_ok(m.group("m")):
        return None
    month = _MONTH_INDEX[m.group("m").lower()]
    if _upcoming(text, m.start(), m.end()):
        year = anchor.year if month >= anchor.month else anchor.year + 1
    else:
        year = anchor.year if month <= anchor.month else anchor.year - 1
    first, last = _month_range(year, month)
    label = _month_label(year, month)
    modifier = (m.group("mod") or "").lower()
    if modifier:
        bounds = {"early": (1, 10), "mid": (11, 20), "late": (21, last.day)}[modifier]
        first, last = date(year, month, bounds[0]), date(year, month, bounds[1])
        label = f"{modifier} {label}"
    start = m.start("mod") if modifier else m.start("m")
    return _Period(first, last, "month", label, label, span=(start, m.end("m")))


@_rule(
    r"\b(?:(?P<d1>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<m1>" + _MONTH_RE + r")\b\.?"
    r"|(?P<m2>" + _MONTH_RE + r")\.?\s+(?P<d2>\d{1,2})(?:st|nd|rd|th)?\b)(?!\s*,?\s*\d)"
)
def _day_without_year(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    """'on 8 May', 'May 8th': the year comes from the session date (and the tense)."""
    word = m.group("m1") or m.group("m2")
    if anchor is None or not _capital_ok(word):
        return None
    month, day = _MONTH_INDEX[word.lower()], int(m.group("d1") or m.group("d2"))
    found = _nearest_day(month, day, anchor, forward=_upcoming(text, m.start(), m.end()))
    if found is None:
        return None
    label = day_label(found)
    return _Period(found, found, "day", label, label)


def _nearest_day(month: int, day: int, anchor: date, forward: bool) -> date | None:
    """The first `month`/`day` on or after the anchor (`forward`), else the last one on or before it.
    29 February falls only in leap years, so the search goes on to the nearest one in that direction
    (eight years reach it even across 2100, which is no leap year); a day no year has is None."""
    step = 1 if forward else -1
    for year in range(anchor.year, anchor.year + step * 9, step):
        try:
            found = date(year, month, day)
        except ValueError:  # 29 February of a common year, 31 April, or a year outside 1 to 9999
            continue
        if (found >= anchor) if forward else (found <= anchor):
            return found
    return None


@_rule(r"\b(?:in|during|over|through|throughout)\s+(?P<the>the\s+)?(?P<s>" + _SEASON_RE + r")\b(?!\s*(?:of\s+)?\d)")
def _bare_season(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    if anchor is None:
        return None
    season = m.group("s").lower()
    relation = "future" if _is_future(text, m.start(), m.end()) else "past-or-current"
    period = _season_period(season, _season_year(season, anchor, relation))
    start = m.start("the") if m.group("the") else m.start("s")
    return period._replace(span=(start, m.end("s")), adverbial=period.label)


# Absolute dates: no anchor needed.


@_rule(r"\b(?P<d>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<m>" + _MONTH_RE + r")\.?,?\s+(?P<y>\d{4})\b")
def _day_month_year(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    return _absolute_day(int(m.group("y")), m.group("m"), int(m.group("d")))


@_rule(r"\b(?P<m>" + _MONTH_RE + r")\.?\s+(?P<d>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<y>\d{4})\b")
def _month_day_year(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    return _absolute_day(int(m.group("y")), m.group("m"), int(m.group("d")))


_DAY_WITH_YEAR = (
    r"(?:\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTH_RE + r"\.?,?\s+\d{4}"
    r"|" + _MONTH_RE + r"\.?\s+\d{1,2}(?:st|nd|rd|th)?,?\s+\d{4}|\d{4}-\d{2}-\d{2})"
)


@_rule(
    rf"\bthe\s+(?P<u>day|week|weekend|month|year|{_WEEKDAY_RE})\s+(?P<d>before|after)\s+(?P<date>{_DAY_WITH_YEAR})\b"
)
def _unit_around_date(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    """'the week before 9 June 2023': the benchmark's own way of naming a period, read back."""
    found = _find(m.group("date"), None)
    if not found or not _capital_ok(m.group("u")):
        return None
    pivot, unit, after = found[0].start, m.group("u").lower(), m.group("d").lower() == "after"
    if unit == "day":
        period = _day(pivot + timedelta(days=1 if after else -1))
    else:
        period = _relative_period("next" if after else "last", unit, pivot)
    label = " ".join(m.group().split())
    return period._replace(relative=False, label=label[:1].lower() + label[1:], adverbial=f"in {label}")


@_rule(
    r"\b(?:between\s+)?(?P<m1>"
    + _MONTH_RE
    + r")\s+(?:and|to|through|until|till|-|–)\s+(?P<m2>"
    + _MONTH_RE
    + r")\.?,?\s+(?P<y>\d{4})\b"
)
def _months_of_year(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    """'between May and July 2023': both months take the stated year."""
    if not (_capital_ok(m.group("m1")) and _capital_ok(m.group("m2"))):
        return None
    year = int(m.group("y"))
    first_month, last_month = _MONTH_INDEX[m.group("m1").lower()], _MONTH_INDEX[m.group("m2").lower()]
    first_year = year if first_month <= last_month else year - 1
    label = f"{MONTH_NAMES[first_month - 1]} to {MONTH_NAMES[last_month - 1]} {year}"
    first, last = _month_range(first_year, first_month)[0], _month_range(year, last_month)[1]
    return _Period(first, last, "month", label, f"from {label}", relative=False)


@_rule(r"\b(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})\b")
def _iso_day(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    try:
        return _day(date(int(m.group("y")), int(m.group("m")), int(m.group("d"))), relative=False)
    except ValueError:
        return None


def _absolute_day(year: int, month_word: str, day: int) -> _Period | None:
    if not _capital_ok(month_word):
        return None
    try:
        return _day(date(year, _MONTH_INDEX[month_word.lower()], day), relative=False)
    except ValueError:
        return None


@_rule(r"\b(?P<m>" + _MONTH_RE + r")\.?,?\s+(?:of\s+)?(?P<y>\d{4})\b")
def _month_year(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    if not _capital_ok(m.group("m")):
        return None
    return _month_period(int(m.group("y")), _MONTH_INDEX[m.group("m").lower()], relative=False)


@_rule(r"\b(?P<s>" + _SEASON_RE + r")\s+(?:of\s+)?(?P<y>\d{4})\b")
def _season_of_year(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    return _season_period(m.group("s").lower(), int(m.group("y")), relative=False)


@_rule(r"\b(?:in|during|since|until|till|by|from|of|around|before|after|through|throughout)\s+(?P<y>(?:19|20)\d{2})\b"
       r"(?!\s*[-/]\s*\d)")  # fmt: skip
def _year(m: re.Match[str], anchor: date | None, text: str) -> _Period | None:
    return _year_period(int(m.group("y")), relative=False)._replace(span=m.span("y"))


# --- public functions ---------------------------------------------------------------------


# Every rule needs one of these words or a digit: texts without any skip the rules (most chat turns).
_TRIGGER = re.compile(
    r"\d|yesterday|today|tonight|tomorrow|\b(?:last|next|this|past|ago|back|now|other|before|after|coming|following)\b"
    rf"|\b{_MONTH_RE}\b|\b{_SEASON_RE}\b|\bon\s+(?:{_WEEKDAY_NAME_RE})\b|{_IN_UNITS}",
    re.IGNORECASE,
)


def _find(text: str, anchor: date | None) -> list[ResolvedDate]:
    """Every time expression, longest first where two overlap, in text order."""
    if not _TRIGGER.search(text):
        return []
    candidates: list[ResolvedDate] = []
    for pattern, resolve in _RULES:
        for match in pattern.finditer(text):
            try:
                period = resolve(match, anchor, text)
            except (OverflowError, ValueError):
                # Outside the calendar (years 1 to 9999): "tomorrow" on 31 December 9999, "next year" in 9999,
                # "May 0000", "999 decades from now". The expression stays as said, unresolved.
                continue
            if period is None:
                continue
            start, end = period.span or match.span()
            end = start + len(text[start:end].rstrip(". "))
            candidates.append(
                ResolvedDate(
                    expression=text[start:end],
                    char_start=start,
                    char_end=end,
                    start=period.first,
                    end=period.last,
                    granularity=period.granularity,
                    label=period.label,
                    adverbial=period.adverbial,
                    relative=period.relative,
                    approximate=period.approximate,
                )
            )
    candidates.sort(key=lambda r: (r.char_start, -(r.char_end - r.char_start)))
    chosen: list[ResolvedDate] = []
    for candidate in candidates:
        if chosen and candidate.char_start < chosen[-1].char_end:
            if candidate.char_end - candidate.char_start > chosen[-1].char_end - chosen[-1].char_start:
                chosen[-1] = candidate
            continue
        chosen.append(candidate)
    return chosen


def _anchor_date(anchor: datetime | date | None) -> date | None:
    if anchor is None:
        return None
    return anchor.date() if isinstance(anchor, datetime) else anchor


def resolve_relative(text: str, anchor: datetime | date) -> list[ResolvedDate]:
    """Time expressions in `text` resolved against the session date `anchor`, in text order.

    Relative ones ("yesterday", "last week", "three years ago", "in May") have
    `relative=True`; dates stated outright ("in 2022", "8 May 2023") are
    returned too, with `relative=False`, so a caller sees every date a text names.
    """
    day = _anchor_date(anchor)
    if day is None:
        raise DateReadError("resolve_relative needs the session date as anchor: pass a datetime")
    return _find(text, day)


def with_absolute_dates(text: str, anchor: datetime | date) -> str:
    """The text with each relative expression followed by its label: 'yesterday (7 May 2023)'."""
    for found in reversed(resolve_relative(text, anchor)):
        if not found.relative:
            continue
        note = f" ({found.label})"
        if text.startswith(note, found.char_end):
            continue  # already annotated
        text = text[: found.char_end] + note + text[found.char_end :]
    return text


def time_window(question: str, now: datetime | None = None) -> tuple[datetime, datetime] | None:
    """The period a question asks about, as (first instant, last instant), or None.

    Absolute dates ("in May 2023", "on 8 May 2023", "in 2022") always count.
    Year-less and relative ones ("during June", "last week") need `now`: pass
    the latest date of the conversation, not the wall clock, when replaying old
    dialogues. Several dates give the period that spans them all.
    """
    found = _find(question, _anchor_date(now))
    if not found:
        return None
    first = datetime.combine(min(f.start for f in found), time.min)
    last = datetime.combine(max(f.end for f in found), time.max)
    return first, last


_LOCOMO_STAMP = re.compile(
    r"^(?P<h>\d{1,2}):(?P<mi>\d{2})\s*(?P<ap>[ap])\.?\s*m\.?\s*(?:on\s+)?(?P<d>\d{1,2})\s+(?P<m>[A-Za-z]+)\.?,?\s+"
    r"(?P<y>\d{4})$",
    re.IGNORECASE,
)


def parse_datetime(text: str, strict: bool = False) -> datetime | None:
    """A naive UTC datetime from ISO 8601 (any offset) or a LoCoMo session stamp ('1:56 pm on 8 May, 2023');
    None if unreadable (`memory/moments.py` states the convention). A readable time whose offset takes it
    outside the years 1 to 9999 in UTC ('9999-12-31T23:59-05:00') is None too, unless `strict`: then the
    ValueError that says so is raised, for a caller to pass on rather than a vaguer "cannot read"."""
    if not isinstance(text, str) or not text.strip():
        return None
    value = " ".join(text.split())
    stamp = _LOCOMO_STAMP.match(value)
    if stamp:
        month = _MONTH_INDEX.get(stamp.group("m").lower())
        hour, minute = int(stamp.group("h")), int(stamp.group("mi"))
        if month is None or not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if stamp.group("ap").lower() == "p" else 0)
        try:
            return datetime(int(stamp.group("y")), month, int(stamp.group("d")), hour, minute)
        except ValueError:
            return None
    parsed = from_iso(value)
    if parsed is not None:
        try:
            return utc(parsed)  # one convention for every stored time: naive UTC
        except ValueError:
            if strict:
                raise
            return None
    found = _find(value, None)
    if len(found) == 1 and found[0].granularity == "day" and len(found[0].expression) >= len(value) - 1:
        return datetime.combine(found[0].start, time.min)
    return None
