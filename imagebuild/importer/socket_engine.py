"""The Docker engine API with http.client: the engine of nodes without imagebuild.

The engine is the one the docker CLI uses (``docker_context``: DOCKER_HOST, else the docker context),
unix:// or tcp:// (TLS from DOCKER_TLS_VERIFY and DOCKER_CERT_PATH, or from the context's files).
It talks to the engine itself rather than running the docker CLI, so it needs no CLI on the node and
reports the engine's own error messages.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import urllib.parse
from typing import Any, Iterable

from .docker_api import (
    ABSENT,
    image_state,
    names_images_by_manifest,
    read_load,
    response_error,
    tag_table,
)
from .docker_context import ContextError, Tls, engine_endpoint
from .failures import BadInput, EngineUnavailable
from .held_layers import chains_of
from .load_places import PODMAN_API_COPIES, docker_disk, podman_disk
from .load_room import LoadDisk


class SocketEngine:
    """The engine calls the importer makes (``verified_load.ImportEngine``), and nothing else."""

    def __init__(self, host: str, *, source: str = "DOCKER_HOST", chosen: str = "", tls: Tls | None = None) -> None:
        self.address = host
        self._chosen = chosen  # what chose the address, for a message about it (Endpoint.chosen)
        url = urllib.parse.urlsplit(host)
        self._unix = url.path if url.scheme == "unix" else None
        self._netloc = url.netloc if url.scheme == "tcp" else None
        if self._unix is None and self._netloc is None:
            msg = f"{source}={host}: only unix:// and tcp:// engines are supported here" if source == "DOCKER_HOST" else (
                f"{host}{chosen}: only unix:// and tcp:// engines are supported here"
            )
            raise EngineUnavailable(msg)
        self._tls = _tls_context(tls, source) if tls is not None and self._netloc is not None else None
        self._podman: bool | None = None
        self._info = self._json("/info", "report how it stores images")
        self.ids_are_manifests = names_images_by_manifest(self._info)

    @classmethod
    def from_env(cls) -> SocketEngine:
        """The engine `docker` uses here: DOCKER_HOST, else the docker context, else the default socket."""
        try:
            endpoint = engine_endpoint()
        except ContextError as e:  # named but unusable: bad input, as in imagebuild
            raise BadInput(str(e)) from None
        return cls(endpoint.host, source=endpoint.source, chosen=endpoint.chosen, tls=endpoint.tls)

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._unix is not None:
            return UnixConnection(self._unix, timeout)
        assert self._netloc is not None
        if self._tls is not None:
            return http.client.HTTPSConnection(self._netloc, timeout=timeout, context=self._tls)
        return http.client.HTTPConnection(self._netloc, timeout=timeout)

    def _request(
        self, method: str, path: str, body: Iterable[bytes] | None = None, timeout: float | None = 60
    ) -> tuple[int, bytes]:
        # Unversioned paths: every engine serves them at its own API version (Docker 29 refuses < 1.44).
        conn = self._connect(timeout)
        try:
            headers = {"Content-Type": "application/x-tar"} if body is not None else {}
            # The engine may hang up mid-upload (bad data): its answer, if it sent one, says why.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                conn.request(method, path, body=body, headers=headers, encode_chunked=body is not None)
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as e:
            msg = (
                f"the Docker engine at {self.address}{self._chosen} did not answer {method} {path.split('?', maxsplit=1)[0]} "
                f"({e or type(e).__name__}); start docker on this node, or point DOCKER_HOST at its engine"
            )
            raise EngineUnavailable(msg) from None
        finally:
            conn.close()

    def _call(self, method: str, path: str, what: str, body: Iterable[bytes] | None = None) -> bytes:
        """The response body of a successful call; an error status becomes one line naming ``what``."""
        status, data = self._request(method, path, body, timeout=None if body is not None else 60)
        if status >= 300:
            msg = f"the Docker engine at {self.address} refused to {what}: {response_error(data)}"
            raise EngineUnavailable(msg)
        return data

    def _json(self, path: str, what: str) -> Any:
        return json.loads(self._call("GET", path, what) or b"{}")

    def has_image(self, image_id: str) -> bool:
        return self.image_state(image_id) != ABSENT

    def image_state(self, image_id: str) -> str:
        # manifests=1: engines from API 1.48 on say whether the content is all there, and unpacked.
        status, data = self._request("GET", f"/images/{image_id}/json?manifests=1")
        if status == 404:
            return ABSENT
        if status >= 300:
            msg = f"the Docker engine at {self.address} refused to inspect {image_id}: {response_error(data)}"
            raise EngineUnavailable(msg)
        inspected = json.loads(data or b"{}")
        return image_state(inspected if isinstance(inspected, dict) else {}, image_id)

    def image_ids(self) -> frozenset[str]:
        return frozenset(str(i["Id"]) for i in self._json("/images/json?all=1", "list images"))

    def held_chains(self) -> frozenset[str]:
        if self.ids_are_manifests or self._is_podman():
            return frozenset()
        layers = []  # the top-level images': an intermediate image's layers are a prefix of its child's
        for image_id in {str(i["Id"]) for i in self._json("/images/json", "list images")}:
            status, data = self._request("GET", f"/images/{image_id}/json")
            if status < 300:  # else removed since the list
                layers.append(((json.loads(data) or {}).get("RootFS") or {}).get("Layers") or [])
        return chains_of(layers)

    def load_disk(self) -> LoadDisk:
        if self._unix is None or not self._is_podman():
            return docker_disk(self._info, self.address)
        return podman_disk(self._json("/v1.41/libpod/info", "report where it stores images"), PODMAN_API_COPIES)  # its own API

    def _is_podman(self) -> bool:
        """Podman's API says so in ``/version``'s Components; it refuses an archive that lacks a layer.
        Asked once: an import asks it for the held layers and for the room."""
        if self._podman is None:
            components = self._json("/version", "report its version").get("Components") or []
            self._podman = any(isinstance(c, dict) and c.get("Name") == "Podman Engine" for c in components)
        return self._podman

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        data = self._call("POST", "/images/load?quiet=1", "load the archive", body=chunks)
        lines = data.decode(errors="replace").splitlines()
        loaded, detail = read_load((json.loads(line) for line in lines if line.strip()), self._image_id)
        if detail is not None:
            msg = f"the Docker engine at {self.address} refused to load the archive: {detail}"
            raise EngineUnavailable(msg)
        return loaded

    def _image_id(self, name: str) -> str:
        quoted = urllib.parse.quote(name, safe="")
        return str(self._json(f"/images/{quoted}/json", f"inspect {quoted}")["Id"])

    def tag(self, image_id: str, name: str) -> None:
        repository, tag = name.rsplit(":", 1)
        query = urllib.parse.urlencode({"repo": repository, "tag": tag})
        self._call("POST", f"/images/{image_id}/tag?{query}", f"tag {image_id} as {name}")

    def tag_table(self) -> dict[str, str]:
        return tag_table(self._json("/images/json", "list images"))

    def untag(self, name: str) -> None:
        quoted = urllib.parse.quote(name, safe="")
        status, data = self._request("DELETE", f"/images/{quoted}?noprune=1")
        if status >= 300 and status != 404:
            msg = f"the Docker engine at {self.address} refused to remove the tag {name}: {response_error(data)}"
            raise EngineUnavailable(msg)

    def remove_image(self, image_id: str) -> None:
        status, data = self._request("DELETE", f"/images/{image_id}")
        if status >= 300 and status != 404:
            msg = f"the Docker engine at {self.address} refused to remove {image_id}: {response_error(data)}"
            raise EngineUnavailable(msg)


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _tls_context(tls: Tls, source: str) -> ssl.SSLContext:
    """The client's TLS as the docker CLI sets it up: the CA given (else the system's), the client
    certificate when there is one, and no verification only when the context says SkipTLSVerify."""
    try:
        context = ssl.create_default_context(cafile=str(tls.ca) if tls.ca else None)
        if not tls.verify:
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        if tls.cert is not None:
            context.load_cert_chain(str(tls.cert), str(tls.key) if tls.key else None)
    except (OSError, ssl.SSLError) as e:
        files = ", ".join(str(path) for path in (tls.ca, tls.cert, tls.key) if path is not None)
        msg = f"{source}: cannot use its TLS files ({files}): {getattr(e, 'strerror', None) or e}; fix them or point DOCKER_HOST elsewhere"
        raise BadInput(msg) from None
    return context
