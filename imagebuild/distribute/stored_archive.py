"""The archive `export` writes, read straight from a local engine's store instead of ``docker save``.

``docker save`` makes the engine write the whole image into its data root before it sends the first
byte (Docker 20.10's and 26's save both assemble it in a temporary directory), so a save costs a
write and a read of every byte on top of the copy to the archive; on the containerd image store it
was slower still here (docs/measured.md). Read from the store, the image's bytes flow once: from
the engine's files, through the compressor and the archive's hash, into the archive.

* overlay2 keeps each layer as a directory plus a tar-split record (``engine.tar_split``), from which
  the layer's tar is rebuilt byte for byte, as the save itself rebuilds it. The layout is the one
  ``archive_layout`` gives a Docker 20.10 save, with every blob under its digest:
  ``blobs/sha256/<config digest>`` (the config exactly as stored: its sha256 is the identity),
  ``blobs/sha256/<diffID>`` per layer (uncompressed tars), an OCI manifest imagebuild writes.
* the containerd image store keeps the image's manifest, config and layers as blobs of its content
  store (``engine.containerd_store``): they are copied as stored, as that store's own save copies
  them (pulled layers compressed, the layers imagebuild loaded uncompressed), under their digests,
  with the engine's manifest, so the archive names the image by the manifest digest the engine
  calls it by.

Both end with ``oci-layout``, ``index.json`` and the legacy ``manifest.json``
(``archive_layout.write_indexes``), so every engine and store loads them as it loads a save-made
archive.

Everything is checked: the config must hash to the identity and name the layers the store gives,
and each layer must hash, as it streams (the hash in a thread of its own), to its diffID (a rebuilt
or uncompressed tar) or to the digest its manifest names (a compressed blob), with the size declared.
A mismatch raises StoredArchiveError, and the caller exports from ``docker save`` instead.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from imagebuild.distribute.archive_layout import (
    OCI_MANIFEST,
    UNCOMPRESSED_LAYER,
    Descriptor,
    PortableArchive,
    Sink,
    TarWriter,
    write_indexes,
    write_oci_manifest,
)
from imagebuild.engine.content_blobs import BlobError, blob_chunks
from imagebuild.engine.interface import BlobLayer, StoredImage, StoredLayer
from imagebuild.engine.tar_split import TarSplitError, layer_chunks, tar_size
from imagebuild.util.background_hash import BackgroundSha256
from imagebuild.util.streams import tar_padding


class StoredArchiveError(Exception):
    """The layer store did not give the image the engine reports (the message says how)."""


def stored_archive(
    image: StoredImage, image_id: str, out: Sink, *, progress: Callable[[int], None] = lambda _: None
) -> PortableArchive:
    """Write the image ``image_id`` (the engine's ID) from its store to ``out`` as the archive every
    engine loads.

    ``progress(n)`` is told of each chunk's bytes as it is written.
    """
    config_bytes, manifest_bytes = checked_documents(image, image_id)
    config_digest = _digest(config_bytes)
    diff_ids = tuple(layer.diff_id for layer in image.layers)
    writer = TarWriter(out)
    config_path = f"blobs/sha256/{config_digest.removeprefix('sha256:')}"
    writer.file(config_path, config_bytes)
    blobs: dict[str, Descriptor] = {}  # by diffID: the layer's blob in the archive
    try:
        for layer in image.layers:
            if layer.diff_id not in blobs:  # the same layer twice (two empty ones): one blob
                blobs[layer.diff_id] = _write_layer(writer, layer, progress)
    except (TarSplitError, BlobError) as e:
        raise StoredArchiveError(str(e)) from e
    if manifest_bytes is None:  # overlay2: a manifest of the uncompressed layers
        manifest = write_oci_manifest(
            writer, config_digest=config_digest, config_size=len(config_bytes), layers=[blobs[d] for d in diff_ids]
        )
    else:  # the containerd store's own: its digest is the image ID, as in that store's save
        writer.file(f"blobs/sha256/{image_id.removeprefix('sha256:')}", manifest_bytes)
        media_type = str(json.loads(manifest_bytes).get("mediaType") or OCI_MANIFEST)
        manifest = (media_type, image_id, len(manifest_bytes))
    layer_paths = [f"blobs/sha256/{blobs[d][1].removeprefix('sha256:')}" for d in diff_ids]
    write_indexes(writer, manifest=manifest, config_path=config_path, layer_paths=layer_paths)
    return PortableArchive(
        config_digest=config_digest,
        manifest_digest=manifest[1],
        diff_ids=diff_ids,
        layer_paths=tuple(layer_paths),
        layer_sizes=tuple(blobs[d][2] for d in diff_ids),
    )


def checked_documents(image: StoredImage, image_id: str) -> tuple[bytes, bytes | None]:
    """(the config's bytes, the manifest's on the containerd store), checked against ``image_id`` and
    the layers the store gives."""
    if image.config is None:
        raise StoredArchiveError(image.unavailable or f"the engine's store has no config for {image_id[:19]}")
    config_bytes = _read(image.config)
    manifest_bytes = _read(image.manifest) if image.manifest is not None else None
    config_digest = _digest(config_bytes)
    try:
        named = tuple((json.loads(config_bytes).get("rootfs") or {}).get("diff_ids") or ())
        names_config = manifest_bytes is None or json.loads(manifest_bytes)["config"]["digest"] == config_digest
    except (ValueError, AttributeError, KeyError, TypeError) as e:
        msg = f"the config {image.config} or its manifest is not an image's ({e})"
        raise StoredArchiveError(msg) from e
    named_by_id = _digest(manifest_bytes if manifest_bytes is not None else config_bytes) == image_id
    if not (named_by_id and names_config and named == tuple(layer.diff_id for layer in image.layers)):
        msg = f"the engine's store's config and layers are not those of {image_id[:19]}"
        raise StoredArchiveError(msg)
    return config_bytes, manifest_bytes


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        msg = f"cannot read {path}: {e.strerror}"
        raise StoredArchiveError(msg) from e


def _write_layer(writer: TarWriter, layer: StoredLayer | BlobLayer, progress: Callable[[int], None]) -> Descriptor:
    """One layer as the blob ``blobs/sha256/<digest>``, checked against that digest; its descriptor.

    overlay2: the tar rebuilt from the store, its digest the diffID; the containerd store: the blob
    as stored, its digest the manifest's.
    """
    chunks: Iterator[bytes]
    if isinstance(layer, BlobLayer):
        media_type, digest, size, where = layer.media_type, layer.digest, layer.size, f"read from {layer.blob}"
        chunks = blob_chunks(layer.blob, layer.size)
    else:
        media_type, digest, size = UNCOMPRESSED_LAYER, layer.diff_id, tar_size(layer.tar_split)
        chunks, where = layer_chunks(layer.tar_split, layer.files), f"rebuilt from {layer.files}"
    info = tarfile.TarInfo(f"blobs/sha256/{digest.removeprefix('sha256:')}")
    info.size, info.mode = size, 0o444
    writer.header(info)
    for chunk in checked_chunks(chunks, size=size, digest=digest, what=f"layer {layer.diff_id[:19]} {where}", progress=progress):
        writer.out.write(chunk)
    writer.out.write(tar_padding(size))
    return media_type, digest, size


def checked_chunks(
    chunks: Iterable[bytes], *, size: int, digest: str, what: str, progress: Callable[[int], None]
) -> Iterator[bytes]:
    """``chunks`` passed on as they come, ``size`` bytes at most, hashed on the way; once they end,
    StoredArchiveError when they were not ``size`` bytes of sha256 ``digest`` (``what`` names them)."""
    done = 0
    with BackgroundSha256() as sha256:
        for chunk in chunks:
            done += len(chunk)
            if done > size:
                break
            sha256.update(chunk)
            progress(len(chunk))
            yield chunk
        found = "sha256:" + sha256.hexdigest()
    if done != size or found != digest:
        msg = f"{what} is {done} bytes with sha256 {found[:19]}, not the layer"
        raise StoredArchiveError(msg)
