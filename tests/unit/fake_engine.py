"""An in-memory engine behind the same interface as DockerEngine, for the distribution logic.

It behaves like Docker where the logic depends on it: an image's ID is the sha256 of its saved bytes
(Docker's is the config's digest, which covers every layer's content), so a damaged archive loads as a
different image or not at all; `load` reads gzip always and zstd only when ``loads_zstd`` (Docker 23+),
and refuses anything else that is not one of its archives; saved archives carry no tags.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import zstandard

from imagebuild.engine import BuildEvent, BuildRequest, Engine, ImageInfo, PushEvent
from imagebuild.errors import EngineError, RegistryError, UnknownImageError

MAGIC = b"FAKE-IMAGE\n"


def image_id_of(payload: bytes) -> str:
    return "sha256:" + hashlib.sha256(payload).hexdigest()


@dataclass
class FakeEngine(Engine):
    loads_zstd_: bool = True
    images: dict[str, bytes] = field(default_factory=dict)  # ID -> saved bytes
    tags: dict[str, str] = field(default_factory=dict)  # name -> ID
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    pushed: dict[str, str] = field(default_factory=dict)  # repository:tag -> digest
    loads: int = 0
    refuse_load: str | None = None  # the engine's message when it refuses every load
    interrupt_save_after: int | None = None  # chunks, then Ctrl-C

    def add_image(self, tag: str, size: int = 3 << 20, labels: dict[str, str] | None = None) -> str:
        body = hashlib.shake_256(tag.encode()).digest(size // 2) * 2  # compressible, like layers
        payload = MAGIC + body
        image_id = image_id_of(payload)
        self.images[image_id] = payload
        self.tags[tag] = image_id
        self.labels[image_id] = labels or {}
        return image_id

    @property
    def address(self) -> str:
        return "fake://engine"

    def build(self, request: BuildRequest) -> Iterator[BuildEvent]:
        raise NotImplementedError

    def run(self, image: str, command: list[str], *, network_mode: str | None = None) -> tuple[int, str]:
        raise NotImplementedError

    def start(self, image: str, *, network_mode: str | None = None) -> str:
        raise NotImplementedError

    def remove(self, container_id: str) -> None:
        raise NotImplementedError

    def _resolve(self, ref: str) -> str:
        image_id = self.tags.get(ref, ref)
        if image_id not in self.images:
            msg = f"no image '{ref}' in the Docker engine at {self.address}"
            raise UnknownImageError(msg)
        return image_id

    def inspect_image(self, ref: str) -> ImageInfo:
        image_id = self._resolve(ref)
        return ImageInfo(
            id=image_id,
            tags=tuple(sorted(t for t, i in self.tags.items() if i == image_id)),
            labels=self.labels.get(image_id, {}),
            env={},
            entrypoint=None,
            cmd=None,
            workdir="/",
        )

    def tag(self, image_id: str, name: str) -> None:
        self.tags[name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"] = self._resolve(image_id)

    def push(self, repository: str, tag: str) -> Iterator[PushEvent]:
        image_id = self._resolve(f"{repository}:{tag}")
        if repository.startswith("unreachable"):
            msg = f"push of {repository}:{tag}: registry unreachable"
            raise RegistryError(msg)
        yield PushEvent(layer="abc", status="Pushing", current=10, total=20)
        yield PushEvent(layer="abc", status="Pushed", current=20, total=20)
        digest = "sha256:" + hashlib.sha256(image_id.encode()).hexdigest()
        self.pushed[f"{repository}:{tag}"] = digest
        yield PushEvent(digest=digest)

    def pull(self, reference: str) -> str:
        raise NotImplementedError

    def save(self, image_id: str) -> Iterator[bytes]:
        payload = self.images[self._resolve(image_id)]
        for n, start in enumerate(range(0, len(payload), 1 << 16)):
            if self.interrupt_save_after is not None and n >= self.interrupt_save_after:
                raise KeyboardInterrupt
            yield payload[start : start + (1 << 16)]

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        self.loads += 1
        data = b"".join(chunks)
        if self.refuse_load:
            raise EngineError(self.refuse_load)
        try:
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            elif data[:4] == b"\x28\xb5\x2f\xfd":
                if not self.loads_zstd:
                    msg = "Error processing tar file(exit status 1): archive/tar: invalid tar header"
                    raise EngineError(msg)
                data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        except (OSError, EOFError, zlib.error, zstandard.ZstdError) as e:
            msg = f"Error processing tar file: {e}"
            raise EngineError(msg) from e
        if not data.startswith(MAGIC):
            msg = "Error processing tar file(exit status 1): archive/tar: invalid tar header"
            raise EngineError(msg)
        image_id = image_id_of(data)
        self.images[image_id] = data
        return [image_id]

    @property
    def loads_zstd(self) -> bool:
        return self.loads_zstd_

    def has_image(self, image_id: str) -> bool:
        return image_id in self.images

    def image_ids(self) -> frozenset[str]:
        return frozenset(self.images)

    def remove_image(self, image_id: str) -> None:
        self.images.pop(image_id, None)
