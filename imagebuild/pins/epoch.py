"""SOURCE_DATE_EPOCH: the time a build claims, taken from its pins, never from the clock.

Each step's epoch is the newest commit time (``committed``, recorded by
``imagebuild lock``) among the git pins consumed by that step and the steps
before it, and never earlier than :data:`FLOOR`. It is declared as an ARG just
before the RUN steps where it rises, like every pin's ARG, so it changes
exactly where a pin change already breaks the layer cache: a new router commit
moves the epoch of steps 9-18 only, and the vLLM compile (step 7) stays
cached. One epoch for the whole image would rebuild every layer whenever any
git pin moved, and would give every normalised layer new bytes (new digests to
push and pull).

The build uses it twice: tools in the RUN steps honour it (Python's
py_compile, so pip, writes hash-checked .pyc files when it is set; gcc's
__DATE__; wheel's zip times), and the normaliser clamps the mtimes of each
layer to its step's epoch and sets the image's created time to the last one.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from imagebuild.pins import GitPin, PinSet

ARG_NAME = "SOURCE_DATE_EPOCH"
# 1980-01-01T00:00:00Z: the oldest time a zip file (so a wheel) can hold; tools
# that zip fail on earlier epochs. Steps before the first git pin get it.
FLOOR = 315532800


def epoch_of(pins: PinSet, consumed: Iterable[str]) -> int:
    """The epoch after the pins named in ``consumed``: their newest commit time, at least FLOOR.

    Git pins without a recorded commit time do not count (render refuses them
    unless --allow-unpinned); other kinds carry no time.
    """
    times = [
        pin.commit_time
        for pin in (pins.get(name) for name in consumed)
        if isinstance(pin, GitPin) and pin.commit_time is not None
    ]
    return max([FLOOR, *times])


def format_epoch(epoch: int) -> str:
    """RFC 3339 in UTC, as image configs write times: 2026-01-01T03:00:00Z."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
