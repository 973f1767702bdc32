"""Import an archive into an engine: one pass, its bytes hashed as they are read on their way in.

What the engine is sent is ``load_stream``'s: the archive decompressed here, stopped one byte past
its declared size, without any name it carries. So a load tags nothing; the manifest's tags
are applied only after the sha256 matched and the engine reported the image the manifest names: its
identity (the config digest) on graph-driver stores and Podman, the digest of the archive's OCI
manifest (which names that config) on the containerd store. A failed check or load removes the image
the load created (never one that was there before). An image already present returns at once; the
files of layers the engine holds already are read and hashed but not sent (``held_layers``), and a
disk without room for the rest fails before a byte is read (``load_room``). Before any of it, every
attestation file the manifest names (the export statement, the SBOM, the provenance,
their envelopes) must be beside it with its sha256.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Generator, Iterable, Protocol

from .docker_api import CONTENT_MISSING, HELD, NOT_UNPACKED, WHOLE
from .failures import BadInput, EngineUnavailable, IntegrityFailure
from .held_layers import files_to_skip
from .load_room import LoadDisk, check_room
from .load_stream import CHUNK_SIZE, engine_tar
from .manifest import SQUASHFS, Manifest, read_manifest
from .tag_guard import release, undo_load_tags
from .text import shown

HASH_QUEUE = 8  # chunks between the reader and the hashing thread: memory stays bounded
PROGRESS_EVERY_S = 10.0


class ImportEngine(Protocol):
    """What the importer needs of an engine (imagebuild's DockerEngine, or the shipped SocketEngine)."""

    @property
    def address(self) -> str: ...
    @property
    def ids_are_manifests(self) -> bool: ...
    def has_image(self, image_id: str) -> bool: ...
    def image_state(self, image_id: str) -> str:
        """ABSENT, or what the engine holds of the image (``docker_api.image_state``)."""
        ...
    def image_ids(self) -> frozenset[str]: ...
    def load(self, chunks: Iterable[bytes]) -> list[str]: ...
    def tag(self, image_id: str, name: str) -> None: ...
    def tag_table(self) -> dict[str, str]: ...
    def untag(self, name: str) -> None: ...
    def remove_image(self, image_id: str) -> None: ...
    def held_chains(self) -> frozenset[str]:
        """The chain IDs of every layer stack the engine holds and finds by chain when it loads an
        archive (a graph-driver engine's); empty for any other (``held_layers``)."""
        ...
    def load_disk(self) -> LoadDisk:
        """Where a load writes the layers on this machine (``load_places``): its free space is checked."""
        ...


@dataclass(frozen=True)
class ImportResult:
    image_id: str  # the identity (config digest)
    engine_id: str  # what the engine calls it: the identity, or the manifest digest on the containerd store
    tags: tuple[str, ...]
    already_present: bool
    seconds: float


class _HashingReader:
    """Reads the archive in chunks, counting them and reporting progress now and then.

    A second thread hashes the chunks (hashlib releases the GIL), so hashing overlaps sending to the
    engine instead of adding to it; the queue bounds what is in flight to HASH_QUEUE chunks.
    """

    def __init__(self, file: BinaryIO, total: int, report: Callable[[str], None], name: str) -> None:
        self.file, self.total, self.report, self.name = file, total, report, name
        self.done = 0
        self._next_report = time.monotonic() + PROGRESS_EVERY_S
        self._hash = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=HASH_QUEUE)
        self._hasher = threading.Thread(target=self._hash_chunks, name="sha256", daemon=True)
        self._hasher.start()

    def _hash_chunks(self) -> None:
        for chunk in iter(self._queue.get, None):
            self._hash.update(chunk)

    def chunks(self) -> Generator[bytes, None, None]:
        for chunk in iter(lambda: self.file.read(CHUNK_SIZE), b""):
            self._queue.put(chunk)
            self.done += len(chunk)
            if time.monotonic() >= self._next_report:
                self._next_report = time.monotonic() + PROGRESS_EVERY_S
                self.report(f"{self.name}: {self.done / 1e9:.1f} of {self.total / 1e9:.1f} GB loaded")
            yield chunk

    def drain(self) -> None:
        """Hash what the engine did not read, to tell a damaged archive from a failing engine."""
        for _ in self.chunks():
            pass

    def hexdigest(self) -> str:
        self.close()
        return self._hash.hexdigest()

    def close(self) -> None:
        if self._hasher.is_alive():
            self._queue.put(None)
            self._hasher.join()


def import_archive(
    manifest_path: Path, engine: ImportEngine, report: Callable[[str], None] = lambda _: None
) -> ImportResult:
    """Make the manifest's image present and tagged in ``engine``, or fail with nothing tagged."""
    started = time.monotonic()
    manifest = read_manifest(manifest_path)
    refuse_unloadable(manifest, manifest_path, engine.address)
    check_attestations(manifest, manifest_path)
    engine_id = expected_engine_id(manifest, manifest_path, engine)
    state = _state(engine, engine_id, report)
    if state == WHOLE:
        _tag(engine, engine_id, manifest)
        return ImportResult(
            image_id=manifest.image_id, engine_id=engine_id, tags=manifest.repo_tags, already_present=True,
            seconds=time.monotonic() - started,
        )  # fmt: skip
    archive, again = archive_of(manifest, manifest_path)
    before, tags_before = engine.image_ids(), engine.tag_table()
    skip = files_to_skip(manifest, engine.held_chains()) if manifest.layers else frozenset()
    # Before a byte is read: fail at once, naming this node.
    check_room(manifest, skip, engine.load_disk(), report, content_held=state == NOT_UNPACKED)
    report(f"loading {archive.name} ({manifest.size / 1e9:.2f} GB, {manifest.compression}) into {engine.address}")
    if skip:
        held = sum(layer.file in skip for layer in manifest.layers)
        report(f"{held} of its {len(manifest.layers)} layers are in the engine already: read and hashed, not sent")
    loaded, engine_error, digest = _load_hashed(engine, archive, manifest, report, skip)
    touched = undo_load_tags(engine, tags_before, [i for i in loaded if i not in before])
    if touched:
        named = ", ".join(map(shown, touched[:5])) + (" ..." if len(touched) > 5 else "")
        report(f"the archive named {named}: those tags are put back as they were")
    if digest != manifest.sha256:
        _undo_failed_load(engine, [*loaded, engine_id], before, report)
        msg = f"archive {archive}: sha256 mismatch (expected {manifest.sha256}, got {digest}); {again}"
        raise IntegrityFailure(msg)
    if engine_error is not None:
        _undo_failed_load(engine, [engine_id], before, report)
        raise engine_error
    if loaded != [engine_id]:
        _remove_new(engine, loaded, before)
        got = ", ".join(loaded) or "nothing"
        said = f"{manifest.image_id}" + (f" (manifest {engine_id})" if engine_id != manifest.image_id else "")
        msg = (
            f"archive {archive}: the engine loaded {got}, but {manifest_path} says {said}: "
            "archive and manifest do not belong together; export the image again"
        )
        raise IntegrityFailure(msg)
    if engine.ids_are_manifests and engine.image_state(engine_id) == NOT_UNPACKED:  # said in words not known here
        _undo_failed_load(engine, [engine_id], before, report)
        msg = f"the Docker engine at {engine.address} loaded {engine_id} but did not unpack it; see its log"
        raise EngineUnavailable(msg)
    _tag(engine, engine_id, manifest)
    if touched and manifest.repo_tags:
        release(engine, [engine_id])
    return ImportResult(
        image_id=manifest.image_id, engine_id=engine_id, tags=manifest.repo_tags, already_present=False,
        seconds=time.monotonic() - started,
    )  # fmt: skip


def refuse_unloadable(manifest: Manifest, manifest_path: Path, address: str) -> None:
    """A squashfs is run in place by enroot or ch-run: no engine loads one (before anything is read)."""
    if manifest.kind == SQUASHFS:
        msg = (
            f"archive {manifest_path.parent / manifest.archive}: a squashfs (export --format squashfs), which "
            f"the engine at {address} cannot load; run it with enroot/pyxis or ch-run (check it with "
            "--check-only), or export the image with --format docker or oci"
        )
        raise BadInput(msg)


def _again(manifest: Manifest, name: str) -> str:
    where = shown(f"{manifest.origin}/{name}") if manifest.origin else "where it was exported"
    return f"copy it again from {where}"


def _regular_file(what: str, path: Path, manifest_path: Path, again: str) -> os.stat_result:
    """``path``'s status (links followed: a file elsewhere on shared storage is fine); BadInput when it
    is missing, unreadable or not a regular file (a FIFO or a device would stream for ever)."""
    try:
        status = path.stat()
    except FileNotFoundError:
        msg = f"{what} {path}: not found (named by {manifest_path}); {again}"
        raise BadInput(msg) from None
    except OSError as e:
        msg = f"{what} {path}: cannot be read ({e.strerror}); {again}"
        raise BadInput(msg) from None
    if not stat.S_ISREG(status.st_mode):
        msg = f"{what} {path}: not a regular file (named by {manifest_path}); {again}"
        raise BadInput(msg)
    return status


def check_attestations(manifest: Manifest, manifest_path: Path) -> None:
    """Every attestation file the manifest names, beside it with its sha256, before anything is loaded."""
    for name, expected in sorted(manifest.attestations.items()):
        path, again = manifest_path.parent / name, _again(manifest, name)
        _regular_file("attestation", path, manifest_path, again)
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as e:
            msg = f"attestation {path}: cannot be read ({e.strerror}); {again}"
            raise BadInput(msg) from None
        if digest != expected:
            msg = f"attestation {path}: sha256 mismatch (expected {expected}, got {digest}); nothing was loaded; {again}"
            raise IntegrityFailure(msg)


def archive_of(manifest: Manifest, manifest_path: Path) -> tuple[Path, str]:
    """The archive beside the manifest, a regular file of the manifest's size; and what to do if not."""
    archive = manifest_path.parent / manifest.archive
    again = _again(manifest, manifest.archive)
    status = _regular_file("archive", archive, manifest_path, again)
    if status.st_size != manifest.size:
        msg = (
            f"archive {archive}: {status.st_size} bytes, the manifest says {manifest.size} (truncated, still "
            f"being copied, or another archive under its name); {again}"
        )
        raise IntegrityFailure(msg)
    return archive, again


def _load_hashed(
    engine: ImportEngine, archive: Path, manifest: Manifest, report: Callable[[str], None], skip: frozenset[str]
) -> tuple[list[str], BaseException | None, str]:
    """(the IDs the engine loaded, its failure if any, the archive's sha256): one pass over the file."""
    loaded: list[str] = []
    engine_error: BaseException | None = None
    with archive.open("rb") as file, contextlib.closing(
        _HashingReader(file, manifest.size, report, archive.name)
    ) as reader:
        stream = engine_tar(reader.chunks(), manifest, archive, skip)
        try:
            loaded = engine.load(stream)
        except Exception as e:  # the engine's failure, or the stream's: judged once the whole file is hashed
            engine_error = e
        finally:
            stream.close()  # stops a zstd process the engine left unread
        reader.drain()
        return loaded, engine_error, reader.hexdigest()


def expected_engine_id(manifest: Manifest, manifest_path: Path, engine: ImportEngine) -> str:
    """The ID the engine must report for the manifest's image: its identity, or its manifest's digest."""
    if not engine.ids_are_manifests:
        return manifest.image_id
    if not manifest.manifest_digest:
        msg = (
            f"manifest {manifest_path}: format version {manifest.format_version} names no OCI manifest, which "
            f"the containerd image store of the engine at {engine.address} names images by; export the "
            "image again with this imagebuild (its archives load on every engine)"
        )
        raise BadInput(msg)
    return manifest.manifest_digest


def _tag(engine: ImportEngine, engine_id: str, manifest: Manifest) -> None:
    for name in manifest.repo_tags:
        engine.tag(engine_id, name)


def _state(engine: ImportEngine, engine_id: str, report: Callable[[str], None]) -> str:
    """WHOLE when the engine holds the image whole and unpacked, else why it is loaded. The containerd
    store keeps the record of an image whose load broke off (a corrupt or cut archive) with part of
    its content missing, and the content of one it could not unpack (a full disk): `docker run`
    cannot start the first, and unpacks the second as it starts, with no room check. Either is loaded
    again, which completes and unpacks it. Engines from API 1.48 on say which (``image_state``);
    before, the image list leaves out the first, and nothing tells the second."""
    state = engine.image_state(engine_id)
    if state == HELD:
        state = CONTENT_MISSING if engine.ids_are_manifests and engine_id not in engine.image_ids() else WHOLE
    if state == CONTENT_MISSING:
        report(f"the engine holds {engine_id} with part of its content missing (a load that broke off): loading it again")
    elif state == NOT_UNPACKED:
        report(f"the engine holds {engine_id} not unpacked (an unpack that failed): loading it again, which unpacks it")
    return state


def _undo_failed_load(engine: ImportEngine, image_ids: list[str], before: frozenset[str], report: Callable[[str], None]) -> None:
    """After a failed load, remove what it left. The containerd store keeps the image whose content
    it stored (measured on Docker 26.1.5): all of it when the disk filled as it unpacked, part of it
    when the archive broke off. Left there, the next import would take it as present."""
    try:
        removed = _remove_new(engine, image_ids, before)
    except Exception:  # the engine went away too: the load's own failure is the one to say
        return
    for image_id in removed:
        report(f"the engine kept {image_id} of the failed load: removed, so the next import loads it again")


def _remove_new(engine: ImportEngine, loaded: list[str], before: frozenset[str]) -> list[str]:
    """Remove each image of ``loaded`` the engine holds now and did not list before this load; those removed."""
    removed = []
    for image_id in dict.fromkeys(loaded):
        if image_id not in before and engine.has_image(image_id):
            engine.remove_image(image_id)
            removed.append(image_id)
    return removed
