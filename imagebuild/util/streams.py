"""Byte streams with bounded memory: chunks as a file, hashing on the way, tar entries as chunks.

Images are tens of gigabytes; nothing here holds more than one chunk of a
layer in memory. Layers that must be read twice are spooled to disk and hashed
while they are written.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, Protocol, cast

from isal import igzip

from imagebuild.util import tar_checksums
from imagebuild.util.background_hash import BackgroundSha256

tar_checksums.install()  # every layer tar is read or written through tarfile: its checksums, faster

CHUNK = 1 << 20  # 1 MiB: large enough for throughput, small enough to never matter in RSS
# How tar entries' names are decoded: names that are not UTF-8 round-trip byte for byte.
ENCODING, ERRORS = "utf-8", "surrogateescape"
# The buffer of tarfile's stream reader ("r|"): it copies what remains of it on every read, a
# 512-byte header included, so a 1 MiB one cost a megabyte of copying per entry (the sample base's
# 18,000 headers: 2.3 s of CPU to scan, against 1.1 s with this). EntryReads reads a file's content
# in larger pieces.
TAR_READ_BUFFER = 64 << 10


class ChunkReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks (an engine's ``save`` stream)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class EntryReads:
    """A tar read as a stream (tarfile's "r|"): headers in small reads, an extracted file's content in
    large ones.

    tarfile's stream reader asks its source for ``bufsize`` bytes at a time and keeps the excess,
    copying it on every later read. With a small ``bufsize`` (TAR_READ_BUFFER) a file's content
    costs 16 reads, joins and hash updates per MiB (the rewrite of a 1 GB file: 2.4 s of CPU per GB,
    against 1.8 in chunks); with a large one every header copies most of a megabyte, and so does
    skipping a file's content (a header scan: 0.25 s per GB skipped in small reads, 1.1 s in chunks).
    So the content of a file ``extractfile`` opens is read a chunk at a time, up to exactly its end
    and never past it, and everything else in small reads: the reader never holds part of the next
    entry.
    """

    def __init__(self, source: Readable) -> None:
        self._source = source
        self._position = 0  # bytes handed to the reader: its offsets (TarInfo.offset_data) count the same
        self._content_end = 0  # of the file being extracted
        self._tar: tarfile.TarFile | None = None  # None while tarfile.open reads the first header

    def tar(self) -> tarfile.TarFile:
        """The stream reader over this source; open its files' contents with ``extractfile``."""
        tar = tarfile.open(  # noqa: SIM115 - the caller's to close (a with block)
            fileobj=cast("IO[bytes]", self), mode="r|", encoding=ENCODING, errors=ERRORS, bufsize=TAR_READ_BUFFER
        )
        self._tar = tar
        return tar

    def _reader_stream(self) -> Any:
        """The reader's buffered stream over this source (tarfile's ``_Stream``, whose ``bufsize`` it reads by)."""
        return None if self._tar is None else cast("Any", self._tar).fileobj

    def extractfile(self, info: tarfile.TarInfo) -> IO[bytes] | None:
        """The reader's ``extractfile(info)`` (``info`` just parsed), its content read a chunk at a time."""
        if self._tar is None:
            msg = "extractfile() before tar()"
            raise ValueError(msg)
        data = self._tar.extractfile(info)
        if data is not None and info.isreg() and info.size > TAR_READ_BUFFER:
            self._content_end = info.offset_data + info.size
            self._reader_stream().bufsize = CHUNK
        return data

    def read(self, size: int = -1) -> bytes:
        if size >= 0:
            left = self._content_end - self._position
            if left > 0:
                size = min(size, left)
            elif (stream := self._reader_stream()) is not None and stream.bufsize != TAR_READ_BUFFER:
                stream.bufsize = TAR_READ_BUFFER  # past the content: headers again
                size = min(size, TAR_READ_BUFFER)
        data = self._source.read(size)
        self._position += len(data)
        return data


def gzip_reader(compressed: Any) -> BinaryIO:
    """gzip.GzipFile reading ``compressed`` (a file with read()), with ISA-L's inflate (python-isal:
    twice zlib's speed on a layer here, docs/measured.md); the same content, the same errors."""
    return cast("BinaryIO", igzip.GzipFile(fileobj=compressed, mode="rb"))  # type: ignore[no-untyped-call]


def open_stream(chunks: Iterable[bytes]) -> BinaryIO:
    """A buffered, readable file over ``chunks``."""
    return cast("BinaryIO", io.BufferedReader(ChunkReader(chunks), buffer_size=CHUNK))


def forget_members(tar: tarfile.TarFile) -> None:
    """Drop the TarInfo of every entry seen so far.

    TarFile keeps them all (for getmembers and random access), so memory would
    grow with the number of files; streaming code never looks back.
    typeshed does not declare the list, hence the cast.
    """
    cast("Any", tar).members.clear()


class Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...
    def hexdigest(self) -> str: ...


def hasher(*, background: bool) -> Hasher:
    """A sha256; ``background``: hashed in a thread of its own (close it: ``hexdigest`` or ``close``)."""
    return BackgroundSha256() if background else hashlib.sha256()


class HashingReader:
    """Reads from ``source`` and hashes every byte read: a layer's diffID while it is parsed.

    ``background``: the hash runs in a thread of its own, overlapping the parse (see
    util.background_hash); ``digest`` (or ``close``) ends that thread.
    """

    def __init__(self, source: BinaryIO, *, background: bool = False) -> None:
        self._source = source
        self.sha256 = hasher(background=background)
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self._source.read(n)
        self.sha256.update(data)
        self.size += len(data)
        return data

    def drain(self) -> None:
        """Read what the tar parser left (end-of-archive padding), so the hash covers every byte."""
        while self.read(CHUNK):
            pass

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha256.hexdigest()

    def close(self) -> None:
        """Stop a background hash early (the stream was abandoned); a no-op otherwise."""
        if isinstance(self.sha256, BackgroundSha256):
            self.sha256.close()


class Sink(Protocol):
    def write(self, data: bytes, /) -> int: ...


class HashingWriter:
    """Writes to ``sink`` and hashes every byte written (``background``: in a thread, as HashingReader)."""

    def __init__(self, sink: Sink, *, background: bool = False) -> None:
        self._sink = sink
        self.sha256 = hasher(background=background)
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self._sink.write(data)

    def tell(self) -> int:
        """Bytes written so far: what tarfile's (non-stream) writer asks once, when it opens."""
        return self.size

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha256.hexdigest()

    def close(self) -> None:
        """Stop a background hash early (the stream was abandoned); a no-op otherwise."""
        if isinstance(self.sha256, BackgroundSha256):
            self.sha256.close()


def spool(source: BinaryIO, path: Path) -> tuple[str, int]:
    """Copy ``source`` to ``path`` in chunks; return its sha256 digest and size (hashed in a thread)."""
    with path.open("wb") as f:
        out = HashingWriter(f, background=True)
        try:
            while chunk := source.read(CHUNK):
                out.write(chunk)
        finally:
            out.close()
    return out.digest, out.size


def tar_entry(name: str, size: int, *, mode: int = 0o644) -> bytes:
    """The header block(s) of a regular file entry in an outer archive (docker load's input)."""
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, mode
    return info.tobuf(format=tarfile.PAX_FORMAT)


def tar_padding(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


def tar_file_chunks(name: str, path: Path) -> Iterator[bytes]:
    """One file of an outer archive as chunks: header, content, padding."""
    size = path.stat().st_size
    yield tar_entry(name, size)
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk
    yield tar_padding(size)


def tar_bytes_chunks(name: str, data: bytes) -> Iterator[bytes]:
    yield tar_entry(name, len(data))
    yield data
    yield tar_padding(len(data))


TAR_END = b"\0" * (2 * tarfile.BLOCKSIZE)
