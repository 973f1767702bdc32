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
from collections.abc import Iterator
from pathlib import Path

from imagebuild.util.streams import CHUNK

SEGMENT, FILE = 2, 1


class TarSplitError(Exception):
    """The record or the layer directory cannot give the layer's tar; the message says why."""


def layer_chunks(tar_split: Path, files: Path) -> Iterator[bytes]:
    """The layer tar as chunks: the record's segments, and each file's content from ``files``."""
    try:
        with gzip.open(tar_split, "rt", encoding="utf-8") as record:
            for number, line in enumerate(record, start=1):
                entry = json.loads(line)
                if entry.get("type") == SEGMENT:
                    yield base64.b64decode(entry.get("payload") or "", validate=True)
                elif entry.get("type") == FILE:
                    size = int(entry.get("size") or 0)
                    if size:  # directories, links, whiteouts and empty files have no content
                        yield from _content(files, _name(entry), size)
                else:
                    msg = f"{tar_split} line {number}: unknown entry type {entry.get('type')!r}"
                    raise TarSplitError(msg)
    except (OSError, EOFError, ValueError, binascii.Error) as e:  # JSON and base64 errors are ValueErrors
        msg = f"cannot rebuild the layer from {tar_split}: {e}"
        raise TarSplitError(msg) from e


def _name(entry: dict[str, object]) -> bytes:
    """The file's path in the layer; tar-split keeps names that are not UTF-8 as base64 ``name_raw``."""
    raw = entry.get("name_raw")
    return (
        base64.b64decode(str(raw)) if raw else str(entry.get("name") or "").encode("utf-8", "surrogateescape")
    )


def _content(files: Path, name: bytes, size: int) -> Iterator[bytes]:
    """Exactly ``size`` bytes of the regular file ``name`` under ``files``, never through a symlink."""
    parts = [p for p in name.split(b"/") if p not in (b"", b".")]
    if not parts or b".." in parts:
        msg = f"{name!r} is not a path inside the layer"
        raise TarSplitError(msg)
    fd = os.open(files, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:  # one component at a time, so no symlink in the layer leads outside it
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    with os.fdopen(file_fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            msg = f"{name!r} in {files} is not a regular file"
            raise TarSplitError(msg)
        left = size
        while left and (chunk := f.read(min(CHUNK, left))):
            left -= len(chunk)
            yield chunk
    if left:
        msg = f"{name!r} in {files} is {size - left} bytes, the layer's record says {size}"
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
    return _content(files, name.encode("utf-8", "surrogateescape"), size)
