"""`export --format oci`: the image as an OCI image layout archive, the same bytes for the same image.

Made from the spooled save (``spooled_image``): the config exactly as the engine saved it (so its digest,
the image's identity, is unchanged) and each layer tar as saved, uncompressed (its digest is its diffID);
or from overlay2's layer store, each layer rebuilt as it is written (``spooled_image.StreamedImage``).
The archive holds, in this order and nothing else:

* ``blobs/``, ``blobs/sha256/``; the config, each layer once (config order), then the OCI manifest,
  each ``blobs/sha256/<hex>`` of its own digest;
* ``oci-layout``, ``index.json`` naming that one manifest (no name annotation: a load tags nothing,
  the importer tags after checking);
* ``manifest.json``, the legacy index naming the same blobs, so Docker's ``docker load`` reads the
  archive too (what Docker 25's own save writes beside its OCI layout).

Every header is ``fixed_tar``'s (mtime 0, no owner names), so two exports of one image are the same
bytes. Podman and skopeo read it as ``oci-archive:FILE``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from imagebuild.distribute import fixed_tar
from imagebuild.distribute.spooled_image import SpooledImage, StreamedImage
from imagebuild.engine.saved_image import OCI_BLOBS
from imagebuild.util.streams import tar_padding

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"  # uncompressed: the digest is the diffID
OCI_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'


@dataclass(frozen=True, kw_only=True)
class OciLayout:
    config_digest: str  # the identity
    manifest_digest: str  # the manifest index.json names


def _canonical(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _blob(digest: str) -> str:
    return OCI_BLOBS + digest.removeprefix("sha256:")


def oci_manifest(image: SpooledImage | StreamedImage) -> bytes:
    """The OCI manifest of ``image``: its config and layers by digest, canonical JSON."""
    return _canonical(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": image.identity, "size": len(image.config_bytes)},
            "layers": [{"mediaType": OCI_LAYER, "digest": layer.diff_id, "size": layer.size} for layer in image.layers],
        }
    )


def write_oci_layout(image: SpooledImage | StreamedImage, out: fixed_tar.Sink) -> OciLayout:
    """Write ``image`` to ``out`` as an OCI image layout tar (see the module's docstring)."""
    manifest = oci_manifest(image)
    manifest_digest = _digest(manifest)
    fixed_tar.directory(out, "blobs")
    fixed_tar.directory(out, "blobs/sha256")
    fixed_tar.regular_file(out, _blob(image.identity), image.config_bytes)
    written: set[str] = set()
    for layer in image.layers:
        if layer.diff_id in written:  # the same layer twice (two empty layers): one blob
            continue
        written.add(layer.diff_id)
        out.write(fixed_tar.header(_blob(layer.diff_id), size=layer.size))
        for chunk in layer.chunks():  # a streamed layer raises once it is not its diffID
            out.write(chunk)
        out.write(tar_padding(layer.size))
    fixed_tar.regular_file(out, _blob(manifest_digest), manifest)
    fixed_tar.regular_file(out, "oci-layout", OCI_LAYOUT)
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": manifest_digest, "size": len(manifest)}],
    }
    fixed_tar.regular_file(out, "index.json", _canonical(index))
    legacy = [{"Config": _blob(image.identity), "RepoTags": None, "Layers": [_blob(layer.diff_id) for layer in image.layers]}]
    fixed_tar.regular_file(out, "manifest.json", json.dumps(legacy, separators=(",", ":")).encode())
    out.write(fixed_tar.TAR_END)
    return OciLayout(config_digest=image.identity, manifest_digest=manifest_digest)
