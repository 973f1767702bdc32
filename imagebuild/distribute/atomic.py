"""Files that appear complete or not at all: written under a temporary name, fsynced, then renamed.

Readers on shared storage (the nodes of a cluster) see the old file, the new one, or nothing, never a
half-written one; a failure or Ctrl-C removes the temporary file. Temporary names start with a dot and
end in ``.tmp``, so a file left by a killed process (SIGKILL cannot be cleaned up) never looks complete.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_file(path: Path, mode: int = 0o644) -> Iterator[BinaryIO]:
    """Yield a binary file that becomes ``path`` when the block ends without an exception."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        tmp.chmod(mode & ~_umask())  # mkstemp makes 0600; other users' jobs on the nodes must read it
        tmp.replace(path)
        _fsync_dir(path.parent)  # the rename itself must survive a crash before the next file is written
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_file(path: Path, data: bytes, mode: int = 0o644) -> None:
    with atomic_file(path, mode) as file:
        file.write(data)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
