"""A sha256 computed in a thread of its own, so hashing a stream overlaps reading and writing it.

hashlib releases the GIL while it hashes a large buffer, so on a machine with a second core the hash
of an export's bytes (each layer's digest, then the archive's) costs no time of the thread that
moves them: measured on the 5 GB export, see docs/measured.md. At most ``depth`` chunks wait, so
memory stays bounded; the bytes are the same, only the thread that hashes them differs.

Small updates (a tar header, a 4 KiB file) are gathered into one buffer of up to ``BATCH`` before
they are queued: a hand-off through the queue costs more than hashing a few KiB (measured on a layer
of 20,000 small files: two hand-offs per entry were a fifth of the rewrite's CPU).
"""

from __future__ import annotations

import hashlib
import queue
import threading
from types import TracebackType

DEPTH = 8  # chunks (1 MiB each, as the callers read them) waiting to be hashed
BATCH = 256 * 1024  # updates smaller than this are gathered up to it before they are queued


class BackgroundSha256:
    """``update`` hands the bytes to the hashing thread; ``hexdigest`` waits for it and answers.

    A chunk is kept until it is hashed, so the caller must not change it: a ``bytes`` is passed as it
    is, anything else (a bytearray, a memoryview a compressor reuses) is copied first; small ones are
    copied into the batch. ``close`` (or
    leaving the ``with`` block) stops the thread when the stream is abandoned before its end.
    """

    def __init__(self, depth: int = DEPTH) -> None:
        self._hash = hashlib.sha256()
        self._batch = bytearray()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(target=self._run, name="sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for chunk in iter(self._queue.get, None):
            self._hash.update(chunk)

    def update(self, data: bytes | bytearray | memoryview) -> None:
        if not self._thread.is_alive():
            msg = "update() after hexdigest() or close()"
            raise ValueError(msg)
        if len(data) < BATCH:
            self._batch += data
            if len(self._batch) >= BATCH:
                self._send_batch()
            return
        self._send_batch()  # first: the bytes stay in order
        self._queue.put(data if isinstance(data, bytes) else bytes(data))

    def _send_batch(self) -> None:
        if self._batch:
            self._queue.put(bytes(self._batch))
            self._batch.clear()

    def hexdigest(self) -> str:
        self.close()
        return self._hash.hexdigest()

    def close(self) -> None:
        if self._thread.is_alive():
            self._send_batch()
            self._queue.put(None)
            self._thread.join()

    def __enter__(self) -> BackgroundSha256:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
