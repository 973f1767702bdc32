"""The archive `export` writes, read straight from a local engine's layer store instead of ``docker save``.

``docker save`` makes the engine write the whole image into its data root before it sends the first
byte (Docker 20.10's and 26's save both assemble it in a temporary directory), so a save costs a
write and a read of every byte on top of the copy to the archive. An overlay2 engine keeps each
layer as a directory plus a tar-split record (``engine.tar_split``), from which the layer's tar is
rebuilt byte for byte, as the save itself rebuilds it. Read so, the image's bytes flow once: from
the layer directories, through the compressor and the archive's hash, into the archive.

The layout is the one ``archive_layout`` gives a Docker 20.10 save, with every blob under its
digest: ``blobs/sha256/<config digest>`` (the config exactly as stored: its sha256 is the identity),
``blobs/sha256/<diffID>`` per layer (uncompressed tars), an OCI manifest imagebuild writes, then
``oci-layout``, ``index.json`` and the legacy ``manifest.json`` (``archive_layout.write_indexes``).
So every engine and store loads it as it loads a save-made archive.

Everything is checked: the config must hash to the image ID and name the layers the store gives,
and each layer's rebuilt tar must hash to its diffID and have the size the record declares, as it
streams (the hash in a thread of its own). A mismatch raises StoredArchiveError, and the caller
exports from ``docker save`` instead.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

from imagebuild.distribute.archive_layout import (
    UNCOMPRESSED_LAYER,
    PortableArchive,
    Sink,
    TarWriter,
    write_indexes,
    write_oci_manifest,
)
from imagebuild.engine.interface import StoredImage
from imagebuild.engine.tar_split import TarSplitError, layer_chunks, tar_size
from imagebuild.util.background_hash import BackgroundSha256
from imagebuild.util.streams import tar_padding


class StoredArchiveError(Exception):
    """The layer store did not give the image the engine reports (the message says how)."""


def stored_archive(
    image: StoredImage, image_id: str, out: Sink, *, progress: Callable[[int], None] = lambda _: None
) -> PortableArchive:
    """Write the image ``image_id`` from its layer store to ``out`` as the archive every engine loads.

    ``progress(n)`` is told of each chunk's bytes as it is written.
    """
    if image.config is None:
        raise StoredArchiveError(image.unavailable or f"the layer store has no config for {image_id[:19]}")
    try:
        config_bytes = image.config.read_bytes()
    except OSError as e:
        msg = f"cannot read the config {image.config}: {e.strerror}"
        raise StoredArchiveError(msg) from e
    config_digest = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
    diff_ids = tuple(layer.diff_id for layer in image.layers)
    try:
        named = tuple((json.loads(config_bytes).get("rootfs") or {}).get("diff_ids") or ())
    except (ValueError, AttributeError) as e:
        msg = f"the config {image.config} is not an image config ({e})"
        raise StoredArchiveError(msg) from e
    if config_digest != image_id or named != diff_ids:
        msg = f"the layer store's config and layers are not those of {image_id[:19]}"
        raise StoredArchiveError(msg)
    writer = TarWriter(out)
    config_path = f"blobs/sha256/{config_digest.removeprefix('sha256:')}"
    writer.file(config_path, config_bytes)
    sizes: dict[str, int] = {}
    try:
        for layer in image.layers:
            if layer.diff_id not in sizes:  # the same layer twice (two empty ones): one blob
                sizes[layer.diff_id] = _write_layer(writer, layer.diff_id, layer.tar_split, layer.files, progress)
    except TarSplitError as e:
        raise StoredArchiveError(str(e)) from e
    manifest = write_oci_manifest(
        writer,
        config_digest=config_digest,
        config_size=len(config_bytes),
        layers=[(UNCOMPRESSED_LAYER, diff_id, sizes[diff_id]) for diff_id in diff_ids],
    )
    layer_paths = [f"blobs/sha256/{diff_id.removeprefix('sha256:')}" for diff_id in diff_ids]
    write_indexes(writer, manifest=manifest, config_path=config_path, layer_paths=layer_paths)
    return PortableArchive(
        config_digest=config_digest,
        manifest_digest=manifest[1],
        diff_ids=diff_ids,
        layer_bytes=sum(sizes[d] for d in diff_ids),
    )


def _write_layer(
    writer: TarWriter, diff_id: str, tar_split: Path, files: Path, progress: Callable[[int], None]
) -> int:
    """One layer's tar as the blob ``blobs/sha256/<diffID>``, checked against its diffID; its size."""
    size = tar_size(tar_split)
    info = tarfile.TarInfo(f"blobs/sha256/{diff_id.removeprefix('sha256:')}")
    info.size, info.mode = size, 0o444
    writer.header(info)
    done = 0
    with BackgroundSha256() as sha256:
        for chunk in layer_chunks(tar_split, files):
            done += len(chunk)
            if done > size:
                break
            sha256.update(chunk)
            writer.out.write(chunk)
            progress(len(chunk))
        digest = "sha256:" + sha256.hexdigest()
    if done != size or digest != diff_id:
        msg = f"layer {diff_id[:19]} rebuilt from {files} is {done} bytes with sha256 {digest[:19]}, not the layer"
        raise StoredArchiveError(msg)
    writer.out.write(tar_padding(size))
    return size
