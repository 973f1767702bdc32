"""An image's config and layers, each layer spooled to a file once: from the engine's own store where
this process can read it, else from its ``save`` stream.

The OCI layout and the squashfs are made from the same content-addressed image the docker archive is:
the config exactly as stored or saved (its sha256 is the identity) and every layer tar checked against
its diffID. Unlike the docker archive, which streams through, these need the layers by digest before
they are written (an OCI blob's name is its digest; flattening reads every layer), so each is spooled to
the export's temporary directory while it is hashed, and read from there. Read from the store
(overlay2's layer store: each tar rebuilt from its tar-split record; the containerd store: each blob
decompressed), the engine does not first write the whole image into its data root as its save does.

One exception: overlay2's layer store (``stream_stored_image``). There a layer's digest is its
diffID, its size is on its tar-split record, both known before a byte is read, and its files'
contents are in its directory: the OCI layout rebuilds each layer from the store as it writes it,
the squashfs reads each layer's tar once through for its headers, then the files it keeps from the
directory; every layer is checked against its diffID on the way. No spool: the image's size less of
temporary disk. A layer that is not its diffID fails the write (nothing is left at the output) and
the caller reads the save instead, as when a spool is refused.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

from imagebuild.distribute.stored_archive import StoredArchiveError, checked_chunks, checked_documents
from imagebuild.engine.content_blobs import BlobError, layer_tar
from imagebuild.engine.interface import BlobLayer, StoredImage, StoredLayer
from imagebuild.engine.saved_image import ArchiveError, read_saved_image
from imagebuild.engine.tar_split import (
    CheckedHeaderFile,
    LayerDirectory,
    TarSplitError,
    layer_chunks,
    tar_size,
)
from imagebuild.util.background_hash import BackgroundSha256
from imagebuild.util.streams import CHUNK, open_stream, spool


class SpoolError(Exception):
    """The save stream is not one image whose layers match its config (the message says why)."""


@dataclass(frozen=True, kw_only=True)
class SpooledLayer:
    path: Path  # the uncompressed layer tar, in the export's temporary directory
    diff_id: str  # its sha256: what the config's rootfs names
    size: int

    def chunks(self) -> Iterator[bytes]:
        with self.path.open("rb") as source:
            while chunk := source.read(CHUNK):
                yield chunk


@dataclass(frozen=True, kw_only=True)
class StreamedLayer:
    """An overlay2 layer, rebuilt from the layer store as it is written (see the module's doc)."""

    stored: StoredLayer
    diff_id: str
    size: int  # from its tar-split record
    progress: Callable[[int], None]

    def chunks(self) -> Iterator[bytes]:
        """The layer's tar, ``size`` bytes at most; StoredArchiveError once it is not the layer."""
        rebuilt = layer_chunks(self.stored.tar_split, self.stored.files)
        what = f"layer {self.diff_id[:19]} rebuilt from {self.stored.files}"
        try:
            yield from checked_chunks(rebuilt, size=self.size, digest=self.diff_id, what=what, progress=self.progress)
        except TarSplitError as e:
            raise StoredArchiveError(str(e)) from e

    @contextmanager
    def headers(self) -> Iterator[IO[bytes]]:
        """The tar with the files' content left out (for tarfile's ``r:``), read from the tar-split
        record, which reads every file's content from the directory as it passes, for the check: once
        the block ends, the whole tar has been hashed (StoredArchiveError when it is not the layer)."""
        size = 0
        with BackgroundSha256() as sha256:

            def seen(data: bytes) -> None:
                nonlocal size
                size += len(data)
                sha256.update(data)
                self.progress(len(data))

            try:
                headers = CheckedHeaderFile(self.stored.tar_split, self.stored.files, seen)
                try:
                    yield cast("IO[bytes]", headers)
                    headers.drain()
                finally:
                    headers.close()
            except TarSplitError as e:
                raise StoredArchiveError(str(e)) from e
            self._check(size, sha256.hexdigest())

    def _check(self, size: int, hexdigest: str) -> None:
        if size != self.size or f"sha256:{hexdigest}" != self.diff_id:
            msg = f"layer {self.diff_id[:19]} rebuilt from {self.stored.files} is sha256:{hexdigest[:12]}, not the layer"
            raise StoredArchiveError(msg)

    @contextmanager
    def files(self) -> Iterator[Callable[[str, int], Iterator[bytes]]]:
        """A regular file's content from the layer's directory, by its entry's name and size."""
        directory = LayerDirectory(self.stored.files)

        def content(name: str, size: int) -> Iterator[bytes]:
            try:
                yield from directory.content(name, size)
            except (TarSplitError, OSError) as e:
                msg = f"layer {self.diff_id[:19]}: {name} in {self.stored.files}: {e}"
                raise StoredArchiveError(msg) from e

        try:
            yield content
        finally:
            directory.close()


@dataclass(frozen=True, kw_only=True)
class _Image:
    config_bytes: bytes  # exactly as saved or stored
    config: dict[str, Any]

    @property
    def identity(self) -> str:
        return "sha256:" + hashlib.sha256(self.config_bytes).hexdigest()


@dataclass(frozen=True, kw_only=True)
class SpooledImage(_Image):
    layers: tuple[SpooledLayer, ...]  # in the config's order, lowest first


@dataclass(frozen=True, kw_only=True)
class StreamedImage(_Image):
    """An image whose layers are read from overlay2's layer store as they are written."""

    layers: tuple[StreamedLayer, ...]


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


def spool_stored_image(
    image: StoredImage, image_id: str, directory: Path, *, progress: Callable[[int], None] = lambda _: None
) -> SpooledImage:
    """The image ``image_id`` (the engine's ID) from the engine's store, each layer's tar spooled to
    ``directory`` and checked against its diffID; ``progress(n)`` is told of each chunk read.

    StoredArchiveError when the store does not give that image (the caller then reads the save).
    """
    config_bytes, _ = checked_documents(image, image_id)
    layers = []
    for number, layer in enumerate(image.layers, 1):
        path = directory / f"layer-{number:04d}.tar"
        if isinstance(layer, BlobLayer):
            chunks, where = layer_tar(layer), f"read from {layer.blob}"
        else:
            chunks, where = layer_chunks(layer.tar_split, layer.files), f"rebuilt from {layer.files}"
        try:
            digest, size = spool(open_stream(_counted(chunks, progress)), path)
        except (TarSplitError, BlobError) as e:
            raise StoredArchiveError(str(e)) from e
        if digest != layer.diff_id:
            msg = f"layer {layer.diff_id[:19]} {where} is {digest[:19]}, not the layer"
            raise StoredArchiveError(msg)
        layers.append(SpooledLayer(path=path, diff_id=digest, size=size))
    return SpooledImage(config_bytes=config_bytes, config=json.loads(config_bytes), layers=tuple(layers))


def stream_stored_image(
    image: StoredImage, image_id: str, *, progress: Callable[[int], None] = lambda _: None
) -> StreamedImage | None:
    """The image ``image_id`` from overlay2's layer store, its layers to be read as they are written;
    None on another store (its layers are spooled). StoredArchiveError when the store does not give that
    image's config, or a layer's record cannot be read."""
    if not image.layers or not all(isinstance(layer, StoredLayer) for layer in image.layers):
        return None
    config_bytes, _ = checked_documents(image, image_id)
    layers = []
    for layer in image.layers:
        assert isinstance(layer, StoredLayer)
        try:
            size = tar_size(layer.tar_split)
        except TarSplitError as e:
            raise StoredArchiveError(str(e)) from e
        layers.append(StreamedLayer(stored=layer, diff_id=layer.diff_id, size=size, progress=progress))
    return StreamedImage(config_bytes=config_bytes, config=json.loads(config_bytes), layers=tuple(layers))


def _counted(chunks: Iterable[bytes], progress: Callable[[int], None]) -> Iterator[bytes]:
    for chunk in chunks:
        progress(len(chunk))
        yield chunk
