"""`export --format`: which archive export writes, and the two made from the spooled save.

* ``docker`` (the default): the portable docker archive ``archive_layout`` streams through, unchanged;
* ``oci``: an OCI image layout archive (``oci_layout``), compressed as ``--compress`` says; Podman and
  skopeo load it, and so does ``docker load`` (it carries the legacy ``manifest.json`` too);
* ``squashfs``: the flattened root filesystem (``rootfs``, ``runtime_files``, ``squashfs``) for
  enroot/pyxis and Charliecloud, its blocks compressed with ``--compress`` (zstd or gzip).

Both of the latter spool the save first (``spooled_image``: config as saved, layers checked against
their diffIDs) into a temporary directory beside the output, which is removed on every path; from
overlay2's layer store they read the layers where they are, with no spool (``StreamedImage``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import BinaryIO

from imagebuild.distribute.compression import Compression, Sink, compressing
from imagebuild.distribute.oci_layout import oci_manifest, write_oci_layout
from imagebuild.distribute.rootfs import Flattened, RootfsError
from imagebuild.distribute.runtime_files import RuntimeFilesError
from imagebuild.distribute.spooled_image import SpooledImage, SpoolError, StreamedImage
from imagebuild.distribute.squashfs import COMPRESSORS, TAR2SQFS, SquashfsError, write_squashfs
from imagebuild.errors import ConfigError, ImageBuildError
from imagebuild.importer.manifest import DOCKER_ARCHIVE, OCI_ARCHIVE, SQUASHFS, ArchiveLayer
from imagebuild.util.files import atomic_file
from imagebuild.util.streams import CHUNK

SPOOL_PREFIX = ".imagebuild-export-"


class ExportFormat(StrEnum):
    DOCKER = "docker"
    OCI = "oci"
    SQUASHFS = "squashfs"

    @property
    def kind(self) -> str:
        """The manifest's ``kind``."""
        return {"docker": DOCKER_ARCHIVE, "oci": OCI_ARCHIVE, "squashfs": SQUASHFS}[self.value]

    def suffix(self, compression: Compression) -> str:
        if self is ExportFormat.SQUASHFS:
            return ".sqfs"
        return (".oci" if self is ExportFormat.OCI else "") + compression.suffix


class FormatError(Exception):
    """The image cannot be written in this format (the message says why); ``engine``: the engine's save
    stream was at fault, not the image or a tool."""

    def __init__(self, message: str, *, engine: bool) -> None:
        super().__init__(message)
        self.engine = engine


def check_format(export_format: ExportFormat, compression: Compression) -> None:
    """Before the engine is asked for anything: a squashfs needs tar2sqfs, and its blocks are always
    compressed (--compress none means nothing to it)."""
    if export_format is not ExportFormat.SQUASHFS:
        return
    if compression.value not in COMPRESSORS:
        msg = f"--compress {compression}: a squashfs's blocks are compressed with {' or '.join(COMPRESSORS)}; give one of them"
        raise ConfigError(msg)
    if shutil.which(TAR2SQFS) is None:
        msg = f"--format squashfs: `{TAR2SQFS}` is not installed or not on PATH; install squashfs-tools-ng (Debian: apt-get install squashfs-tools-ng)"
        raise ImageBuildError(msg)


@dataclass(frozen=True, kw_only=True)
class WrittenArchive:
    sha256: str  # of the file as written
    size: int
    uncompressed_size: int  # the tar's bytes (a squashfs: the rootfs tar tar2sqfs read)
    config_digest: str  # the identity
    manifest_digest: str  # the OCI manifest naming that config and the layers
    # A docker archive's layers, lowest first, with the file holding each and its size: for the
    # importer to leave out what the engine holds and check the room the rest take; () for the other kinds.
    layer_files: tuple[ArchiveLayer, ...] = ()
    unpacked: Flattened | None = None  # a squashfs's tree: the room it takes unpacked


class _Hashing:
    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self.hash, self.size = hashlib.sha256(), 0

    def write(self, b: bytes, /) -> object:
        self.hash.update(b)
        self.size += len(b)
        return self._out.write(b)

    def flush(self) -> None:
        self._out.flush()


class _Counted:
    def __init__(self, out: Sink) -> None:
        self._out, self.size = out, 0

    def write(self, b: bytes, /) -> object:
        self.size += len(b)
        return self._out.write(b)


def write_layers_format(
    export_format: ExportFormat,
    image_of: Callable[[Path], SpooledImage | StreamedImage],
    path: Path,
    *,
    compression: Compression,
    report: Callable[[str], None],
) -> WrittenArchive:
    """Write ``path`` in ``export_format`` (oci or squashfs) from ``image_of(directory)``: the image
    spooled into a temporary directory beside ``path`` (from the engine's store or its save stream),
    or read from overlay2's layer store as it is written. The directory also holds a squashfs while
    tar2sqfs writes it, and is removed on every path.

    A StoredArchiveError from ``image_of`` or a streamed layer passes through, and nothing is left at ``path``.
    """
    with tempfile.TemporaryDirectory(prefix=SPOOL_PREFIX, dir=path.parent) as spool_dir:
        try:
            image = image_of(Path(spool_dir))
            how = "spooled" if isinstance(image, SpooledImage) else "read from the layer store as they are written"
            report(f"{path.name}: {len(image.layers)} layers {how} ({sum(x.size for x in image.layers) / 1e9:.2f} GB)")
            if export_format is ExportFormat.OCI:
                return _oci(image, path, compression)
            return _squashfs(image, path, Path(spool_dir), compression)
        except SpoolError as e:
            raise FormatError(str(e), engine=True) from e
        except (RootfsError, RuntimeFilesError, SquashfsError) as e:
            raise FormatError(str(e), engine=False) from e


def _oci(image: SpooledImage | StreamedImage, path: Path, compression: Compression) -> WrittenArchive:
    with atomic_file(path, mode=0o644) as file:
        sink = _Hashing(file)
        with compressing(compression, sink) as writer:
            counted = _Counted(writer)
            layout = write_oci_layout(image, counted)
    return WrittenArchive(
        sha256=sink.hash.hexdigest(), size=sink.size, uncompressed_size=counted.size,
        config_digest=layout.config_digest, manifest_digest=layout.manifest_digest,
    )  # fmt: skip


def _squashfs(
    image: SpooledImage | StreamedImage, path: Path, spool_dir: Path, compression: Compression
) -> WrittenArchive:
    """tar2sqfs writes into the spool directory; the complete file is hashed, then renamed into place."""
    made = spool_dir / path.name
    layers = [layer.path for layer in image.layers] if isinstance(image, SpooledImage) else list(image.layers)
    squashfs = write_squashfs(layers, image.config, made, compressor=compression.value)
    digest, size = hashlib.sha256(), 0
    with made.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
        os.fsync(f.fileno())
    made.chmod(0o644)
    made.replace(path)
    manifest = oci_manifest(image)
    return WrittenArchive(
        sha256=digest.hexdigest(), size=size, uncompressed_size=squashfs.tar_bytes, config_digest=image.identity,
        manifest_digest="sha256:" + hashlib.sha256(manifest).hexdigest(), unpacked=squashfs.root,
    )  # fmt: skip
