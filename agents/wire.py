"""How a model call survives the network: retries, backoff, and the per-question call budget.

A provider that answers 429 (rate limit) or 5xx, a dropped connection or a
call that times out is usually fine a moment later, so such calls are tried
again after an exponential backoff with jitter (or after the server's own
Retry-After, when it sends one, up to `RETRY_AFTER_TOTAL` in all). Everything
else (a missing key, an unknown model, a 429 that says the quota is used up)
cannot get better by waiting and is reported as a one-line configuration error.
Each question (each stored turn, while ingesting) may spend at most
`max_model_calls` calls, retries included; once that budget or the retries are
used up, the roles answer with their offline policies and say so in the trace
(a model down after its retries stays out for the rest of an `add`).
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
from dataclasses import dataclass, field

from strata.graph.context import Context

BACKOFF_CEILING = 30.0  # seconds: the longest wait between two tries, however many tries came before
RETRY_AFTER_CEILING = 60.0  # seconds: a Retry-After longer than this is not waited for (the question falls back)
# seconds one call may wait on Retry-After over all its retries: rate limits are counted per minute, so a limit
# not lifted after a minute of waiting is not a blip, and a server asking 60 s on each of 3 retries would hold
# one question (and, while ingesting, one turn) for 3 minutes. Past it the call falls back like one that is down
RETRY_AFTER_TOTAL = 60.0
TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})  # worth trying again
REJECTED_STATUS = frozenset({400, 404, 415, 422})  # a structured request the server may not support
# 429 codes that no wait lifts (a used-up quota, a billing limit): reported like a missing key, not retried
QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "billing_not_active"})
CAP_REACHED = "model call cap reached"
UNAVAILABLE = "model unavailable"
WIRE_PROBLEMS = (CAP_REACHED, UNAVAILABLE)


@dataclass
class CallBudget:
    """Calls spent on the current question (or stored turn), and whether the model gave out."""

    limit: int
    used: int = 0
    down: str = ""  # why the model failed after its retries: later calls of the same question skip it
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self) -> bool:
        """Spend one call; False when the budget is used up."""
        with self.lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True


def budget_of(context: Context) -> CallBudget:
    """The call budget of the question the context is running (one per context object)."""
    budget = getattr(context, "_call_budget", None)
    if not isinstance(budget, CallBudget) or budget.limit != context.max_model_calls:
        budget = CallBudget(limit=context.max_model_calls)
        object.__setattr__(context, "_call_budget", budget)
    return budget


def new_question(context: Context) -> None:
    """A new question (or the first turn of an `add`) starts: a full call budget, the model given another
    chance."""
    object.__setattr__(context, "_call_budget", CallBudget(limit=context.max_model_calls))


def new_unit(context: Context) -> None:
    """The next unit of a long job (a later turn of an `add`, a turn or group the slow path consolidates): a
    full call budget, as a question gets, but a model that gave out earlier in the job stays out (each unit
    would wait through its retries again: 7 s a turn at the defaults while a server answers 503)."""
    down = budget_of(context).down
    new_question(context)
    budget_of(context).down = down


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a provider error, whichever client raised it."""
    for candidate in error_chain(exc):
        for name in ("status_code", "status", "http_status"):
            value = getattr(candidate, name, None)
            if isinstance(value, int) and 100 <= value < 600:
                return value
        value = getattr(getattr(candidate, "response", None), "status_code", None)
        if isinstance(value, int):
            return value
    return None


def is_transient(exc: BaseException) -> bool:
    """Rate limits, server errors, timeouts and dropped connections: worth another try (not a used-up quota)."""
    status = status_of(exc)
    if status is not None:
        return (status in TRANSIENT_STATUS or status >= 500) and not is_quota(exc)
    for candidate in error_chain(exc):
        if isinstance(candidate, ConnectionError | TimeoutError):
            return True
        name = type(candidate).__name__
        if "Timeout" in name or "Connection" in name or "Connect" in name:
            return True
    return False


def is_quota(exc: BaseException) -> bool:
    """A 429 that says the account's quota or billing limit is used up: no wait fixes it."""
    if status_of(exc) != 429:
        return False
    for candidate in error_chain(exc):
        code = getattr(candidate, "code", None)
        if isinstance(code, str) and code.strip().lower() in QUOTA_CODES:
            return True
        if "exceeded your current quota" in str(candidate).lower():
            return True
    return False


def is_rejection(exc: BaseException) -> bool:
    """A client error that a plain-text request may not meet (the server does not do structured output)."""
    return status_of(exc) in REJECTED_STATUS


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked to wait (Retry-After, or retry-after-ms), if it said."""
    for candidate in error_chain(exc):
        headers = getattr(getattr(candidate, "response", None), "headers", None)
        if headers is None:
            continue
        millis = headers.get("retry-after-ms")
        if millis is not None:
            try:
                return max(0.0, float(millis) / 1000.0)
            except ValueError:
                pass
        value = headers.get("retry-after")
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            when = _http_date(value)
            if when is not None:
                return max(0.0, when - time.time())
    return None


def _http_date(value: str) -> float | None:
    """The instant an HTTP date names, or None for anything else (`soon`, `120s`): the backoff is used then.
    Python's parser raises on what it cannot read (it returned None before 3.10)."""
    try:
        when = email.utils.parsedate_to_datetime(value) if value.strip() else None
        return when.timestamp() if when is not None else None
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def backoff(attempt: int, base: float, asked: float | None, waited: float = 0.0) -> float | None:
    """Seconds to wait before try `attempt + 1`; None when the server asks for longer than is worth waiting
    (one Retry-After over `RETRY_AFTER_CEILING`, or, with the `waited` on earlier ones, over
    `RETRY_AFTER_TOTAL` in all).

    Exponential (base, 2*base, 4*base ...) with full jitter between half and the whole
    of it, so that many clients hit by the same limit do not come back in step.
    """
    if asked is not None:
        return asked if asked <= RETRY_AFTER_CEILING and waited + asked <= RETRY_AFTER_TOTAL else None
    step = min(BACKOFF_CEILING, base * 2.0 ** min(attempt, 64))  # 2**1024 as a float overflowed (OverflowError)
    return step * random.uniform(0.5, 1.0)


def error_chain(exc: BaseException) -> list[BaseException]:
    """The error and what it was raised from (a provider's error wrapped by LangChain), nearest first."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 6:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen
