"""What a checkout's test sessions share on one engine: its tags, a lock, removing a test's own images."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import docker

# Per checkout: several checkouts share one Docker engine, and a shared tag would be overwritten.
CHECKOUT = hashlib.sha256(str(Path(__file__).resolve().parents[2]).encode()).hexdigest()[:8]


def remove_images(*tags: str) -> None:
    """Only the given tags; untagged parents (the layer cache) go with them, others' images stay."""
    api = docker.from_env().api
    for tag in tags:
        for name in (tag, f"{tag}-cache"):
            with contextlib.suppress(docker.errors.ImageNotFound):
                api.remove_image(name)


# What one_session_at_a_time serialises: builds of the session images and the compile-cache test (its
# server's counts are exact, and every build's steps 4 and 7 talk to its fixed address); and the sample
# world's apt snapshot (a lock takes the newest published one, and a test publishes the next day's).
BUILDS = "builds"
APT_SNAPSHOT = "apt-snapshot"

_held: dict[str, int] = {}


@contextlib.contextmanager
def one_session_at_a_time(what: str) -> Iterator[None]:
    """Held by one pytest session of this checkout at a time (scripts/test runs the docker tier as two):
    for a build of a session image (the second session finds it in the layer cache), and for what a
    build or a lock would see change under it (the compile cache's fixed address, the apt snapshot).
    Re-entrant within a session: a flock is per open file, and a second one here would wait on the first."""
    if _held.get(what):
        _held[what] += 1
        try:
            yield
        finally:
            _held[what] -= 1
        return
    path = Path(tempfile.gettempdir()) / f"imagebuild-test-{CHECKOUT}-{what}.lock"
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        _held[what] = 1
        try:
            yield
        finally:
            _held[what] = 0
