"""Chunks made in a thread of their own: the same chunks in order, errors raised in the reader, an early stop
stops the producer."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from imagebuild.util.prefetch import prefetched


def test_every_chunk_comes_in_order() -> None:
    chunks = [bytes([n]) * 1000 for n in range(50)]
    assert list(prefetched(iter(chunks), depth=2)) == chunks


def test_an_error_of_the_source_is_raised_in_the_reader_after_what_came_before() -> None:
    def source() -> Iterator[bytes]:
        yield b"a"
        msg = "the blob is damaged"
        raise ValueError(msg)

    got: list[bytes] = []
    with pytest.raises(ValueError, match="the blob is damaged"):
        got.extend(prefetched(source()))
    assert got == [b"a"]


def test_a_reader_that_stops_early_stops_the_producer_and_closes_its_source() -> None:
    closed = threading.Event()

    def source() -> Iterator[bytes]:
        try:
            while True:
                yield b"x"
        finally:
            closed.set()

    reader = prefetched(source(), depth=1)
    assert next(reader) == b"x"
    reader.close()  # type: ignore[attr-defined]
    assert closed.wait(5)
    assert not [t for t in threading.enumerate() if t.name == "prefetch"]
