"""The container engine as imagebuild needs it: a small interface.

Only ``imagebuild.engine.docker`` talks to docker-py; everything else uses
these types, so the build and verify logic is tested with a fake engine
(``imagebuild.testing.FakeEngine``, which replays recorded build streams).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagebuild.engine.transfer_events import PullListener, PushEvent
from imagebuild.errors import UnknownImageError
from imagebuild.importer.docker_api import ABSENT, stream_error
from imagebuild.importer.held_layers import chains_of
from imagebuild.importer.load_places import PODMAN_API_COPIES, docker_disk, podman_disk
from imagebuild.importer.load_room import LoadDisk


@dataclass(frozen=True, kw_only=True)
class BuildEvent:
    """One message of a classic-builder build stream."""

    text: str = ""  # a line of output (may be empty)
    error: str | None = None  # the build failed with this message
    image_id: str | None = None  # the built image (last event of a success)


@dataclass(frozen=True, kw_only=True)
class ImageInfo:
    id: str
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    env: Mapping[str, str]
    entrypoint: tuple[str, ...] | None
    cmd: tuple[str, ...] | None
    workdir: str
    user: str = ""
    exposed_ports: tuple[str, ...] = ()  # "8000/tcp", as the config's ExposedPorts names them
    history: tuple[str, ...] = field(default=())  # created_by of every layer, newest first
    layers: tuple[str, ...] = field(default=())  # the layers' diffIDs (sha256:...), lowest first
    size: int = 0  # bytes, as the engine counts the image (its layers, the base's included)
    # The config's digest, imagebuild's identity of the image, where ``id`` is not it (the containerd
    # image store names images by their manifest); "" with ``identity_unknown`` saying why when the
    # engine's store could not be read.
    config_digest: str = ""
    identity_unknown: str = ""

    @property
    def identity(self) -> str:
        """The config's digest: the same for one image on every engine (the image ID on graph-driver stores)."""
        return self.config_digest or ("" if self.identity_unknown else self.id)

    @property
    def described(self) -> str:
        """``sha256:abc...`` or, where the engine names it otherwise, ``sha256:abc... (engine ID sha256:def...)``."""
        if self.identity_unknown:
            return f"engine ID {self.id[:19]} (identity unknown: {self.identity_unknown})"
        return (
            self.identity[:19]
            if self.identity == self.id
            else f"{self.identity[:19]} (engine ID {self.id[:19]})"
        )


@dataclass(frozen=True, kw_only=True)
class StoredLayer:
    """One layer as the engine stores it: its files, and the record of its tar's headers."""

    diff_id: str  # sha256 of the layer tar, as the image config names it
    files: Path  # the layer's directory (overlay2: its diff directory)
    tar_split: Path  # the engine's tar-split record (tar-split.json.gz): headers and order of the tar
    held_bytes: int | None = None  # what its files hold, as the layer database records it; None: not known


@dataclass(frozen=True, kw_only=True)
class BlobLayer:
    """One layer as the containerd image store keeps it: a blob of its content store, as the manifest names it.

    The blob is the layer's tar, compressed as ``media_type`` says (gzip for the classic builder's
    layers and most pulled ones; none for the layers imagebuild loads), named by its own digest.
    """

    diff_id: str  # sha256 of the layer tar, as the image config names it
    blob: Path  # <content store>/blobs/sha256/<digest hex>
    digest: str  # the blob's sha256 (of the compressed bytes; the diffID when uncompressed)
    media_type: str  # as the manifest gives it
    size: int  # the blob's size, as the manifest gives it


@dataclass(frozen=True, kw_only=True)
class StoredImage:
    """An image read straight from a local engine's store, or why it cannot be.

    A graph-driver store (overlay2) gives StoredLayers and its layer database; the containerd image
    store gives BlobLayers, the manifest the image ID names and its content store's blob directory.
    """

    config: Path | None = None  # the config's bytes, as stored (their sha256 is the identity)
    layers: tuple[StoredLayer | BlobLayer, ...] = ()  # lowest first, one per diffID; all of one kind
    unavailable: str = ""  # why not (a remote engine, another storage driver, an unreadable data root)
    # The layer database (``layerdb/sha256``): every layer the engine holds, by chain ID, with its diffID
    # (``diff``) and tar-split record; where normalisation finds the layers an earlier run made.
    layer_db: Path | None = None
    # The containerd store: the manifest blob (its sha256 is the image ID), and the content store's
    # ``blobs/sha256`` directory, where normalisation finds the (uncompressed) layers an earlier run loaded.
    manifest: Path | None = None
    blobs: Path | None = None


GRAPH_DRIVER, CONTAINERD = "graph driver", "containerd"  # the two image stores a Docker engine may use
PODMAN = "podman"  # Podman's Docker-compatible API in front of containers/storage


@dataclass(frozen=True, kw_only=True)
class EngineStore:
    """Which Docker engine, and how it stores images: what an image ID means there.

    On a graph-driver store (overlay2, vfs: Docker before 29's default) the image ID is the digest of
    the image's config. On the containerd image store (Docker 29's default for fresh installs) it is
    the digest of the image's manifest; the config digest, imagebuild's identity, is not an engine
    reference there, so imagebuild tags and inspects by the manifest digest it loaded.
    Podman (``podman system service``) answers the same API in front of containers/storage: its
    image ID is the config's digest, but its load takes no archive that leaves a layer out.
    """

    version: str = "unknown"
    kind: str = GRAPH_DRIVER  # GRAPH_DRIVER, CONTAINERD or PODMAN
    driver: str = "unknown"  # overlay2, vfs; overlayfs (a containerd snapshotter); overlay (podman)
    api_version: str = ""  # the Docker API version the engine serves (1.41)

    @property
    def ids_are_manifests(self) -> bool:
        return self.kind == CONTAINERD

    @property
    def name(self) -> str:
        """The engine, as a refusal names it: ``Docker 26.1.5``, ``Podman 4.3.1 (Docker API 1.41)``."""
        if self.kind == PODMAN:
            return f"Podman {self.version} (Docker API {self.api_version or 'unknown'})"
        return f"Docker {self.version}"

    def describe(self) -> str:
        if self.kind == PODMAN:
            return f"{self.name}, containers/storage ({self.driver})"
        store = "the containerd image store" if self.kind == CONTAINERD else "the graph-driver store"
        return f"{self.name}, {store} ({self.driver})"


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    context: bytes  # an uncompressed tar with the Dockerfile at its root
    # Labels as a build option; the classic builder commits each as a step of its own, so
    # build_image writes them into the Dockerfile as one LABEL line instead.
    labels: Mapping[str, str] = field(default_factory=dict)
    build_args: Mapping[str, str] = field(default_factory=dict)  # values for the Dockerfile's ARGs
    network_mode: str | None = None
    no_cache: bool = False
    # Images whose history the classic builder may take steps from besides its own parent chain
    # (imagebuild.normalize.cache_image: the last build's layer cache over its normalised layers).
    cache_from: tuple[str, ...] = ()


class Engine(ABC):
    @property
    @abstractmethod
    def address(self) -> str:
        """Where the engine is, for messages (e.g. unix:///var/run/docker.sock)."""

    @abstractmethod
    def build(self, request: BuildRequest) -> Iterator[BuildEvent]:
        """Build, streaming events; never tags."""

    @abstractmethod
    def tag(self, image_id: str, name: str) -> None:
        """Tag ``image_id`` as ``name`` (repository[:tag])."""

    @abstractmethod
    def inspect_image(self, ref: str) -> ImageInfo:
        """Raise EngineError naming ``ref`` when it does not exist."""

    @abstractmethod
    def run(self, image: str, command: list[str], *, network_mode: str | None = None) -> tuple[int, str]:
        """Run a command in a throw-away container: (exit code, combined output)."""

    @abstractmethod
    def start(self, image: str, *, network_mode: str | None = None) -> str:
        """Start a long-lived container (entrypoint overridden to sleep); return its id."""

    @abstractmethod
    def remove(self, container_id: str) -> None:
        """Force-remove a container; a missing one is not an error."""

    def version(self) -> str:
        """The engine's version, for the provenance; engines that cannot tell say so."""
        return "unknown"

    def store(self) -> EngineStore:
        """The engine's version and image store; engines that cannot tell are taken as graph-driver."""
        return EngineStore(version=self.version())

    @abstractmethod
    def push(self, repository: str, tag: str) -> Iterator[PushEvent]:
        """Push repository:tag with the credentials docker would use; the last event carries the digest.

        Raise RegistryError naming the registry when it is unreachable or refuses the credentials.
        """

    @abstractmethod
    def pull(self, reference: str, *, progress: PullListener | None = None) -> str:
        """Pull ``reference`` (repository:tag or repository@sha256:...); return the image ID.

        ``progress`` is told every message of the pull stream, as it arrives.
        """

    @abstractmethod
    def save(self, image_id: str) -> Iterator[bytes]:
        """The image as an uncompressed ``docker save`` tar, in chunks. Saved by ID it carries no tags."""

    def stored_image(self, image_id: str) -> StoredImage:
        """Where the engine keeps ``image_id``'s config and layers, when this process can read them.

        Reading them is much cheaper than ``save``, which exports the whole image. Never raises for an
        engine that cannot tell: ``unavailable`` says why, and callers use ``save`` instead.
        """
        return StoredImage(unavailable=f"the engine at {self.address} does not expose its layer store")

    @abstractmethod
    def load(self, chunks: Iterable[bytes]) -> list[str]:
        """Load a plain ``docker save`` tar (the importer decompresses and filters it); return the loaded IDs."""

    @property
    def ids_are_manifests(self) -> bool:
        """Whether this engine names images by their manifest (the containerd store), not their config."""
        return self.store().ids_are_manifests

    @abstractmethod
    def image_state(self, image_id: str) -> str:
        """ABSENT, or what the engine holds of the image (``importer.docker_api.image_state``)."""

    def has_image(self, image_id: str) -> bool:
        return self.image_state(image_id) != ABSENT

    @abstractmethod
    def image_ids(self) -> frozenset[str]:
        """The IDs of every image present, intermediate ones included."""

    def held_chains(self) -> frozenset[str]:
        """The chain IDs of every layer stack a graph-driver engine holds (every image's layers and
        their prefixes), which its load finds without opening their files; empty on other stores
        (imagebuild.importer.held_layers)."""
        if self.store().kind != GRAPH_DRIVER:
            return frozenset()
        layers = []
        for image_id in self.image_ids():
            with contextlib.suppress(UnknownImageError):  # removed since the list
                layers.append(self.inspect_image(image_id).layers)
        return chains_of(layers)

    def engine_info(self) -> dict[str, Any]:
        """The engine's ``GET /info`` ({} from an engine that has none)."""
        return {}

    def podman_info(self) -> dict[str, Any]:
        """Podman's ``/libpod/info`` ({} from any other engine)."""
        return {}

    def load_disk(self) -> LoadDisk:
        """Where a load writes the layers on this machine: import checks their free space first
        (imagebuild.importer.load_places)."""
        if self.store().kind != PODMAN:
            return docker_disk(self.engine_info(), self.address)
        return podman_disk(self.podman_info(), PODMAN_API_COPIES)

    @abstractmethod
    def tag_table(self) -> dict[str, str]:
        """Every tag the engine holds, as {repository:tag: image ID}."""

    @abstractmethod
    def untag(self, name: str) -> None:
        """Remove the tag ``name`` (and the image, when that was its last name); a missing one is not an error."""

    @abstractmethod
    def remove_image(self, image_id: str) -> None:
        """Remove an untagged image, or a name (the image too when it was its last), with the untagged
        parents only it held (`docker rmi`: a built image's intermediate images); a missing one is not
        an error."""

    def close(self) -> None:  # noqa: B027 - optional hook, most engines hold nothing
        """Release connections."""


def classic_build_events(chunks: Iterable[Mapping[str, Any]]) -> Iterator[BuildEvent]:
    """The classic builder's JSON messages as BuildEvents; nothing after an error.

    The wire format of ``POST /build``: ``{"stream": text}`` (output, not split
    on line boundaries), ``{"aux": {"ID": image}}`` (the built image) and
    ``{"error": ..., "errorDetail": {"message": ...}}`` (the build failed, read as every stream's
    error is: ``importer.docker_api.stream_error``). Shared by the Docker engine and the fake that
    replays recorded streams.
    """
    for chunk in chunks:
        error = stream_error(chunk)
        if error is not None:
            yield BuildEvent(error=error)
            return
        if "stream" in chunk:
            yield BuildEvent(text=str(chunk["stream"]))
        aux = chunk.get("aux")
        if isinstance(aux, dict) and "ID" in aux:
            yield BuildEvent(image_id=str(aux["ID"]))


def image_info(data: Mapping[str, Any], history: Iterable[Mapping[str, Any]], **identity: str) -> ImageInfo:
    """``GET /images/{name}/json`` and ``GET /images/{name}/history`` as an ImageInfo; ``identity`` is its
    ``config_digest`` or ``identity_unknown`` where the engine names images by their manifest."""
    config = data.get("Config") or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    entrypoint = config.get("Entrypoint")
    cmd = config.get("Cmd")
    return ImageInfo(
        id=data["Id"],
        tags=tuple(data.get("RepoTags") or ()),
        labels=dict(config.get("Labels") or {}),
        env=env,
        entrypoint=tuple(entrypoint) if entrypoint is not None else None,
        cmd=tuple(cmd) if cmd is not None else None,
        workdir=config.get("WorkingDir") or "",
        user=config.get("User") or "",
        exposed_ports=tuple(sorted(config.get("ExposedPorts") or {})),
        history=tuple(str(h.get("CreatedBy", "")) for h in history),
        layers=tuple((data.get("RootFS") or {}).get("Layers") or ()),
        size=int(data.get("Size") or 0),
        **identity,
    )
