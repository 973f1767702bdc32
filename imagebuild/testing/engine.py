"""FakeEngine: an Engine that replays recorded classic-builder streams, keeps images and loads archives."""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import zstandard

from imagebuild.engine.interface import (
    CONTAINERD,
    GRAPH_DRIVER,
    BuildEvent,
    BuildRequest,
    Engine,
    EngineStore,
    ImageInfo,
    StoredImage,
    classic_build_events,
)
from imagebuild.engine.transfer_events import PullListener, PushEvent, pull_event
from imagebuild.errors import EngineError, RegistryError, UnknownImageError
from imagebuild.importer.docker_api import (
    ABSENT,
    CONTENT_MISSING,
    HELD,
    NOT_UNPACKED,
    WHOLE,
    read_load,
    stream_error,
)
from imagebuild.importer.load_room import LoadDisk, Place
from imagebuild.testing.archives import (
    archive_image_id,
    archive_names,
    image_info,
    image_root_files,
    saved_image_tar,
    tar_of,
    untarred,
)
from imagebuild.testing.clock import FakeClock

# Recorded builds -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RecordedMessage:
    at: float  # seconds after the build request
    chunk: Mapping[str, Any] | None = None  # a JSON message of the classic builder
    engine_error: str | None = None  # the engine failed here (DockerEngine raised EngineError)


@dataclass(frozen=True, kw_only=True)
class Recording:
    """One build stream as the engine sent it, with the time of each message."""

    name: str
    note: str
    dockerfile_sha256: str  # of the Dockerfile that was built: replays must render the same one
    messages: tuple[RecordedMessage, ...]

    @classmethod
    def load(cls, path: Path) -> Recording:
        header, *rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())
        messages = tuple(
            RecordedMessage(at=row["at"], chunk=row.get("chunk"), engine_error=row.get("engine_error"))
            for row in rows
        )
        return cls(
            name=header["name"],
            note=header["note"],
            dockerfile_sha256=header["dockerfile_sha256"],
            messages=messages,
        )

    def dump(self, path: Path) -> None:
        header = {"name": self.name, "note": self.note, "dockerfile_sha256": self.dockerfile_sha256}
        rows = [header]
        for m in self.messages:
            row: dict[str, Any] = {"at": round(m.at, 3)}
            if m.chunk is not None:
                row["chunk"] = m.chunk
            if m.engine_error is not None:
                row["engine_error"] = m.engine_error
            rows.append(row)
        path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")

    def stretched(self, after_text: str, pause: float) -> Recording:
        """This recording with ``pause`` more seconds of silence after the first message containing ``after_text``."""
        index = next(
            i for i, m in enumerate(self.messages) if m.chunk and after_text in str(m.chunk.get("stream", ""))
        )
        messages = [
            m if i <= index else RecordedMessage(at=m.at + pause, chunk=m.chunk, engine_error=m.engine_error)
            for i, m in enumerate(self.messages)
        ]
        return Recording(
            name=f"{self.name}+pause",
            note=self.note,
            dockerfile_sha256=self.dockerfile_sha256,
            messages=tuple(messages),
        )


# Engine ----------------------------------------------------------------------------------------------


@dataclass
class FakeEngine(Engine):
    """An Engine whose builds replay recordings (one per build call, in order) and whose images are data.

    What the code under test did is kept for assertions: ``requests``, ``tags``,
    ``started``/``removed`` containers, ``runs``, ``closed``.
    """

    builds: list[Recording] = field(default_factory=list)
    images: list[ImageInfo] = field(default_factory=list)  # found by id or by one of their tags
    clock: FakeClock | None = None  # advanced to each message's time while replaying
    run_result: Callable[[str, list[str]], tuple[int, str]] = lambda _image, _cmd: (0, "")
    fake_address: str = "fake://engine"
    requests: list[BuildRequest] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    runs: list[tuple[str, list[str]]] = field(default_factory=list)
    run_networks: list[str | None] = field(default_factory=list)  # each run's network_mode, in order
    refuse_run: str | None = None  # the engine's message when it cannot run any container
    started: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    closed: bool = False
    saved: dict[str, bytes] = field(default_factory=dict)  # image ID -> what `save` streams
    refuse_load: str | None = None  # the engine's message when it refuses every load
    # The containerd store's failure to unpack what it loaded (its disk full): the image kept, its content
    # not unpacked (``not_unpacked``). Docker 26 refuses the load; engines from API 1.48 on
    # (``says_unpacked``) answer it with a line of output, and their inspect says what is unpacked.
    fail_unpack: str | None = None
    says_unpacked: bool = False
    not_unpacked: set[str] = field(default_factory=set)
    # A load that broke off on the containerd store: the image's record kept with part of its content,
    # which inspect finds and the image list leaves out (``incomplete``); the load refused.
    break_off_load: str | None = None
    incomplete: set[str] = field(default_factory=set)
    refuse_push: str | None = None
    interrupt_save_after: int | None = None  # chunks of `save`, then Ctrl-C
    pushed: dict[str, str] = field(default_factory=dict)  # repository:tag -> digest
    pulls: list[str] = field(default_factory=list)  # references, in order
    pull_streams: list[Recording] = field(default_factory=list)  # replayed one per pull, in order
    refuse_pull: str | None = None
    loads: int = 0
    received: list[bytes] = field(default_factory=list)  # what each load was sent, as sent
    # Every name a load's archive carried (RepoTags, repositories, index.json's name annotations), in
    # order: the fake applies them as docker load does, and keeps them here even once they are undone.
    archive_names: list[str] = field(default_factory=list)
    stored: dict[str, StoredImage] = field(default_factory=dict)  # image ID -> its layer store, when readable
    # True: the containerd image store, which names an image by its manifest's digest (a load of an OCI
    # layout reports the manifest index.json names); False: a graph-driver store (the config's digest).
    manifest_ids: bool = False
    # The layers (lowest first; path -> content, ``.wh.NAME`` a whiteout) `save` streams for an image
    # this engine builds: what the SBOM reads. None: one layer of image_root_files().
    built_layers: Sequence[Mapping[str, bytes]] | None = None
    refuse_save: str | None = None  # the engine's message when it cannot save any image
    data_root: str = ""  # a directory standing for the data root a load writes to (its free space is checked)

    @property
    def address(self) -> str:
        return self.fake_address

    def build(self, request: BuildRequest) -> Iterator[BuildEvent]:
        self.requests.append(request)
        if not self.builds:
            msg = "FakeEngine: build() called more often than there are recordings"
            raise AssertionError(msg)
        recording = self.builds.pop(0)
        for event in classic_build_events(self._replay(recording)):
            if event.image_id:  # the engine has the image it built, and saves its layers
                self.images.append(image_info(event.image_id))
                self.saved.setdefault(
                    event.image_id, saved_image_tar(self.built_layers or [image_root_files()])
                )
            yield event

    def _replay(self, recording: Recording) -> Iterator[Mapping[str, Any]]:
        start = self.clock.now() if self.clock else 0.0
        for message in recording.messages:
            if self.clock is not None:
                self.clock.advance_to(start + message.at)
            if message.engine_error is not None:
                raise EngineError(message.engine_error)
            if message.chunk is not None:
                yield message.chunk

    def tag(self, image_id: str, name: str) -> None:
        self.tags[name] = image_id

    def inspect_image(self, ref: str) -> ImageInfo:
        image_id = self.tags.get(ref, ref)
        for info in self.images:
            if image_id == info.id or ref in info.tags:
                return info
        msg = f"no image '{ref}' in the Docker engine at {self.address}; build it first (imagebuild build)"
        raise UnknownImageError(msg)

    def run(self, image: str, command: list[str], *, network_mode: str | None = None) -> tuple[int, str]:
        self.inspect_image(image)
        self.runs.append((image, command))
        self.run_networks.append(network_mode)
        if self.refuse_run is not None:
            msg = f"could not run {command[0]} in {image}: {self.refuse_run}"
            raise EngineError(msg)
        return self.run_result(image, command)

    def start(self, image: str, *, network_mode: str | None = None) -> str:
        self.inspect_image(image)
        container = f"fake-container-{len(self.started) + 1}"
        self.started.append(container)
        return container

    def remove(self, container_id: str) -> None:
        self.removed.append(container_id)

    # Distribution: an image's saved bytes are data too, and its ID is their sha256 (Docker's is the
    # config's digest, which covers every layer), so a damaged archive loads as another image or not
    # at all. `load` reads plain, gzip and zstd tars, as Docker 23 and later do.

    def add_saved_image(
        self, tag: str, *, size: int = 3 << 20, labels: Mapping[str, str] | None = None, layers: int = 1
    ) -> str:
        """An image that `save` streams as Docker 20.10 does (legacy layout); returns its ID.

        Each of its ``layers`` holds ``size`` compressible bytes; the config names their diffIDs, so a
        damaged archive loads as another image or not at all, as on a real engine.
        """
        tars = [tar_of({"payload": hashlib.shake_256(f"{tag}#{n}".encode() if n else tag.encode()).digest(size // 2) * 2}) for n in range(layers)]  # fmt: skip
        diff_ids = ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in tars]
        config = json.dumps(
            {"config": {"Labels": dict(labels or {})}, "rootfs": {"type": "layers", "diff_ids": diff_ids}},
            sort_keys=True,
        ).encode()
        image_id = "sha256:" + hashlib.sha256(config).hexdigest()
        files = [f"{diff_id[7:19]}/layer.tar" for diff_id in diff_ids]
        manifest = [{"Config": f"{image_id[7:]}.json", "RepoTags": None, "Layers": files}]
        self.saved[image_id] = tar_of(
            {
                **dict(zip(files, tars, strict=True)),
                f"{image_id[7:]}.json": config,
                "manifest.json": json.dumps(manifest).encode(),
            }
        )
        self.images.append(replace(image_info(image_id, tags=[tag], labels=labels), layers=tuple(diff_ids)))
        self.tags[tag] = image_id
        return image_id

    def push(self, repository: str, tag: str) -> Iterator[PushEvent]:
        image_id = self.inspect_image(f"{repository}:{tag}").id
        if self.refuse_push:
            raise RegistryError(self.refuse_push)
        yield PushEvent(layer="layer1", status="Pushing", current=10, total=20)
        yield PushEvent(layer="layer1", status="Pushed", current=20, total=20)
        digest = "sha256:" + hashlib.sha256(image_id.encode()).hexdigest()
        self.pushed[f"{repository}:{tag}"] = digest
        yield PushEvent(digest=digest)

    def pull(self, reference: str, *, progress: PullListener | None = None) -> str:
        """Pulls every reference as an image of its own; ``refuse_pull``: the registry's refusal.

        Each pull replays the next of ``pull_streams`` (a recorded ``POST /images/create``) to ``progress``.
        """
        if self.refuse_pull is not None:
            msg = f"pull of {reference}: {self.refuse_pull}"
            raise RegistryError(msg)
        if self.pull_streams:
            for chunk in self._replay(self.pull_streams.pop(0)):
                error = stream_error(chunk)
                if error is not None:
                    msg = f"pull of {reference}: {error}"
                    raise RegistryError(msg)
                if progress is not None:
                    progress(pull_event(chunk))
        self.pulls.append(reference)
        image_id = "sha256:" + hashlib.sha256(reference.encode()).hexdigest()
        self.images.append(image_info(image_id, tags=(reference,)))
        return image_id

    def save(self, image_id: str) -> Iterator[bytes]:
        if self.refuse_save is not None:
            raise EngineError(self.refuse_save)
        payload = self.saved[self.inspect_image(image_id).id]
        for n, start in enumerate(range(0, len(payload), 1 << 16)):
            if self.interrupt_save_after is not None and n >= self.interrupt_save_after:
                raise KeyboardInterrupt
            yield payload[start : start + (1 << 16)]

    def stored_image(self, image_id: str) -> StoredImage:
        unavailable = f"the engine at {self.address} keeps no layer store for {image_id[:19]}"
        return self.stored.get(image_id) or StoredImage(unavailable=unavailable)

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        self.loads += 1
        data = b"".join(chunks)
        self.received.append(data)
        if self.refuse_load:
            raise EngineError(self.refuse_load)
        invalid = "Error processing tar file(exit status 1): archive/tar: invalid tar header"
        try:
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            elif data[:4] == b"\x28\xb5\x2f\xfd":
                data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        except (OSError, EOFError, zlib.error, zstandard.ZstdError) as e:
            msg = f"Error processing tar file: {e}"
            raise EngineError(msg) from e
        files = untarred(data)
        loaded = archive_image_id(files, manifest_ids=self.manifest_ids)
        if loaded is None:
            raise EngineError(invalid)
        image_id, config_digest = loaded
        for name in archive_names(files, manifest_ids=self.manifest_ids):  # as docker load: before any check
            self.archive_names.append(name)
            self.tags[name] = image_id
        self.saved[image_id] = data
        if not self.has_image(image_id):
            info = image_info(image_id)
            self.images.append(
                replace(info, config_digest=config_digest) if config_digest != image_id else info
            )
        if self.break_off_load:
            self.incomplete.add(image_id)
            raise EngineError(self.break_off_load)
        self.incomplete.discard(image_id)
        self.not_unpacked.discard(image_id)
        messages: list[dict[str, str]] = [{"stream": f"Loaded image ID: {image_id}\n"}]
        if self.fail_unpack:
            self.not_unpacked.add(image_id)
            if not self.says_unpacked:
                raise EngineError(self.fail_unpack)
            messages.append({"stream": f"Error unpacking image {image_id}: {self.fail_unpack}\n"})
        ids, detail = read_load(messages, lambda name: self.tags[name])  # as the engines read it
        if detail is not None:
            raise EngineError(detail)
        return ids

    def load_disk(self) -> LoadDisk:
        if not self.data_root:
            return super().load_disk()
        if self.manifest_ids:
            return LoadDisk((Place(self.data_root, 2, "the engine's content store, and them unpacked", content_store=True),))
        return LoadDisk((Place(self.data_root, 2, "the engine's copy while it loads them, and them unpacked"),))

    def store(self) -> EngineStore:
        return EngineStore(version=self.version(), kind=CONTAINERD if self.manifest_ids else GRAPH_DRIVER)

    def has_image(self, image_id: str) -> bool:
        return any(info.id == image_id for info in self.images)

    def image_state(self, image_id: str) -> str:
        if not self.has_image(image_id):
            return ABSENT
        if not self.says_unpacked:
            return HELD
        return CONTENT_MISSING if image_id in self.incomplete else NOT_UNPACKED if image_id in self.not_unpacked else WHOLE

    def image_ids(self) -> frozenset[str]:
        return frozenset(info.id for info in self.images if info.id not in self.incomplete)

    def tag_table(self) -> dict[str, str]:
        return {name: image_id for name, image_id in self.tags.items() if self.has_image(image_id)}

    def untag(self, name: str) -> None:
        """As Docker: removing an image's last name removes the image."""
        image_id = self.tags.pop(name, None)
        if image_id is not None and image_id not in self.tags.values():
            self.remove_image(image_id)

    def remove_image(self, image_id: str) -> None:
        if image_id in self.tags:  # a name, as `docker rmi NAME`
            self.untag(image_id)
            return
        self.images = [info for info in self.images if info.id != image_id]
        self.incomplete.discard(image_id)
        self.not_unpacked.discard(image_id)
        self.saved.pop(image_id, None)

    def close(self) -> None:
        self.closed = True
