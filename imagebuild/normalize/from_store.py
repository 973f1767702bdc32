"""Normalising from a local engine's store, no save: overlay2's layers rebuilt from tar-split, the
containerd store's decompressed from their blobs (imagebuild.normalize.stored_layers)."""

from __future__ import annotations

import json
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, cast

from imagebuild.engine.chain_ids import chain_ids
from imagebuild.engine.interface import BlobLayer, StoredImage, StoredLayer
from imagebuild.normalize.canonical import LayerReducer
from imagebuild.normalize.config import BuildLayer
from imagebuild.normalize.lower import LowerState, entry_path, lower_state
from imagebuild.normalize.lower_cache import Entries, cached_entries
from imagebuild.normalize.model import (
    LayerNote,
    LayerPlan,
    Normalized,
    NormalizedLayer,
    NormalizeFailure,
    StoreReadFailure,
    assemble,
)
from imagebuild.normalize.reuse import remember, reused_layer
from imagebuild.normalize.rewrite import LayerError, RewriteResult, rewrite_layer
from imagebuild.normalize.stored_layers import (
    READ_ERRORS,
    content_digests,
    directory_digests,
    layer_entries,
    layer_tar,
)
from imagebuild.util.streams import HashingReader, open_stream

# How a build layer is rewritten: (the built layer, its step, what is below it, its number, the
# normalised image's diffIDs below it) -> the normalised layer; ``lower`` gets what the built layer held.
LayerWriter = Callable[[StoredLayer | BlobLayer, BuildLayer, LowerState, int, tuple[str, ...]], NormalizedLayer]


def normalize_stored(
    image: StoredImage,
    plan: LayerPlan,
    workdir: Path,
    *,
    what: str,
    lower_cache: Path | None = None,
    write_layer: LayerWriter | None = None,
) -> Normalized:
    """Rewrite the build's layers straight from the engine's store into ``workdir`` (or as
    ``write_layer`` does: imagebuild.normalize.streamed_load streams them into the engine's load).

    The build's first layers are not rewritten when the last run normalised them from the same
    inputs (``plan.previous``, imagebuild.normalize.reuse); the base's are read for what they hold
    (overlay2: their headers only; the containerd store: from ``lower_cache`` once a normalisation
    on the same base kept it there, imagebuild.normalize.lower_cache). Raise StoreReadFailure when
    the store does not give exactly the image the engine reports (its config, or a layer whose tar
    does not hash to its diffID).
    """
    started = time.monotonic()
    if image.config is None or tuple(layer.diff_id for layer in image.layers) != plan.layers:
        msg = image.unavailable or f"{what}: the layer store's layers are not the ones the engine reported"
        raise StoreReadFailure(msg)
    try:
        config = json.loads(image.config.read_bytes())
    except (OSError, ValueError) as e:
        msg = f"{what}: cannot read its config {image.config}: {e}"
        raise StoreReadFailure(msg) from e
    rewritten: list[NormalizedLayer] = []
    steps = plan.build_layers(config, what)
    lower = stored_lower_state(image.layers[: plan.base_layers], what, cache=lower_cache)
    chains, notes = chain_ids(plan.layers), []
    below = list(plan.kept)  # the normalised image's diffIDs so far
    reusing = as_is = image.layer_db is not None or image.blobs is not None
    taken: set[int] = set()  # the epochs of the layers taken as they are from the layer cache image
    for index, (layer, step) in enumerate(zip(image.layers[plan.base_layers :], steps, strict=True)):
        number = plan.base_layers + index
        note = LayerNote(built=chains[number], epoch=step.epoch, pinned=step.copies_context, diff_id="")
        # Normalised already (the layer cache image gave it back): taken as it is, it held what it holds.
        as_is = as_is and index < len(plan.normalized) and plan.normalized[index].made(layer.diff_id, note)
        reusing = reusing and index < len(plan.previous) and plan.previous[index].same_input(note)
        previous = replace(plan.normalized[index], built=note.built) if as_is else plan.previous[index] if reusing else None
        reused = None
        if previous is not None:
            found = reused_layer(layer, step, previous, below=below, image=image, cache=lower_cache)
            if found is None and as_is:  # rewriting a normalised layer is not what a cold build does
                msg = f"{what}: layer {number}, taken from the layer cache image, cannot be read from the engine's store"
                raise StoreReadFailure(msg)
            reusing = as_is = found is not None
            if found is not None:
                lower.apply(found.held, found.written_mtimes)
                reused = found.layer
        if reused is not None:
            made = reused
            taken |= {step.epoch} if as_is else set()
        elif write_layer is not None:
            made = write_layer(layer, step, lower, number, tuple(below))
        else:
            made = rewrite_to(layer, step, lower, workdir / f"layer-{index}.tar", what=f"{what} layer {number}")
        if made.facts is not None:
            _check_times_kept(made.facts, {epoch for epoch in taken if epoch < step.epoch}, f"{what} layer {number}")
            if lower_cache is not None:
                remember(layer, made, lower_cache)
            made = replace(made, facts=None)  # kept on disk: not held in memory with the result
        rewritten.append(made)
        notes.append(replace(note, diff_id=made.diff_id if made.entries else ""))
        below += [made.diff_id] if made.entries else []
    return assemble(
        config,
        plan,
        rewritten,
        spool_peak=sum(layer.size for layer in rewritten if layer.path is not None),
        read_seconds=0.0,
        rewrite_seconds=round(time.monotonic() - started, 3),
        notes=tuple(notes),
        # The containerd store: a manifest of the normalised image names the base's layers as it holds them.
        base_descriptors=tuple(
            {"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size}
            for layer in image.layers[: plan.base_layers]
            if isinstance(layer, BlobLayer)
        ),
    )


def _check_times_kept(facts: RewriteResult, epochs: set[int], what: str) -> None:
    """NormalizeFailure when the layer kept a file's time from a layer taken from the layer cache image.

    Such a file's time is that layer's epoch there (its normalised time); on the built layer a cold
    build has below, it is the build's clock, which this step's later epoch clamps. A file this layer
    wrote at one of ``epochs`` (the earlier epochs of the layers taken as they are) may be one: a
    ``cp -a``, ``mv`` or ``chmod`` of a file below. Directories are left out: their times come from
    the layer below either way (imagebuild.normalize.canonical)."""
    if not epochs:
        return
    directories = {entry_path(name) for name, meta, _ in facts.held if meta.kind == tarfile.DIRTYPE}
    kept = sorted(path for path, mtime in facts.written_mtimes.items() if mtime in epochs and path not in directories)
    if kept:
        msg = (
            f"{what} keeps the time of a file below it ({kept[0]}, {len(kept)} in all) that the layer cache "
            "image gave back normalised, where a cold build has the build's clock; build again with --no-cache"
        )
        raise NormalizeFailure(msg)


def rewrite_to(
    layer: StoredLayer | BlobLayer, step: BuildLayer, lower: LowerState, out: Path, *, what: str
) -> NormalizedLayer:
    """The built ``layer`` rewritten to ``out`` from the store, checked against its diffID; ``lower``
    gets what it held."""
    # The diffID check hashes in a thread of its own; on overlay2 a file's content digest, which only
    # a later layer's file of the same metadata needs, is read from the layer's directory when asked.
    source = HashingReader(open_stream(layer_tar(layer)), background=True)
    try:
        with out.open("wb") as sink:
            # Only read() is called on it: the rewriter parses a stream.
            result = rewrite_layer(
                cast("BinaryIO", source),
                sink,
                step.epoch,
                what=what,
                reducer=LayerReducer(lower, step.epoch),
                pin_times=step.copies_context,
                content=content_digests(layer),
            )
        source.drain()
    except READ_ERRORS as e:
        msg = f"{what}: {e}"
        raise StoreReadFailure(msg) from e
    except LayerError as e:  # its message names the layer
        raise StoreReadFailure(str(e)) from e
    finally:
        source.close()
    lower.apply(result.held, result.written_mtimes)
    if source.digest != layer.diff_id:
        where = layer.blob if isinstance(layer, BlobLayer) else layer.files
        msg = f"{what}: {where} gives sha256 {source.digest}, the image says {layer.diff_id}"
        raise StoreReadFailure(msg)
    return NormalizedLayer.written(result, out, step)


def stored_lower_state(layers: Sequence[StoredLayer | BlobLayer], what: str, *, cache: Path | None = None) -> LowerState:
    """The base's filesystem from the store: on overlay2 headers from the tar-split records, and a
    file's content read from the layer's directory only when a build layer's file matches it in
    every other respect; on the containerd store every blob decompressed and checked, or what a
    normalisation on the same base kept in ``cache``."""

    def scanned() -> list[Entries]:
        entries = []
        for number, layer in enumerate(layers):
            try:
                entries.append(layer_entries(layer))
            except (*READ_ERRORS, tarfile.TarError) as e:
                msg = f"{what} base layer {number}: {e}"
                raise StoreReadFailure(msg) from e
        return entries

    if not layers or cache is None:
        return lower_state(scanned())
    chain = chain_ids([layer.diff_id for layer in layers])[-1]
    if all(isinstance(layer, BlobLayer) for layer in layers):
        return lower_state(cached_entries(cache, chain, scanned))
    directories = [layer.files for layer in layers if isinstance(layer, StoredLayer)]
    if len(directories) != len(layers):
        return lower_state(scanned())
    return lower_state(cached_entries(cache, chain, scanned, directory_digests=lambda n: directory_digests(directories[n])))
