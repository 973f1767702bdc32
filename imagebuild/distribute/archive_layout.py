"""The archive `export` writes: any engine's ``save`` stream, made loadable by every engine and store.

Each engine saves in its own layout: Docker 20.10 the legacy one (``<v1 id>/layer.tar``,
``<config>.json``, ``manifest.json``); Docker 25+ an OCI image layout with ``manifest.json`` beside
it; the containerd image store keeps the layers compressed as they were pulled; Podman the legacy
one. And each loads only some: a graph-driver engine reads ``manifest.json`` alone, the containerd
store reads ``index.json`` when ``oci-layout`` is there. So export passes every file of the save
through as the engine gave it (no layer is decompressed, spooled or copied twice) and replaces the
save's own index files with its own, written last:

* ``manifest.json``: the legacy index (graph-driver stores), ``RepoTags`` null;
* ``oci-layout`` and ``index.json`` naming one OCI manifest, without a name annotation: the engine's
  own manifest when the save carried one, else one imagebuild writes (the config and each layer
  file by its digest, media type from its compression), added as a blob;
* ``blobs/sha256/<digest>`` symlinks for the config and layers the save kept under legacy names,
  so the layout is a complete OCI layout without a byte stored twice.

No entry names a tag, so a load tags nothing until the importer has checked the identity. The
identity is the config's digest (the image ID on graph-driver stores and Podman); the containerd
store names the loaded image by the digest of the manifest ``index.json`` names, which export
records too.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from imagebuild.importer.manifest import ArchiveLayer
from imagebuild.util.background_hash import BackgroundSha256
from imagebuild.util.streams import CHUNK, TAR_END, forget_members, open_stream, tar_padding

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFESTS = (OCI_MANIFEST, DOCKER_MANIFEST)
LAYER_TYPES = {  # by the first bytes of the layer file
    b"\x1f\x8b": "application/vnd.oci.image.layer.v1.tar+gzip",
    b"\x28\xb5\x2f\xfd": "application/vnd.oci.image.layer.v1.tar+zstd",
}
UNCOMPRESSED_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'
REPLACED = frozenset({"manifest.json", "index.json", "oci-layout", "repositories"})
KEPT_IN_MEMORY = 8 << 20  # configs and manifests (kilobytes; a config with a long history, a few MB)


class Sink(Protocol):
    def write(self, b: bytes, /) -> object: ...


class ArchiveLayoutError(Exception):
    """The engine's save stream is not one image this module can make portable (the message says why)."""


@dataclass(frozen=True, kw_only=True)
class PortableArchive:
    """What the written archive holds: checked against the engine's answers by the caller."""

    config_digest: str  # the identity
    manifest_digest: str  # the manifest index.json names: the containerd store's image ID after a load
    diff_ids: tuple[str, ...]
    layer_paths: tuple[str, ...] = ()  # per diffID, the file manifest.json names for it
    layer_sizes: tuple[int, ...] = ()  # per diffID, that file's bytes (compressed where the engine keeps them so)

    @property
    def layer_bytes(self) -> int:
        return sum(self.layer_sizes)

    @property
    def layer_files(self) -> tuple[ArchiveLayer, ...]:
        """Each layer, lowest first, with the file holding it and its size: what the export manifest
        lists for the importer."""
        return tuple(map(ArchiveLayer, self.diff_ids, self.layer_paths, self.layer_sizes))


@dataclass(kw_only=True)
class _Blob:
    digest: str
    size: int
    magic: bytes
    content: bytes | None  # small files only


@dataclass(kw_only=True)
class _Seen:
    files: dict[str, _Blob] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # symlink or hard link name -> target name
    replaced: dict[str, bytes] = field(default_factory=dict)

    def resolve(self, name: str) -> str:
        for _ in range(16):  # a loop of links ends here, and is refused below as a missing file
            if name not in self.links:
                return name
            name = self.links[name]
        return name

    def blob(self, name: str, what: str) -> _Blob:
        found = self.files.get(self.resolve(_clean(name)))
        if found is None:
            msg = f"the saved image names {what} {name!r}, which its archive does not hold"
            raise ArchiveLayoutError(msg)
        return found

    def by_digest(self, digest: str) -> str | None:
        """The name of a file holding ``digest``, preferring its OCI blob path."""
        path = f"blobs/sha256/{digest.removeprefix('sha256:')}"
        if path in self.files and self.files[path].digest == digest:
            return path
        return next((name for name, blob in self.files.items() if blob.digest == digest), None)


def _clean(name: str) -> str:
    return posixpath.normpath(name.lstrip("/")).removeprefix("./")


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except ValueError as e:
        msg = f"the saved image's {what} is not JSON ({e})"
        raise ArchiveLayoutError(msg) from e


def _canonical(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class TarWriter:
    """The archive's members, written as PAX headers (and content) to ``out``."""

    def __init__(self, out: Sink) -> None:
        self.out = out

    def header(self, info: tarfile.TarInfo) -> None:
        self.out.write(info.tobuf(format=tarfile.PAX_FORMAT))

    def file(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o444
        self.header(info)
        self.out.write(data)
        self.out.write(tar_padding(len(data)))

    def symlink(self, name: str, target: str) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, posixpath.relpath(target, posixpath.dirname(name)), 0o777
        self.header(info)


def _pass_through(chunks: Iterable[bytes], writer: TarWriter) -> _Seen:
    """Copy every entry but the save's index files, hashing each file on its way."""
    seen = _Seen()
    with open_stream(chunks) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            name = _clean(member.name)
            if member.isdir():
                writer.header(member)
            elif member.issym() or member.islnk():
                target = member.linkname if member.islnk() else posixpath.join(posixpath.dirname(name), member.linkname)
                seen.links[name] = _clean(target)
                writer.header(member)
            elif not member.isreg():
                msg = f"the saved image's archive holds {name!r}, which is neither a file, a directory nor a link"
                raise ArchiveLayoutError(msg)
            else:
                source = tar.extractfile(member)
                assert source is not None  # a regular file always has content
                if name in REPLACED:
                    if member.size > KEPT_IN_MEMORY:
                        msg = f"the saved image's {name} is {member.size} bytes; an index file is a few kilobytes"
                        raise ArchiveLayoutError(msg)
                    seen.replaced[name] = source.read()
                else:
                    writer.header(member)
                    seen.files[name] = _copy(source, member.size, writer.out)
            forget_members(tar)
    return seen


def _copy(source: Any, size: int, out: Sink) -> _Blob:
    kept, magic, done = bytearray(), b"", 0
    with BackgroundSha256() as sha256:  # the blob's digest, hashed while the next chunk is read and written
        while chunk := source.read(CHUNK):
            sha256.update(chunk)
            magic = magic or chunk[:4]
            if size <= KEPT_IN_MEMORY:
                kept += chunk
            out.write(chunk)
            done += len(chunk)
    if done != size:
        msg = f"the engine's save stream ended inside a file ({done} of {size} bytes)"
        raise ArchiveLayoutError(msg)
    out.write(tar_padding(size))
    return _Blob(
        digest="sha256:" + sha256.hexdigest(), size=size, magic=magic, content=bytes(kept) if size <= KEPT_IN_MEMORY else None
    )


def _engine_manifest(seen: _Seen) -> tuple[str, dict[str, Any]] | None:
    """The OCI (or Docker v2) manifest the save's index.json names, with its digest, when there is one."""
    if "index.json" not in seen.replaced:
        return None
    index = _json(seen.replaced["index.json"], "index.json")
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(manifests, list) or len(manifests) != 1 or not isinstance(manifests[0], dict):
        msg = "the saved image's index.json does not name exactly one manifest; export one image, by its ID"
        raise ArchiveLayoutError(msg)
    descriptor = manifests[0]
    if descriptor.get("mediaType") not in MANIFESTS:
        msg = f"the saved image is a {descriptor.get('mediaType')}, not one image's manifest; export one platform's image by its ID"
        raise ArchiveLayoutError(msg)
    digest = str(descriptor.get("digest"))
    name = seen.by_digest(digest)
    blob = seen.files.get(name) if name else None
    if blob is None or blob.content is None:
        msg = f"the saved image's index.json names manifest {digest}, which its archive does not hold"
        raise ArchiveLayoutError(msg)
    manifest = _json(blob.content, f"manifest {digest}")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("config"), dict):
        msg = f"the saved image's manifest {digest} names no config"
        raise ArchiveLayoutError(msg)
    return digest, manifest


def _legacy_entry(seen: _Seen) -> dict[str, Any] | None:
    if "manifest.json" not in seen.replaced:
        return None
    entries = _json(seen.replaced["manifest.json"], "manifest.json")
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        msg = "the saved image's manifest.json does not describe exactly one image; export one image, by its ID"
        raise ArchiveLayoutError(msg)
    return entries[0]


def _config_and_layers(seen: _Seen) -> tuple[str, list[str], tuple[str, dict[str, Any]] | None]:
    """(config path, layer paths, the engine's manifest) from whichever index files the save has."""
    engine_manifest, legacy = _engine_manifest(seen), _legacy_entry(seen)
    if legacy is not None:
        config_path = seen.resolve(_clean(str(legacy.get("Config"))))
        layers = [seen.resolve(_clean(str(p))) for p in legacy.get("Layers") or []]
    elif engine_manifest is not None:
        manifest = engine_manifest[1]
        config_path = seen.by_digest(str(manifest["config"].get("digest"))) or ""
        layers = [seen.by_digest(str(d.get("digest"))) or str(d.get("digest")) for d in manifest.get("layers") or []]
    else:
        msg = "the engine's save stream has neither manifest.json nor index.json: it is not an image archive"
        raise ArchiveLayoutError(msg)
    config = seen.blob(config_path, "config")
    if engine_manifest is not None and engine_manifest[1]["config"].get("digest") != config.digest:
        msg = "the saved image's manifest.json and index.json name different configs; export it again"
        raise ArchiveLayoutError(msg)
    return config_path, layers, engine_manifest


Descriptor = tuple[str, str, int]  # media type, digest, size


def write_oci_manifest(
    writer: TarWriter, *, config_digest: str, config_size: int, layers: Sequence[Descriptor]
) -> Descriptor:
    """An OCI manifest of the config and ``layers``, written as a blob; its descriptor."""
    manifest_bytes = _canonical(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config_size},
            "layers": [{"mediaType": kind, "digest": digest, "size": size} for kind, digest, size in layers],
        }
    )
    manifest_digest = _digest(manifest_bytes)
    writer.file(f"blobs/sha256/{manifest_digest.removeprefix('sha256:')}", manifest_bytes)
    return OCI_MANIFEST, manifest_digest, len(manifest_bytes)


def write_indexes(writer: TarWriter, *, manifest: Descriptor, config_path: str, layer_paths: Sequence[str]) -> None:
    """The archive's end: ``oci-layout``, ``index.json`` naming ``manifest`` (no name annotation), the
    legacy ``manifest.json`` (``RepoTags`` null), the end blocks."""
    media_type, digest, size = manifest
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": media_type, "digest": digest, "size": size}],
    }
    writer.file("oci-layout", OCI_LAYOUT)
    writer.file("index.json", _canonical(index))
    legacy = [{"Config": config_path, "RepoTags": None, "Layers": list(layer_paths)}]
    writer.file("manifest.json", json.dumps(legacy, separators=(",", ":")).encode())
    writer.out.write(TAR_END)


def portable_archive(chunks: Iterable[bytes], out: Sink) -> PortableArchive:
    """Write the engine's save stream ``chunks`` to ``out`` as the archive every engine loads."""
    writer = TarWriter(out)
    try:
        seen = _pass_through(chunks, writer)
    except tarfile.TarError as e:
        msg = f"the engine's save stream is not a complete tar archive ({e})"
        raise ArchiveLayoutError(msg) from e
    config_path, layer_paths, engine_manifest = _config_and_layers(seen)
    config = seen.blob(config_path, "config")
    layers = [seen.blob(path, "layer") for path in layer_paths]
    if config.content is None:
        msg = f"the saved image's config is {config.size} bytes; a config is a few kilobytes"
        raise ArchiveLayoutError(msg)
    diff_ids = ((_json(config.content, "config").get("rootfs") or {}).get("diff_ids")) or []
    if len(diff_ids) != len(layers):
        msg = f"the saved image's config names {len(diff_ids)} layers and its archive holds {len(layers)}"
        raise ArchiveLayoutError(msg)
    for diff_id, layer in zip(diff_ids, layers, strict=True):
        if layer.magic[:2] not in (b"\x1f\x8b", b"\x28\xb5") and layer.digest != diff_id:
            msg = f"the saved image's layer {diff_id[:19]} has another digest ({layer.digest[:19]}): the save is damaged"
            raise ArchiveLayoutError(msg)
    for blob in (config, *layers):  # a complete OCI layout: every blob under its digest
        path = f"blobs/sha256/{blob.digest.removeprefix('sha256:')}"
        if path not in seen.files and path not in seen.links:
            source = seen.by_digest(blob.digest)
            assert source is not None  # found by digest above
            writer.symlink(path, source)
            seen.links[path] = source
    if engine_manifest is None:
        descriptor = write_oci_manifest(
            writer,
            config_digest=config.digest,
            config_size=config.size,
            layers=[
                (LAYER_TYPES.get(b.magic[:4], LAYER_TYPES.get(b.magic[:2], UNCOMPRESSED_LAYER)), b.digest, b.size)
                for b in layers
            ],
        )
    else:
        named = seen.blob(seen.by_digest(engine_manifest[0]) or engine_manifest[0], "manifest")
        descriptor = (str(engine_manifest[1].get("mediaType") or OCI_MANIFEST), engine_manifest[0], named.size)
    write_indexes(writer, manifest=descriptor, config_path=config_path, layer_paths=layer_paths)
    manifest_digest = descriptor[1]
    return PortableArchive(
        config_digest=config.digest,
        manifest_digest=manifest_digest,
        diff_ids=tuple(str(d) for d in diff_ids),
        layer_paths=tuple(layer_paths),
        layer_sizes=tuple(b.size for b in layers),
    )
