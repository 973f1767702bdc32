"""Stale JIT lock cleanup: remove lock files a killed job left in a persistent JIT cache.

AITER and MoRI compile kernels on first use and guard each build with a lock file; a waiter polls
until the file goes away. Clusters mount the image's JIT cache (/opt/vllm_cache) from the host across
jobs, so a job killed mid-build leaves a lock nobody will remove, and the next job on that host waits
on it (about 67 minutes, once). At start every node removes lock files older than
JIT_LOCK_STALE_MIN minutes, logging each, and never touches a younger one: that may be a build
running right now. Symlinks are neither followed nor removed.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import time
from pathlib import Path

from .messages import say


@dataclasses.dataclass(frozen=True, kw_only=True)
class LockDir:
    owner: str  # "AITER", "MoRI": for the log line
    path: Path


def is_lock_file(name: str) -> bool:
    """AITER: `lock_<module>` and torch-style `lock`; MoRI: `.<kernel>.hsaco.lock`."""
    return name == "lock" or name.startswith("lock_") or name.endswith(".lock")


def stale_locks(directory: Path, *, older_than_s: float, now: float) -> list[tuple[Path, float]]:
    """(path, age in seconds) of every lock file under `directory` older than `older_than_s`."""
    found: list[tuple[Path, float]] = []
    for root, _dirs, files in os.walk(directory):  # does not follow symlinked directories
        for name in files:
            if not is_lock_file(name):
                continue
            path = Path(root) / name
            try:
                info = path.lstat()
            except OSError:
                continue  # released while we looked
            age = now - info.st_mtime
            if stat.S_ISREG(info.st_mode) and age > older_than_s:
                found.append((path, age))
    return sorted(found)


def remove_stale_locks(dirs: tuple[LockDir, ...], *, stale_min: float) -> list[Path]:
    """Remove stale lock files and log each one; return what was removed."""
    removed: list[Path] = []
    now = time.time()
    for lock_dir in dirs:
        if not lock_dir.path.is_dir():
            continue
        for path, age in stale_locks(lock_dir.path, older_than_s=stale_min * 60, now=now):
            try:
                path.unlink()
            except FileNotFoundError:
                continue  # another node on this host removed it first
            except OSError as error:
                say(f"could not remove the stale {lock_dir.owner} JIT lock {path} ({error.strerror}): "
                    "a build may wait on it; remove it by hand")  # fmt: skip
                continue
            removed.append(path)
            say(f"removed a stale {lock_dir.owner} JIT lock {path} ({age / 60:.0f} min old, "
                f"JIT_LOCK_STALE_MIN={stale_min:g})")  # fmt: skip
    return removed
