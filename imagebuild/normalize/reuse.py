"""Build layers the last run normalised from the same inputs: taken from the engine, not rewritten.

A normalised layer is a function of the built layer and every layer below it (the built layer's
chain ID), of the epochs and pinning of the steps up to it, and of the rules. The build record keeps
those per build layer (``LayerNote``); when a rebuild changes a later step only, its first build
layers have the same chain IDs, and their normalised layers are still in the engine (the last
normalised image holds them). Such a layer is neither rewritten nor sent to the engine again: its
diffID comes from the record, and what the layers above it are reduced against comes from the two
tar-split records, headers only: what the built layer held (the lower state's entries, each file's
digest read from the layer's directory when a comparison needs it) and the times the normalised
layer wrote.

Only on the layer-store path (a local overlay2 engine), and only for a prefix of the build layers:
from the first layer whose inputs differ (or whose normalised layer the engine no longer holds)
every layer above is rewritten, as they all stand on it.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from imagebuild.engine.chain_ids import chain_ids
from imagebuild.engine.interface import StoredLayer
from imagebuild.engine.overlay2_store import held_layer
from imagebuild.engine.tar_split import TarSplitError, header_chunks, tar_size
from imagebuild.normalize.config import BuildLayer
from imagebuild.normalize.lower import Digest, Meta, entry_path, scan_layer
from imagebuild.normalize.model import LayerNote, NormalizedLayer
from imagebuild.util.streams import open_stream


@dataclass(frozen=True, kw_only=True)
class Reused:
    layer: NormalizedLayer
    held: list[tuple[str, Meta, Digest | None]]  # the built layer's entries, for the lower state
    written_mtimes: dict[str, int]  # by path, the times the normalised layer wrote


def reused_layer(
    layer: StoredLayer,
    step: BuildLayer,
    previous: LayerNote,
    *,
    below: Sequence[str],
    layer_db: Path,
    content: Callable[[str, int], Digest],
) -> Reused | None:
    """The layer the last run made from the same inputs, when the engine still holds it; else None.

    ``below``: the normalised image's diffIDs under it (the base's and the kept build layers').
    """
    try:
        held = scan_layer(open_stream(header_chunks(layer.tar_split)), digests=False, content=content)
        if not previous.diff_id:  # it held nothing: nothing written, nothing to find
            return Reused(layer=_note(previous, step, None, 0, 0), held=held, written_mtimes={})
        record = held_layer(layer_db, chain_ids([*below, previous.diff_id])[-1], previous.diff_id)
        if record is None:
            return None
        written = scan_layer(open_stream(header_chunks(record)), digests=False)
        size = tar_size(record)
    except (TarSplitError, tarfile.TarError, OSError):
        return None  # rewritten instead: the record is not there as it was
    mtimes = {entry_path(name): meta.mtime for name, meta, _ in written}
    return Reused(layer=_note(previous, step, None, size, len(written)), held=held, written_mtimes=mtimes)


def _note(previous: LayerNote, step: BuildLayer, path: None, size: int, entries: int) -> NormalizedLayer:
    return NormalizedLayer(
        diff_id=previous.diff_id, path=path, size=size, entries=entries, clamped=0, history=step.history
    )
