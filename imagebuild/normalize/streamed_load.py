"""Normalising from overlay2's layer store straight into the engine's load: no spool.

The spooled path (imagebuild.normalize.from_store) writes each rewritten layer to disk, then sends
the files to ``docker load``, which unpacks the archive into its own temporary directory and then
into the layer: three writes of every byte, one after the other. Here each layer is rewritten into
the load request as it is made, so the engine unpacks while this process rewrites (two writes, and
the two overlap) and the spool's disk (N GB for N GB of build layers) is not needed.

A tar entry's header comes before its content and states its size, so each layer is rewritten
twice: first for its size alone (imagebuild.normalize.rewrite's ``sizes_only``: the headers from the
layer's tar-split record, no file read but the few whose digests a comparison needs), then for real
into the stream. That first pass costs per entry (about 80 us, measured on a layer of 50,000 files
of 2 KB: 4 s) and little per byte; a spool costs per byte. So a layer whose files hold less than
``SPOOL_BELOW`` (the layer database records it) is rewritten once into a spool file and sent from
there: at most that much disk for a moment, and no second pass over its headers. The legacy
archive allows the rest: a layer's file may be named before its diffID is known, and the config
that names the diffIDs comes last (imagebuild.normalize.load_archive).

The checks are the spooled path's: each built layer's tar must hash to its diffID, and the rewrite
must be as long as its first pass said; when either fails the stream is cut before its manifest,
so the engine loads nothing, and StoreReadFailure sends the caller to ``docker save``. The engine
itself checks every streamed layer against the diffID the config names.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, cast

from imagebuild.engine.interface import BlobLayer, StoredImage, StoredLayer
from imagebuild.engine.tar_split import header_chunks
from imagebuild.normalize.canonical import LayerReducer
from imagebuild.normalize.config import BuildLayer
from imagebuild.normalize.from_store import normalize_stored
from imagebuild.normalize.lower import Digest, LowerState
from imagebuild.normalize.model import LayerPlan, Normalized, NormalizedLayer, StoreReadFailure
from imagebuild.normalize.rewrite import LayerError, RewriteResult, rewrite_layer
from imagebuild.normalize.segmented_load import SEGMENT_BYTES, SegmentedLoad
from imagebuild.normalize.stored_layers import READ_ERRORS, directory_digests, layer_tar
from imagebuild.util.pushed import ReaderLeft
from imagebuild.util.streams import CHUNK, HashingReader, Sink, open_stream, tar_entry, tar_padding

# A layer whose files hold less than this is rewritten into a spool file rather than sized first:
# spooling 256 MB costs about what sizing 3,000 entries does, and any layer of small files has more.
SPOOL_BELOW = 256 * 1024 * 1024


def streams_into_load(image: StoredImage) -> bool:
    """Whether this image's layers can be streamed into a load: overlay2's, whose headers are on record."""
    return image.layer_db is not None and all(isinstance(layer, StoredLayer) for layer in image.layers)


def normalize_into_load(
    image: StoredImage,
    plan: LayerPlan,
    load: Callable[[Iterable[bytes]], list[str]],
    *,
    what: str,
    lower_cache: Path | None = None,
    spool: Path | None = None,
    spool_below: int = SPOOL_BELOW,
    segment_bytes: int = SEGMENT_BYTES,
    remove: Callable[[str], None] = lambda _: None,
) -> tuple[Normalized, list[str], float]:
    """Normalise ``image`` (see streams_into_load) while ``load`` sends it to the engine.

    ``spool``: where a layer whose files hold less than ``spool_below`` is rewritten before it is
    sent (None: every layer is sized first). The layers go in loads of ``segment_bytes`` or more
    (imagebuild.normalize.segmented_load), and ``remove`` removes the images the loads before the
    last one left, whatever happens. Returns the normalised image (its spool peak: the largest layer
    spooled), what the engine says it loaded and the seconds spent sizing the layers (the first pass;
    the rest of the load's time is the rewrite and the engine's unpacking, which overlap).
    """
    sizing: list[float] = []
    spooled: list[int] = [0]
    loads = SegmentedLoad(load, _platform(image), segment_bytes=segment_bytes)

    def streamed(
        layer: StoredLayer | BlobLayer, step: BuildLayer, lower: LowerState, number: int, below: tuple[str, ...]
    ) -> NormalizedLayer:
        stored = cast("StoredLayer", layer)

        def sink(size: int) -> Sink:
            return loads.sink(below, size)

        if spool is not None and stored.held_bytes is not None and stored.held_bytes < spool_below:
            made = _spooled_layer(stored, step, lower, sink, number, spool=spool, what=what)
            spooled.append(made.size)
        else:
            made = _stream_layer(stored, step, lower, sink, number, what=what, sizing=sizing)
        if made.member:
            loads.written(made.diff_id, made.member)
        return made

    try:
        normalized = normalize_stored(image, plan, Path(), what=what, lower_cache=lower_cache, write_layer=streamed)
        loaded = loads.finish(normalized.config_bytes, normalized.diff_ids)
    except ReaderLeft:  # a load stopped reading: its failure is the one to tell
        loads.abort()
        loads.raise_failed()
        raise
    except BaseException:
        loads.abort()  # the engine loads nothing of what is not ended yet
        raise
    finally:
        for prefix in loads.prefixes():
            remove(prefix)
    return replace(normalized, spool_peak=max(spooled)), loaded, round(sum(sizing), 3)


def _platform(image: StoredImage) -> dict[str, str]:
    """The built config's platform, which a segment's config repeats ({} when it cannot be read:
    normalize_stored says why)."""
    try:
        config = json.loads(image.config.read_bytes()) if image.config is not None else {}
    except (OSError, ValueError):
        return {}
    return {key: config[key] for key in ("architecture", "os", "variant") if isinstance(config.get(key), str)}


def _stream_layer(
    layer: StoredLayer,
    step: BuildLayer,
    lower: LowerState,
    sink_for: Callable[[int], Sink],
    number: int,
    *,
    what: str,
    sizing: list[float],
) -> NormalizedLayer:
    """The built ``layer`` rewritten into ``sink`` as one file of the archive (none when it holds
    nothing once reduced); ``lower`` gets what it held."""
    what = f"{what} layer {number}"
    content = _once_each(directory_digests(layer.files))
    started = time.monotonic()
    sized = _rewrite(open_stream(header_chunks(layer.tar_split)), None, step, lower, content, what=what)
    sizing.append(time.monotonic() - started)
    if not sized.entries:  # nothing to send; still checked against its diffID, as the spooled path does
        _check_source(layer, None, what=what)
        lower.apply(sized.held, sized.written_mtimes)
        return NormalizedLayer(
            diff_id="", path=None, size=0, entries=0, clamped=sized.clamped, history=step.history, facts=sized
        )
    member = f"build-{number}/layer.tar"
    sink = sink_for(sized.size)
    sink.write(tar_entry(member, sized.size))
    result, digest = _rewrite_built(layer, sink, step, lower, content, what=what)
    if result.size != sized.size:
        msg = f"{what}: the rewrite gave {result.size} bytes where its sizing pass gave {sized.size}"
        raise StoreReadFailure(msg)
    _check_source(layer, digest, what=what)
    sink.write(tar_padding(result.size))
    lower.apply(result.held, result.written_mtimes)
    return NormalizedLayer.written(result, None, step, member=member)


def _spooled_layer(
    layer: StoredLayer,
    step: BuildLayer,
    lower: LowerState,
    sink_for: Callable[[int], Sink],
    number: int,
    *,
    spool: Path,
    what: str,
) -> NormalizedLayer:
    """The built ``layer`` rewritten into a spool file, then sent from it into ``sink`` (as _stream_layer)."""
    what = f"{what} layer {number}"
    with tempfile.TemporaryFile(dir=spool, prefix=f"build-{number}-") as file:
        result, digest = _rewrite_built(layer, file, step, lower, directory_digests(layer.files), what=what)
        _check_source(layer, digest, what=what)
        lower.apply(result.held, result.written_mtimes)
        if not result.entries:
            return NormalizedLayer(
                diff_id="", path=None, size=0, entries=0, clamped=result.clamped, history=step.history, facts=result
            )
        member = f"build-{number}/layer.tar"
        sink = sink_for(result.size)
        sink.write(tar_entry(member, result.size))
        file.seek(0)
        while chunk := file.read(CHUNK):
            sink.write(chunk)
        sink.write(tar_padding(result.size))
    return NormalizedLayer.written(result, None, step, member=member)


def _rewrite_built(
    layer: StoredLayer,
    sink: Sink,
    step: BuildLayer,
    lower: LowerState,
    content: Callable[[str, int], Digest],
    *,
    what: str,
) -> tuple[RewriteResult, str]:
    """The built ``layer``'s tar, read from the store and hashed as it passes, rewritten into
    ``sink``: the result and the built tar's digest (the caller checks it against the diffID)."""
    source = HashingReader(open_stream(layer_tar(layer)), background=True)
    try:
        result = _rewrite(cast("BinaryIO", source), sink, step, lower, content, what=what)
        source.drain()
    except READ_ERRORS as e:
        msg = f"{what}: {e}"
        raise StoreReadFailure(msg) from e
    finally:
        source.close()
    return result, source.digest


def _rewrite(
    source: BinaryIO,
    sink: Sink | None,
    step: BuildLayer,
    lower: LowerState,
    content: Callable[[str, int], Digest],
    *,
    what: str,
) -> RewriteResult:
    """One pass of the rewrite: for its size alone (no ``sink``) or into ``sink``."""
    try:
        return rewrite_layer(
            source,
            sink or _NOWHERE,
            step.epoch,
            what=what,
            reducer=LayerReducer(lower, step.epoch),
            pin_times=step.copies_context,
            content=content,
            sizes_only=sink is None,
        )
    except READ_ERRORS as e:
        msg = f"{what}: {e}"
        raise StoreReadFailure(msg) from e
    except LayerError as e:  # its message names the layer
        raise StoreReadFailure(str(e)) from e


def _check_source(layer: StoredLayer, digest: str | None, *, what: str) -> None:
    """The built layer's tar (``digest``, or hashed now) must be the one its diffID names."""
    if digest is None:
        source = HashingReader(open_stream(layer_tar(layer)))
        try:
            source.drain()
        except READ_ERRORS as e:
            msg = f"{what}: {e}"
            raise StoreReadFailure(msg) from e
        digest = source.digest
    if digest != layer.diff_id:
        msg = f"{what}: {layer.files} gives sha256 {digest}, the image says {layer.diff_id}"
        raise StoreReadFailure(msg)


def _once_each(content: Callable[[str, int], Digest]) -> Callable[[str, int], Digest]:
    """``content`` asked once per file for both passes: a compared file is read once, not twice."""
    known: dict[tuple[str, int], Digest] = {}

    def digest(name: str, size: int) -> Digest:
        if (name, size) not in known:
            known[name, size] = content(name, size)
        return known[name, size]

    return digest


class _Nowhere:
    def write(self, data: bytes, /) -> int:
        return len(data)


_NOWHERE = _Nowhere()
