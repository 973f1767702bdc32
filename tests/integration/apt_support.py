"""The sample world's apt snapshot service moved on for a test: the next day's snapshot published."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sampleworld import apt_archive
from sampleworld.layout import StateDir
from sampleworld.world import World


@contextmanager
def newer_snapshot(world: World) -> Iterator[str]:
    """The service imports the next day's snapshot for the block (and the world is put back after)."""
    state = StateDir(world.state_dir)
    newer = apt_archive.SNAPSHOTS[1]
    apt_archive.publish(state, newer)
    try:
        yield newer
    finally:
        apt_archive.unpublish(state, newer)
