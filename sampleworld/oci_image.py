"""Byte-for-byte reproducible OCI images, pushed to the sample registry over its HTTP API.

A stand-in pinned by digest in sampleworld/pins.toml (as the real pins.toml pins the MI355X donor)
must have the same digest on every machine, so it cannot come from `docker build` (timestamps)
nor `docker push` (the engine compresses the layers). Here the layer is a tar written with fixed
owners, modes and times, left uncompressed (``application/vnd.oci.image.layer.v1.tar``: gzip's
bytes depend on the zlib build, a digest must not), and the manifests are compact, key-sorted JSON.
The image is an OCI index, as a `docker buildx` push makes one: the platform's manifest and a
provenance attestation manifest (platform unknown/unknown) beside it, so a client must pick
its platform out of the index.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urljoin

import requests

from sampleworld.errors import SampleWorldError
from sampleworld.layout import REGISTRY

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
IN_TOTO = "application/vnd.in-toto+json"
TIMEOUT_S = 30


def canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _descriptor(media_type: str, data: bytes, **extra: object) -> dict[str, object]:
    return {"mediaType": media_type, "digest": digest_of(data), "size": len(data), **extra}


def layer_tar(files: Mapping[str, bytes], *, mtime: int) -> bytes:
    """A tar of ``files`` (path below / -> content) and their parent directories, in name order,
    root-owned, directories 0755 and files 0644, every time ``mtime``."""
    dirs = {"/".join(path.split("/")[:i]) for path in files for i in range(1, path.count("/") + 1)}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(dirs | set(files)):
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "root", "root"
            if name in files:
                info.mode, info.size = 0o644, len(files[name])
                tar.addfile(info, io.BytesIO(files[name]))
            else:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
    return out.getvalue()


@dataclass(frozen=True, kw_only=True)
class OciImage:
    """Every blob and manifest of one image index; ``digest`` is what a pin names."""

    blobs: tuple[bytes, ...]  # layers and configs
    manifests: tuple[tuple[str, bytes], ...]  # (media type, body): the index's entries
    index: bytes

    @property
    def digest(self) -> str:
        return digest_of(self.index)

    @property
    def platform_digest(self) -> str:
        """The runnable platform's manifest (the index's first entry)."""
        return digest_of(self.manifests[0][1])


def single_layer_image(
    files: Mapping[str, bytes],
    *,
    created: str,
    mtime: int,
    labels: Mapping[str, str],
    history: str,
    platform: tuple[str, str] = ("linux", "amd64"),
) -> OciImage:
    """One layer of ``files`` on nothing (FROM scratch), indexed for ``platform``, with an attestation."""
    layer = layer_tar(files, mtime=mtime)
    os_name, arch = platform
    config = canonical_json(
        {
            "architecture": arch,
            "os": os_name,
            "created": created,
            "config": {"Labels": dict(labels)},
            "rootfs": {"type": "layers", "diff_ids": [digest_of(layer)]},
            "history": [{"created": created, "created_by": history}],
        }
    )
    image = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": _descriptor(OCI_CONFIG, config),
            "layers": [_descriptor(OCI_LAYER_TAR, layer)],
        }
    )
    statement = canonical_json(
        {
            "_type": "https://in-toto.io/Statement/v0.1",
            "predicateType": "https://slsa.dev/provenance/v0.2",
            "subject": [{"name": "_", "digest": {"sha256": digest_of(image).removeprefix("sha256:")}}],
            "predicate": {"builder": {"id": "sampleworld"}, "buildType": "sampleworld/oci_image.py"},
        }
    )
    attestation_config = canonical_json(
        {
            "architecture": "unknown",
            "os": "unknown",
            "rootfs": {"type": "layers", "diff_ids": [digest_of(statement)]},
        }
    )
    attestation = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": _descriptor(OCI_CONFIG, attestation_config),
            "layers": [
                _descriptor(
                    IN_TOTO,
                    statement,
                    annotations={"in-toto.io/predicate-type": "https://slsa.dev/provenance/v0.2"},
                )
            ],
        }
    )
    index = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                _descriptor(OCI_MANIFEST, image, platform={"architecture": arch, "os": os_name}),
                _descriptor(
                    OCI_MANIFEST,
                    attestation,
                    platform={"architecture": "unknown", "os": "unknown"},
                    annotations={
                        "vnd.docker.reference.digest": digest_of(image),
                        "vnd.docker.reference.type": "attestation-manifest",
                    },
                ),
            ],
        }
    )
    return OciImage(
        blobs=(layer, config, statement, attestation_config),
        manifests=((OCI_MANIFEST, image), (OCI_MANIFEST, attestation)),
        index=index,
    )


def _request(method: str, url: str, **kwargs: object) -> requests.Response:
    try:
        response = requests.request(method, url, timeout=TIMEOUT_S, **kwargs)  # type: ignore[arg-type]
    except requests.RequestException as e:
        msg = f"the sample registry does not answer {method} {url}: {e}"
        raise SampleWorldError(msg) from e
    return response


def served_digest(repository: str, tag: str) -> str | None:
    """The digest the registry serves for repository:tag (None when it has no such tag)."""
    url = f"http://{REGISTRY}/v2/{repository}/manifests/{tag}"
    response = _request("HEAD", url, headers={"Accept": f"{OCI_INDEX}, {OCI_MANIFEST}"})
    if response.status_code == 404:
        return None
    if not response.ok:
        msg = f"HEAD {url}: HTTP {response.status_code}"
        raise SampleWorldError(msg)
    return response.headers.get("Docker-Content-Digest")


def _push_blob(repository: str, data: bytes) -> None:
    base = f"http://{REGISTRY}/v2/{repository}/blobs/"
    digest = digest_of(data)
    if _request("HEAD", base + digest).status_code == 200:
        return
    started = _request("POST", base + "uploads/")
    location = started.headers.get("Location")
    if started.status_code != 202 or not location:
        msg = f"POST {base}uploads/: HTTP {started.status_code} {started.text[:200]}"
        raise SampleWorldError(msg)
    upload = urljoin(base, location)
    done = _request(
        "PUT",
        upload,
        params={"digest": digest},
        data=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    if done.status_code != 201:
        msg = f"PUT blob {digest} to {repository}: HTTP {done.status_code} {done.text[:200]}"
        raise SampleWorldError(msg)


def _push_manifest(repository: str, reference: str, media_type: str, body: bytes) -> None:
    url = f"http://{REGISTRY}/v2/{repository}/manifests/{reference}"
    done = _request("PUT", url, data=body, headers={"Content-Type": media_type})
    if done.status_code != 201 or done.headers.get("Docker-Content-Digest") != digest_of(body):
        msg = f"PUT {url}: HTTP {done.status_code}, digest {done.headers.get('Docker-Content-Digest')} (sent {digest_of(body)}) {done.text[:200]}"
        raise SampleWorldError(msg)


def push(image: OciImage, repository: str, tag: str) -> None:
    """Blobs, then the manifests the index names (the registry checks they exist), then the index by tag."""
    for blob in image.blobs:
        _push_blob(repository, blob)
    for media_type, body in image.manifests:
        _push_manifest(repository, digest_of(body), media_type, body)
    _push_manifest(repository, tag, OCI_INDEX, image.index)
