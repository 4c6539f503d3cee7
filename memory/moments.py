"""One convention for times: every time the memory holds is a naive datetime in UTC.

Callers send times in many shapes: ISO 8601 with `Z` or an offset (what
JavaScript's `toISOString()` and most APIs emit), ISO without an offset,
LoCoMo's session stamps ('1:56 pm on 8 May, 2023'), or epoch numbers. Python
refuses to compare a time that carries an offset with one that does not, so
a single offset in a namespace used to break every later question. Each time
is therefore normalised where it enters (the pydantic models of turns,
records, evidence and history use `UtcTime`), and records stored before this
rule are normalised as they are read:

- a time with an offset is converted to UTC and stored without the offset;
- a time without an offset is taken to be UTC already (a replayed conversation
  keeps its own clock, since all of its turns are read the same way);
- a number is seconds since 1970-01-01 UTC; one above `MILLISECONDS_FROM`
  is milliseconds (JavaScript's `Date.now()`), as pydantic reads them.

The offset a turn's time was sent with is not lost: a turn keeps it as
`utc_offset` (minutes east of UTC, `offset_of`), and so do the records made
from it. Order, windows and "now" use UTC; the day a turn was said, and the
days its "yesterday" or "last Friday" name, are read on the speaker's clock
(`local`): "I went hiking yesterday", said at 20:00 in Denver on 8 May
(02:00 UTC on 9 May), happened on 7 May.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime, time, timedelta, timezone
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BeforeValidator, WithJsonSchema

# Above this an epoch number is read as milliseconds: 2e10 seconds is the year 2603, while
# 2e10 milliseconds is August 1970, so no time a conversation holds falls on the wrong side.
MILLISECONDS_FROM = 2e10
_EPOCH_TEXT = re.compile(r"^-?\d{9,}(?:\.\d+)?$")  # "1683626400": nine digits or more, not a year
_NUMBER_TEXT = re.compile(r"^-?\d+(?:\.\d+)?$")


def utc(moment: datetime) -> datetime:
    """The same instant as a naive UTC datetime (a naive one is already UTC by convention)."""
    if moment.tzinfo is None:
        return moment
    try:
        return moment.astimezone(UTC).replace(tzinfo=None)
    except OverflowError:  # 0001-01-01T00:00+05:00 is in the year 0 in UTC, which datetime cannot hold
        raise ValueError(f"the time {moment.isoformat()} falls outside the years 1 to 9999 in UTC: "
                         "give a time within them") from None


MAX_OFFSET_MINUTES = 18 * 60  # the widest offset ISO 8601 and Python allow (+-18:00; real zones span -12 to +14)


def offset_of(value: object) -> int | None:
    """The offset, in minutes east of UTC, that a time was sent with (`-06:00` -> -360); None when it names
    none, or names UTC itself (`Z`, `+00:00`): such a turn is read on the UTC clock, as every turn was before."""
    if isinstance(value, str):
        text = value.strip()
        value = None if _NUMBER_TEXT.match(text) else from_iso(text)
    if not isinstance(value, datetime) or value.tzinfo is None:
        return None
    shift = value.utcoffset()
    minutes = round(shift.total_seconds() / 60) if shift is not None else 0
    return minutes or None


def from_iso(text: str) -> datetime | None:
    """ISO 8601 as written, its offset kept (a trailing `Z`, which Python 3.11 reads only in some forms, is
    `+00:00`); None for text that is not ISO 8601. The one reading of ISO text the time rules share."""
    if not text[:1].isdigit():
        return None
    try:
        return datetime.fromisoformat(text[:-1] + "+00:00" if text[-1] in "Zz" else text)
    except ValueError:
        return None


def local(moment: datetime | None, offset: int | None) -> datetime | None:
    """A stored (UTC) time on the clock of the one who said it, `offset` minutes east of UTC; the time
    itself when there is no offset, or when the shift would leave the calendar (years 1 to 9999)."""
    if moment is None or not offset:
        return moment
    try:
        return moment + timedelta(minutes=offset)
    except OverflowError:
        return moment


def iso_on_clock(moment: datetime, offset: int | None) -> str:
    """ISO 8601 of a stored (UTC) time on the speaker's clock, its offset written ("2023-05-08T20:00:00-06:00"),
    for what people read outside the memory; a time without an offset stays as stored (naive, UTC)."""
    shifted = local(moment, offset)
    if not offset or shifted is moment:
        return moment.isoformat()
    return shifted.replace(tzinfo=timezone(timedelta(minutes=offset))).isoformat()


def zone_of(name: str, where: str = "timezone") -> ZoneInfo | None:
    """The IANA time zone a setting names (None for ''), or a one-line ConfigError."""
    from strata.memory.errors import ConfigError

    if not name.strip():
        return None
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{where}: no time zone is called {name[:60]!r}: give an IANA name such as "
                          "America/Denver or Europe/Paris (or '' for UTC)") from None


def offset_in(moment: datetime, zone: ZoneInfo) -> int | None:
    """The offset, in minutes east of UTC, of `zone`'s clock at the UTC instant `moment` (daylight saving
    included); None where that clock is UTC's."""
    try:
        return offset_of(moment.replace(tzinfo=UTC).astimezone(zone))
    except (OverflowError, ValueError):  # at the calendar's edges
        return None


def utc_now() -> datetime:
    """The current time under the convention, to the second."""
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


def epoch_seconds(moment: datetime) -> float:
    """Seconds since 1970 for range filters; a naive time counts as UTC whatever the machine's zone."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def from_epoch(number: float) -> datetime:
    """A naive UTC datetime from epoch seconds, or milliseconds above `MILLISECONDS_FROM`."""
    if not math.isfinite(number):
        raise ValueError(f"cannot read the time {number!r}: give seconds since 1970 or an ISO 8601 string")
    seconds = number / 1000 if abs(number) > MILLISECONDS_FROM else number
    try:
        return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"the time {number!r} is out of range: give seconds since 1970 (e.g. 1683626400)") from None


def read_time(value: object) -> datetime | None:
    """Any time a caller may send, normalised; None for None or blank text; ValueError otherwise."""
    if value is None or isinstance(value, datetime):
        return utc(value) if value is not None else None
    if isinstance(value, date):
        return datetime.combine(value, time.min)
    if isinstance(value, bool):
        raise ValueError(f"cannot read the time {value!r}: give an ISO 8601 string such as 2023-05-08T13:56")
    if isinstance(value, int | float):
        return from_epoch(float(value))
    if isinstance(value, str):
        if not value.strip():
            return None
        if _EPOCH_TEXT.match(value.strip()):
            return from_epoch(float(value))
        from strata.memory.dates import parse_datetime

        parsed = parse_datetime(value, strict=True)
        if parsed is None and _NUMBER_TEXT.match(value.strip()):
            return _short_number(value.strip())
        if parsed is None:
            raise ValueError(
                f"cannot read the time {value[:60]!r}: use ISO 8601 such as 2023-05-08T13:56 or 2023-05-08T13:56:00Z, "
                "epoch seconds, or '1:56 pm on 8 May, 2023'"
            )
        return parsed
    raise ValueError(f"a time cannot be {type(value).__name__}: give an ISO 8601 string or epoch seconds")


def _short_number(text: str) -> datetime:
    """Fewer than nine digits no date format reads: "0" is the epoch, as the number 0 is; the rest are refused.
    Read as seconds, a mistyped date ("20231301", "202305") became a time in 1970, stored without a word."""
    if text.lstrip("-") == "0":
        return from_epoch(0.0)
    if re.fullmatch(r"\d{4}", text):
        raise ValueError(f"the time {text!r} is a year alone: give a date such as {text}-01-01 or epoch seconds")
    raise ValueError(f"cannot read the time {text!r}: digits alone are epoch seconds from nine digits on "
                     "(1683626400); give a date such as 2023-05-08")


# What a caller may send, as the schemas say it (Studio's forms, the server's input check): the text
# forms and epoch seconds `read_time` takes, not only ISO 8601 date-times.
_SENT = [{"type": "string", "description": "ISO 8601, or a date as people write it"},
         {"type": "number", "description": "epoch seconds"}]
UtcTime = Annotated[datetime, BeforeValidator(read_time), WithJsonSchema({"anyOf": _SENT}, mode="validation")]
"""A datetime field that holds naive UTC, whatever form the caller sent."""
MaybeUtcTime = Annotated[datetime | None, BeforeValidator(read_time),
                         WithJsonSchema({"anyOf": [*_SENT, {"type": "null"}]}, mode="validation")]
"""The same, where no time (None or blank text) is allowed."""
