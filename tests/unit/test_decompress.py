"""gunzip gives the same bytes and the same failures with zlib and with python-isal's inflate."""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from types import ModuleType

import pytest
from isal import isal_zlib

from imagebuild.importer.decompress import CHUNK_SIZE, StreamError, gunzip

INFLATERS = [pytest.param(zlib, id="zlib"), pytest.param(isal_zlib, id="isal")]
# Compressible and not: the deflate stream holds both coded and stored blocks.
DATA = b"".join(b"line %d of a layer tar\n" % i for i in range(200_000)) + os.urandom(3 << 20)


def chunked(data: bytes, size: int = 64 << 10) -> Iterator[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


@pytest.mark.parametrize("inflater", INFLATERS)
def test_members_decompress_in_bounded_chunks(inflater: ModuleType) -> None:
    stream = gzip.compress(DATA[:1000], mtime=0) + gzip.compress(DATA[1000:], mtime=0)  # two members
    out = list(gunzip(chunked(stream), inflater))
    assert b"".join(out) == DATA
    assert max(len(chunk) for chunk in out) <= CHUNK_SIZE


@pytest.mark.parametrize("inflater", INFLATERS)
def test_a_small_input_that_expands_hugely_is_read_a_chunk_at_a_time(inflater: ModuleType) -> None:
    bomb = gzip.compress(bytes(64 << 20), mtime=0)  # 64 KiB that decompress to 64 MiB
    chunks = gunzip(iter([bomb]), inflater)
    assert len(next(chunks)) == CHUNK_SIZE
    chunks.close()


@pytest.mark.parametrize("inflater", INFLATERS)
def test_a_cut_stream_ends_early(inflater: ModuleType) -> None:
    with pytest.raises(StreamError, match="its gzip stream ends early"):
        b"".join(gunzip(chunked(gzip.compress(DATA, mtime=0)[:-100]), inflater))


@pytest.mark.parametrize("inflater", INFLATERS)
@pytest.mark.parametrize("damage", ["header", "trailer crc"])
def test_a_damaged_stream_is_not_valid(inflater: ModuleType, damage: str) -> None:
    stream = bytearray(gzip.compress(DATA, mtime=0))
    stream[0 if damage == "header" else -8] ^= 0xFF
    with pytest.raises(StreamError, match=r"not a valid gzip stream \("):
        b"".join(gunzip(chunked(bytes(stream)), inflater))
