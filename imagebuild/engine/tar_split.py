"""A layer's tar, rebuilt byte for byte from the engine's layer store, as ``docker save`` rebuilds it.

When the engine committed a layer it kept a tar-split record of the tar
(gzipped JSON lines, github.com/vbatts/tar-split): ``{"type": 2, "payload":
base64}`` segments hold the raw bytes between files (headers, padding, the end
blocks), ``{"type": 1, "name": ..., "size": N}`` entries stand for a file's
content, read from the layer's directory. ``docker save`` concatenates the
two; so does this, so whiteouts, opaque markers, hard links, xattrs and the
entry order are the engine's own and nothing here re-derives them. The result
is checked against the layer's diffID by the caller, so a record or a
directory that changed under us is found, not trusted.

Memory: one JSON line and one 1 MiB chunk at a time.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from imagebuild.util.streams import CHUNK

SEGMENT, FILE = 2, 1


class TarSplitError(Exception):
    """The record or the layer directory cannot give the layer's tar; the message says why."""


def layer_chunks(tar_split: Path, files: Path) -> Iterator[bytes]:
    """The layer tar as chunks: the record's segments, and each file's content from ``files``."""
    directories = _Directories(files)
    try:
        with gzip.open(tar_split, "rt", encoding="utf-8") as record:
            for number, line in enumerate(record, start=1):
                entry = json.loads(line)
                if entry.get("type") == SEGMENT:
                    yield base64.b64decode(entry.get("payload") or "", validate=True)
                elif entry.get("type") == FILE:
                    size = int(entry.get("size") or 0)
                    if size:  # directories, links, whiteouts and empty files have no content
                        yield from _content(directories, _name(entry), size)
                else:
                    msg = f"{tar_split} line {number}: unknown entry type {entry.get('type')!r}"
                    raise TarSplitError(msg)
    except (OSError, EOFError, ValueError, binascii.Error) as e:  # JSON and base64 errors are ValueErrors
        msg = f"cannot rebuild the layer from {tar_split}: {e}"
        raise TarSplitError(msg) from e
    finally:
        directories.close()


def _name(entry: dict[str, object]) -> bytes:
    """The file's path in the layer; tar-split keeps names that are not UTF-8 as base64 ``name_raw``."""
    raw = entry.get("name_raw")
    return (
        base64.b64decode(str(raw)) if raw else str(entry.get("name") or "").encode("utf-8", "surrogateescape")
    )


class _Directories:
    """Open directories of a layer, one path component at a time and never through a symlink.

    The record lists a directory's files one after the other (the tar's walk order), so the open
    directories of the last file's path are kept: the next file in the same directory costs one
    open, not one per component of its path (a file of a package tree sits 6-8 deep).
    """

    def __init__(self, files: Path) -> None:
        self.files = files
        self._parts: list[bytes] = []  # the path of the innermost open directory, by component
        self._fds: list[int] = []  # the layer's directory, then one per component of _parts

    def open(self, parts: list[bytes]) -> int:
        """An fd of the directory ``parts`` (the caller must not close it)."""
        if not self._fds:
            self._fds.append(os.open(self.files, os.O_RDONLY | os.O_DIRECTORY))
        shared = 0
        while shared < min(len(parts), len(self._parts)) and parts[shared] == self._parts[shared]:
            shared += 1
        while len(self._parts) > shared:
            self._parts.pop()
            os.close(self._fds.pop())
        for part in parts[shared:]:
            self._fds.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=self._fds[-1]))
            self._parts.append(part)
        return self._fds[-1]

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.pop())
        self._parts.clear()


def _content(directories: _Directories, name: bytes, size: int) -> Iterator[bytes]:
    """Exactly ``size`` bytes of the regular file ``name`` in the layer, never through a symlink."""
    parts = [p for p in name.split(b"/") if p not in (b"", b".")]
    if not parts or b".." in parts:
        msg = f"{name!r} is not a path inside the layer"
        raise TarSplitError(msg)
    file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=directories.open(parts[:-1]))
    with os.fdopen(file_fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            msg = f"{name!r} in {directories.files} is not a regular file"
            raise TarSplitError(msg)
        left = size
        while left and (chunk := f.read(min(CHUNK, left))):
            left -= len(chunk)
            yield chunk
    if left:
        msg = f"{name!r} in {directories.files} is {size - left} bytes, the layer's record says {size}"
        raise TarSplitError(msg)


_ZEROS = bytes(CHUNK)


def header_chunks(tar_split: Path) -> Iterator[bytes]:
    """The layer tar with every file's content as zeros: all a header scan needs, without reading a file."""
    try:
        with gzip.open(tar_split, "rt", encoding="utf-8") as record:
            for line in record:
                entry = json.loads(line)
                if entry.get("type") == SEGMENT:
                    yield base64.b64decode(entry.get("payload") or "", validate=True)
                elif entry.get("type") == FILE:
                    left = int(entry.get("size") or 0)
                    while left:
                        yield _ZEROS[: min(left, CHUNK)]
                        left -= min(left, CHUNK)
    except (OSError, EOFError, ValueError, binascii.Error) as e:
        msg = f"cannot read the layer's headers from {tar_split}: {e}"
        raise TarSplitError(msg) from e


class HeaderFile:
    """The layer tar as a file whose regular files' content is left out: read it with tarfile's
    seeking mode (``r:``), which seeks past each file's content instead of reading it.

    A header scan through ``header_chunks`` makes every content byte (as zeros) and passes it through
    the stream reader; here the record is read forward, one item at a time, and a file's content is
    only a span of offsets. tarfile seeks backward only within the item it is in (to the last byte
    of an entry it has just read), which is kept.
    """

    def __init__(self, tar_split: Path) -> None:
        self._tar_split = tar_split
        try:
            self._record: IO[str] | None = gzip.open(tar_split, "rt", encoding="utf-8")  # noqa: SIM115 - closed by close()
        except OSError as e:
            msg = f"cannot read the layer's headers from {tar_split}: {e}"
            raise TarSplitError(msg) from e
        self._position = 0
        self._start, self._end, self._bytes = 0, 0, b""  # the current item: a segment's bytes, or content (b"")
        self._content = False

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence != 0 or offset < self._start:
            msg = f"{self._tar_split}: only forward seeks are possible (to {offset} from {self._position})"
            raise TarSplitError(msg)
        self._position = offset
        return offset

    def read(self, size: int = -1) -> bytes:
        out: list[bytes] = []
        wanted = size
        while wanted:
            while self._position >= self._end:
                if not self._next_item():
                    return b"".join(out)
            n = self._end - self._position if wanted < 0 else min(wanted, self._end - self._position)
            at = self._position - self._start
            out.append(bytes(n) if self._content else self._bytes[at : at + n])
            self._position += n
            wanted -= n if wanted > 0 else 0
        return b"".join(out)

    def _next_item(self) -> bool:
        """Move on to the record's next item; False at its end."""
        if self._record is None:
            return False
        try:
            line = self._record.readline()
            if not line:
                return False
            entry = json.loads(line)
            self._start = self._end
            if entry.get("type") == SEGMENT:
                self._bytes, self._content = base64.b64decode(entry.get("payload") or "", validate=True), False
                self._end = self._start + len(self._bytes)
            else:
                self._bytes, self._content = b"", True
                self._end = self._start + int(entry.get("size") or 0)
        except (OSError, EOFError, ValueError, binascii.Error) as e:
            msg = f"cannot read the layer's headers from {self._tar_split}: {e}"
            raise TarSplitError(msg) from e
        self._passed(entry)
        return True

    def _passed(self, entry: dict[str, object]) -> None:
        """Each item of the record, as the reading reaches it (the segment's bytes are ``self._bytes``)."""

    def drain(self) -> None:
        """Move through the rest of the record (what follows the tar's end marker)."""
        while self._next_item():
            pass

    def close(self) -> None:
        if self._record is not None:
            self._record.close()
            self._record = None


def tar_size(tar_split: Path) -> int:
    """The size of the tar ``layer_chunks`` rebuilds, from the record alone (no file is opened)."""
    size = 0
    try:
        with gzip.open(tar_split, "rt", encoding="utf-8") as record:
            for line in record:
                entry = json.loads(line)
                if entry.get("type") == SEGMENT:
                    size += len(base64.b64decode(entry.get("payload") or "", validate=True))
                elif entry.get("type") == FILE:
                    size += int(entry.get("size") or 0)
    except (OSError, EOFError, ValueError, binascii.Error) as e:
        msg = f"cannot read the layer's record {tar_split}: {e}"
        raise TarSplitError(msg) from e
    return size


def file_content(files: Path, name: str, size: int) -> Iterator[bytes]:
    """A regular file's content in a layer's directory, as its tar entry names it."""
    directory = LayerDirectory(files)
    try:
        yield from directory.content(name, size)
    finally:
        directory.close()


class CheckedHeaderFile(HeaderFile):
    """A HeaderFile that also reads each file's content from the layer's directory as the record
    passes it, giving every byte of the rebuilt tar to ``seen`` (a hash): the headers and the layer's
    digest in one pass over the record. ``drain`` it once the headers are read, to see the rest."""

    def __init__(self, tar_split: Path, files: Path, seen: Callable[[bytes], object]) -> None:
        super().__init__(tar_split)
        self._directories = _Directories(files)
        self._seen = seen

    def _passed(self, entry: dict[str, object]) -> None:
        if not self._content:
            self._seen(self._bytes)
            return
        if entry.get("type") != FILE:
            msg = f"{self._tar_split}: unknown entry type {entry.get('type')!r}"
            raise TarSplitError(msg)
        size = int(str(entry.get("size") or 0))
        try:
            if size:  # directories, links, whiteouts and empty files have no content
                for chunk in _content(self._directories, _name(entry), size):
                    self._seen(chunk)
        except OSError as e:
            msg = f"cannot read {_name(entry)!r} in {self._directories.files}: {e}"
            raise TarSplitError(msg) from e

    def close(self) -> None:
        super().close()
        self._directories.close()


class LayerDirectory:
    """A layer's directory, its regular files read by their tar entries' names, many in a row: the
    directories of the last file's path stay open for the next (``_Directories``)."""

    def __init__(self, files: Path) -> None:
        self._directories = _Directories(files)

    def content(self, name: str, size: int) -> Iterator[bytes]:
        """Exactly ``size`` bytes of the file ``name``, never through a symlink (TarSplitError otherwise)."""
        yield from _content(self._directories, name.encode("utf-8", "surrogateescape"), size)

    def close(self) -> None:
        self._directories.close()
