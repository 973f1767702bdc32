"""Writing files so that a crash or Ctrl-C never leaves one half-written.

The temporary file lives beside the target (same file system, so the rename is atomic), named
``.<name>.<random>.tmp`` so that one left by a killed process (SIGKILL cannot be cleaned up) never
looks complete, and is removed on any failure, Ctrl-C included. The file is fsynced before the
rename and the directory after it: without the second, a power loss can keep the old directory
entry even though the call returned.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


@contextmanager
def atomic_file(path: Path, mode: int | None = None) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` when the block ends without an exception.

    ``mode``: the new file's permission bits, less the umask; None keeps the replaced file's
    (mkstemp's 0600 for a new one).
    """
    file, tmp = _temp_beside(path)
    try:
        with file:
            yield file
            _sync(file)
        if mode is not None:
            tmp.chmod(mode & ~_umask())
        elif path.exists():
            tmp.chmod(path.stat().st_mode & 0o777)
        tmp.replace(path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        _name_the_file(e, path)
        raise
    _fsync_directory(path.parent)


def _temp_beside(path: Path) -> tuple[BinaryIO, Path]:
    """A new ``.<name>.<random>.tmp`` beside ``path``, open for writing, and its path."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        return os.fdopen(fd, "wb"), Path(name)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.close(fd)
        Path(name).unlink(missing_ok=True)
        _name_the_file(e, path)
        raise


def _sync(file: BinaryIO) -> None:
    file.flush()
    os.fsync(file.fileno())


def _name_the_file(error: BaseException, path: Path) -> None:
    """A write's OSError (a full disk) carries no file name: give it the file being written, which is
    what the one-line report of it names."""
    if isinstance(error, OSError) and error.filename is None:
        error.filename = str(path)


def write_all_or_none(directory: Path, files: Iterable[tuple[str, bytes]], mode: int) -> None:
    """Write every file (a path relative to ``directory``, its bytes) or, when one fails, none.

    Each is staged beside its target first, and only when all are staged are they renamed into
    place: a full disk half-way leaves neither a half-written project nor a replaced file, and the
    directories made for them are removed again. The renames need no space, so they do not fail
    for the reason the writes do.
    """
    made: list[Path] = []
    staged: list[tuple[Path, Path]] = []
    target = directory
    try:
        for relative, data in files:
            target = directory / relative
            made.extend(_make_directories(target.parent))
            file, tmp = _temp_beside(target)
            staged.append((tmp, target))
            with file:
                file.write(data)
                _sync(file)
            tmp.chmod(mode & ~_umask())
        for tmp, target in staged:
            tmp.replace(target)
    except BaseException as e:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        for made_directory in reversed(made):
            with contextlib.suppress(OSError):
                made_directory.rmdir()
        _name_the_file(e, target)
        raise
    for parent in dict.fromkeys(target.parent for _, target in staged):
        _fsync_directory(parent)


def _make_directories(directory: Path) -> list[Path]:
    """Make ``directory`` and its missing parents; the ones made, outermost first."""
    missing = [path for path in (directory, *directory.parents) if not path.exists()]
    for path in reversed(missing):
        path.mkdir()
    return list(reversed(missing))


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
