"""Chunks made in a thread of their own, a few ahead of the reader: decompression beside the parse.

zlib and zstandard release the GIL while they decompress, as file reads do, so on a machine with a
second core a layer blob is decompressed while the previous chunks are parsed and rewritten (the
reader's own thread) and hashed (util.background_hash): the three overlap instead of adding up. At
most ``depth`` chunks wait, so memory stays bounded. An error in the producing thread is raised in
the reader's at the point it reached; a reader that stops early stops the producer, which then
closes its source.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

DEPTH = 8  # chunks (1 MiB each, as the callers make them) made ahead
_POLL_S = 0.1  # how often a producer blocked on a full queue checks whether the reader left


class _End:
    """The producer's last item: the source ended (``error`` None) or raised ``error``."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


def prefetched(chunks: Iterator[bytes], depth: int = DEPTH) -> Iterator[bytes]:
    """``chunks``, each made in a thread of its own up to ``depth`` ahead of the reader."""
    ready: queue.Queue[bytes | _End] = queue.Queue(maxsize=depth)
    left = threading.Event()

    def put(item: bytes | _End) -> bool:
        while not left.is_set():
            try:
                ready.put(item, timeout=_POLL_S)
            except queue.Full:
                continue
            return True
        return False

    def produce() -> None:
        try:
            for chunk in chunks:
                if not put(chunk):
                    return
            put(_End())
        except BaseException as e:  # handed to the reader, who raises it
            put(_End(e))
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        while not isinstance(item := ready.get(), _End):
            yield item
        if item.error is not None:
            raise item.error
    finally:
        left.set()
        thread.join()
