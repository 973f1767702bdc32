"""Build layers the last run normalised from the same inputs: taken from the engine, not rewritten.

A normalised layer is a function of the built layer and every layer below it (the built layer's
chain ID), of the epochs and pinning of the steps up to it, and of the rules. The build record keeps
those per build layer (``LayerNote``); when a rebuild changes a later step only, its first build
layers have the same chain IDs, and their normalised layers are still in the engine (the last
normalised image holds them). Such a layer is neither rewritten nor sent to the engine again: its
diffID comes from the record, and what the layers above it are reduced against comes from the
built layer (what it held: the lower state's entries) and from the normalised layer the engine
holds (the times it wrote), headers only where the store allows:

* overlay2: both from their tar-split records, each file's digest read from the built layer's
  directory when a comparison needs it; the normalised layer found in the layer database under its
  chain ID;
* the containerd store: the built layer's blob decompressed (its files hashed as they pass, the tar
  checked against its diffID), the normalised layer found as the uncompressed blob imagebuild
  loaded, its headers read by seeking past every file's content.

Both facts depend on one layer's bytes alone, so they are kept by diffID (imagebuild.normalize.lower_cache):
by the normalisation that rewrote the layer (``remember``: its rewrite read the one and wrote the
other), or else once read, and the rebuilds that keep the layer read neither. The engine is still
asked whether it holds the normalised layer.

Only for a prefix of the build layers: from the first layer whose inputs differ (or whose normalised
layer the engine no longer holds) every layer above is rewritten, as they all stand on it.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from imagebuild.engine.chain_ids import chain_ids
from imagebuild.engine.containerd_store import held_blob
from imagebuild.engine.interface import BlobLayer, StoredImage, StoredLayer
from imagebuild.engine.overlay2_store import held_layer
from imagebuild.engine.tar_split import tar_size
from imagebuild.normalize.config import BuildLayer
from imagebuild.normalize.lower import Digest, Meta, entry_path
from imagebuild.normalize.lower_cache import (
    Entries,
    Times,
    cached_entries,
    cached_times,
    keep_entries,
    keep_times,
)
from imagebuild.normalize.model import LayerNote, NormalizedLayer
from imagebuild.normalize.stored_layers import READ_ERRORS, directory_digests, layer_entries, record_entries
from imagebuild.util.streams import ENCODING, ERRORS, forget_members


@dataclass(frozen=True, kw_only=True)
class Reused:
    layer: NormalizedLayer
    held: list[tuple[str, Meta, Digest | None]]  # the built layer's entries, for the lower state
    written_mtimes: dict[str, int]  # by path, the times the normalised layer wrote


def reused_layer(
    layer: StoredLayer | BlobLayer,
    step: BuildLayer,
    previous: LayerNote,
    *,
    below: Sequence[str],
    image: StoredImage,
    cache: Path | None = None,
) -> Reused | None:
    """The layer the last run made from the same inputs, when the engine still holds it; else None.

    ``below``: the normalised image's diffIDs under it (the base's and the kept build layers').
    ``cache``: where what the two layers hold is kept once read (imagebuild.normalize.lower_cache).
    """
    try:
        if not previous.diff_id:  # it held nothing: nothing written, nothing to find
            held = _held(layer, cache)
            return Reused(layer=_note(previous, step, 0, 0), held=held, written_mtimes={})
        written = _written(image, chain_ids([*below, previous.diff_id])[-1], previous.diff_id, cache)
        if written is None:
            return None
        held = _held(layer, cache)
    except (*READ_ERRORS, tarfile.TarError, OSError):
        return None  # rewritten instead: the store is not as it was (a damaged layer then fails its check)
    times, size = written
    mtimes = {entry_path(name): mtime for name, mtime in times}
    return Reused(layer=_note(previous, step, size, len(times)), held=held, written_mtimes=mtimes)


def remember(layer: StoredLayer | BlobLayer, made: NormalizedLayer, cache: Path) -> None:
    """Keep what rewriting ``layer`` into ``made`` read and wrote, as the two facts below, so that
    even the first rebuild that takes the layer from the engine reads neither layer's headers."""
    facts = made.facts
    if facts is None:
        return
    keep_entries(cache, layer.diff_id, facts.held, headers=isinstance(layer, StoredLayer))
    if made.entries and len(facts.written_mtimes) == made.entries:  # one time per entry, as _written reads
        keep_times(cache, made.diff_id, list(facts.written_mtimes.items()), made.size)


def _held(layer: StoredLayer | BlobLayer, cache: Path | None) -> Entries:
    """What the built layer holds: a function of its bytes alone, so kept by its diffID."""
    if cache is None:
        return layer_entries(layer)
    if isinstance(layer, BlobLayer):
        return cached_entries(cache, layer.diff_id, lambda: [layer_entries(layer)])[0]
    digests = directory_digests(layer.files)
    return cached_entries(cache, layer.diff_id, lambda: [layer_entries(layer)], directory_digests=lambda _: digests)[0]


def _written(image: StoredImage, chain: str, diff_id: str, cache: Path | None) -> Times | None:
    """(each entry of the normalised layer ``diff_id`` with the time it wrote; its size), when the
    engine holds that layer."""
    compute: Callable[[], Times]
    if image.layer_db is not None:
        record = held_layer(image.layer_db, chain, diff_id)
        if record is None:
            return None
        compute = partial(_record_times, record)
    else:
        blob = held_blob(image.blobs, diff_id) if image.blobs is not None else None
        if blob is None:
            return None
        compute = partial(_blob_times, blob)
    return compute() if cache is None else cached_times(cache, diff_id, compute)


def _record_times(record: Path) -> Times:
    return [(name, meta.mtime) for name, meta, _ in record_entries(record)], tar_size(record)


def _blob_times(blob: Path) -> Times:
    return _header_times(blob), blob.stat().st_size


def _header_times(tar: Path) -> list[tuple[str, int]]:
    """Every entry of an uncompressed tar on disk with its mtime: headers only, each file's content skipped."""
    times: list[tuple[str, int]] = []
    with tar.open("rb") as f, tarfile.open(fileobj=f, mode="r:", encoding=ENCODING, errors=ERRORS) as reader:
        while (info := reader.next()) is not None:
            times.append((info.name, int(info.mtime)))
            forget_members(reader)
    return times


def _note(previous: LayerNote, step: BuildLayer, size: int, entries: int) -> NormalizedLayer:
    return NormalizedLayer(
        diff_id=previous.diff_id, path=None, size=size, entries=entries, clamped=0, history=step.history
    )
