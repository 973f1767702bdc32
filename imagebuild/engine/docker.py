"""The Docker engine through docker-py: with ``credentials`` and ``address``, the only modules that import docker.

docker-py's errors become EngineError with the address tried and what to do.
The engine is taken from the environment like the docker CLI does: DOCKER_HOST
and the TLS variables, else the current docker context, else the local socket.
Registry credentials come from docker's own config (``auths``, ``credsStore``, ``credHelpers``)
through docker-py's auth module, so they resolve exactly as docker resolves them: for lock's
registry queries and for push and pull (``credentials``).
Load and stream messages are read by ``importer.docker_api``, shared with the nodes' stdlib engine.
"""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import docker.auth
import docker.errors
import docker.utils
import docker.utils.config
import requests
import urllib3

import docker
from imagebuild.engine import containerd_store
from imagebuild.engine.address import check_address, context_tls, docker_endpoint
from imagebuild.engine.credentials import credentials_for, registry_failure
from imagebuild.engine.interface import (
    GRAPH_DRIVER,
    BuildEvent,
    BuildRequest,
    Engine,
    EngineStore,
    ImageInfo,
    StoredImage,
    classic_build_events,
    image_info,
)
from imagebuild.engine.overlay2_store import stored_image
from imagebuild.engine.store_kind import api_version_problem, engine_store
from imagebuild.engine.transfer_events import PullListener, PushEvent, pull_event, push_event
from imagebuild.engine.unreachable import plain_reason, probe, unreachable
from imagebuild.errors import EngineError, UnknownImageError
from imagebuild.importer.docker_api import ABSENT, image_state, read_load, stream_error, tag_table
from imagebuild.importer.held_layers import chains_of

PROBE_TIMEOUT_S = 10  # connecting to a live engine takes milliseconds; a filtered port never answers
CHUNK_SIZE = 1 << 20  # save stream chunks: large enough for throughput, small enough to bound memory


class DockerEngine(Engine):
    def __init__(self, client: docker.DockerClient, address: str) -> None:
        self._client = client
        self._api = client.api
        self._address = address
        self._store: EngineStore | None = None  # asked once: it does not change while we talk
        self._info: dict[str, Any] = {}  # /info, as store() asked it
        # Requests without a timeout under way (loads may overlap: imagebuild.normalize.segmented_load)
        # and the client's timeout, which the last of them puts back.
        self._unbounded, self._timeout_lock, self._timeout = 0, threading.Lock(), client.api.timeout

    @classmethod
    def from_env(cls, timeout: int = 600) -> DockerEngine:
        endpoint = docker_endpoint()
        address = endpoint.host
        check_address(address, endpoint.source)
        try:
            probe(address, PROBE_TIMEOUT_S)
        except OSError as e:
            raise EngineError(unreachable(address, e) + endpoint.chosen) from e
        try:
            # Creating the client asks the engine for its API version (GET /version):
            # that request is the reachability check, so no separate ping.
            client = (
                docker.DockerClient(base_url=address, timeout=timeout, tls=context_tls(endpoint.tls))
                if endpoint.context
                else docker.from_env(timeout=timeout)  # DOCKER_HOST and its TLS variables, or the default socket
            )
        except docker.errors.DockerException as e:
            if "paramiko" in str(e):
                msg = (
                    f"DOCKER_HOST={address}: ssh:// engines need the paramiko package (pip install paramiko); "
                    "or forward the engine's socket with ssh -L and point DOCKER_HOST at the local end"
                )
                raise EngineError(msg) from e
            raise EngineError(unreachable(address, e) + endpoint.chosen) from e
        problem = api_version_problem(address, str(client.api.api_version))  # negotiated: the engine's own
        if problem is not None:
            client.close()
            raise EngineError(problem)
        return cls(client, address)

    @property
    def address(self) -> str:
        return self._address

    def close(self) -> None:
        self._client.close()

    @classmethod
    @contextmanager
    def opened(cls, timeout: int = 600) -> Iterator[DockerEngine]:
        """The engine from the environment (as ``from_env``), closed when the block ends, also on error.

        The one way a verb holds the engine: ``with DockerEngine.opened() as engine: ...``.
        """
        engine = cls.from_env(timeout)
        try:
            yield engine
        finally:
            engine.close()

    def version(self) -> str:
        try:
            return str(self._api.version().get("Version", "unknown"))
        except docker.errors.DockerException as e:
            msg = f"could not ask the Docker engine at {self._address} for its version: {plain_reason(e)}"
            raise EngineError(msg) from e

    def store(self) -> EngineStore:
        if self._store is None:
            try:
                info, version = self._api.info(), self._api.version()
            except docker.errors.DockerException as e:
                msg = f"could not ask the Docker engine at {self._address} how it stores images: {plain_reason(e)}"
                raise EngineError(msg) from e
            self._store, self._info = engine_store(info, version), info
        return self._store

    def engine_info(self) -> dict[str, Any]:
        self.store()
        return self._info

    def podman_info(self) -> dict[str, Any]:
        try:  # Podman's own API, beside its Docker-compatible one; docker-py has no call for it
            response = self._api.get(f"{self._api.base_url}/v{self._api.api_version}/libpod/info", timeout=30)
            return dict(response.json()) if response.ok else {}
        except (requests.exceptions.RequestException, ValueError, TypeError):
            return {}

    def build(self, request: BuildRequest) -> Iterator[BuildEvent]:
        try:
            yield from classic_build_events(self.build_chunks(request))
        except docker.errors.DockerException as e:
            msg = f"the Docker engine at {self._address} failed the build request: {plain_reason(e)}"
            raise EngineError(msg) from e
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as e:
            # docker-py lets the transport's errors through unwrapped: a connection lost
            # mid-stream (a daemon restart, a dropped tunnel) is urllib3's ProtocolError.
            msg = f"lost the connection to the Docker engine at {self._address} during the build: {plain_reason(e)}"
            raise EngineError(msg) from e

    def build_chunks(self, request: BuildRequest) -> Iterator[dict[str, Any]]:
        """The raw JSON messages of the build stream (build() translates them; recorders keep them)."""
        stream: Iterator[dict[str, Any]] = self._api.build(
            fileobj=io.BytesIO(request.context),
            custom_context=True,
            decode=True,
            rm=True,
            forcerm=True,  # remove intermediate containers of failed steps too
            labels=dict(request.labels),
            buildargs=dict(request.build_args),
            network_mode=request.network_mode,
            nocache=request.no_cache,
            pull=False,
            cache_from=list(request.cache_from) or None,
        )
        return stream

    def tag(self, image_id: str, name: str) -> None:
        repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "latest")
        try:
            self._api.tag(image_id, repository, tag)
        except docker.errors.DockerException as e:
            msg = f"could not tag {image_id} as {name}: {plain_reason(e)}"
            raise EngineError(msg) from e

    def inspect_image(self, ref: str) -> ImageInfo:
        try:
            data = self._api.inspect_image(ref)
            history = self._api.history(ref)
        except docker.errors.ImageNotFound as e:
            msg = f"no image '{ref}' in the Docker engine at {self._address}; build it first (imagebuild build) or name an image `docker images` lists"
            raise UnknownImageError(msg) from e
        except docker.errors.DockerException as e:
            msg = f"could not inspect image '{ref}': {plain_reason(e)}"
            raise EngineError(msg) from e
        if not self.store().ids_are_manifests:  # the image ID is the config digest
            return image_info(data, history)
        return image_info(data, history, **containerd_store.identity_fields(data["Id"], address=self._address, info=self._info))

    def run(self, image: str, command: list[str], *, network_mode: str | None = None) -> tuple[int, str]:
        container_id = self._create(image, command, network_mode)
        try:
            self._api.start(container_id)
            code = int(self._api.wait(container_id)["StatusCode"])
            output = self._api.logs(container_id, stdout=True, stderr=True).decode(errors="replace")
        except docker.errors.DockerException as e:
            msg = f"could not run {command[0]} in {image}: {plain_reason(e)}"
            raise EngineError(msg) from e
        finally:
            self.remove(container_id)
        return code, output

    def start(self, image: str, *, network_mode: str | None = None) -> str:
        container_id = self._create(image, ["sleep", "infinity"], network_mode)
        try:
            self._api.start(container_id)
        except docker.errors.DockerException as e:
            self.remove(container_id)
            msg = f"could not start a container of {image}: {plain_reason(e)}"
            raise EngineError(msg) from e
        return container_id

    def remove(self, container_id: str) -> None:
        try:
            self._api.remove_container(container_id, force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as e:
            msg = f"could not remove container {container_id[:12]}: {plain_reason(e)}"
            raise EngineError(msg) from e

    def push(self, repository: str, tag: str) -> Iterator[PushEvent]:
        what = f"push of {repository}:{tag}"
        registry, _ = docker.auth.resolve_repository_name(repository)
        credentials = credentials_for(registry)
        try:
            with self._without_timeout():
                stream = self._api.push(
                    repository, tag=tag, stream=True, decode=True, auth_config=credentials.config
                )
            for chunk in stream:
                detail = stream_error(chunk)
                if detail is not None:
                    raise registry_failure(what, registry, detail, credentials)
                yield push_event(chunk)
        except docker.errors.DockerException as e:
            raise registry_failure(what, registry, plain_reason(e), credentials) from e

    def pull(self, reference: str, *, progress: PullListener | None = None) -> str:
        what = f"pull of {reference}"
        repository, _ = docker.utils.parse_repository_tag(reference)
        registry, _ = docker.auth.resolve_repository_name(repository)
        credentials = credentials_for(registry)
        try:
            for chunk in self._api.pull(reference, stream=True, decode=True, auth_config=credentials.config):
                detail = stream_error(chunk)
                if detail is not None:
                    raise registry_failure(what, registry, detail, credentials)
                if progress is not None:
                    progress(pull_event(chunk))
            return str(self._api.inspect_image(reference)["Id"])
        except docker.errors.DockerException as e:
            raise registry_failure(what, registry, plain_reason(e), credentials) from e

    def save(self, image_id: str) -> Iterator[bytes]:
        try:
            with self._without_timeout():  # the engine may prepare for minutes before the first byte
                stream = self._api.get_image(image_id, chunk_size=CHUNK_SIZE)
            yield from stream
        except docker.errors.ImageNotFound as e:
            msg = f"no image {image_id} in the Docker engine at {self._address}"
            raise UnknownImageError(msg) from e
        except docker.errors.DockerException as e:
            msg = f"the Docker engine at {self._address} failed to save {image_id}: {plain_reason(e)}"
            raise EngineError(msg) from e

    def stored_image(self, image_id: str) -> StoredImage:
        if not self._address.startswith("unix://"):  # its data root is on another machine (or VM)
            return StoredImage(unavailable=f"the engine at {self._address} is not on a local socket")
        try:
            data, root = self._api.inspect_image(image_id), self.engine_info().get("DockerRootDir")
        except docker.errors.DockerException as e:
            return StoredImage(unavailable=f"could not inspect {image_id[:19]}: {plain_reason(e)}")
        if self.store().ids_are_manifests:  # the content store: blobs, read by the manifest the ID names
            return containerd_store.stored_image(str(data["Id"]), data_root=str(root or ""))
        return stored_image(image_id, inspected=data, data_root=str(root or ""))

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        try:
            with self._without_timeout():  # uploading many GB is one request
                stream = self._api.load_image(iter(chunks), quiet=True)
            loaded, detail = read_load(stream, self._image_id)
        except (docker.errors.DockerException, OSError) as e:
            # requests raises ConnectionError when the engine hangs up mid-stream (bad data).
            msg = f"the Docker engine at {self._address} stopped reading the archive: {plain_reason(e)}"
            raise EngineError(msg) from e
        if detail is not None:
            msg = f"the Docker engine at {self._address} refused the archive: {detail}"
            raise EngineError(msg)
        return loaded

    def _image_id(self, name: str) -> str:
        return str(self._api.inspect_image(name)["Id"])

    def image_state(self, image_id: str) -> str:
        try:  # manifests=1 (API 1.48 on): docker-py's inspect_image does not ask it
            response = self._api.get(self._api._url("/images/{0}/json", image_id), params={"manifests": 1})
            if response.status_code == 404:
                return ABSENT
            inspected = self._api._result(response, json=True)
        except (docker.errors.DockerException, requests.exceptions.RequestException, ValueError) as e:
            msg = f"could not inspect image {image_id}: {plain_reason(e)}"
            raise EngineError(msg) from e
        return image_state(inspected if isinstance(inspected, dict) else {}, image_id)

    def image_ids(self) -> frozenset[str]:
        try:
            return frozenset(str(i) for i in self._api.images(all=True, quiet=True))
        except docker.errors.DockerException as e:
            msg = f"could not list the images of the Docker engine at {self._address}: {plain_reason(e)}"
            raise EngineError(msg) from e

    def held_chains(self) -> frozenset[str]:
        """As Engine's, from the top-level images alone (an intermediate image's layers are a prefix
        of its child's), one inspect each."""
        if self.store().kind != GRAPH_DRIVER:
            return frozenset()
        layers = []
        try:
            for image in self._api.images():
                with contextlib.suppress(docker.errors.ImageNotFound):  # removed since the list
                    layers.append(self._api.inspect_image(image["Id"]).get("RootFS", {}).get("Layers") or [])
        except docker.errors.DockerException as e:
            msg = f"could not list the images of the Docker engine at {self._address}: {plain_reason(e)}"
            raise EngineError(msg) from e
        return chains_of(layers)

    def tag_table(self) -> dict[str, str]:
        try:
            images = self._api.images()
        except docker.errors.DockerException as e:
            msg = f"could not list the images of the Docker engine at {self._address}: {plain_reason(e)}"
            raise EngineError(msg) from e
        return tag_table(images)

    def untag(self, name: str) -> None:
        try:
            self._api.remove_image(name, noprune=True)
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.DockerException as e:
            msg = f"could not remove the tag {name}: {plain_reason(e)}"
            raise EngineError(msg) from e

    def remove_image(self, image_id: str) -> None:
        try:
            self._api.remove_image(image_id)
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.DockerException as e:
            msg = f"could not remove image {image_id}: {plain_reason(e)}"
            raise EngineError(msg) from e

    @contextmanager
    def _without_timeout(self) -> Iterator[None]:
        """No socket timeout for the request made inside: saves, loads and pushes run as long as they must.

        docker-py applies the client's timeout per request, so only the request made here is unbounded
        (and any other made while one is under way: loads overlap in imagebuild.normalize.segmented_load).
        """
        with self._timeout_lock:
            if not self._unbounded:
                self._timeout = self._api.timeout
            self._unbounded += 1
            self._api.timeout = None
        try:
            yield
        finally:
            with self._timeout_lock:
                self._unbounded -= 1
                if not self._unbounded:
                    self._api.timeout = self._timeout

    def _create(self, image: str, command: list[str], network_mode: str | None) -> str:
        try:
            host_config = self._api.create_host_config(network_mode=network_mode)
            container = self._api.create_container(
                image, command=command, entrypoint=[], host_config=host_config, detach=True
            )
        except docker.errors.ImageNotFound as e:
            msg = f"no image '{image}' in the Docker engine at {self._address}"
            raise EngineError(msg) from e
        except docker.errors.DockerException as e:
            msg = f"could not create a container of {image}: {plain_reason(e)}"
            raise EngineError(msg) from e
        return str(container["Id"])
