"""Writing files so that a crash or Ctrl-C never leaves one half-written.

The temporary file lives beside the target (same file system, so the rename is atomic), named
``.<name>.<random>.tmp`` so that one left by a killed process (SIGKILL cannot be cleaned up) never
looks complete, and is removed on any failure, Ctrl-C included. The file is fsynced before the
rename and the directory after it: without the second, a power loss can keep the old directory
entry even though the call returned.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


@contextmanager
def atomic_file(path: Path, mode: int | None = None) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` when the block ends without an exception.

    ``mode``: the new file's permission bits, less the umask; None keeps the replaced file's
    (mkstemp's 0600 for a new one).
    """
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        if mode is not None:
            tmp.chmod(mode & ~_umask())
        elif path.exists():
            tmp.chmod(path.stat().st_mode & 0o777)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so readers see the old or the new file, never half."""
    with atomic_file(path) as file:
        file.write(text.encode("utf-8"))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_directory(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def writable_directory_problem(directory: Path) -> str:
    """Why files cannot be written in ``directory``, made first if missing ('' when they can): asked
    before the engine, so a long build or a push never ends on a place it cannot write."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"{directory}: {e.strerror or e}"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"{directory} is not writable"
    return ""
