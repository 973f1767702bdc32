"""One repository of a registry over the distribution API, with requests: what the attestations need.

publish pushes the image through the engine; its attestations, which no engine pushes, go straight to
the registry from here: blobs (``POST`` an upload, ``PUT`` it with its digest), manifests by digest
or tag, the referrers API and the fallback tag's index. The transport is the lock's (``lock.http``:
timeouts, retries on a reset or a 5xx, no plain HTTP off this machine) and so is the authentication
(``lock.registry_auth``: the registry's challenge, answered with the credentials docker holds for
it, read through docker-py as ``engine.credentials`` reads them for the push, the token asked for
``pull,push``). Loopback registries are spoken to over plain HTTP, as docker does by default; every
other over HTTPS with the system's CA store (or ``REQUESTS_CA_BUNDLE``), and docker's own files for
the registry where it has them (``/etc/docker/certs.d/HOST:PORT/ca.crt``, ``client.cert`` and
``client.key``), as the engine's push used them.

Every failure is a RegistryError naming the URL (credentials in it redacted) and the cause; every
digest a registry answers with is checked against the bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

from imagebuild.distribute.referrers import OCI_INDEX, OCI_MANIFEST, Descriptor, sha256_of
from imagebuild.engine.credentials import registry_credentials
from imagebuild.errors import RegistryError
from imagebuild.inputs.references import ImageName, parse_image_name
from imagebuild.lock.http import FetchError, Http, TlsFiles
from imagebuild.lock.registry_auth import RegistrySession
from imagebuild.secrets import redact

TIMEOUT_S = 60.0
DOCKER_CERTS = Path("/etc/docker/certs.d")  # docker's per-registry TLS files, as the engine reads them
REFUSALS = (400, 403, 404, 405, 406, 409, 413, 415)  # 401 is the session's; 429 and 5xx are retried


def registry_said(body: bytes) -> str:
    """The distribution spec's error body, ``{"errors": [{"code", "message"}]}``, as ``: CODE message``."""
    try:
        errors = json.loads(body).get("errors")
        first = errors[0]
        said = f"{first.get('code', '')} {first.get('message', '')}".strip()
    except (ValueError, AttributeError, IndexError, KeyError, TypeError):
        said = body[:200].decode("utf-8", "replace").strip()
    said = " ".join(said.split())[:300]
    return f": {said}" if said else ""


DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_ACCEPT = ", ".join(
    (OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, "application/vnd.docker.distribution.manifest.list.v2+json")
)


@dataclass(frozen=True, kw_only=True)
class Pushed:
    digest: str
    subject_processed: bool  # the registry answered OCI-Subject: it keeps the referrers list itself


class RegistryRepository:
    """Manifests, blobs and referrers of one repository, through one authenticated session."""

    def __init__(self, http: Http, name: ImageName, *, push: bool) -> None:
        self.name = name
        creds = registry_credentials(name.registry)
        self.session = RegistrySession(
            http,
            registry=name.registry,
            repository=name.repository,
            creds=creds,
            actions="pull,push" if push else "pull",
        )

    @property
    def where(self) -> str:
        return f"{self.name.registry}/{self.name.repository}"

    def _send(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        *,
        body: bytes | None = None,
        accept: tuple[int, ...] = (200,),
    ) -> tuple[int, bytes, dict[str, str]]:
        try:  # a refusal (4xx) is read here, for the registry's own words; a 5xx is retried first
            status, answer, answered = self.session.send(
                method, url, headers, body=body, accept=(*accept, *REFUSALS)
            )
        except FetchError as e:
            cause = e.cause if e.status != 401 else f"{e.cause} ({e.hint})"
            hint = "" if e.status else "; check the registry's address and that it answers from this machine"
            msg = f"{method} {url}: {cause}{hint}"
            raise RegistryError(redact(msg)) from e
        if status not in accept:
            msg = f"{method} {url}: HTTP {status}{registry_said(answer)}"
            raise RegistryError(redact(msg))
        return status, answer, dict(answered)

    def manifest(self, reference: str) -> tuple[bytes, str] | None:
        """(bytes, media type) of the manifest ``reference`` (a tag or a digest); None when there is none."""
        url = f"{self.name.base_url}/manifests/{reference}"
        status, body, headers = self._send("GET", url, {"Accept": MANIFEST_ACCEPT}, accept=(200, 404))
        if status == 404:
            return None
        served = headers.get("Docker-Content-Digest", "")
        if reference.startswith("sha256:") and sha256_of(body) != reference:
            msg = f"GET {url}: the registry sent a manifest whose bytes hash to {sha256_of(body)}, not {reference}"
            raise RegistryError(msg)
        if served.startswith("sha256:") and served != sha256_of(body):
            msg = f"GET {url}: the registry says the manifest is {served} but its bytes hash to {sha256_of(body)}"
            raise RegistryError(msg)
        return body, headers.get("Content-Type", "").split(";")[0].strip()

    def descriptor(self, reference: str) -> Descriptor:
        """The descriptor of the manifest ``reference``: what an artifact names as its subject."""
        found = self.manifest(reference)
        if found is None:
            msg = f"{self.where} has no manifest {reference}; check the reference (publish prints it)"
            raise RegistryError(msg)
        body, media_type = found
        return Descriptor(media_type=media_type or OCI_MANIFEST, digest=sha256_of(body), size=len(body))

    def put_blob(self, data: bytes) -> bool:
        """Upload ``data`` unless the registry has it; whether it was sent."""
        digest = sha256_of(data)
        status, _, _ = self._send("HEAD", f"{self.name.base_url}/blobs/{digest}", {}, accept=(200, 404))
        if status == 200:
            return False
        start = f"{self.name.base_url}/blobs/uploads/"
        _, _, headers = self._send("POST", start, {"Content-Length": "0"}, accept=(202,))
        location = headers.get("Location")
        if not location:
            msg = f"POST {start}: the registry started an upload without a Location to send it to"
            raise RegistryError(msg)
        target = urljoin(start, location)
        target += ("&" if "?" in target else "?") + f"digest={digest}"
        self._send("PUT", target, {"Content-Type": "application/octet-stream"}, body=data, accept=(201,))
        return True

    def put_manifest(self, reference: str, data: bytes, media_type: str) -> Pushed:
        url = f"{self.name.base_url}/manifests/{reference}"
        _, _, headers = self._send("PUT", url, {"Content-Type": media_type}, body=data, accept=(201,))
        served = headers.get("Docker-Content-Digest", "")
        if served and served != sha256_of(data):
            msg = f"PUT {url}: the registry stored {served}, not the {sha256_of(data)} that was sent"
            raise RegistryError(msg)
        return Pushed(digest=sha256_of(data), subject_processed=bool(headers.get("OCI-Subject")))

    def referrers(self, digest: str) -> bytes | None:
        """The referrers API's index for ``digest``; None where the registry has no such API (404 or 400)."""
        url = f"{self.name.base_url}/referrers/{digest}"
        status, body, headers = self._send("GET", url, {"Accept": OCI_INDEX}, accept=(200, 400, 404, 406))
        if status != 200 or headers.get("Content-Type", "").split(";")[0].strip() != OCI_INDEX:
            return None
        return body

    def blob(self, digest: str) -> bytes:
        url = f"{self.name.base_url}/blobs/{digest}"
        _, body, _ = self._send("GET", url, {})
        if sha256_of(body) != digest:
            msg = f"GET {url}: the blob's bytes hash to {sha256_of(body)}, not {digest}; do not trust this answer"
            raise RegistryError(msg)
        return body


def docker_tls_files(registry: str, root: Path = DOCKER_CERTS) -> TlsFiles:
    """The CA and client certificate docker uses for ``registry`` (``/etc/docker/certs.d/HOST:PORT/``:
    ``ca.crt``, ``client.cert`` with ``client.key``), so this client trusts what the engine's push did."""
    directory = root / registry
    if not registry or "/" in registry or registry.startswith(".") or not directory.is_dir():
        return TlsFiles()
    ca = directory / "ca.crt"
    cert, key = directory / "client.cert", directory / "client.key"
    return TlsFiles(
        ca=ca if ca.is_file() else None, client=(cert, key) if cert.is_file() and key.is_file() else None
    )


@contextmanager
def opened_repository(repository: str, *, push: bool) -> Iterator[RegistryRepository]:
    """``HOST[:PORT]/REPO`` as a RegistryRepository; its connections closed on leaving."""
    name = parse_image_name(repository)
    with Http(timeout=TIMEOUT_S, tls=docker_tls_files(name.registry)) as http:
        yield RegistryRepository(http, name, push=push)
