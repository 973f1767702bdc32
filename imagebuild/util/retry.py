"""Retry a call with exponential backoff, under a deadline, cancellable at once.

Generic: nothing here knows about HTTP or git. The call raises; ``classify``
decides whether that failure is worth another try (a :class:`Transient`,
perhaps carrying the wait the other side asked for, like HTTP Retry-After)
or final (``None``). Waits never run past the deadline, a requested wait
longer than the policy's cap is not waited out, and setting ``cancel``
(Ctrl-C) wakes a waiting caller at once.
"""

from __future__ import annotations

import email.utils
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

T = TypeVar("T")


class Cancelled(Exception):
    """The work was cancelled (Ctrl-C or a passed deadline): stop, report nothing."""


@dataclass(frozen=True)
class Deadline:
    """A point in ``time.monotonic()`` after which no new work starts."""

    at: float = math.inf

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.at


NO_DEADLINE = Deadline()


@dataclass(frozen=True, kw_only=True)
class Transient:
    """A failure worth another try; ``after`` is the wait the other side asked for."""

    after: float | None = None


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    attempts: int = 3
    backoff: float = 0.25  # the first wait; it doubles with every attempt
    max_wait: float = 60.0  # the longest single wait, a server's Retry-After included

    def wait(self, attempt: int, requested: float | None) -> float | None:
        """Seconds to wait after failed attempt ``attempt``; None: do not retry."""
        if attempt >= self.attempts:
            return None
        wait = self.backoff * 2.0 ** (attempt - 1)
        if requested is not None:
            if requested > self.max_wait:
                return None  # waiting that long is the caller's decision, not ours
            wait = max(wait, requested)
        return min(wait, self.max_wait)


RetryHook = Callable[[Exception, int, float], None]


def retry_call(
    call: Callable[[int], T],
    *,
    classify: Callable[[Exception], Transient | None],
    policy: RetryPolicy,
    deadline: Deadline = NO_DEADLINE,
    cancel: threading.Event | None = None,
    on_retry: RetryHook | None = None,
) -> T:
    """``call(attempt)`` until it returns, fails for good, or runs out of attempts or time.

    The last failure is re-raised unchanged; ``call`` gets the attempt number
    (from 1) so its errors can say how often it tried.
    """
    never = threading.Event()
    attempt = 1
    while True:
        if cancel is not None and cancel.is_set():
            raise Cancelled
        try:
            return call(attempt)
        except Exception as e:
            transient = classify(e)
            wait = None if transient is None else policy.wait(attempt, transient.after)
            if wait is None or wait >= deadline.remaining():
                raise
            if on_retry is not None:
                on_retry(e, attempt, wait)
            if (cancel or never).wait(wait):
                raise Cancelled from e
            attempt += 1


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from an HTTP Retry-After header (delta-seconds or HTTP-date); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = datetime.now(UTC).timestamp() if now is None else now
    return max(0.0, when.timestamp() - current)
