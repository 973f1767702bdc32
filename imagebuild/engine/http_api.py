"""The Docker engine on a local socket over http.client, for the calls a cached build makes.

A fully cached ``imagebuild build`` asks the engine for its version and store, the build (its cache
check), whether the last normalised image is still there, and tags. Through docker-py those cost the
import of docker-py and requests (about 0.1 s of the no-op's 0.5 s, ``python -X importtime``) before
the first byte is sent. ``HttpEngine`` sends exactly those requests with the standard library, to
the same versioned paths docker-py uses (``/v1.41/build?...``), and opens a ``DockerEngine`` for
anything else (run, save, load, push, pull, ...) the first time it is asked: a cold build pays the
import once, when it normalises or writes its SBOM.

It is used only where it sends what docker-py would send: a unix socket named by DOCKER_HOST, or the
default socket with no docker context, and no docker config entry that changes a build request
(registry credentials and proxies: docker-py sends them as X-Registry-Config and build args). Anything
else (tcp with TLS, ssh, a context, a logged-in registry) is docker-py's, as before. Errors are the
ones DockerEngine raises, in the same words (``engine.unreachable``).
"""

from __future__ import annotations

import codecs
import http.client
import json
import os
import urllib.parse
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from imagebuild.engine.interface import (
    BuildEvent,
    BuildRequest,
    Engine,
    EngineStore,
    ImageInfo,
    StoredImage,
    classic_build_events,
    image_info,
)
from imagebuild.engine.store_kind import api_version_problem, engine_store
from imagebuild.engine.transfer_events import PullListener, PushEvent
from imagebuild.engine.unreachable import DEFAULT_SOCKET, plain_reason, probe, unreachable
from imagebuild.errors import EngineError, UnknownImageError
from imagebuild.importer.docker_api import ABSENT, image_state, response_error
from imagebuild.importer.docker_context import ContextError, engine_endpoint
from imagebuild.importer.socket_engine import UnixConnection
from imagebuild.launcher.text import control_character

PROBE_TIMEOUT_S = 10  # as DockerEngine: connecting to a live engine takes milliseconds
READ_SIZE = 1 << 16
# Keys of the docker config that change what docker-py sends with a build (or where it sends it).
REQUEST_KEYS = ("auths", "credsStore", "credHelpers", "proxies")


def plain_socket() -> str | None:
    """The engine's unix socket when docker-py would send a build there exactly as HttpEngine does, else None.

    DOCKER_HOST ``unix:///PATH`` (or unset, with no docker context: the default socket), and a docker
    config (DOCKER_CONFIG, else ~/.docker) without credentials or proxies.
    """
    host = os.environ.get("DOCKER_HOST")
    if host:
        scheme, _, path = host.partition("://")
        plain = scheme == "unix" and path.startswith("/") and not any(c in path for c in "?#")
        if not plain or control_character(path):
            return None  # docker-py's, with its checks and messages
    found = docker_config_file()
    if found is not None and found.name != "config.json":
        return None  # the legacy ~/.dockercfg: credentials only
    try:
        config = json.loads(found.read_bytes()) if found is not None else {}
    except (OSError, ValueError):
        return None  # unreadable: docker-py's (credentials.check_config_file names it)
    if not isinstance(config, dict) or any(config.get(key) for key in REQUEST_KEYS):
        return None
    if not host:
        try:
            if engine_endpoint().context:  # DOCKER_CONTEXT or the config's current one
                return None
        except ContextError:
            return None  # DockerEngine says why
    return host.partition("://")[2] if host else DEFAULT_SOCKET


def docker_config_file() -> Path | None:
    """The docker config docker-py reads (its ``find_config_file``): DOCKER_CONFIG's, ~/.docker's, ~/.dockercfg."""
    candidates = (
        [Path(os.environ["DOCKER_CONFIG"]) / "config.json"] if os.environ.get("DOCKER_CONFIG") else []
    )
    candidates += [Path.home() / ".docker" / "config.json", Path.home() / ".dockercfg"]
    return next((path for path in candidates if path.exists()), None)


class HttpEngine(Engine):
    def __init__(self, socket_path: str, version: dict[str, Any], timeout: int) -> None:
        self._socket = socket_path
        self._address = f"unix://{socket_path}"
        self._version = version
        self._prefix = f"/v{version.get('ApiVersion')}"
        self._timeout = timeout
        self._info: dict[str, Any] | None = None
        self._store: EngineStore | None = None
        self._docker: Engine | None = None  # docker-py's, for the rest, opened when first needed

    @classmethod
    def from_env(cls, timeout: int = 600) -> Engine:
        """The engine from the environment: this one on a plain local socket, else DockerEngine's."""
        path = plain_socket()
        if path is None:
            from imagebuild.engine.docker import DockerEngine

            return DockerEngine.from_env(timeout)
        address = f"unix://{path}"
        try:
            probe(address, PROBE_TIMEOUT_S)
            status, body = _request(path, "GET", "/version", timeout=timeout)
        except (OSError, http.client.HTTPException) as e:
            raise EngineError(unreachable(address, e)) from e
        version = _json_object(body) if status < 300 else {}
        if not version:
            msg = f"cannot reach the Docker engine at {address}: GET /version answered {status} ({response_error(body)})"
            raise EngineError(msg)
        problem = api_version_problem(address, str(version.get("ApiVersion", "")))
        if problem is not None:
            raise EngineError(problem)
        return cls(path, version, timeout)

    @classmethod
    @contextmanager
    def opened(cls, timeout: int = 600) -> Iterator[Engine]:
        """As ``DockerEngine.opened``: the engine from the environment, closed when the block ends."""
        engine = cls.from_env(timeout)
        try:
            yield engine
        finally:
            engine.close()

    @property
    def address(self) -> str:
        return self._address

    def close(self) -> None:
        if self._docker is not None:
            self._docker.close()

    def _call(self, method: str, path: str, what: str) -> tuple[int, bytes]:
        try:
            return _request(self._socket, method, self._prefix + path, timeout=self._timeout)
        except (OSError, http.client.HTTPException) as e:
            msg = f"could not {what}: {plain_reason(e)}"
            raise EngineError(msg) from e

    def engine_info(self) -> dict[str, Any]:
        if self._info is None:
            status, body = self._call(
                "GET", "/info", f"ask the Docker engine at {self._address} how it stores images"
            )
            if status >= 300:
                msg = f"could not ask the Docker engine at {self._address} how it stores images: {response_error(body)}"
                raise EngineError(msg)
            self._info = _json_object(body)
        return self._info

    def version(self) -> str:
        return str(self._version.get("Version", "unknown"))

    def store(self) -> EngineStore:
        if self._store is None:
            self._store = engine_store(self.engine_info(), self._version)
        return self._store

    def build(self, request: BuildRequest) -> Iterator[BuildEvent]:
        yield from classic_build_events(self.build_chunks(request))

    def build_chunks(self, request: BuildRequest) -> Iterator[dict[str, Any]]:
        """The raw JSON messages of the build stream: the query docker-py's ``build`` sends for the same request."""
        query: dict[str, str] = {
            "q": "False",
            "nocache": str(request.no_cache),
            "rm": "True",
            "forcerm": "True",
        }
        query["pull"] = "False"
        if request.build_args:
            query["buildargs"] = json.dumps(dict(request.build_args))
        if request.labels:
            query["labels"] = json.dumps(dict(request.labels))
        if request.network_mode:
            query["networkmode"] = request.network_mode
        if request.cache_from:
            query["cachefrom"] = json.dumps(list(request.cache_from))
        path = f"{self._prefix}/build?{urllib.parse.urlencode(query)}"
        # No timeout, as docker-py's build: a step may print nothing for most of an hour.
        connection = UnixConnection(self._socket, None)
        try:
            try:
                connection.request(
                    "POST", path, body=request.context, headers={"Content-Type": "application/tar"}
                )
                response = connection.getresponse()
                if response.status >= 300:
                    detail = response_error(response.read())
                    msg = f"the Docker engine at {self._address} failed the build request: {detail}"
                    raise EngineError(msg)
                yield from json_messages(iter(lambda: response.read1(READ_SIZE), b""))
            except (OSError, http.client.HTTPException) as e:
                msg = f"lost the connection to the Docker engine at {self._address} during the build: {plain_reason(e)}"
                raise EngineError(msg) from e
        finally:
            connection.close()

    def tag(self, image_id: str, name: str) -> None:
        repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "latest")
        query = urllib.parse.urlencode({"tag": tag, "repo": repository, "force": "False"})
        status, body = self._call(
            "POST", f"/images/{_quoted(image_id)}/tag?{query}", f"tag {image_id} as {name}"
        )
        if status >= 300:
            msg = f"could not tag {image_id} as {name}: {response_error(body)}"
            raise EngineError(msg)

    def inspect_image(self, ref: str) -> ImageInfo:
        status, body = self._call("GET", f"/images/{_quoted(ref)}/json", f"inspect image '{ref}'")
        if status == 404:
            msg = f"no image '{ref}' in the Docker engine at {self._address}; build it first (imagebuild build) or name an image `docker images` lists"
            raise UnknownImageError(msg)
        if status < 300:
            data = _json_object(body)
            status, body = self._call("GET", f"/images/{_quoted(ref)}/history", f"inspect image '{ref}'")
        if status >= 300:
            msg = f"could not inspect image '{ref}': {response_error(body)}"
            raise EngineError(msg)
        history = json.loads(body)
        return image_info(
            data, history if isinstance(history, list) else [], **self._identity_fields(str(data["Id"]))
        )

    def _identity_fields(self, image_id: str) -> dict[str, str]:
        if not self.store().ids_are_manifests:  # the image ID is the config digest
            return {}
        from imagebuild.engine import containerd_store  # not on a graph-driver engine's path

        return containerd_store.identity_fields(image_id, address=self._address, info=self.engine_info())

    def has_image(self, image_id: str) -> bool:
        return self._inspected(image_id, "") is not None  # a fully cached build's check: no more asked

    def image_state(self, image_id: str) -> str:
        # manifests=1: from API 1.48 on the engine says whether the content is all there, and unpacked.
        inspected = self._inspected(image_id, "?manifests=1")
        return ABSENT if inspected is None else image_state(inspected, image_id)

    def _inspected(self, image_id: str, query: str) -> dict[str, Any] | None:
        status, body = self._call("GET", f"/images/{_quoted(image_id)}/json{query}", f"inspect image {image_id}")
        if status == 404:
            return None
        if status >= 300:
            msg = f"could not inspect image {image_id}: {response_error(body)}"
            raise EngineError(msg)
        return _json_object(body)

    # Everything else is docker-py's: the calls of a build that makes a new image, and of the other verbs.

    def docker(self) -> Engine:
        if self._docker is None:
            from imagebuild.engine.docker import DockerEngine

            self._docker = DockerEngine.from_env(self._timeout)
        return self._docker

    def run(self, image: str, command: list[str], *, network_mode: str | None = None) -> tuple[int, str]:
        return self.docker().run(image, command, network_mode=network_mode)

    def start(self, image: str, *, network_mode: str | None = None) -> str:
        return self.docker().start(image, network_mode=network_mode)

    def remove(self, container_id: str) -> None:
        self.docker().remove(container_id)

    def push(self, repository: str, tag: str) -> Iterator[PushEvent]:
        return self.docker().push(repository, tag)

    def pull(self, reference: str, *, progress: PullListener | None = None) -> str:
        return self.docker().pull(reference, progress=progress)

    def save(self, image_id: str) -> Iterator[bytes]:
        return self.docker().save(image_id)

    def stored_image(self, image_id: str) -> StoredImage:
        return self.docker().stored_image(image_id)

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        return self.docker().load(chunks)

    def image_ids(self) -> frozenset[str]:
        return self.docker().image_ids()

    def tag_table(self) -> dict[str, str]:
        return self.docker().tag_table()

    def held_chains(self) -> frozenset[str]:
        return self.docker().held_chains()

    def podman_info(self) -> dict[str, Any]:
        status, body = self._call("GET", "/libpod/info", f"ask Podman at {self._address} where it copies a load")
        return _json_object(body) if status < 300 else {}  # Podman's own API, beside its Docker-compatible one

    def untag(self, name: str) -> None:
        self.docker().untag(name)

    def remove_image(self, image_id: str) -> None:
        self.docker().remove_image(image_id)


def json_messages(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a stream, however its chunks split them (as docker-py's ``json_stream``)."""
    decoder, text = json.JSONDecoder(), codecs.getincrementaldecoder("utf-8")(errors="replace")
    buffered = ""
    for chunk in chunks:
        buffered += text.decode(chunk)
        while True:
            buffered = buffered.lstrip()
            try:
                message, end = decoder.raw_decode(buffered)
            except ValueError:
                break  # the rest of this object is still to come
            buffered = buffered[end:]
            if isinstance(message, dict):
                yield message
    rest = (buffered + text.decode(b"", final=True)).strip()
    if rest:
        msg = f"the build stream ended inside a message: {rest[:200]!r}"
        raise EngineError(msg)


def _request(socket_path: str, method: str, path: str, *, timeout: float) -> tuple[int, bytes]:
    connection = UnixConnection(socket_path, timeout)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _quoted(name: str) -> str:
    """A name in a path, quoted as docker-py quotes it (``/`` and ``:`` kept)."""
    return urllib.parse.quote(name, safe="/:")
