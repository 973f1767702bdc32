"""Where Docker's containerd image store keeps an image: used by engine.docker (``held_blob`` also by
normalisation, to find a layer an earlier run loaded).

On that store an image ID is the digest of the image's manifest (or index), and ``docker image
inspect`` does not say which config the manifest names (before API 1.48). imagebuild's identity is
the config's digest, so it reads the manifest from the content store the engine's containerd keeps
(under the data root, or a system containerd's root: imagebuild.engine.containerd_roots), checks
that the bytes hash to the image ID, and takes the config digest from it. Anything unexpected gives
None and the reason; the caller then says the identity is not known rather than guess it.

The same content store holds the image's config and every layer as a blob named by its digest, as
the manifest's descriptors name them (what a build, a pull or a load put there: see
imagebuild.engine.content_blobs). ``stored_image`` gives them to normalisation and export instead
of ``docker save``, which on this store took minutes per GB here (docs/measured.md). Everything is
checked first: the manifest against the image ID, the config against the manifest, each blob's
presence and size against its descriptor, an uncompressed layer's digest against its diffID; the
layers' bytes are checked by the reader (each tar against its diffID) as they stream. Anything
unexpected gives ``unavailable`` with the reason, and the caller uses ``save``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from imagebuild.engine import containerd_roots
from imagebuild.engine.content_blobs import NONE, compression
from imagebuild.engine.interface import BlobLayer, StoredImage
from imagebuild.importer.containerd_root import MANAGED_ROOT

CONTENT = MANAGED_ROOT / containerd_roots.CONTENT  # under the data root
INDEXES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
MAX_MANIFEST = 4 << 20


def identity_fields(image_id: str, *, address: str, info: dict[str, Any]) -> dict[str, str]:
    """ImageInfo's ``config_digest`` of the image ``image_id`` names on the containerd store of the
    engine at ``address`` (whose ``GET /info`` is ``info``), or its ``identity_unknown``."""
    if not address.startswith("unix://"):
        return {"identity_unknown": f"the containerd store of the engine at {address} is not on this machine"}
    digest, reason = config_digest(image_id, data_root=str(info.get("DockerRootDir") or ""))
    return {"config_digest": digest} if digest else {"identity_unknown": reason}


def config_digest(image_id: str, *, data_root: str, platform: tuple[str, str] = ("linux", "amd64")) -> tuple[str | None, str]:
    """(the config digest of the image ``image_id`` names, "") or (None, why it cannot be read)."""
    content, reason = _content(image_id, data_root)
    if content is None:
        return None, reason
    digest = image_id
    for _ in range(2):  # an index names the platform's manifest; that one names the config
        document, reason = _blob(content, digest)
        if document is None:
            return None, reason
        if document.get("mediaType") in INDEXES or "manifests" in document:
            chosen = [
                m for m in document.get("manifests") or []
                if isinstance(m, dict) and (m.get("platform") or {}).get("os") == platform[0]
                and (m.get("platform") or {}).get("architecture") == platform[1]
            ]  # fmt: skip
            if not chosen:
                return None, f"index {digest[:19]} names no {'/'.join(platform)} manifest"
            digest = str(chosen[0].get("digest"))
            continue
        config = document.get("config")
        if not isinstance(config, dict) or not str(config.get("digest", "")).startswith("sha256:"):
            return None, f"manifest {digest[:19]} names no config"
        return str(config["digest"]), ""
    return None, f"{image_id[:19]} is an index of indexes"


def stored_image(image_id: str, *, data_root: str) -> StoredImage:
    """The image's manifest, config and layer blobs in the content store, or ``unavailable`` saying why not."""
    content, reason = _content(image_id, data_root)
    if content is None:
        return StoredImage(unavailable=reason)
    manifest, reason = _blob(content, image_id)
    if manifest is None:
        return StoredImage(unavailable=reason)
    if "manifests" in manifest or not isinstance(manifest.get("layers"), list):
        return StoredImage(unavailable=f"{image_id[:19]} names an index, not one image's manifest")
    descriptor = manifest.get("config")
    config_digest = str(descriptor.get("digest", "")) if isinstance(descriptor, dict) else ""
    config, reason = _blob(content, config_digest) if config_digest.startswith("sha256:") else (None, "")
    if config is None:
        return StoredImage(unavailable=reason or f"manifest {image_id[:19]} names no config")
    diff_ids = [str(d) for d in (config.get("rootfs") or {}).get("diff_ids") or []]
    descriptors = [d for d in manifest["layers"] if isinstance(d, dict)]
    if len(descriptors) != len(diff_ids) or len(descriptors) != len(manifest["layers"]):
        return StoredImage(
            unavailable=f"manifest {image_id[:19]} names {len(descriptors)} layers, its config {len(diff_ids)}"
        )
    layers = []
    for diff_id, layer in zip(diff_ids, descriptors, strict=True):
        found = _layer(content, diff_id, layer)
        if isinstance(found, str):
            return StoredImage(unavailable=found)
        layers.append(found)
    return StoredImage(
        config=content / config_digest.removeprefix("sha256:"),
        layers=tuple(layers),
        manifest=content / image_id.removeprefix("sha256:"),
        blobs=content,
    )


def _content(image_id: str, data_root: str) -> tuple[Path | None, str]:
    """(the content store holding the blob ``image_id`` names, "") or (None, where it was looked for)."""
    found, looked = containerd_roots.blob_dir(data_root, image_id)
    if found is None:
        return None, f"no blob {image_id[:19]} in the content store ({'; '.join(looked)})"
    return found, ""


def held_blob(content: Path, diff_id: str) -> Path | None:
    """The uncompressed blob of layer ``diff_id`` (a layer imagebuild loaded), when the store holds it."""
    path = content / diff_id.removeprefix("sha256:")
    return path if path.is_file() else None


def _layer(content: Path, diff_id: str, descriptor: dict[str, Any]) -> BlobLayer | str:
    """One layer's blob, checked against its descriptor; else why it cannot be read."""
    digest, media_type = str(descriptor.get("digest", "")), str(descriptor.get("mediaType", ""))
    kind = compression(media_type)
    if kind is None or not digest.startswith("sha256:") or "/" in digest:
        return f"layer {diff_id[:19]} is a {media_type or 'blob without a media type'} ({digest[:19]}), not a layer tar"
    if kind == NONE and digest != diff_id:
        return f"the uncompressed layer {digest[:19]} is named as layer {diff_id[:19]}"
    blob = content / digest.removeprefix("sha256:")
    try:
        size = blob.stat().st_size
    except OSError as e:
        return f"the content store has no blob {digest[:19]} for layer {diff_id[:19]} ({e.strerror})"
    if size != descriptor.get("size") or not os.access(blob, os.R_OK):
        return f"the blob {blob} is {size} bytes and its manifest names {descriptor.get('size')}, or it is unreadable"
    return BlobLayer(diff_id=diff_id, blob=blob, digest=digest, media_type=media_type, size=size)


def _blob(content: Path, digest: str) -> tuple[dict[str, Any] | None, str]:
    path = content / digest.removeprefix("sha256:")
    try:
        if path.stat().st_size > MAX_MANIFEST:
            return None, f"{path} is too large for a manifest"
        data = path.read_bytes()
    except OSError as e:
        return None, f"cannot read {path} ({e.strerror})"
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        return None, f"{path} does not hash to {digest[:19]}"
    try:
        document = json.loads(data)
    except ValueError:
        return None, f"{path} is not JSON"
    return (document, "") if isinstance(document, dict) else (None, f"{path} is not a JSON object")
