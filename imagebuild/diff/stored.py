"""One side of a diff read from the engine's store rather than from ``docker save``.

``docker save`` exports the whole image, base included, through the engine: both sides of a diff
of a rebuild send the same base twice. The store gives each layer by itself (overlay2: the tar
rebuilt from its tar-split record and its directory; the containerd store: its blob), so a layer
the two images share is read and indexed once. Each layer is checked against its diffID as it is
indexed; one that is not what its diffID says leaves that side to ``docker save``, with a warning.
An archive is read whole, but a layer the other side indexed already is only hashed.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from typing import BinaryIO, cast

from imagebuild.diff.compare import Snapshot
from imagebuild.diff.tree import LayerIndex, index_layer
from imagebuild.engine.content_blobs import BlobError
from imagebuild.engine.interface import BlobLayer, Engine, StoredLayer
from imagebuild.engine.saved_image import OCI_BLOBS, ArchiveError, SavedImage
from imagebuild.engine.tar_split import TarSplitError
from imagebuild.log import logger
from imagebuild.normalize.stored_layers import layer_tar
from imagebuild.util.streams import open_stream

_READ_ERRORS = (TarSplitError, BlobError, tarfile.TarError, OSError, EOFError, ValueError)


class LayerIndexes:
    """Each layer indexed once per diff, by its diffID."""

    def __init__(self) -> None:
        self._by_diff_id: dict[str, LayerIndex] = {}

    def of_archive_entry(self, name: str, data: BinaryIO) -> LayerIndex:
        """A layer read from an archive. An OCI blob is named by its digest, an uncompressed layer's
        being its diffID: one this diff indexed already (the base both sides of a rebuild hold) is
        only hashed, to check it is that layer, not parsed and indexed again."""
        claimed = "sha256:" + name.removeprefix(OCI_BLOBS) if name.startswith(OCI_BLOBS) else ""
        known = self._by_diff_id.get(claimed) if claimed else None
        if known is None:
            index = index_layer(data)
            self._by_diff_id.setdefault(index.diff_id, index)
            return index
        # Read into one reused buffer; read_saved_image gives each layer as an io.BufferedReader.
        digest = "sha256:" + hashlib.file_digest(cast("io.BufferedReader", data), "sha256").hexdigest()
        if digest != claimed:
            msg = f"{name} reads as {digest}, not the digest its name says: the archive is damaged"
            raise ArchiveError(msg)
        return known

    def of(self, layer: StoredLayer | BlobLayer) -> LayerIndex:
        index = self._by_diff_id.get(layer.diff_id)
        if index is None:
            index = index_layer(open_stream(layer_tar(layer)))
            if index.diff_id != layer.diff_id:
                msg = f"the store's copy of layer {layer.diff_id[:19]} reads as {index.diff_id[:19]}"
                raise TarSplitError(msg)
            self._by_diff_id[layer.diff_id] = index
        return index


def stored_snapshot(engine: Engine, image_id: str, name: str, indexes: LayerIndexes) -> Snapshot | None:
    """The image indexed from the engine's store, or None where the store cannot give it."""
    stored = engine.stored_image(image_id)
    if stored.unavailable or stored.config is None:
        logger.info("diff: reading %s through docker save, the whole image (%s)", name, stored.unavailable or "no config")
        return None
    where = "content store" if stored.manifest is not None else "layer store"
    logger.info("diff: reading %s from the engine's %s", name, where)
    try:
        config_bytes = stored.config.read_bytes()
        config = json.loads(config_bytes)
        layers = tuple(indexes.of(layer) for layer in stored.layers)
    except _READ_ERRORS as e:
        logger.warning("reading %s from the engine's store failed (%s); using docker save", name, e)
        return None
    image = SavedImage(config=config, config_bytes=config_bytes, layers=layers, repo_tags=())
    return Snapshot(name=name, image=image)
