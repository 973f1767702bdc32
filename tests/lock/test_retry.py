"""The one retry-with-backoff helper, shared by the HTTP and git code."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from imagebuild.util.retry import (
    Cancelled,
    Deadline,
    RetryPolicy,
    Transient,
    parse_retry_after,
    retry_call,
)


class Flaky(Exception):
    def __init__(self, after: float | None = None, *, transient: bool = True) -> None:
        super().__init__(f"flaky (after={after})")
        self.after = after
        self.transient = transient


def classify(e: Exception) -> Transient | None:
    return Transient(after=e.after) if isinstance(e, Flaky) and e.transient else None


def failing(times: int, error: Flaky, calls: list[int]) -> Callable[[int], str]:
    def call(attempt: int) -> str:
        calls.append(attempt)
        if attempt <= times:
            raise error
        return "ok"

    return call


FAST = RetryPolicy(attempts=3, backoff=0.001, max_wait=5)


def test_transient_failures_are_retried_with_doubling_waits() -> None:
    calls: list[int] = []
    waits: list[float] = []
    policy = RetryPolicy(attempts=3, backoff=0.001, max_wait=5)
    result = retry_call(
        failing(2, Flaky(), calls),
        classify=classify,
        policy=policy,
        on_retry=lambda _e, _n, wait: waits.append(wait),
    )
    assert (result, calls, waits) == ("ok", [1, 2, 3], [0.001, 0.002])


def test_permanent_failure_is_not_retried() -> None:
    calls: list[int] = []
    with pytest.raises(Flaky):
        retry_call(failing(5, Flaky(transient=False), calls), classify=classify, policy=FAST)
    assert calls == [1]


def test_gives_up_after_the_last_attempt_with_the_last_error() -> None:
    calls: list[int] = []
    error = Flaky()
    with pytest.raises(Flaky) as e:
        retry_call(failing(9, error, calls), classify=classify, policy=FAST)
    assert (e.value, calls) == (error, [1, 2, 3])


def test_a_requested_wait_is_honoured_up_to_the_cap() -> None:
    waits: list[float] = []
    policy = RetryPolicy(attempts=2, backoff=0.001, max_wait=5)
    retry_call(
        failing(1, Flaky(after=0.05), []),
        classify=classify,
        policy=policy,
        on_retry=lambda _e, _n, wait: waits.append(wait),
    )
    assert waits == [0.05]  # the server's Retry-After, not our 1 ms backoff
    calls: list[int] = []
    with pytest.raises(Flaky):
        retry_call(failing(1, Flaky(after=3600), calls), classify=classify, policy=policy)
    assert calls == [1]  # an hour is more than the cap: not waited out


def test_no_wait_runs_past_the_deadline() -> None:
    calls: list[int] = []
    policy = RetryPolicy(attempts=3, backoff=10, max_wait=60)
    with pytest.raises(Flaky):
        retry_call(
            failing(9, Flaky(), calls),
            classify=classify,
            policy=policy,
            deadline=Deadline.after(1),
        )
    assert calls == [1]


def test_cancel_wakes_a_waiting_retry_at_once() -> None:
    cancel = threading.Event()
    calls: list[int] = []
    policy = RetryPolicy(attempts=3, backoff=3600, max_wait=7200)
    with pytest.raises(Cancelled):
        retry_call(
            failing(9, Flaky(), calls),
            classify=classify,
            policy=policy,
            cancel=cancel,
            on_retry=lambda *_: cancel.set(),  # Ctrl-C arrives during the hour-long wait
        )
    assert calls == [1]


def test_a_cancelled_call_never_starts() -> None:
    cancel = threading.Event()
    cancel.set()
    calls: list[int] = []
    with pytest.raises(Cancelled):
        retry_call(failing(0, Flaky(), calls), classify=classify, policy=FAST, cancel=cancel)
    assert calls == []


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("120", 120.0), ("0", 0.0), (None, None), ("", None), ("soon", None), ("-5", None)],
)
def test_retry_after_seconds(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header) == seconds


def test_retry_after_http_date() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC), usegmt=True)
    assert parse_retry_after(later, now=now.timestamp()) == 30.0
    earlier = format_datetime(datetime(2026, 1, 1, 11, 0, 0, tzinfo=UTC), usegmt=True)
    assert parse_retry_after(earlier, now=now.timestamp()) == 0.0
