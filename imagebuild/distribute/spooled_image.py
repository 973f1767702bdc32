"""An image's config and layers from the engine's ``save`` stream, each layer spooled to a file once.

The OCI layout and the squashfs are made from the same content-addressed save the docker archive is:
the config exactly as saved (its sha256 is the identity) and every layer tar checked against its diffID
(``engine.saved_image`` does both). Unlike the docker archive, which streams through, these need the
layers by digest before they are written (an OCI blob's name is its digest; flattening reads every
layer), so each is spooled to the export's temporary directory while it is hashed, and read from there.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from imagebuild.engine.saved_image import ArchiveError, read_saved_image
from imagebuild.util.streams import open_stream, spool


class SpoolError(Exception):
    """The save stream is not one image whose layers match its config (the message says why)."""


@dataclass(frozen=True, kw_only=True)
class SpooledLayer:
    path: Path  # the uncompressed layer tar, in the export's temporary directory
    diff_id: str  # its sha256: what the config's rootfs names
    size: int


@dataclass(frozen=True, kw_only=True)
class SpooledImage:
    config_bytes: bytes  # exactly as saved
    config: dict[str, Any]
    layers: tuple[SpooledLayer, ...]  # in the config's order, lowest first

    @property
    def identity(self) -> str:
        import hashlib

        return "sha256:" + hashlib.sha256(self.config_bytes).hexdigest()


def spool_saved_image(chunks: Iterable[bytes], directory: Path, *, what: str) -> SpooledImage:
    """Read the save stream ``chunks`` once, writing each layer to ``directory`` as it streams by."""
    count = 0

    def on_layer(_name: str, data: BinaryIO) -> SpooledLayer:
        nonlocal count
        count += 1
        path = directory / f"layer-{count:04d}.tar"
        digest, size = spool(data, path)
        return SpooledLayer(path=path, diff_id=digest, size=size)

    try:
        saved = read_saved_image(open_stream(chunks), on_layer, what=what)
    except (ArchiveError, tarfile.TarError) as e:
        raise SpoolError(str(e)) from e
    return SpooledImage(config_bytes=saved.config_bytes, config=saved.config, layers=saved.layers)
