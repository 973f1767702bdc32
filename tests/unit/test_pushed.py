"""A writer's pushes as a reader's chunks: the bytes as written, gathered into chunks, the writer's
error raised in the reader, and a reader that leaves early ending the writer."""

from __future__ import annotations

import threading

import pytest

from imagebuild.util.pushed import PushedChunks
from imagebuild.util.streams import CHUNK, Sink


def test_the_bytes_arrive_as_written_in_bounded_chunks_then_the_result() -> None:
    big = bytes(range(256)) * (CHUNK // 256)

    def write(sink: Sink) -> str:
        for _ in range(5000):
            sink.write(b"x" * 512)  # small writes (tar headers) are gathered
        sink.write(big)  # a large one passes as it is
        sink.write(b"end")
        return "done"

    pushed = PushedChunks(write)
    chunks = list(pushed.chunks())
    assert b"".join(chunks) == b"x" * 512 * 5000 + big + b"end"
    assert max(len(c) for c in chunks) < 2 * CHUNK
    assert len(chunks) < 10
    assert pushed.result == "done"


def test_the_writers_error_is_raised_in_the_reader() -> None:
    def write(sink: Sink) -> None:
        sink.write(b"partial")
        msg = "layer 5: gives sha256 other"
        raise ValueError(msg)

    pushed: PushedChunks[None] = PushedChunks(write)
    with pytest.raises(ValueError, match="layer 5"):
        b"".join(pushed.chunks())
    with pytest.raises(RuntimeError, match="not finished"):
        _ = pushed.result


def test_a_reader_that_leaves_early_ends_the_writer() -> None:
    stopped = threading.Event()

    def write(sink: Sink) -> None:
        try:
            while True:
                sink.write(bytes(CHUNK))
        finally:
            stopped.set()

    pushed: PushedChunks[None] = PushedChunks(write)
    chunks = pushed.chunks()
    next(chunks)
    chunks.close()
    assert stopped.wait(5)
