"""`imagebuild export`: stream an image out of the engine into a verified archive every engine loads.

One pass: the engine's `save` stream is rearranged into the portable layout (``archive_layout``: its
files as the engine gave them, with a legacy ``manifest.json`` for graph-driver stores and an OCI
``index.json`` for the containerd store), compressed and hashed as it is written, in 1 MiB chunks, so
memory stays bounded whatever the image size. The archive is named by the image's identity, the
config digest (``kimi-k3-<id12>.tar.zst``): the same for every compression and engine, while the
archive's own sha256 is not known until the last byte is written. The image is saved by its engine
ID, so the archive carries no tags: loading it tags nothing until the importer has verified it.

Files appear in this order, each complete (temporary name, fsync, rename): the archive, the importer
(``imagebuild-import.pyz``, standard library only, for nodes without imagebuild; the same bytes from
every export of one imagebuild), the archive's in-toto statement (``<archive>.export.intoto.jsonl``:
subject the archive's sha256, predicate the image identity and manifest digest; with a signing key
also its DSSE envelope, ``<archive>.export.dsse.jsonl``), the build's SBOM, provenance and their
envelopes when the build record of this image names them (``<archive>.sbom.cdx.jsonl``,
``<archive>.provenance.intoto.jsonl``, ``<archive>.sbom.dsse.jsonl`` ...: the same JSON on one line),
then the manifest (``<archive>.json``, naming every one of those files by sha256, which the importer
checks before it loads anything) last. A manifest therefore
always names a complete archive, and an interrupted export leaves no file that looks complete. The
manifest's absolute path is then noted in the build record, when that record describes the image.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

from imagebuild import __version__
from imagebuild.attest.keys import SigningKey
from imagebuild.attest.statement import (
    ImageIdentity,
    distribution_statement,
    statement_text,
    write_attestation,
)
from imagebuild.distribute.archive_files import (
    archive_name,
    carry_build_documents,
    check_output_dir,
    made_directory,
    named_by_identity,
    write_file,
)
from imagebuild.distribute.archive_layout import ArchiveLayoutError, PortableArchive, portable_archive
from imagebuild.distribute.compression import Compression, Sink, compressing
from imagebuild.distribute.formats import (
    ExportFormat,
    FormatError,
    WrittenArchive,
    check_format,
    write_layers_format,
)
from imagebuild.distribute.record_notes import EXPORTED, note_in_record
from imagebuild.distribute.shipped_importer import IMPORTER_NAME, importer_zipapp
from imagebuild.distribute.spooled_image import (
    SpooledImage,
    StreamedImage,
    spool_saved_image,
    spool_stored_image,
    stream_stored_image,
)
from imagebuild.distribute.stored_archive import StoredArchiveError, stored_archive
from imagebuild.engine.interface import Engine, ImageInfo
from imagebuild.errors import ConfigError, EngineError, ImageBuildError
from imagebuild.importer.manifest import Manifest, parse_manifest
from imagebuild.log import logger
from imagebuild.secrets import secret_value_reason
from imagebuild.util.background_hash import BackgroundSha256
from imagebuild.util.files import atomic_file

PIN_LABEL_PREFIX = "io.imagebuild.pin."
# The archive's distribution statement, beside it: `.jsonl` (one statement, in-toto's bundle form), so
# that `*.json` beside an archive still finds only its manifest.
EXPORT_SUFFIX = ".export.intoto.jsonl"
PROGRESS_EVERY_S = 10.0


@dataclass(frozen=True, kw_only=True)
class ExportOptions:
    image: str
    output: Path
    compression: Compression = Compression.ZSTD
    export_format: ExportFormat = ExportFormat.DOCKER  # --format: docker, oci or squashfs (formats.py)
    signing_key: SigningKey | None = None  # --sign-key: the export's statement also as a signed DSSE envelope
    record_path: Path | None = None  # the build record to note the manifest in, when it is this image's


@dataclass(frozen=True, kw_only=True)
class ExportResult:
    manifest_path: Path
    manifest: Manifest
    seconds: float
    recorded_in: Path | None = None  # the build record the manifest was noted in


class _HashingSink:
    """The archive file, hashing (in a thread of its own: it overlaps the writes) and counting every
    byte on its way in."""

    def __init__(self, file: BinaryIO, digest: BackgroundSha256) -> None:
        self._file = file
        self.hash = digest
        self.size = 0

    def write(self, b: bytes, /) -> int:
        self.hash.update(b)
        self.size += len(b)
        self._file.write(b)
        return len(b)

    def flush(self) -> None:
        self._file.flush()


def image_manifest_fields(info: ImageInfo) -> tuple[dict[str, str], dict[str, str]]:
    """(pins, labels) of the image, refusing a label whose value looks like a credential."""
    for name, value in info.labels.items():
        reason = secret_value_reason(value)
        if reason:
            msg = f"image {info.described}: label {name} {reason}; refusing to copy it into a manifest on shared storage (rebuild without it)"
            raise ConfigError(msg)
    pins = {
        name.removeprefix(PIN_LABEL_PREFIX): value
        for name, value in sorted(info.labels.items())
        if name.startswith(PIN_LABEL_PREFIX)
    }
    return pins, dict(sorted(info.labels.items()))


def export_image(options: ExportOptions, engine: Engine, *, report: Callable[[str], None]) -> ExportResult:
    started = time.monotonic()
    check_format(options.export_format, options.compression)
    output = check_output_dir(options.output)
    info = engine.inspect_image(options.image)
    image_manifest_fields(info)  # a label holding a credential: refused before anything is written
    name = archive_name(info, options.compression, options.export_format)
    report(f"exporting {options.image} ({info.described}) from {engine.store().describe()} to {output / name}")
    with made_directory(output):
        try:
            return _export(options, engine, output=output, info=info, name=name, report=report, started=started)
        except OSError as e:  # a full or failing disk: the temporary file is gone, no manifest was written
            msg = f"cannot write the archive in {output} ({e.strerror}); free space there or choose another --output (nothing was left behind)"
            raise ImageBuildError(msg) from e


def _export(
    options: ExportOptions,
    engine: Engine,
    *,
    output: Path,
    info: ImageInfo,
    name: str,
    report: Callable[[str], None],
    started: float,
) -> ExportResult:
    pins, labels = image_manifest_fields(info)
    progress = _SaveProgress(engine.save(info.id), _Count(), name, report)
    if options.export_format is ExportFormat.DOCKER:
        written = _docker_archive(options, engine, info, output / name, progress)
    else:
        try:
            written = _spooled_format(options, engine, info, output / name, progress, report=report)
        except FormatError as e:
            msg = f"cannot export {options.image} ({info.described}) as {options.export_format}: {e}"
            raise (EngineError if e.engine else ImageBuildError)(msg) from e
    if info.identity and written.config_digest != info.identity:
        msg = (
            f"cannot export {options.image}: the engine saved config {written.config_digest[:19]} for an image "
            f"it reports as {info.described}; the engine changed the image while it was saved, export it again"
        )
        raise EngineError(msg)
    if not info.identity:  # the store could not be read for it; the config the engine saved names it
        info = replace(info, config_digest=written.config_digest, identity_unknown="")
        name = named_by_identity(output, name, archive_name(info, options.compression, options.export_format), report)
    write_file(output / IMPORTER_NAME, importer_zipapp(), mode=0o755)
    image = ImageIdentity(identity=written.config_digest, manifest_digest=written.manifest_digest)
    archive_details: dict[str, object] = {"size": written.size, "compression": options.compression.value}
    if options.export_format is not ExportFormat.DOCKER:  # a docker archive's statement is as it was
        archive_details["kind"] = options.export_format.kind
    statement = distribution_statement(
        subject={"name": name, "digest": {"sha256": written.sha256}},
        image=image,
        action="export",
        details={"archive": archive_details},
    )
    attested = write_attestation(output / f"{name}{EXPORT_SUFFIX}", statement_text(statement, one_line=True), key=options.signing_key)
    carried = carry_build_documents(options.record_path, info, output=output, name=name, report=report)
    manifest = Manifest(
        archive=name,
        sha256=written.sha256,
        size=written.size,
        compression=options.compression.value,
        image_id=written.config_digest,
        manifest_digest=written.manifest_digest,
        uncompressed_size=written.uncompressed_size,
        repo_tags=tuple(t for t in info.tags if t != "<none>:<none>"),
        pins=pins,
        labels=labels,
        imagebuild_version=__version__,
        origin=f"{socket.gethostname()}:{output}",
        attestations={path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in (*attested.paths, *carried)},
        kind=options.export_format.kind,
        layers=written.layer_files,
        unpacked_bytes=written.unpacked.file_bytes if written.unpacked else 0,
        unpacked_directories=written.unpacked.directories if written.unpacked else 0,
    )
    parse_manifest(manifest.to_json(), name)  # what nodes will accept, checked before writing
    manifest_path = output / f"{name}.json"
    write_file(manifest_path, (json.dumps(manifest.to_json(), indent=2) + "\n").encode())
    seconds = time.monotonic() - started
    report(
        f"wrote {name} ({options.export_format}, {written.size / 1e9:.2f} GB from {progress.saved / 1e9:.2f} GB read from "
        f"{progress.source}, {options.compression}) "
        f"in {seconds:.1f}s; manifest {manifest_path.name}"
    )
    recorded = note_in_record(
        options.record_path, image_id=info.identity, key=EXPORTED, value=str(manifest_path), report=report
    )
    return ExportResult(manifest_path=manifest_path, manifest=manifest, seconds=seconds, recorded_in=recorded)


def _docker_archive(
    options: ExportOptions, engine: Engine, info: ImageInfo, path: Path, progress: _SaveProgress
) -> WrittenArchive:
    """The portable docker archive, compressed and hashed as it is written: from the engine's store
    where it can be read (``stored_archive``: overlay2's layer store, the containerd store's content
    store; no save), else the save streamed through (``archive_layout``)."""
    stored = engine.stored_image(info.id)
    if not stored.unavailable:
        progress.source = f"the engine's {'content' if stored.manifest is not None else 'layer'} store"
        try:
            return _written_archive(
                options, info, path, progress, lambda out: stored_archive(stored, info.id, out, progress=progress.count)
            )
        except StoredArchiveError as e:
            logger.warning("reading %s from %s failed (%s); using docker save", info.described, progress.source, e)
            progress.source, progress.saved = "docker save", 0
    else:
        logger.debug("exporting %s from docker save: %s", info.described, stored.unavailable)
    return _written_archive(options, info, path, progress, lambda out: portable_archive(progress, out))


def _spooled_format(
    options: ExportOptions,
    engine: Engine,
    info: ImageInfo,
    path: Path,
    progress: _SaveProgress,
    *,
    report: Callable[[str], None],
) -> WrittenArchive:
    """The OCI layout or squashfs, from the image's layers spooled once: read from the engine's store
    where it can be (as ``_docker_archive`` reads it), else from the save; from overlay2's layer
    store, read where they are, with no spool."""
    stored = engine.stored_image(info.id)
    if not stored.unavailable:
        progress.source = f"the engine's {'content' if stored.manifest is not None else 'layer'} store"

        def stored_layers(spool_dir: Path) -> SpooledImage | StreamedImage:
            streamed = stream_stored_image(stored, info.id, progress=progress.count)  # overlay2's: no spool
            return streamed if streamed is not None else spool_stored_image(stored, info.id, spool_dir, progress=progress.count)

        try:
            return write_layers_format(
                options.export_format, stored_layers, path, compression=options.compression, report=report
            )
        except StoredArchiveError as e:
            logger.warning("reading %s from %s failed (%s); using docker save", info.described, progress.source, e)
            progress.source, progress.saved = "docker save", 0
    else:
        logger.debug("exporting %s from docker save: %s", info.described, stored.unavailable)
    return write_layers_format(
        options.export_format,
        lambda spool_dir: spool_saved_image(progress, spool_dir, what="the engine's save stream"),
        path,
        compression=options.compression,
        report=report,
    )


def _written_archive(
    options: ExportOptions,
    info: ImageInfo,
    path: Path,
    progress: _SaveProgress,
    layout_of: Callable[[_Counted], PortableArchive],
) -> WrittenArchive:
    # 0644 and 0755: the nodes' jobs may run as other users than the one exporting.
    with atomic_file(path, mode=0o644) as file, BackgroundSha256() as digest:
        sink = _HashingSink(file, digest)
        progress.written = sink
        with compressing(options.compression, sink) as writer:
            counted = _Counted(writer)
            try:
                layout = layout_of(counted)
            except ArchiveLayoutError as e:
                msg = f"cannot export {options.image} ({info.described}): {e}"
                raise EngineError(msg) from e
    return WrittenArchive(
        sha256=sink.hash.hexdigest(), size=sink.size, uncompressed_size=counted.size,
        config_digest=layout.config_digest, manifest_digest=layout.manifest_digest, layer_files=layout.layer_files,
    )  # fmt: skip


class _Count:
    """What a spooled format has written so far: nothing the progress line can see until the end."""

    size = 0


class _Counted:
    """The compressor's input, counted: the manifest declares it, and importers stop decompressing past it."""

    def __init__(self, writer: Sink) -> None:
        self._writer, self.size = writer, 0

    def write(self, b: bytes, /) -> object:
        self.size += len(b)
        return self._writer.write(b)


class _SaveProgress:
    """The image's bytes as they are read (the engine's save stream, or the layer store's layers), counted,
    with a line every PROGRESS_EVERY_S seconds."""

    def __init__(self, chunks: Iterable[bytes], written: _HashingSink | _Count, name: str, report: Callable[[str], None]) -> None:
        self._chunks, self.written, self._name, self._report = chunks, written, name, report
        self.saved = 0
        self.source = "docker save"  # or the layer store: what the final line names
        self._next_report = time.monotonic() + PROGRESS_EVERY_S

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.count(len(chunk))
            yield chunk

    def count(self, size: int) -> None:
        self.saved += size
        if time.monotonic() >= self._next_report:
            self._next_report = time.monotonic() + PROGRESS_EVERY_S
            verb = "saved" if self.source == "docker save" else "read"
            self._report(f"{self._name}: {self.saved / 1e9:.1f} GB {verb}, {self.written.size / 1e9:.1f} GB written")
