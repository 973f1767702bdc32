"""The streamed load in segments: the engine registers one segment's layers while the next is rewritten.

``docker load`` unpacks the whole archive into its ``tmp/`` before it registers a layer (hashes it
and unpacks it into the store). Measured with one 2 GB layer on Docker 20.10, the stream ended after
6 s and the engine registered for 11 s more, using 1.3-1.4 of the 2 cores while this process waited.
So a normalisation that rewrites several large layers sends them as a chain of loads, a segment of
about ``SEGMENT_BYTES`` or more each: while the engine registers one, the next is rewritten and
streamed. A segment's archive ends (a config naming every layer so far, and the manifest) only once
the load before it has returned, so the engine finds every earlier layer by its chain and registers
only the segment's own. Those earlier loads leave images whose config names the layers so far and
nothing else (untagged); the caller removes them once the image holds their layers, or after a
failure, when nothing does.

At most one load is unfinished behind the one being written (the engine's ``tmp/`` holds what it
sent). A load that fails cuts every later one before its manifest, so the engine loads nothing
of them, and the writer's next layer raises that failure.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from imagebuild.normalize.load_archive import canonical_json, legacy_end
from imagebuild.util.pushed import ChunkPipe, ReaderLeft
from imagebuild.util.streams import Sink

# A segment ends before the next layer once it holds this much: a load costs the engine about 0.1 s
# beyond its bytes, so small layers go together (the sample image's 60 MB is one segment).
SEGMENT_BYTES = 256 * 1024 * 1024
Load = Callable[[Iterable[bytes]], list[str]]


class LoadCut(Exception):
    """A segment's archive cut before its manifest: a load before it failed, or the writer stopped."""


class _Segment:
    """One load: the layers the writer puts in ``pipe``, then the end it is given once ``before`` is done."""

    def __init__(self, load: Load, before: _Segment | None, cancelled: threading.Event) -> None:
        self.pipe = ChunkPipe()
        self.bytes = 0
        self.prefix = False  # whether it ends with a config of the layers so far, not the image's own
        self.loaded: list[str] = []
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._before, self._cancelled = before, cancelled
        self._end: Iterable[bytes] = ()
        self._thread = threading.Thread(target=self._run, args=(load,), name="segmented-load", daemon=True)
        self._thread.start()

    def end(self, chunks: Iterable[bytes], *, prefix: bool = False) -> None:
        """What the archive ends with, sent once the load before this one has returned."""
        self._end, self.prefix = chunks, prefix
        self.pipe.close()

    def cut(self) -> None:
        with contextlib.suppress(ReaderLeft):  # its load failed already
            self.pipe.close(LoadCut("the normalisation stopped"))

    def join(self) -> None:
        self._thread.join()

    def _archive(self) -> Iterator[bytes]:
        yield from self.pipe.chunks()
        if self._before is not None:
            self._before.done.wait()
            if self._before.error is not None:
                msg = "the load before this one failed"
                raise LoadCut(msg)
        if self._cancelled.is_set():
            msg = "the normalisation stopped"
            raise LoadCut(msg)
        yield from self._end

    def _run(self, load: Load) -> None:
        try:
            self.loaded = load(self._archive())
        except BaseException as e:  # the writer's thread raises it
            self.error = e
        finally:
            self.done.set()


class SegmentedLoad:
    """The loads one streamed normalisation sends (see the module's text)."""

    def __init__(
        self, load: Load, platform: Mapping[str, str], *, segment_bytes: int = SEGMENT_BYTES
    ) -> None:
        """``platform``: the image config's ``architecture`` and ``os`` (and ``variant``), which a
        segment's config repeats so that the engine takes it for an image it can hold."""
        self._load, self._platform, self._segment_bytes = load, dict(platform), segment_bytes
        self._segments: list[_Segment] = []
        self._members: dict[str, str] = {}  # diffID -> its file in the archive that carried it
        self._cancelled = threading.Event()

    def sink(self, below: Sequence[str], size: int) -> Sink:
        """Where the next layer's file (``size`` bytes of archive) goes: the open segment, or, once that
        holds ``segment_bytes``, a new one; ``below``: the normalised image's diffIDs under this layer."""
        self.raise_failed()
        current = self._segments[-1] if self._segments else None
        if current is None or current.bytes >= self._segment_bytes:
            if current is not None:
                config = canonical_json({**self._platform, "rootfs": {"type": "layers", "diff_ids": list(below)}})
                current.end(legacy_end(config, below, self._members), prefix=True)
            if len(self._segments) >= 2:
                self._segments[-2].done.wait()
                self.raise_failed()
            current = _Segment(self._load, current, self._cancelled)
            self._segments.append(current)
        current.bytes += size
        return current.pipe

    def written(self, diff_id: str, member: str) -> None:
        """The layer ``diff_id`` went into the open segment as ``member``."""
        self._members[diff_id] = member

    def finish(self, config_bytes: bytes, diff_ids: Sequence[str]) -> list[str]:
        """End the last segment with the image's config (a load of that alone when no layer was sent),
        wait for every load; what the last one loaded. Raises the first failure."""
        if not self._segments:
            self._segments.append(_Segment(self._load, None, self._cancelled))
        self._segments[-1].end(legacy_end(config_bytes, diff_ids, self._members))
        for segment in self._segments:
            segment.join()
        self.raise_failed()
        return self._segments[-1].loaded

    def abort(self) -> None:
        """Cut every load not yet ended, wait for all of them."""
        self._cancelled.set()
        for segment in self._segments:
            if not segment.done.is_set():
                segment.cut()
        for segment in self._segments:
            segment.join()

    def prefixes(self) -> list[str]:
        """The images the segments before the last one loaded: configs of the layers so far, untagged."""
        return [
            image
            for segment in self._segments
            if segment.prefix and segment.error is None
            for image in segment.loaded
        ]

    def raise_failed(self) -> None:
        """Raise the failure of a load that has ended, the first cause before the loads it cut."""
        for segment in self._segments:
            if segment.done.is_set() and segment.error is not None and not isinstance(segment.error, LoadCut):
                raise segment.error
        for segment in self._segments:
            if segment.done.is_set() and segment.error is not None:
                raise segment.error

