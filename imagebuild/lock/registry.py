"""Resolve container image tags to digests over the registry HTTP API v2.

No Docker engine is needed: the manifest is fetched with requests. Names are
normalised like docker (``rocm/vllm-dev`` -> registry-1.docker.io,
``ubuntu`` -> ``library/ubuntu``). Authentication follows the registry's
challenge (registry_auth.py: anonymous or credentialed bearer tokens, or
basic auth, credentials sent only where docker would send them). Loopback
registries are spoken to over plain HTTP (as docker treats them as insecure
by default); every other registry over HTTPS.

Two identities are recorded: ``digest`` is the manifest as served for the tag
(the multi-arch index when there is one), ``platform_digest`` the manifest of
the arch profile's platform inside it. The served digest header is checked
against the body (sha256 or sha512, whichever it sends), so a lying proxy cannot slip a
different manifest in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from imagebuild.inputs.references import ImageName, is_loopback, parse_image_name
from imagebuild.lock.http import FetchError, Http
from imagebuild.lock.registry_auth import Credentials, RegistrySession
from imagebuild.pins import DIGEST_RE

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join((*INDEX_TYPES, *MANIFEST_TYPES))


@dataclass(frozen=True, kw_only=True)
class ImageDigests:
    digest: str
    platform_digest: str
    media_type: str
    platforms: tuple[str, ...]  # of the index; the one platform of a single manifest


class RegistryClient:
    """Reads manifests (and config blobs) of one registry repository at a time."""

    def __init__(self, http: Http, credentials: Mapping[str, Credentials]) -> None:
        self.http = http
        self.credentials = credentials  # registry (as ImageName.registry names it) -> credentials

    def resolve(self, name: ImageName, tag: str, platform: str) -> ImageDigests:
        session = _Repository(self.http, name, self.credentials.get(name.registry))
        url = f"{name.base_url}/manifests/{tag}"
        body, media_type, digest = session.get_manifest(url)
        os_name, _, arch = platform.partition("/")
        doc = _json(url, body)
        if media_type in INDEX_TYPES:
            platforms, chosen = _pick_platform(doc, os_name, arch)
            if chosen is None:
                raise FetchError(
                    url,
                    f"the index has no manifest for {platform} (it has: {', '.join(platforms) or 'none'})",
                    "Pick an image built for this arch, or another --arch profile",
                )
            if not DIGEST_RE.fullmatch(chosen):
                raise FetchError(
                    url,
                    f"the index lists {platform} as {chosen!r}, not a sha256 digest",
                    "The registry served a bad index: report it to the image's publisher",
                )
            return ImageDigests(
                digest=digest, platform_digest=chosen, media_type=media_type, platforms=platforms
            )
        # A single manifest serves one platform: make sure it is ours.
        config = doc.get("config") if isinstance(doc, dict) else None
        config_digest = config.get("digest") if isinstance(config, dict) else None
        if not isinstance(config_digest, str) or not DIGEST_RE.fullmatch(config_digest):
            raise FetchError(
                url, "the manifest has no valid config descriptor", "The registry served a bad manifest"
            )
        cfg = _json(f"{name.base_url}/blobs/{config_digest}", session.get_blob(config_digest))
        got = f"{cfg.get('os', '?')}/{cfg.get('architecture', '?')}" if isinstance(cfg, dict) else "?/?"
        if got != platform:
            raise FetchError(
                url,
                f"the tag is a single-platform image for {got}, not {platform}",
                "Pick an image built for this arch, or another --arch profile",
            )
        return ImageDigests(digest=digest, platform_digest=digest, media_type=media_type, platforms=(got,))


def _json(url: str, body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as e:
        raise FetchError(url, f"the registry sent invalid JSON ({e})", "Check the registry URL") from e


def _pick_platform(doc: Any, os_name: str, arch: str) -> tuple[tuple[str, ...], str | None]:
    manifests = doc.get("manifests") if isinstance(doc, dict) else None
    platforms: list[str] = []
    chosen: str | None = None
    for entry in manifests or []:
        plat = entry.get("platform") if isinstance(entry, dict) else None
        if not isinstance(plat, dict):
            continue
        p_os, p_arch, variant = plat.get("os"), plat.get("architecture"), plat.get("variant")
        if p_os == "unknown":  # buildx attestation manifests, not a runnable platform
            continue
        platforms.append(f"{p_os}/{p_arch}" + (f"/{variant}" if variant else ""))
        # arm64 images are variant v8 or carry no variant at all
        matches = p_os == os_name and p_arch == arch and (variant in (None, "v8") or arch != "arm64")
        if matches and chosen is None:
            chosen = str(entry.get("digest"))
    return tuple(platforms), chosen


# The digest algorithms the OCI image spec registers; a registry may answer with either.
DIGEST_ALGORITHMS = {"sha256": 64, "sha512": 128}


def _check_served_digest(url: str, body: bytes, served: str) -> None:
    """The registry's Docker-Content-Digest, in whichever registered algorithm, must be the body's.

    pins.toml records the sha256 (what docker pulls by); a header in another algorithm is checked
    all the same, and one in an algorithm we cannot check is refused rather than ignored.
    """
    if not served:
        return
    algorithm, _, hex_digest = served.partition(":")
    if DIGEST_ALGORITHMS.get(algorithm) != len(hex_digest):
        raise FetchError(
            url,
            f"the registry sent Docker-Content-Digest {served!r}, which is not a sha256 or sha512 digest",
            "The registry is at fault; pins.toml was left as it was",
        )
    computed = f"{algorithm}:{hashlib.new(algorithm, body).hexdigest()}"
    if served != computed:
        raise FetchError(
            url,
            f"the registry says the manifest is {served} but its bytes hash to {computed}",
            "Something between you and the registry altered the manifest: do not trust it",
        )


class _Repository:
    """Manifests and blobs of one repository, through one authenticated session."""

    def __init__(self, http: Http, name: ImageName, creds: Credentials | None) -> None:
        self.name = name
        self.session = RegistrySession(http, registry=name.registry, repository=name.repository, creds=creds)

    def get_manifest(self, url: str) -> tuple[bytes, str, str]:
        """(body, media type, digest) of the manifest at ``url``, digest verified."""
        body, headers = self.session.get(url, {"Accept": ACCEPT})
        media_type = headers.get("Content-Type", "").split(";")[0].strip()
        if media_type not in (*INDEX_TYPES, *MANIFEST_TYPES):
            doc = _json(url, body)
            media_type = doc.get("mediaType", "") if isinstance(doc, dict) else ""
        if media_type not in (*INDEX_TYPES, *MANIFEST_TYPES):
            raise FetchError(
                url,
                f"unsupported manifest type '{media_type or 'unknown'}'",
                "Only OCI and Docker v2 manifests and indexes are supported; re-push the image",
            )
        _check_served_digest(url, body, headers.get("Docker-Content-Digest", ""))
        return body, media_type, "sha256:" + hashlib.sha256(body).hexdigest()

    def get_blob(self, digest: str) -> bytes:
        url = f"{self.name.base_url}/blobs/{digest}"
        body, _ = self.session.get(url, {})
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise FetchError(url, "the blob does not match its digest", "Do not trust this registry answer")
        return body


__all__ = ["ImageDigests", "ImageName", "RegistryClient", "is_loopback", "parse_image_name"]
