"""FakeClock: time stands still until a test advances it; timers due on the way fire in order."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from imagebuild.util.clock import Clock, Timer

# Clock ---------------------------------------------------------------------------------------------


class FakeClock(Clock):
    """Time stands still until ``advance``; timers due on the way fire in order, synchronously."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _FakeTimer]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def every(self, interval: float, callback: Callable[[], None]) -> Timer:
        timer = _FakeTimer(interval, callback)
        heapq.heappush(self._timers, (self._now + interval, next(self._order), timer))
        return timer

    def advance(self, seconds: float) -> None:
        self.advance_to(self._now + seconds)

    def advance_to(self, when: float) -> None:
        while self._timers and self._timers[0][0] <= when:
            due, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, due)
            timer.callback()
            heapq.heappush(self._timers, (due + timer.interval, next(self._order), timer))
        self._now = max(self._now, when)


@dataclass
class _FakeTimer(Timer):
    interval: float
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True
