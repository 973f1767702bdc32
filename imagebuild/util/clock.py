"""Time as the build sees it: a monotonic now() and a repeating timer, behind one small interface.

The build's heartbeats must fire while the engine's stream is silent, so a
timer thread calls them; tests replace the clock with
``imagebuild.testing.FakeClock``, whose timers fire as the test advances time,
so heartbeats are tested without sleeping.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable


class Timer(ABC):
    @abstractmethod
    def cancel(self) -> None:
        """Stop calling back; returns once no callback is running."""


class Clock(ABC):
    @abstractmethod
    def now(self) -> float:
        """Seconds on a monotonic clock."""

    @abstractmethod
    def every(self, interval: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` every ``interval`` seconds until the timer is cancelled."""


class SystemClock(Clock):
    def now(self) -> float:
        return time.monotonic()

    def every(self, interval: float, callback: Callable[[], None]) -> Timer:
        timer = _ThreadTimer(interval, callback)
        timer.start()
        return timer


class _ThreadTimer(Timer):
    def __init__(self, interval: float, callback: Callable[[], None]) -> None:
        self._interval = interval
        self._callback = callback
        self._stop = threading.Event()
        # A daemon: a timer must never keep the process alive after Ctrl-C.
        self._thread = threading.Thread(target=self._run, name="imagebuild-timer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._callback()

    def cancel(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()
