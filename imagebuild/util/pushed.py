"""What a writer pushes, as chunks a reader pulls: a producer that writes (tarfile) feeding a consumer
that iterates (an engine's load request), with neither spooling to disk.

``ChunkPipe`` is the channel: writes are gathered into chunks of about ``CHUNK`` bytes (a large write
is passed on as it is, not copied), at most ``depth`` of them waiting, so memory stays bounded; the
writer closes it, with an error the reader then raises. A reader that stops early (the engine refused
the stream) makes the writer's next write raise ``ReaderLeft``, which ends it. ``PushedChunks`` runs
a writer in a thread of its own over a pipe; once its chunks are exhausted, ``result`` is what the
writer returned.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator
from typing import Generic, TypeVar

from imagebuild.util.streams import CHUNK

T = TypeVar("T")
DEPTH = 8
_POLL_S = 0.1  # how often a writer blocked on a full queue checks whether the reader left


class ReaderLeft(Exception):
    """The reader stopped before the writer finished: the writer's work is no longer wanted."""


class _End:
    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class ChunkPipe:
    """A writer's bytes, in chunks, for a reader in another thread (``chunks()``)."""

    def __init__(self, depth: int = DEPTH) -> None:
        self._ready: queue.Queue[bytes | _End] = queue.Queue(maxsize=depth)
        self._left = threading.Event()
        self._pending = bytearray()

    # The writer's side.
    def write(self, data: bytes | bytearray | memoryview) -> int:
        size = len(data)
        if not self._pending and size >= CHUNK and isinstance(data, bytes):
            self._put(data)
            return size
        self._pending += data
        if len(self._pending) >= CHUNK:
            self._flush()
        return size

    def close(self, error: BaseException | None = None) -> None:
        """The end of the writes: the reader's chunks stop there (and raise ``error``, when given).
        ReaderLeft when the reader is gone already."""
        if error is None:
            self._flush()
        self._put(_End(error))

    def _flush(self) -> None:
        if self._pending:
            chunk, self._pending = bytes(self._pending), bytearray()
            self._put(chunk)

    def _put(self, item: bytes | _End) -> None:
        while not self._left.is_set():
            try:
                self._ready.put(item, timeout=_POLL_S)
            except queue.Full:
                continue
            return
        raise ReaderLeft

    # The reader's side.
    def chunks(self) -> Generator[bytes, None, None]:
        try:
            while not isinstance(item := self._ready.get(), _End):
                yield item
            if item.error is not None:
                raise item.error
        finally:
            self._left.set()


class PushedChunks(Generic[T]):
    """``write(sink)`` run in a thread; ``chunks()`` yields what it wrote; then ``result``."""

    def __init__(self, write: Callable[[PushedChunks[T]], T], depth: int = DEPTH) -> None:
        self._write = write
        self._pipe = ChunkPipe(depth)
        self._result: list[T] = []

    # The writer's side.
    def write(self, data: bytes | bytearray | memoryview) -> int:
        return self._pipe.write(data)

    def _run(self) -> None:
        try:
            result = self._write(self)
            self._result.append(result)
            self._pipe.close()
        except ReaderLeft:
            return
        except BaseException as e:  # handed to the reader, who raises it
            try:
                self._pipe.close(e)
            except ReaderLeft:
                return

    # The reader's side.
    def chunks(self) -> Generator[bytes, None, None]:
        thread = threading.Thread(target=self._run, name="pushed", daemon=True)
        thread.start()
        try:
            yield from self._pipe.chunks()
        finally:
            thread.join()

    @property
    def result(self) -> T:
        """What the writer returned (only once ``chunks()`` ran to its end)."""
        if not self._result:
            msg = "the writer has not finished"
            raise RuntimeError(msg)
        return self._result[0]
