"""EntryReads: a tar's headers read in small pieces, an extracted file's content in chunks that stop at its end."""

from __future__ import annotations

import io
import os
import tarfile

from imagebuild.util.streams import CHUNK, TAR_READ_BUFFER, EntryReads

BIG = 3 * CHUNK + 17  # not a multiple of anything the reader reads


class RecordedSource:
    """A tar's bytes, recording where each read the parser made started and how much it got."""

    def __init__(self, data: bytes) -> None:
        self._file = io.BytesIO(data)
        self.reads: list[tuple[int, int]] = []

    def read(self, size: int = -1, /) -> bytes:
        start = self._file.tell()
        data = self._file.read(size)
        self.reads.append((start, len(data)))
        return data


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _read_all(source: RecordedSource) -> tuple[dict[str, bytes], dict[str, tuple[int, int]]]:
    """Every file's content, and where each file's content lies in the stream."""
    reads = EntryReads(source)
    contents: dict[str, bytes] = {}
    spans: dict[str, tuple[int, int]] = {}
    with reads.tar() as tar:
        while (info := tar.next()) is not None:
            data = reads.extractfile(info)
            assert data is not None
            contents[info.name] = data.read()
            spans[info.name] = (info.offset_data, info.offset_data + info.size)
    return contents, spans


def test_a_large_file_is_read_in_chunks_that_stop_at_its_end() -> None:
    small = [(f"small/{n}", os.urandom(n * 37)) for n in range(1, 40)]
    members = [("before", b"x" * 100), ("big", os.urandom(BIG)), *small]
    source = RecordedSource(_tar(members))

    contents, spans = _read_all(source)

    assert contents == dict(members)  # the same bytes, whatever the read sizes
    start, end = spans["big"]
    inside = [(at, n) for at, n in source.reads if start <= at < end]
    assert all(at + n <= end for at, n in inside), "a read crossed the end of the large file"
    assert max(n for _, n in inside) == CHUNK
    assert len(inside) <= BIG // CHUNK + 2  # not one read per 64 KiB
    after = [n for at, n in source.reads if at >= end]
    assert after
    assert max(after) <= TAR_READ_BUFFER  # headers after it: small reads again


def test_small_files_and_headers_keep_small_reads() -> None:
    members = [(f"f{n}", os.urandom(n * 1000)) for n in range(50)]
    source = RecordedSource(_tar(members))

    contents, _ = _read_all(source)

    assert contents == dict(members)
    assert max(n for _, n in source.reads) <= TAR_READ_BUFFER


def test_content_skipped_is_read_in_small_pieces() -> None:
    """Header scans skip a file's content: in small reads (chunks would be copied again and again by
    the reader's seek), and the next header is still found."""
    members = [("big", os.urandom(BIG)), ("after", b"after\n")]
    source = RecordedSource(_tar(members))
    reads = EntryReads(source)
    with reads.tar() as tar:
        names = [info.name for info in tar]
    assert names == ["big", "after"]
    assert max(n for _, n in source.reads) <= TAR_READ_BUFFER
