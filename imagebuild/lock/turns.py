"""Concurrent locks of one pins file take turns: an flock on a file beside it.

The pins file itself cannot carry the lock: it is replaced by rename, and a
second writer would lock the old inode. The lock file (``.pins.toml.lock``)
stays after use (removing it would race with a writer about to lock it);
flock is released with the process, so a killed lock leaves nothing stuck.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from imagebuild.errors import ConfigError, LockError


def turn_file(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def writer_turn(path: Path, *, wait: float, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold the exclusive lock of ``path``'s writers; wait up to ``wait`` seconds for another one.

    ``on_wait`` is called once when another writer holds it.
    """
    lock_path = turn_file(path)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        msg = (
            f"{lock_path}: cannot create the lock file beside {path.name} ({e.strerror or e}); "
            "check the directory's permissions"
        )
        raise ConfigError(msg) from e
    try:
        give_up = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if on_wait is not None:
                    on_wait()
                    on_wait = None
                if time.monotonic() >= give_up:
                    msg = (
                        f"{path}: another `imagebuild lock` held {lock_path.name} for {wait:g}s; "
                        "nothing written. Run it again when that one is done"
                    )
                    raise LockError(msg) from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the flock
