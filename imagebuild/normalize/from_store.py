"""Normalising from a local engine's layer store: the build's layers rebuilt from tar-split, no save."""

from __future__ import annotations

import json
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, cast

from imagebuild.engine.chain_ids import chain_ids
from imagebuild.engine.interface import StoredImage, StoredLayer
from imagebuild.engine.tar_split import TarSplitError, file_content, header_chunks, layer_chunks
from imagebuild.normalize.canonical import LayerReducer
from imagebuild.normalize.config import BuildLayer
from imagebuild.normalize.lower import Digest, LowerState, file_digest, scan_layer
from imagebuild.normalize.model import (
    LayerNote,
    LayerPlan,
    Normalized,
    NormalizedLayer,
    StoreReadFailure,
    assemble,
)
from imagebuild.normalize.reuse import reused_layer
from imagebuild.normalize.rewrite import LayerError, rewrite_layer
from imagebuild.util.streams import HashingReader, open_stream


def normalize_stored(image: StoredImage, plan: LayerPlan, workdir: Path, *, what: str) -> Normalized:
    """Rewrite the build's layers straight from the engine's layer store into ``workdir``.

    The base's layers are not opened; nor are the build's first layers when the last run normalised
    them from the same inputs (``plan.previous``, imagebuild.normalize.reuse). Raise StoreReadFailure when the store
    does not give exactly the image the engine reports (its config, or a layer
    whose rebuilt tar does not hash to its diffID).
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
    lower = stored_lower_state(image.layers[: plan.base_layers], what)
    chains, notes = chain_ids(plan.layers), []
    below = list(plan.kept)  # the normalised image's diffIDs so far
    reusing = image.layer_db is not None
    for index, (layer, step) in enumerate(zip(image.layers[plan.base_layers :], steps, strict=True)):
        number = plan.base_layers + index
        note = LayerNote(built=chains[number], epoch=step.epoch, pinned=step.copies_context, diff_id="")
        reusing = reusing and index < len(plan.previous) and plan.previous[index].same_input(note)
        reused = None
        if reusing and image.layer_db is not None:
            content = directory_digests(layer.files)
            found = reused_layer(layer, step, plan.previous[index], below=below, layer_db=image.layer_db, content=content)
            reusing = found is not None
            if found is not None:
                lower.apply(found.held, found.written_mtimes)
                reused = found.layer
        made = reused or _rewritten(layer, step, lower, workdir / f"layer-{index}.tar", what=f"{what} layer {number}")
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
    )


def _rewritten(layer: StoredLayer, step: BuildLayer, lower: LowerState, out: Path, *, what: str) -> NormalizedLayer:
    """The built ``layer`` rewritten to ``out`` from the layer store, checked against its diffID; ``lower``
    gets what it held."""
    # The diffID check hashes in a thread of its own; a file's content digest, which only a later
    # layer's file of the same metadata needs, is read from the layer's directory when asked.
    source = HashingReader(open_stream(layer_chunks(layer.tar_split, layer.files)), background=True)
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
                content=directory_digests(layer.files),
            )
        source.drain()
    except (TarSplitError, LayerError) as e:
        raise StoreReadFailure(str(e)) from e
    finally:
        source.close()
    lower.apply(result.held, result.written_mtimes)
    if source.digest != layer.diff_id:
        msg = f"{what}: {layer.files} gives sha256 {source.digest}, the image says {layer.diff_id}"
        raise StoreReadFailure(msg)
    return NormalizedLayer.written(result, out, step)


def directory_digests(files: Path) -> Callable[[str, int], Digest]:
    """A regular file's content digest from the layer's directory, computed when first asked for."""

    def content(name: str, size: int) -> Digest:
        return file_digest(lambda: file_content(files, name, size))

    return content


def stored_lower_state(layers: Sequence[StoredLayer], what: str) -> LowerState:
    """The base's filesystem from the layer store: headers from the tar-split records, no file read.

    A file's content is read from the layer's directory only when a build layer's file matches it
    in every other respect.
    """
    lower = LowerState()
    for number, layer in enumerate(layers):
        try:
            lower.apply(
                scan_layer(
                    open_stream(header_chunks(layer.tar_split)),
                    digests=False,
                    content=directory_digests(layer.files),
                )
            )
        except (TarSplitError, tarfile.TarError) as e:
            msg = f"{what} base layer {number}: {e}"
            raise StoreReadFailure(msg) from e
    return lower
