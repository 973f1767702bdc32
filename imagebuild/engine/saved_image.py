"""Read an image from a ``docker save`` stream, one pass, layers handed on as they stream by.

Two layouts exist: the legacy one (``manifest.json``, ``<config>.json``,
``<id>/layer.tar``; Docker before 25) and the OCI image layout Docker 25 and
later also write (``index.json``, ``blobs/sha256/<hex>``). Podman writes the
legacy one with each layer at the top as ``<diffID hex>.tar`` (the name
manifest.json gives) and ``<id>/layer.tar`` a symlink to it. In both, which
entry is which layer is only known from the manifest, which may come last,
so each layer tar is handed to ``on_layer`` as it arrives (to be spooled or
indexed, and hashed) and matched to the config's diffIDs by its sha256
afterwards. The small JSON documents are kept in memory; nothing else is.
A graph-driver engine saves its layers uncompressed; the containerd image store
saves them as they were pulled or built (gzip): those are decompressed as they
stream by, so every layer is known by its diffID either way.
"""

from __future__ import annotations

import gzip
import io
import json
import posixpath
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any, BinaryIO, Generic, Protocol, TypeVar, cast

from imagebuild.util.streams import CHUNK, forget_members, gzip_reader

JSON_LIMIT = 64 << 20  # a config or manifest larger than this is not one
TAR_MAGIC_OFFSET, TAR_MAGICS = 257, (b"ustar\x0000", b"ustar  \x00")
GZIP_MAGIC = b"\x1f\x8b"


class ArchiveError(Exception):
    """The stream is not a docker save archive this reader understands; the message says why."""


class LayerResult(Protocol):
    @property
    def diff_id(self) -> str: ...


L = TypeVar("L", bound=LayerResult)


@dataclass(frozen=True, kw_only=True)
class SavedImage(Generic[L]):
    config: dict[str, Any]
    config_bytes: bytes  # exactly as saved: its sha256 is the image ID
    layers: tuple[L, ...]  # in the config's rootfs order, one per diffID
    repo_tags: tuple[str, ...]
    # The OCI manifest's layer descriptors, as saved (compressed ones included); () in the legacy layout.
    layer_descriptors: tuple[dict[str, Any], ...] = ()

    @property
    def image_id(self) -> str:
        import hashlib

        return "sha256:" + hashlib.sha256(self.config_bytes).hexdigest()

    @property
    def diff_ids(self) -> tuple[str, ...]:
        return tuple(self.config.get("rootfs", {}).get("diff_ids") or ())


OCI_BLOBS = "blobs/sha256/"  # an OCI layout's blobs, each named by the hex of its digest


class _Prefixed(io.RawIOBase):
    """``head`` followed by the rest of ``rest``: a peeked-at entry read from its start."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head, self._rest = memoryview(head), rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _is_tar(head: bytes) -> bool:
    """A tar's first block: a header with its magic, or the end-of-archive zeros of an empty layer."""
    return head[TAR_MAGIC_OFFSET : TAR_MAGIC_OFFSET + 8] in TAR_MAGICS or (bool(head) and not head.strip(b"\0"))


def _is_top_level_tar(name: str) -> bool:
    """Podman's legacy layout: a layer saved at the archive's top as ``<diffID hex>.tar``."""
    return "/" not in name and name.endswith(".tar")


def read_saved_image(
    stream: BinaryIO,
    on_layer: Callable[[str, BinaryIO], L],
    *,
    what: str,
) -> SavedImage[L]:
    """Walk the archive once; ``on_layer(entry name, file)`` must read its file to the end."""
    documents: dict[str, bytes] = {}
    layers: dict[str, L] = {}
    links: dict[str, str] = {}  # legacy: a layer.tar that is a symlink to an identical one
    try:
        with tarfile.open(fileobj=stream, mode="r|", bufsize=CHUNK) as tar:
            while (entry := tar.next()) is not None:
                name = posixpath.normpath(entry.name)
                if entry.issym() and name.endswith("/layer.tar"):
                    links[name] = posixpath.normpath(posixpath.join(posixpath.dirname(name), entry.linkname))
                elif entry.isreg():
                    data = tar.extractfile(entry)
                    assert data is not None
                    head = data.read(tarfile.BLOCKSIZE)
                    if name.endswith("/layer.tar") or (
                        (name.startswith("blobs/") or _is_top_level_tar(name)) and _is_tar(head)
                    ):
                        reader = io.BufferedReader(_Prefixed(head, data), buffer_size=CHUNK)
                        layers[name] = on_layer(name, cast("BinaryIO", reader))
                    elif name.startswith("blobs/") and head.startswith(GZIP_MAGIC):
                        unpacked = gzip_reader(_Prefixed(head, data))
                        layers[name] = on_layer(name, cast("BinaryIO", io.BufferedReader(unpacked, CHUNK)))
                    elif name.endswith((".json", "/json")) or name.startswith("blobs/"):
                        documents[name] = _document(name, head, data, entry.size, what)
                forget_members(tar)
    except (tarfile.TarError, gzip.BadGzipFile, EOFError) as e:
        msg = f"{what}: not a tar archive, or cut short ({e})"
        raise ArchiveError(msg) from e
    for alias, target in links.items():
        if target in layers:
            layers[alias] = layers[target]
    config_name, layer_names, tags = _manifest(documents, what)
    config_bytes = documents.get(config_name)
    if config_bytes is None:
        msg = f"{what}: the image config {config_name} named by the manifest is missing"
        raise ArchiveError(msg)
    config = _object(_json(config_bytes, config_name, what), config_name, what)
    ordered = _in_config_order(config, layer_names, layers, what)
    return SavedImage(
        config=config,
        config_bytes=config_bytes,
        layers=ordered,
        repo_tags=tags,
        layer_descriptors=_oci_layer_descriptors(documents, what),
    )


def _in_config_order(
    config: dict[str, Any], names: list[str], layers: dict[str, L], what: str
) -> tuple[L, ...]:
    """The layers the manifest names, each checked against its diffID in the config."""
    diff_ids = list(config.get("rootfs", {}).get("diff_ids") or [])
    if len(diff_ids) != len(names):
        msg = f"{what}: the manifest lists {len(names)} layers, the config {len(diff_ids)}"
        raise ArchiveError(msg)
    ordered: list[L] = []
    for index, (name, diff_id) in enumerate(zip(names, diff_ids, strict=True)):
        layer = layers.get(name)
        if layer is None:
            msg = f"{what}: layer {index} ({name}) is not in the archive"
            raise ArchiveError(msg)
        if layer.diff_id != diff_id:
            msg = f"{what}: layer {index} ({name}) has sha256 {layer.diff_id}, the config says {diff_id}"
            raise ArchiveError(msg)
        ordered.append(layer)
    return tuple(ordered)


def _document(name: str, head: bytes, rest: IO[bytes], size: int, what: str) -> bytes:
    if size > JSON_LIMIT:
        msg = f"{what}: {name} is {size} bytes, too large for an image document"
        raise ArchiveError(msg)
    return head + rest.read()


def _json(data: bytes, name: str, what: str) -> Any:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        msg = f"{what}: {name} is not JSON ({e})"
        raise ArchiveError(msg) from e


def _object(value: Any, name: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        msg = f"{what}: {name} is not a JSON object"
        raise ArchiveError(msg)
    return value


def _manifest(documents: dict[str, bytes], what: str) -> tuple[str, list[str], tuple[str, ...]]:
    """(config entry, layer entries, repo tags) from manifest.json, else from the OCI index."""
    if "manifest.json" in documents:
        entries = _json(documents["manifest.json"], "manifest.json", what)
        if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
            count = len(entries) if isinstance(entries, list) else 0
            msg = f"{what}: manifest.json describes {count} images; save one image per archive"
            raise ArchiveError(msg)
        entry = entries[0]
        layer_names = [posixpath.normpath(str(p)) for p in entry.get("Layers") or []]
        return str(entry.get("Config")), layer_names, tuple(entry.get("RepoTags") or ())
    if "index.json" in documents:
        manifest = _oci_manifest(documents, what)
        layers = manifest.get("layers") or []
        return _blob(manifest.get("config") or {}), [_blob(m) for m in layers], ()
    msg = f"{what}: neither manifest.json nor index.json found: not a docker save archive"
    raise ArchiveError(msg)


def _oci_manifest(documents: dict[str, bytes], what: str) -> dict[str, Any]:
    index = _object(_json(documents["index.json"], "index.json", what), "index.json", what)
    manifests = index.get("manifests") or []
    if len(manifests) != 1:
        msg = f"{what}: index.json lists {len(manifests)} manifests; save one image per archive"
        raise ArchiveError(msg)
    name = _blob(manifests[0])
    return _object(_json(documents.get(name, b"null"), name, what), name, what)


def _oci_layer_descriptors(documents: dict[str, bytes], what: str) -> tuple[dict[str, Any], ...]:
    if "index.json" not in documents:
        return ()
    layers = _oci_manifest(documents, what).get("layers") or []
    return tuple(dict(layer) for layer in layers if isinstance(layer, dict))


def _blob(descriptor: dict[str, Any]) -> str:
    algorithm, _, hex_digest = str(descriptor.get("digest", "")).partition(":")
    return f"blobs/{algorithm}/{hex_digest}"
