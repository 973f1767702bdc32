"""The archives the normalised image is loaded from, streamed from the spool, one per kind of store.

Both name every layer but carry only the rewritten ones: the engine already holds the base's.

* graph-driver stores: ``docker load``'s legacy layout (``manifest.json``); the engine finds the base
  layers by their chain of diffIDs and never opens their (absent) files;
* the containerd image store: an OCI image layout whose manifest imagebuild writes. The base's layers
  are named by the descriptors the engine holds them under (compressed, as pulled), the build's as
  uncompressed tars; the engine keeps the manifest as it is, so the image ID it gives the image is
  that manifest's digest, known before the load. A build layer reused from the last run
  (imagebuild.normalize.reuse) is named but not carried: its blob is in the content store already.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from imagebuild.util.streams import TAR_END, tar_bytes_chunks, tar_file_chunks

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'


class LoadLayer(Protocol):
    @property
    def diff_id(self) -> str: ...
    @property
    def path(self) -> Path | None: ...  # None: the engine holds it already (not sent)
    @property
    def size(self) -> int: ...


def canonical_json(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def blob_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def legacy_chunks(config_bytes: bytes, diff_ids: Sequence[str], layers: Sequence[LoadLayer]) -> Iterator[bytes]:
    """A legacy ``docker load`` archive (graph-driver stores)."""
    for layer in layers:
        if layer.path is not None:  # the engine finds a layer it holds by its chain, never opening the file
            yield from tar_file_chunks(legacy_member(layer.diff_id), layer.path)
    yield from legacy_end(config_bytes, diff_ids)


def legacy_member(diff_id: str) -> str:
    """The file a layer is (or, for one the engine holds, would be) in a legacy archive."""
    return f"{diff_id.removeprefix('sha256:')}/layer.tar"


def legacy_end(config_bytes: bytes, diff_ids: Sequence[str], members: Mapping[str, str] | None = None) -> Iterator[bytes]:
    """What a legacy archive ends with, once its layers' files are written: the config, the manifest
    naming every layer's file (``members``: those not named by their diffID), the end of the tar.

    ``docker load`` unpacks the whole archive before it reads the manifest, so the order is free: a
    layer streamed as it is rewritten comes first, and the config, which names its diffID, after it.
    """
    hex_id = blob_digest(config_bytes).removeprefix("sha256:")
    yield from tar_bytes_chunks(f"{hex_id}.json", config_bytes)
    named = members or {}
    manifest = [{"Config": f"{hex_id}.json", "RepoTags": None, "Layers": [named.get(d) or legacy_member(d) for d in diff_ids]}]
    yield from tar_bytes_chunks("manifest.json", json.dumps(manifest).encode())
    yield TAR_END


def oci_manifest(
    config_bytes: bytes, base_descriptors: Sequence[Mapping[str, Any]], layers: Sequence[LoadLayer]
) -> bytes:
    """The manifest of the normalised image for the containerd store: its bytes, canonical JSON."""
    descriptors = [
        {key: descriptor[key] for key in ("mediaType", "digest", "size") if key in descriptor}
        for descriptor in base_descriptors
    ]
    descriptors += [{"mediaType": OCI_LAYER, "digest": layer.diff_id, "size": layer.size} for layer in layers]
    return canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": blob_digest(config_bytes), "size": len(config_bytes)},
            "layers": descriptors,
        }
    )


def oci_chunks(config_bytes: bytes, manifest_bytes: bytes, layers: Sequence[LoadLayer]) -> Iterator[bytes]:
    """An OCI image layout holding the manifest, the config and the rewritten layers."""
    yield from oci_start()
    yield from _oci_documents(config_bytes, manifest_bytes)
    for layer in layers:
        if layer.path is not None:  # a reused layer's blob is in the engine's content store already
            yield from oci_blob(layer.diff_id, layer.path)
    yield from _oci_index(manifest_bytes)


def oci_start() -> Iterator[bytes]:
    yield from tar_bytes_chunks("oci-layout", OCI_LAYOUT)


def oci_blob(digest: str, path: Path) -> Iterator[bytes]:
    """A blob of the layout, named by its digest (which its bytes must have)."""
    yield from tar_file_chunks(f"blobs/sha256/{digest.removeprefix('sha256:')}", path)


def oci_end(config_bytes: bytes, manifest_bytes: bytes) -> Iterator[bytes]:
    """What an OCI layout ends with once its layers' blobs are written: the config, the manifest and
    the index naming it. The containerd store reads the index once the whole archive is there, so the
    blobs it names may come first, each as soon as it is made."""
    yield from _oci_documents(config_bytes, manifest_bytes)
    yield from _oci_index(manifest_bytes)


def _oci_documents(config_bytes: bytes, manifest_bytes: bytes) -> Iterator[bytes]:
    yield from tar_bytes_chunks(f"blobs/sha256/{blob_digest(config_bytes).removeprefix('sha256:')}", config_bytes)
    yield from tar_bytes_chunks(f"blobs/sha256/{blob_digest(manifest_bytes).removeprefix('sha256:')}", manifest_bytes)


def _oci_index(manifest_bytes: bytes) -> Iterator[bytes]:
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": blob_digest(manifest_bytes), "size": len(manifest_bytes)}],
    }
    yield from tar_bytes_chunks("index.json", canonical_json(index))
    yield TAR_END
