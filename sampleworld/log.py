"""Progress lines on stderr with timings; stdout stays free for data."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

_START = time.monotonic()


def info(message: str) -> None:
    print(f"[sampleworld +{time.monotonic() - _START:6.1f}s] {message}", file=sys.stderr, flush=True)


@contextmanager
def step(what: str) -> Iterator[None]:
    """Log the start and the duration of one piece of work."""
    began = time.monotonic()
    info(f"{what} ...")
    yield
    info(f"{what}: done in {time.monotonic() - began:.1f}s")
