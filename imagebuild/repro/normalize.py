"""Timestamp normalisation: the built image, rewritten so the same pins give the same image ID.

The classic builder stamps every file a step writes, and the image config,
with the wall clock. After the build the image is read out of the engine
(``save``), each layer the build made is rewritten with its mtimes clamped to
its step's SOURCE_DATE_EPOCH (imagebuild.repro.rewrite), the config gets
input-derived times and loses the fields that name the build's containers
and engine, and the result is loaded back. The base image's layers are never
touched: they keep their digests (shared with the registry's copy) and are
not even sent back, because the engine already has them.

Bounded memory: each layer the build made is spooled to ``workdir`` while it
is hashed, and rewritten from there in 1 MiB copies. The base's layers are
recognised by their entry names and passed by unread (layer_names); should
that fail, they are spooled, identified by their hash and dropped at once.
"""

from __future__ import annotations

import copy
import hashlib
import json
import posixpath
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from imagebuild.epoch import format_epoch
from imagebuild.repro.archive import ArchiveError, read_saved_image
from imagebuild.repro.layer_names import legacy_layer_dirs
from imagebuild.repro.rewrite import LayerError, rewrite_layer
from imagebuild.repro.streams import TAR_END, open_stream, spool, tar_bytes_chunks, tar_file_chunks

# Fields of a classic-builder config that name the build's last container, its
# host and the engine's version: they differ on every build and say nothing
# about the image. BuildKit does not write them; Docker 25 dropped them too.
BUILD_ONLY_FIELDS = ("container", "container_config", "docker_version")


class NormalizeFailure(Exception):
    """Normalisation could not be done; the message says why (the caller adds what to do)."""


@dataclass(frozen=True, kw_only=True)
class LayerPlan:
    """What to do with the layers of one built image."""

    layers: tuple[str, ...]  # the image's diffIDs, as the engine reports them
    base_layers: int  # how many of them are the base image's: kept byte for byte
    base_history: int  # history entries of the base image: kept as they are
    epochs: tuple[int, ...]  # one per layer the build made, in order: the mtime clamp
    created: int  # the config's created time and the build's history entries

    def __post_init__(self) -> None:
        built = len(self.layers) - self.base_layers
        if built != len(self.epochs):
            msg = f"the image has {built} layers above its base, but the Dockerfile makes {len(self.epochs)}"
            raise NormalizeFailure(msg)

    @property
    def kept(self) -> tuple[str, ...]:
        return self.layers[: self.base_layers]


@dataclass(frozen=True, kw_only=True)
class NormalizedLayer:
    diff_id: str
    path: Path
    size: int
    entries: int
    clamped: int


@dataclass(frozen=True, kw_only=True)
class Normalized:
    """The rewritten image, on disk in ``workdir`` until loaded."""

    image_id: str
    config_bytes: bytes
    diff_ids: tuple[str, ...]  # every layer, base included
    layers: tuple[NormalizedLayer, ...]  # only the rewritten ones
    spool_peak: int  # most bytes the spool held at once
    read_seconds: float  # reading the saved stream (the build's layers spooled and hashed)
    rewrite_seconds: float


@dataclass(frozen=True, kw_only=True)
class NormalizeResult:
    image_id: str
    unnormalized_id: str
    layers_rewritten: int
    bytes_rewritten: int  # the rewritten layers' size: the engine stores them besides the cache's
    spool_peak: int  # temporary disk in the work directory
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)  # save, rewrite, load: seconds each
    reused: bool = False  # a previous run's result was still in the engine

    def to_json(self) -> dict[str, object]:
        from dataclasses import asdict

        return asdict(self)


class ImageStore(Protocol):
    """The engine as normalisation needs it."""

    def save(self, image_id: str) -> Iterator[bytes]: ...
    def load(self, chunks: Iterable[bytes]) -> list[str]: ...


@dataclass(frozen=True, kw_only=True)
class _Spooled:
    diff_id: str
    path: Path | None  # None: a base layer, dropped
    size: int


def normalized_config(config: dict[str, Any], diff_ids: Sequence[str], plan: LayerPlan) -> bytes:
    """The config bytes of the normalised image: a pure function, so its sha256 (the ID) is too.

    Keys are sorted and the JSON compact, so the bytes depend on the content
    only, not on the engine that wrote the original.
    """
    new = copy.deepcopy(config)
    new["rootfs"] = {**new.get("rootfs", {}), "diff_ids": list(diff_ids)}
    created = format_epoch(plan.created)
    new["created"] = created
    for entry in (new.get("history") or [])[plan.base_history :]:
        entry["created"] = created
    for key in BUILD_ONLY_FIELDS:
        new.pop(key, None)
    if isinstance(new.get("config"), dict) and new["config"].get("Image"):
        new["config"]["Image"] = ""  # the unnormalised parent's ID: another image, and varies per build
    return json.dumps(new, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def normalize_saved(saved: BinaryIO, plan: LayerPlan, workdir: Path, *, what: str) -> Normalized:
    """Read a saved image from ``saved`` and rewrite its build layers into ``workdir``."""
    # Dropped from the spool at once; a layer that is also one the build made (two empty ones) is kept.
    base = set(plan.kept) - set(plan.layers[plan.base_layers :])
    counter = iter(range(1 << 30))
    spooled_bytes = [0, 0]  # now, peak

    def take(name: str, data: BinaryIO) -> _Spooled:
        path = workdir / f"raw-{next(counter)}.tar"
        diff_id, size = spool(data, path)
        spooled_bytes[1] = max(spooled_bytes[1], spooled_bytes[0] + size)
        if diff_id in base:
            path.unlink()
            return _Spooled(diff_id=diff_id, path=None, size=size)
        spooled_bytes[0] += size
        return _Spooled(diff_id=diff_id, path=path, size=size)

    started = time.monotonic()
    legacy_dirs: dict[str, int] = {}

    def known_base_layer(name: str, documents: Mapping[str, bytes]) -> _Spooled | None:
        """A base layer recognised by its entry's name: passed by unread (layer_names)."""
        if name.startswith("blobs/sha256/"):
            diff_id = "sha256:" + name.removeprefix("blobs/sha256/")
        else:
            if not legacy_dirs:
                legacy_dirs.update(legacy_layer_dirs(plan.layers, documents))
            index = legacy_dirs.get(posixpath.dirname(name))
            diff_id = plan.layers[index] if index is not None else ""
        return _Spooled(diff_id=diff_id, path=None, size=0) if diff_id in base else None

    try:
        image = read_saved_image(saved, take, what=what, skip=known_base_layer)
    except ArchiveError as e:
        raise NormalizeFailure(str(e)) from e
    read_done = time.monotonic()
    if image.diff_ids != plan.layers:
        msg = f"{what}: the saved layers are not the ones the engine reported for the image"
        raise NormalizeFailure(msg)
    built = image.layers[plan.base_layers :]
    rewritten: list[NormalizedLayer] = []
    for index, (layer, epoch) in enumerate(zip(built, plan.epochs, strict=True)):
        assert layer.path is not None
        out = workdir / f"layer-{index}.tar"
        try:
            with layer.path.open("rb") as source, out.open("wb") as sink:
                result = rewrite_layer(source, sink, epoch, what=f"{what} layer {plan.base_layers + index}")
        except LayerError as e:
            raise NormalizeFailure(str(e)) from e
        spooled_bytes[0] += result.size
        spooled_bytes[1] = max(spooled_bytes)
        if not any(layer.path == other.path for other in built[index + 1 :]):
            layer.path.unlink()  # identical layers (two empty ones) share one spool file
            spooled_bytes[0] -= layer.size
        rewritten.append(
            NormalizedLayer(
                diff_id=result.diff_id,
                path=out,
                size=result.size,
                entries=result.entries,
                clamped=result.clamped,
            )
        )
    diff_ids = (*plan.kept, *(layer.diff_id for layer in rewritten))
    config_bytes = normalized_config(image.config, diff_ids, plan)
    return Normalized(
        image_id="sha256:" + hashlib.sha256(config_bytes).hexdigest(),
        config_bytes=config_bytes,
        diff_ids=diff_ids,
        layers=tuple(rewritten),
        spool_peak=spooled_bytes[1],
        read_seconds=round(read_done - started, 3),
        rewrite_seconds=round(time.monotonic() - read_done, 3),
    )


def load_chunks(image: Normalized) -> Iterator[bytes]:
    """A ``docker load`` archive of the normalised image, streamed from the spool.

    Its manifest names every layer, but only the rewritten ones are in it: the
    engine finds the base layers by their chain of diffIDs and never opens
    their (absent) files.
    """
    hex_id = image.image_id.removeprefix("sha256:")
    yield from tar_bytes_chunks(f"{hex_id}.json", image.config_bytes)
    for layer in image.layers:
        yield from tar_file_chunks(f"{layer.diff_id.removeprefix('sha256:')}/layer.tar", layer.path)
    manifest = [
        {
            "Config": f"{hex_id}.json",
            "RepoTags": None,
            "Layers": [f"{d.removeprefix('sha256:')}/layer.tar" for d in image.diff_ids],
        }
    ]
    yield from tar_bytes_chunks("manifest.json", json.dumps(manifest).encode())
    yield TAR_END


def normalize_image(store: ImageStore, image_id: str, plan: LayerPlan, spool_dir: Path) -> NormalizeResult:
    """Normalise ``image_id`` in ``store``; the result is loaded but not tagged.

    The spool is a fresh directory under ``spool_dir`` (on disk, not /tmp,
    which may be memory), removed afterwards whatever happens.
    """
    started = time.monotonic()
    spool_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="normalize-", dir=spool_dir) as workdir:
        saved = open_stream(store.save(image_id))
        normalized = normalize_saved(saved, plan, Path(workdir), what=f"image {image_id[:19]}")
        load_started = time.monotonic()
        loaded = store.load(load_chunks(normalized))
        load_seconds = round(time.monotonic() - load_started, 3)
    # The engine prepares its save before the first byte: "save" counts from the request on.
    save_seconds = round(load_started - started - normalized.rewrite_seconds, 3)
    if normalized.image_id not in loaded:
        msg = f"the engine loaded {', '.join(loaded) or 'nothing'} instead of {normalized.image_id}"
        raise NormalizeFailure(msg)
    return NormalizeResult(
        image_id=normalized.image_id,
        unnormalized_id=image_id,
        layers_rewritten=len(normalized.layers),
        bytes_rewritten=sum(layer.size for layer in normalized.layers),
        spool_peak=normalized.spool_peak,
        seconds=round(time.monotonic() - started, 3),
        phases={"save": save_seconds, "rewrite": normalized.rewrite_seconds, "load": load_seconds},
    )
