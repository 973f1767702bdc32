"""OCI 1.1 artifacts that refer to an image: their manifests and the referrers index, as pure data.

An attestation goes to the registry as an *artifact manifest* (OCI image spec 1.1, "Guidelines for
artifact usage"): an image manifest whose ``artifactType`` says what the document is, whose config
is the empty descriptor (``application/vnd.oci.empty.v1+json``, the two bytes ``{}``), whose one
layer is the document's blob, and whose ``subject`` is the image's pushed manifest. A registry with
the referrers API (distribution spec 1.1, ``GET /v2/<name>/referrers/<digest>``) lists it by that
subject itself and says so with an ``OCI-Subject`` header on the push. One without it (Debian's
docker-registry 2.8) gets the *referrers tag schema*: an OCI image index tagged
``sha256-<hex of the subject>`` listing the artifacts, which the pushing client updates
(read, add what is missing, write back).

Everything here is bytes in, bytes out: the manifests are serialised once, compactly and with
sorted keys and no time in them, so the same document pushed twice is the same manifest with the
same digest, and the index never lists it twice.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagebuild.inputs.values import DIGEST_RE

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB = b"{}"
EMPTY_DIGEST = "sha256:" + hashlib.sha256(EMPTY_BLOB).hexdigest()
TITLE = "org.opencontainers.image.title"  # the document's file name: what a download names it
# What each document is, by the suffix imagebuild names it with (the longest first).
ARTIFACT_TYPES = (
    (".sbom.cdx.json", "application/vnd.cyclonedx+json"),
    (".dsse.jsonl", "application/vnd.dsse.envelope.v1+json"),
    (".dsse.json", "application/vnd.dsse.envelope.v1+json"),
    (".intoto.jsonl", "application/vnd.in-toto+json"),
    (".intoto.json", "application/vnd.in-toto+json"),
)
DSSE_TYPE = "application/vnd.dsse.envelope.v1+json"
MEDIA_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$")


class ReferrersError(ValueError):
    """A registry's index or manifest is not what the OCI spec says it is: the text says what is wrong."""


def sha256_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def fallback_tag(digest: str) -> str:
    """The referrers tag schema's tag of ``digest``: ``<alg>-<hex>``, cut to a tag's 128 characters."""
    if not DIGEST_RE.fullmatch(digest):
        msg = f"{digest!r} is not a sha256 digest"
        raise ReferrersError(msg)
    return digest.replace(":", "-", 1)[:128]


def artifact_type_of(name: str) -> str:
    for suffix, media_type in ARTIFACT_TYPES:
        if name.endswith(suffix):
            return media_type
    return "application/json"


@dataclass(frozen=True, kw_only=True)
class Descriptor:
    """An OCI content descriptor: what the index lists, what a subject names."""

    media_type: str
    digest: str
    size: int
    artifact_type: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.artifact_type:
            found["artifactType"] = self.artifact_type
        if self.annotations:
            found["annotations"] = dict(self.annotations)
        return found

    @property
    def title(self) -> str:
        return self.annotations.get(TITLE, "")


def descriptor_of(data: object, where: str) -> Descriptor:
    """A descriptor from a registry's JSON, every field checked (it names what a client fetches next)."""
    if not isinstance(data, dict):
        msg = f"{where}: a descriptor is not a JSON object"
        raise ReferrersError(msg)
    media_type, digest, size = data.get("mediaType"), data.get("digest"), data.get("size")
    artifact_type, annotations = data.get("artifactType", ""), data.get("annotations", {})
    if not isinstance(media_type, str) or not MEDIA_TYPE_RE.fullmatch(media_type):
        msg = f"{where}: mediaType {media_type!r} is not a media type"
        raise ReferrersError(msg)
    if not isinstance(digest, str) or not DIGEST_RE.fullmatch(digest):
        msg = f"{where}: digest {digest!r} is not sha256: and 64 hex digits"
        raise ReferrersError(msg)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        msg = f"{where}: size {size!r} is not a byte count"
        raise ReferrersError(msg)
    if not isinstance(artifact_type, str) or (artifact_type and not MEDIA_TYPE_RE.fullmatch(artifact_type)):
        msg = f"{where}: artifactType {artifact_type!r} is not a media type"
        raise ReferrersError(msg)
    if not isinstance(annotations, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
    ):
        msg = f"{where}: annotations must map strings to strings"
        raise ReferrersError(msg)
    return Descriptor(
        media_type=media_type,
        digest=digest,
        size=size,
        artifact_type=artifact_type,
        annotations=dict(annotations),
    )


def _serialised(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True, kw_only=True)
class Artifact:
    """One attestation file, ready to push: its blob, and the manifest that names it and the image."""

    name: str  # the file's name, the layer's title
    blob: bytes
    manifest: bytes

    @property
    def descriptor(self) -> Descriptor:
        """What the referrers index lists for it."""
        data = json.loads(self.manifest)
        return Descriptor(
            media_type=OCI_MANIFEST,
            digest=sha256_of(self.manifest),
            size=len(self.manifest),
            artifact_type=data["artifactType"],
            annotations=data.get("annotations", {}),
        )

    @property
    def blob_digest(self) -> str:
        return sha256_of(self.blob)


def artifact_of(name: str, blob: bytes, subject: Descriptor) -> Artifact:
    """The artifact manifest of the document ``name`` (its bytes ``blob``) about the image ``subject``."""
    artifact_type = artifact_type_of(name)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {
            "mediaType": EMPTY_MEDIA_TYPE,
            "digest": EMPTY_DIGEST,
            "size": len(EMPTY_BLOB),
            "data": "e30=",
        },
        "layers": [
            {
                "mediaType": artifact_type,
                "digest": sha256_of(blob),
                "size": len(blob),
                "annotations": {TITLE: name},
            }
        ],
        "subject": subject.to_json(),
        "annotations": {TITLE: name},
    }
    return Artifact(name=name, blob=blob, manifest=_serialised(manifest))


def artifact_from_file(path: Path, subject: Descriptor) -> Artifact:
    return artifact_of(path.name, path.read_bytes(), subject)


def referrers_in(index: bytes, where: str) -> list[Descriptor]:
    """The descriptors an OCI image index lists (a referrers answer, or the fallback tag's index)."""
    try:
        data = json.loads(index)
    except ValueError as e:
        msg = f"{where}: not JSON ({e})"
        raise ReferrersError(msg) from e
    if (
        not isinstance(data, dict)
        or data.get("schemaVersion") != 2
        or not isinstance(data.get("manifests", []), list)
    ):
        msg = f"{where}: not an OCI image index (schemaVersion 2 with a manifests list)"
        raise ReferrersError(msg)
    media_type = data.get("mediaType", OCI_INDEX)
    if media_type != OCI_INDEX:
        msg = f"{where}: mediaType {media_type!r}, not {OCI_INDEX}"
        raise ReferrersError(msg)
    return [
        descriptor_of(entry, f"{where} manifests[{n}]") for n, entry in enumerate(data.get("manifests", []))
    ]


def merged_index(existing: bytes | None, added: Iterable[Descriptor], where: str) -> tuple[bytes, bool]:
    """The fallback tag's index with ``added`` in it, each digest once; and whether it changed.

    Entries already there are kept as they are (other tools' signatures, older attestations), in
    their order; only descriptors whose digest is not listed are appended.
    """
    data: dict[str, Any] = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
    if existing is not None:
        referrers_in(existing, where)  # refuse to rewrite what is not an index
        data = json.loads(existing)
        data.setdefault("mediaType", OCI_INDEX)
        data.setdefault("manifests", [])
    listed = {entry["digest"] for entry in data["manifests"]}
    changed = False
    for descriptor in added:
        if descriptor.digest not in listed:
            data["manifests"].append(descriptor.to_json())
            listed.add(descriptor.digest)
            changed = True
    return _serialised(data), changed


def artifact_subject(manifest: bytes, where: str) -> tuple[Descriptor, Descriptor]:
    """(its subject, its one layer) of a pushed artifact manifest, checked."""
    try:
        data = json.loads(manifest)
    except ValueError as e:
        msg = f"{where}: not JSON ({e})"
        raise ReferrersError(msg) from e
    if not isinstance(data, dict) or "subject" not in data:
        msg = f"{where}: an artifact manifest without a subject"
        raise ReferrersError(msg)
    layers = data.get("layers")
    if not isinstance(layers, list) or len(layers) != 1:
        msg = f"{where}: an attestation artifact has one layer, this has {len(layers) if isinstance(layers, list) else 'none'}"
        raise ReferrersError(msg)
    return descriptor_of(data["subject"], f"{where} subject"), descriptor_of(layers[0], f"{where} layers[0]")


def config_digest_of(manifest: bytes) -> str:
    """The config digest an image manifest names: the image's identity ("" when it names none, as an
    index does, or is not JSON)."""
    try:
        config = json.loads(manifest).get("config") or {}
    except (ValueError, AttributeError):
        return ""
    digest = config.get("digest") if isinstance(config, dict) else None
    return digest if isinstance(digest, str) and DIGEST_RE.fullmatch(digest) else ""
