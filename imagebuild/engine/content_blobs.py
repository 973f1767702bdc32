"""A layer's bytes from its blob in the containerd image store's content store: as stored, or as its tar.

The content store keeps every blob under its digest, as the manifest that names it describes it:
the classic builder commits each layer as gzip (``application/vnd.oci.image.layer.v1.tar+gzip``),
a pull keeps the registry's blobs (gzip, sometimes zstd), and the layers imagebuild loads stay
uncompressed (``application/vnd.oci.image.layer.v1.tar``). ``layer_tar`` gives the layer's tar,
decompressed as the media type says (imagebuild.importer.decompress, shared with the importer; gzip
by python-isal's inflate, zstd by zstandard);
``blob_chunks`` the blob as stored, for an archive that keeps it so. Neither hashes: the caller
checks the tar against the diffID (``checked_read`` does, for a reader that parses it), or the blob
against its digest, while it reads them, and so finds a blob that is damaged or not the one named.

Memory: one 1 MiB chunk at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar, cast

import zstandard
from isal import isal_zlib

from imagebuild.engine.interface import BlobLayer
from imagebuild.importer.decompress import StreamError, gunzip, unzstd
from imagebuild.util.prefetch import prefetched
from imagebuild.util.streams import CHUNK, HashingReader, open_stream

T = TypeVar("T")

GZIP, ZSTD, NONE = "gzip", "zstd", "none"


class BlobError(Exception):
    """The blob cannot be read, or does not decompress; the message names it."""


def compression(media_type: str) -> str | None:
    """How a layer of ``media_type`` is compressed (OCI and Docker names, non-distributable ones
    included); None for a media type that is not a layer tar's."""
    if "layer" not in media_type and "rootfs" not in media_type:
        return None
    for kind, endings in ((GZIP, ("+gzip", ".tar.gzip")), (ZSTD, ("+zstd", ".tar.zstd")), (NONE, (".tar",))):
        if media_type.endswith(endings):
            return kind
    return None


def blob_chunks(blob: Path, size: int) -> Generator[bytes, None, None]:
    """The blob's ``size`` bytes as stored (BlobError when the file holds another number of bytes)."""
    left = size
    try:
        with blob.open("rb") as f:
            while left and (chunk := f.read(min(CHUNK, left))):
                left -= len(chunk)
                yield chunk
            extra = f.read(1)
    except OSError as e:
        msg = f"cannot read the blob {blob} ({e.strerror})"
        raise BlobError(msg) from e
    if left or extra:
        msg = f"the blob {blob} is not the {size} bytes its manifest names"
        raise BlobError(msg)


def layer_tar(layer: BlobLayer) -> Iterator[bytes]:
    """The layer's tar, decompressed from its blob as its media type says, in a thread of its own
    (util.prefetch: beside the reader's parse)."""
    return prefetched(_decompressed(layer))


def _decompressed(layer: BlobLayer) -> Iterator[bytes]:
    kind = compression(layer.media_type)
    stored = blob_chunks(layer.blob, layer.size)
    try:
        if kind == GZIP:
            yield from gunzip(stored, isal_zlib)  # the classic builder's layers: ISA-L inflates 2.3x zlib's speed
        elif kind == ZSTD:
            yield from unzstd(zstandard, stored)
        elif kind == NONE:
            yield from stored
        else:
            msg = f"the blob {layer.blob} is a {layer.media_type}, not a layer tar"
            raise BlobError(msg)
    except StreamError as e:
        msg = f"the blob {layer.blob}: {e}"
        raise BlobError(msg) from e
    finally:
        stored.close()


def checked_read(layer: BlobLayer, read: Callable[[BinaryIO], T]) -> T:
    """What ``read`` makes of the layer's tar (it reads it as a stream), the tar checked against the
    layer's diffID as it passes (BlobError when it is another)."""
    source = HashingReader(open_stream(layer_tar(layer)), background=True)
    try:
        result = read(cast("BinaryIO", source))  # only read() is called on it
        source.drain()
    finally:
        source.close()
    if source.digest != layer.diff_id:
        msg = f"the blob {layer.blob} decompresses to sha256 {source.digest}, not layer {layer.diff_id}"
        raise BlobError(msg)
    return result
