"""gzip and zstd streams decompressed one chunk at a time: the importer's archives, and the layer blobs
imagebuild reads from the containerd image store's content store (imagebuild.engine.content_blobs).

Output is pulled at most CHUNK_SIZE at a time, so a small input that decompresses to terabytes costs
one chunk of memory before the caller stops it. A damaged or cut stream raises StreamError, whose
message says which; the caller names the file. The standard library only (zstd through the
``zstandard`` module, and gzip through python-isal's ``isal_zlib`` where present, which the caller
passes in when it can import it): see the package's rules.
"""

from __future__ import annotations

import zlib
from types import ModuleType
from typing import Any, Generator, Iterator

CHUNK_SIZE = 1 << 20
GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer around the deflate stream

Chunks = Generator[bytes, None, None]


class StreamError(Exception):
    """The compressed stream is not valid or ends early; the message says which."""


def gunzip(chunks: Iterator[bytes], inflater: ModuleType = zlib) -> Chunks:
    """At most CHUNK_SIZE of output per call; concatenated members as Go's gzip reader reads them.

    ``inflater``: zlib, or a module with zlib's decompressobj and error (``isal.isal_zlib``: ISA-L's
    inflate, 2.3 times zlib's speed on the sample base's layer, docs/measured.md).
    """
    inflate, fed = inflater.decompressobj(GZIP_WBITS), False
    try:
        for chunk in chunks:
            data = chunk
            while data:
                out = inflate.decompress(data, CHUNK_SIZE)
                fed = True
                if out:
                    yield out
                if inflate.eof:  # another member may follow
                    data, inflate, fed = inflate.unused_data, inflater.decompressobj(GZIP_WBITS), False
                else:
                    data = inflate.unconsumed_tail
                    while len(out) == CHUNK_SIZE and not data:  # output still pending for input read
                        out = inflate.decompress(b"", CHUNK_SIZE)
                        if out:
                            yield out
    except inflater.error as e:
        msg = f"not a valid gzip stream ({e})"
        raise StreamError(msg) from None
    if fed and not inflate.eof:
        msg = "its gzip stream ends early"
        raise StreamError(msg)


def unzstd(zstandard: Any, chunks: Iterator[bytes]) -> Chunks:
    """The zstandard module's decompression; its reader says nothing of a cut last frame (a tar read
    from it then ends early, or its digest differs)."""
    reader = zstandard.ZstdDecompressor().stream_reader(_ChunkFile(chunks), read_size=CHUNK_SIZE, read_across_frames=True)
    try:
        yield from iter(lambda: reader.read(CHUNK_SIZE), b"")
    except zstandard.ZstdError as e:
        msg = f"not a valid zstd stream ({e})"
        raise StreamError(msg) from None
    finally:
        reader.close()


class _ChunkFile:
    """The ``read(n)`` zstandard's stream_reader pulls from, over the input's chunks."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._pending = chunks, b""

    def read(self, size: int = -1) -> bytes:
        if not self._pending:
            self._pending = next(self._chunks, b"")
        out, self._pending = (self._pending, b"") if size < 0 else (self._pending[:size], self._pending[size:])
        return out
