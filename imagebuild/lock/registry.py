"""Resolve container image tags to digests over the registry HTTP API v2.

No Docker engine is needed: the manifest is fetched with requests. Names are
normalised like docker (``rocm/vllm-dev`` -> registry-1.docker.io,
``ubuntu`` -> ``library/ubuntu``). Authentication follows the registry's
challenge: anonymous or credentialed bearer tokens (credentials from the
docker config's ``auths``), or basic auth. Loopback registries are spoken to
over plain HTTP (as docker treats them as insecure by default); every other
registry over HTTPS.

Two identities are recorded: ``digest`` is the manifest as served for the tag
(the multi-arch index when there is one), ``platform_digest`` the manifest of
the arch profile's platform inside it. The served digest header is checked
against the body's sha256, so a lying proxy cannot slip a different manifest in.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from requests.structures import CaseInsensitiveDict

from imagebuild.errors import ConfigError
from imagebuild.lock.http import FetchError, Http

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join((*INDEX_TYPES, *MANIFEST_TYPES))

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}
_REPO_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
Headers = CaseInsensitiveDict[str]
_CHALLENGE_PARAM_RE = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True, kw_only=True)
class ImageName:
    """A normalised image name: where the registry is and which repository."""

    registry: str  # host[:port] as docker names it, docker.io for Docker Hub
    repository: str

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def base_url(self) -> str:
        scheme = "http" if is_loopback(self.api_host) else "https"
        return f"{scheme}://{self.api_host}/v2/{self.repository}"


@dataclass(frozen=True, kw_only=True)
class ImageDigests:
    digest: str
    platform_digest: str
    media_type: str
    platforms: tuple[str, ...]  # of the index; the one platform of a single manifest


def is_loopback(host_port: str) -> bool:
    host = host_port
    if host.startswith("["):  # [::1]:5000
        host = host[1 : host.index("]")]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_image_name(image: str) -> ImageName:
    """Split ``[host[:port]/]path`` like docker; the tag lives in its own field."""
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, image
    if registry in _HUB_ALIASES:
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not _REPO_RE.fullmatch(path):
        msg = (
            f"image '{image}' is not a valid repository name (lowercase path components; "
            f"put the tag in `tag`, not in `image`)"
        )
        raise ConfigError(msg)
    return ImageName(registry=registry, repository=path)


def load_docker_credentials(env: Mapping[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """{registry host: (user, password)} from the docker config's ``auths``.

    Only inline ``auth`` entries are read; credential stores (credsStore,
    credHelpers) need their helper binaries and are not consulted.
    """
    env = os.environ if env is None else env
    config_dir = Path(env["DOCKER_CONFIG"]) if env.get("DOCKER_CONFIG") else Path.home() / ".docker"
    path = config_dir / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        msg = f"{path}: cannot read the docker config ({e}); fix or move it"
        raise ConfigError(msg) from e
    creds: dict[str, tuple[str, str]] = {}
    auths = data.get("auths") if isinstance(data, dict) else None
    for key, entry in (auths or {}).items():
        if not isinstance(entry, dict) or not entry.get("auth"):
            continue
        try:
            user, _, password = base64.b64decode(entry["auth"]).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError) as e:
            msg = f"{path}: auths['{key}'].auth is not base64 of 'user:password'; run `docker login` again"
            raise ConfigError(msg) from e
        creds[_normalise_auth_key(key)] = (user, password)
    return creds


def _normalise_auth_key(key: str) -> str:
    host = re.sub(r"^[a-z]+://", "", key).split("/", 1)[0]
    return DOCKER_HUB if host in _HUB_ALIASES else host


def _challenge(resp: requests.Response) -> tuple[str, dict[str, str]]:
    header = resp.headers.get("WWW-Authenticate", "")
    scheme, _, rest = header.partition(" ")
    return scheme.lower(), dict(_CHALLENGE_PARAM_RE.findall(rest))


class RegistryClient:
    """Reads manifests (and config blobs) of one registry repository at a time."""

    def __init__(self, http: Http, credentials: Mapping[str, tuple[str, str]]) -> None:
        self.http = http
        self.credentials = credentials

    def resolve(self, name: ImageName, tag: str, platform: str) -> ImageDigests:
        session = _RepoSession(self.http, name, self.credentials.get(name.registry))
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
            return ImageDigests(
                digest=digest, platform_digest=chosen, media_type=media_type, platforms=platforms
            )
        # A single manifest serves one platform: make sure it is ours.
        config = doc.get("config") if isinstance(doc, dict) else None
        config_digest = config.get("digest") if isinstance(config, dict) else None
        if not isinstance(config_digest, str):
            raise FetchError(
                url, "the manifest has no config descriptor", "The registry served a bad manifest"
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
            chosen = entry.get("digest")
    return tuple(platforms), chosen


class _RepoSession:
    """Challenge-driven auth for one repository: token fetched once, reused."""

    def __init__(self, http: Http, name: ImageName, creds: tuple[str, str] | None) -> None:
        self.http = http
        self.name = name
        self.creds = creds
        self.auth_header: dict[str, str] = {}
        self.basic: tuple[str, str] | None = None

    def _get(self, url: str, headers: Mapping[str, str]) -> tuple[bytes, Headers]:
        def consume(resp: requests.Response) -> tuple[bytes, Headers]:
            return resp.content, resp.headers

        def first(resp: requests.Response) -> tuple[int, bytes, Any]:
            if resp.status_code == 401:
                return 401, b"", _challenge(resp)
            return resp.status_code, resp.content, resp.headers

        status, body, extra = self.http.request(
            url, first, headers={**headers, **self.auth_header}, auth=self.basic, accept=(200, 401)
        )
        if status == 200:
            return body, extra
        scheme, params = extra
        self._authenticate(url, scheme, params)
        return self.http.request(url, consume, headers={**headers, **self.auth_header}, auth=self.basic)

    def _authenticate(self, url: str, scheme: str, params: dict[str, str]) -> None:
        if self.auth_header or self.basic:
            raise FetchError(
                url,
                "HTTP 401 Unauthorized (credentials refused)",
                f"Check the credentials for {self.name.registry} in the docker config (docker login)",
                status=401,
            )
        if scheme == "basic":
            if self.creds is None:
                raise FetchError(
                    url,
                    "HTTP 401 Unauthorized (the registry wants a login)",
                    f"Run `docker login {self.name.registry}` (or set DOCKER_CONFIG)",
                    status=401,
                )
            self.basic = self.creds
            return
        if scheme != "bearer" or "realm" not in params:
            raise FetchError(
                url,
                f"HTTP 401 with an unsupported challenge '{scheme}'",
                "Check the registry URL",
                status=401,
            )
        query = {"service": params.get("service", "")}
        query["scope"] = params.get("scope") or f"repository:{self.name.repository}:pull"
        token_url = requests.Request("GET", params["realm"], params=query).prepare().url or params["realm"]

        def consume(resp: requests.Response) -> str:
            try:
                data = resp.json()
            except ValueError as e:
                raise FetchError(
                    token_url, "the token endpoint sent invalid JSON", "Check the registry"
                ) from e
            token = data.get("token") or data.get("access_token") if isinstance(data, dict) else None
            if not isinstance(token, str) or not token:
                raise FetchError(token_url, "the token endpoint sent no token", "Check the registry")
            return token

        try:
            token = self.http.request(token_url, consume, auth=self.creds)
        except FetchError as e:
            if e.status in (401, 403):
                who = "the credentials" if self.creds else "anonymous access"
                raise FetchError(
                    token_url,
                    f"{e.cause}: the token endpoint refused {who}",
                    f"Check the credentials for {self.name.registry} in the docker config (docker login), "
                    f"and that the repository '{self.name.repository}' exists",
                    status=e.status,
                ) from e
            raise
        self.auth_header = {"Authorization": f"Bearer {token}"}

    def get_manifest(self, url: str) -> tuple[bytes, str, str]:
        """(body, media type, digest) of the manifest at ``url``, digest verified."""
        body, headers = self._get(url, {"Accept": ACCEPT})
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
        computed = "sha256:" + hashlib.sha256(body).hexdigest()
        served = headers.get("Docker-Content-Digest", "")
        if served.startswith("sha256:") and served != computed:
            raise FetchError(
                url,
                f"the registry says the manifest is {served} but its bytes hash to {computed}",
                "Something between you and the registry altered the manifest: do not trust it",
            )
        return body, media_type, served if served.startswith("sha256:") else computed

    def get_blob(self, digest: str) -> bytes:
        url = f"{self.name.base_url}/blobs/{digest}"
        body, _ = self._get(url, {})
        if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise FetchError(url, "the blob does not match its digest", "Do not trust this registry answer")
        return body
