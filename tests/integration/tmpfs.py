"""A tmpfs of a set size: a node's disk with just so much room, for the tests of the room checks."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.prerequisites import skip_or_fail


def mount_tmpfs(point: Path, size: int, *, remount: bool = False) -> None:
    """Mount a tmpfs of ``size`` bytes at ``point`` (an existing directory), or resize the one there."""
    if os.geteuid() != 0:
        skip_or_fail("a tmpfs of a set size needs root")
    options = f"remount,size={size}" if remount else f"size={size}"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "imagebuild-room-test", str(point)], check=True)


@contextmanager
def tmpfs(point: Path, size: int) -> Iterator[Path]:
    """``point`` made and a tmpfs of ``size`` bytes mounted there while open."""
    point.mkdir(parents=True)
    mount_tmpfs(point, size)
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=True)
