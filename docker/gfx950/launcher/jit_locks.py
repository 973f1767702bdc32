"""Stale JIT lock cleanup: remove the lock files a killed job left in a persistent JIT cache.

AITER and MoRI compile kernels on first use and guard each build with a lock file; a waiter polls
until the file goes away. Clusters mount the image's JIT cache (/opt/vllm_cache) from the host across
jobs, so a job killed mid-build leaves a lock nobody will remove, and the next job on that host waits
on it (about 67 minutes, once). At start every node removes such locks, logging each.

Only what the two libraries create, where they create it, is ever a candidate, so a cache variable
pointed at a directory that holds other things (a checkout's `poetry.lock`, dpkg's `lock`) loses
nothing:

- AITER (under AITER_JIT_DIR): `build/lock_<module>`, the lock its JIT takes per module, and
  `build/<module>/build/lock`, the baton torch's cpp_extension leaves for AITER's older builds;
- MoRI (under MORI_JIT_CACHE_DIR or ~/.mori/jit): `<kernel>.hsaco.lock` (often with a leading dot),
  at most MORI_MAX_DEPTH directories down (arch/NIC, then the build hash).

A candidate goes only when it is a regular file older than JIT_LOCK_STALE_MIN minutes and its owner is
gone: a lock that names its owner's PID (MoRI writes it) stays while that process lives and started
before the lock was last written (a later start is the PID reused). Symlinks are neither followed
nor removed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
import time
from pathlib import Path

from .messages import say

AITER = "AITER"
MORI = "MoRI"
MORI_MAX_DEPTH = 3  # directories between MoRI's cache dir and a kernel's lock: <arch>_<nic>/<hash>/
_AITER_LOCK_RE = re.compile(r"lock_[A-Za-z0-9_.+-]+")
_MORI_LOCK_RE = re.compile(r"\.?[A-Za-z0-9_.+-]+\.hsaco\.lock")
_PID_MAX = 4_194_304  # Linux's upper bound on pid_max
_OWNER_BYTES = 32  # a PID and a newline; a longer file records no owner


@dataclasses.dataclass(frozen=True, kw_only=True)
class LockDir:
    owner: str  # AITER or MORI: whose lock files to look for, and for the log line
    path: Path


def _entries(directory: Path) -> list[str]:
    try:
        return sorted(entry.name for entry in directory.iterdir())
    except OSError:
        return []  # absent, not a directory, or unreadable: nothing of ours to clean there


def candidates(lock_dir: LockDir) -> list[Path]:
    """The paths under ``lock_dir`` where its library puts its lock files (whether or not they exist)."""
    if lock_dir.owner == AITER:
        build = lock_dir.path / "build"
        found = [build / name for name in _entries(build) if _AITER_LOCK_RE.fullmatch(name)]
        found += [build / name / "build" / "lock" for name in _entries(build)]
        return found
    found = []
    for root, dirs, files in os.walk(lock_dir.path):  # does not follow symlinked directories
        depth = len(Path(root).relative_to(lock_dir.path).parts)
        if depth >= MORI_MAX_DEPTH:
            dirs.clear()
        found += [Path(root) / name for name in sorted(files) if _MORI_LOCK_RE.fullmatch(name)]
    return found


def _process_start(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), from /proc; None if it cannot be told."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        return int(boot.split()[1]) + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, StopIteration):
        return None


def owner_alive(path: Path, written: float) -> bool:
    """Whether the lock at ``path`` names a process that is running and was started before ``written``
    (the lock's mtime). A lock that names no PID has no owner to ask: its age alone decides."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        try:
            text = os.read(fd, _OWNER_BYTES + 1).decode("ascii", "replace").strip()
        finally:
            os.close(fd)
    except OSError:
        return False
    if not text.isdigit() or not 1 <= int(text) <= _PID_MAX:
        return False
    pid = int(text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    started = _process_start(pid)
    return started is None or started <= written + 1  # 1 s: /proc's start time is in clock ticks


def stale_locks(lock_dir: LockDir, *, older_than_s: float, now: float) -> list[tuple[Path, float]]:
    """(path, age in seconds) of every lock file of ``lock_dir``'s library that is older than
    ``older_than_s`` and whose owner is gone."""
    found: list[tuple[Path, float]] = []
    for path in candidates(lock_dir):
        try:
            info = path.lstat()
        except OSError:
            continue  # absent, or released while we looked
        age = now - info.st_mtime
        if stat.S_ISREG(info.st_mode) and age > older_than_s and not owner_alive(path, info.st_mtime):
            found.append((path, age))
    return sorted(found)


def remove_stale_locks(dirs: tuple[LockDir, ...], *, stale_min: float) -> list[Path]:
    """Remove stale lock files and log each one; return what was removed."""
    removed: list[Path] = []
    now = time.time()
    for lock_dir in dirs:
        if not lock_dir.path.is_dir():
            continue
        for path, age in stale_locks(lock_dir, older_than_s=stale_min * 60, now=now):
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
