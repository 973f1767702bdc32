"""Timestamp normalisation: the built image, rewritten so the same pins give the same image ID.

The classic builder stamps every file a step writes, and the image config,
with the wall clock. After the build the image is read out of the engine
(``save``), each layer the build made is rewritten with its mtimes clamped to
its step's SOURCE_DATE_EPOCH (imagebuild.normalize.rewrite), the config gets
input-derived times and loses the fields that name the build's containers
and engine, and the result is loaded back. The base image's layers are never
touched: they keep their digests (shared with the registry's copy) and are
not even sent back, because the engine already has them.

Bounded memory: each layer the build made is spooled to ``workdir`` while it
is hashed, and rewritten from there in 1 MiB copies. The base's layers are
recognised by their entry names and passed by unread (layer_names); should
that fail, they are spooled, identified by their hash and dropped at once.

Faster, when the engine allows it (a local overlay2 engine whose data root
this process can read): the build's layers are rebuilt from the engine's layer
store (imagebuild.normalize.tar_split) and rewritten as they stream by, with no
``save`` at all; each is checked against its diffID on the way, so the result
is the one ``save`` gives. Otherwise, or if that check fails, ``save`` it is;
the result says which ran and why.

The same on every engine. What the builder or the store adds is made canonical:
which step made which layer is read from the config's history (the containerd
image store makes no layer for a step that changed nothing, a graph-driver
store an empty one: empty build layers are dropped, their step marked
``empty_layer``), and the classic builder's ``COPY dir:<hash>``, whose hash
depends on the builder version and on the tar the client sent, names the
normalised layer's diffID instead (a digest of the copied paths, modes and
contents). On the containerd store, where an image ID is a manifest digest,
the image is loaded as an OCI layout with a manifest imagebuild writes, so the
engine's ID for it is known before the load and checked after it.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol, cast

from imagebuild.engine.interface import EngineStore, StoredImage
from imagebuild.log import logger
from imagebuild.normalize.archive import ArchiveError, read_saved_image
from imagebuild.normalize.config import BuildLayer, HistoryMismatch, build_layers, normalized_config
from imagebuild.normalize.layer_names import legacy_layer_dirs
from imagebuild.normalize.load_archive import legacy_chunks, oci_chunks, oci_manifest
from imagebuild.normalize.rewrite import LayerError, RewriteResult, rewrite_layer
from imagebuild.normalize.streams import HashingReader, open_stream, spool
from imagebuild.normalize.tar_split import TarSplitError, layer_chunks

FROM_STORE, FROM_SAVE = "layer store", "docker save"  # where the built image was read from
# Bump when a rule changes what an image normalises to: a build record made under other rules is not
# reused (after_build.previous_normalization).
RULES = 2


class NormalizeFailure(Exception):
    """Normalisation could not be done; the message says why (the caller adds what to do)."""


class StoreReadFailure(Exception):
    """The layer store did not give the image the engine reports: normalisation reads ``save`` instead."""


@dataclass(frozen=True, kw_only=True)
class LayerPlan:
    """What to do with the layers of one built image."""

    layers: tuple[str, ...]  # the image's diffIDs, as the engine reports them
    base_layers: int  # how many of them are the base image's: kept byte for byte
    base_history: int  # history entries of the base image: kept as they are
    epochs: tuple[int, ...]  # one per step after FROM, in order: the mtime clamp of the layer it made
    created: int  # the config's created time and the build's history entries

    @property
    def kept(self) -> tuple[str, ...]:
        return self.layers[: self.base_layers]

    def build_layers(self, config: Mapping[str, Any], what: str) -> tuple[BuildLayer, ...]:
        """Which step made each layer above the base (NormalizeFailure when the history does not fit)."""
        try:
            return build_layers(
                config,
                base_history=self.base_history,
                base_layers=self.base_layers,
                layers=len(self.layers),
                epochs=self.epochs,
                what=what,
            )
        except HistoryMismatch as e:
            raise NormalizeFailure(str(e)) from e


@dataclass(frozen=True, kw_only=True)
class NormalizedLayer:
    diff_id: str
    path: Path
    size: int
    entries: int
    clamped: int
    history: int  # the history entry of the step that made it

    @classmethod
    def written(cls, result: RewriteResult, path: Path, layer: BuildLayer) -> NormalizedLayer:
        """The layer the rewriter wrote to ``path`` for ``layer``."""
        return cls(
            diff_id=result.diff_id,
            path=path,
            size=result.size,
            entries=result.entries,
            clamped=result.clamped,
            history=layer.history,
        )


@dataclass(frozen=True, kw_only=True)
class Normalized:
    """The rewritten image, on disk in ``workdir`` until loaded."""

    image_id: str  # the identity: sha256 of config_bytes
    config_bytes: bytes
    diff_ids: tuple[str, ...]  # every layer, base included
    layers: tuple[NormalizedLayer, ...]  # the rewritten layers that hold anything (empty ones are dropped)
    spool_peak: int  # most bytes the spool held at once
    read_seconds: float  # reading the saved stream (the build's layers spooled and hashed)
    rewrite_seconds: float
    # The base's layers as the engine holds them (the saved OCI manifest's descriptors; () when the
    # save had none): what a manifest of the image names them by, on the containerd store.
    base_descriptors: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, kw_only=True)
class NormalizeResult:
    image_id: str  # the identity: the normalised config's digest, the same on every engine
    unnormalized_id: str
    layers_rewritten: int
    bytes_rewritten: int  # the rewritten layers' size: the engine stores them besides the cache's
    spool_peak: int  # temporary disk in the work directory
    seconds: float
    # Seconds each: save, rewrite, load; from the layer store, reading is part of rewrite.
    phases: dict[str, float] = field(default_factory=dict)
    reused: bool = False  # a previous run's result was still in the engine
    read_from: str = FROM_SAVE  # FROM_STORE or FROM_SAVE
    fallback_reason: str = ""  # why not from the layer store, when from save
    engine_id: str = ""  # what the engine calls it: image_id, or on the containerd store its manifest digest
    engine: str = ""  # EngineStore.describe(): which engine and image store
    rules: int = RULES  # the normalisation rules it was made under

    def to_json(self) -> dict[str, object]:
        from dataclasses import asdict

        return asdict(self)


class ImageStore(Protocol):
    """The engine as normalisation needs it."""

    def save(self, image_id: str) -> Iterator[bytes]: ...
    def stored_image(self, image_id: str) -> StoredImage: ...
    def load(self, chunks: Iterable[bytes]) -> list[str]: ...
    def store(self) -> EngineStore: ...


@dataclass(frozen=True, kw_only=True)
class _Spooled:
    diff_id: str
    path: Path | None  # None: a base layer, dropped
    size: int


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
    steps = plan.build_layers(image.config, what)
    for index, (layer, step) in enumerate(zip(built, steps, strict=True)):
        assert layer.path is not None
        out = workdir / f"layer-{index}.tar"
        try:
            with layer.path.open("rb") as source, out.open("wb") as sink:
                result = rewrite_layer(source, sink, step.epoch, what=f"{what} layer {plan.base_layers + index}")
        except LayerError as e:
            raise NormalizeFailure(str(e)) from e
        spooled_bytes[0] += result.size
        spooled_bytes[1] = max(spooled_bytes)
        if not any(layer.path == other.path for other in built[index + 1 :]):
            layer.path.unlink()  # identical layers (two empty ones) share one spool file
            spooled_bytes[0] -= layer.size
        rewritten.append(NormalizedLayer.written(result, out, step))
    return _normalized(
        image.config,
        plan,
        rewritten,
        spool_peak=spooled_bytes[1],
        read_seconds=round(read_done - started, 3),
        rewrite_seconds=round(time.monotonic() - read_done, 3),
        base_descriptors=image.layer_descriptors[: plan.base_layers],
    )


def normalize_stored(image: StoredImage, plan: LayerPlan, workdir: Path, *, what: str) -> Normalized:
    """Rewrite the build's layers straight from the engine's layer store into ``workdir``.

    The base's layers are not opened. Raise StoreReadFailure when the store
    does not give exactly the image the engine reports (its config, or a layer
    whose rebuilt tar does not hash to its diffID).
    """
    started = time.monotonic()
    if image.config is None or tuple(layer.diff_id for layer in image.layers) != plan.layers:
        msg = image.unavailable or f"{what}: the layer store's layers are not the ones the engine reported"
        raise StoreReadFailure(msg)
    try:
        config = json.loads(image.config.read_bytes())
    except (OSError, ValueError) as e:
        msg = f"{what}: cannot read its config {image.config}: {e}"
        raise StoreReadFailure(msg) from e
    rewritten: list[NormalizedLayer] = []
    steps = plan.build_layers(config, what)
    for index, (layer, step) in enumerate(zip(image.layers[plan.base_layers :], steps, strict=True)):
        number = plan.base_layers + index
        out = workdir / f"layer-{index}.tar"
        source = HashingReader(open_stream(layer_chunks(layer.tar_split, layer.files)))
        try:
            with out.open("wb") as sink:
                # Only read() is called on it: the rewriter parses a stream.
                result = rewrite_layer(cast("BinaryIO", source), sink, step.epoch, what=f"{what} layer {number}")
            source.drain()
        except (TarSplitError, LayerError) as e:
            raise StoreReadFailure(str(e)) from e
        if source.digest != layer.diff_id:
            msg = f"{what} layer {number}: {layer.files} gives sha256 {source.digest}, the image says {layer.diff_id}"
            raise StoreReadFailure(msg)
        rewritten.append(NormalizedLayer.written(result, out, step))
    return _normalized(
        config,
        plan,
        rewritten,
        spool_peak=sum(layer.size for layer in rewritten),
        read_seconds=0.0,
        rewrite_seconds=round(time.monotonic() - started, 3),
    )


def _normalized(
    config: dict[str, Any],
    plan: LayerPlan,
    rewritten: Sequence[NormalizedLayer],
    *,
    spool_peak: int,
    read_seconds: float,
    rewrite_seconds: float,
    base_descriptors: tuple[dict[str, Any], ...] = (),
) -> Normalized:
    """The normalised image: empty build layers dropped (their step marked empty_layer), config canonical."""
    kept = tuple(layer for layer in rewritten if layer.entries)
    for layer in rewritten:
        if not layer.entries:
            layer.path.unlink(missing_ok=True)
    diff_ids = (*plan.kept, *(layer.diff_id for layer in kept))
    made = {layer.history: layer.diff_id if layer.entries else "" for layer in rewritten}
    config_bytes = normalized_config(config, diff_ids, base_history=plan.base_history, created=plan.created, made=made)
    return Normalized(
        image_id="sha256:" + hashlib.sha256(config_bytes).hexdigest(),
        config_bytes=config_bytes,
        diff_ids=diff_ids,
        layers=kept,
        spool_peak=spool_peak,
        read_seconds=read_seconds,
        rewrite_seconds=rewrite_seconds,
        base_descriptors=base_descriptors,
    )


def load_chunks(image: Normalized) -> Iterator[bytes]:
    """A ``docker load`` archive of the normalised image for a graph-driver store."""
    return legacy_chunks(image.config_bytes, image.diff_ids, image.layers)


def normalize_image(
    store: ImageStore, image_id: str, plan: LayerPlan, spool_dir: Path, *, from_store: bool = True
) -> NormalizeResult:
    """Normalise ``image_id`` in ``store``; the result is loaded but not tagged.

    Read from the engine's layer store when it allows it and ``from_store``,
    else (and when that read fails its checks) from ``save``. The spool is a
    fresh directory under ``spool_dir`` (on disk, not /tmp, which may be
    memory), removed afterwards whatever happens.
    """
    started = time.monotonic()
    spool_dir.mkdir(parents=True, exist_ok=True)
    what = f"image {image_id[:19]}"
    engine = store.store()
    with tempfile.TemporaryDirectory(prefix="normalize-", dir=spool_dir) as workdir:
        normalized, fallback, save_started = None, "the layer store was not asked", started
        stored = store.stored_image(image_id) if from_store else None
        if stored is not None and stored.unavailable:
            fallback = stored.unavailable
        elif stored is not None:
            try:
                normalized = normalize_stored(stored, plan, Path(workdir), what=what)
            except StoreReadFailure as e:
                fallback = str(e)
                logger.warning(
                    "reading %s from the engine's layer store failed (%s); using docker save", what, e
                )
        read_from = FROM_SAVE if normalized is None else FROM_STORE
        if normalized is None:
            logger.debug("normalising %s from docker save: %s", what, fallback)
            save_started = time.monotonic()
            normalized = normalize_saved(open_stream(store.save(image_id)), plan, Path(workdir), what=what)
        load_started = time.monotonic()
        engine_id, chunks = _load_archive(normalized, engine, what)
        loaded = store.load(chunks)
        load_seconds = round(time.monotonic() - load_started, 3)
    phases = {"rewrite": normalized.rewrite_seconds, "load": load_seconds}
    if read_from == FROM_SAVE:
        # The engine prepares its save before the first byte: "save" counts from the request on.
        phases = {"save": round(load_started - save_started - normalized.rewrite_seconds, 3), **phases}
    if engine_id not in loaded:
        msg = f"{engine.describe()} loaded {', '.join(loaded) or 'nothing'} instead of {engine_id}"
        raise NormalizeFailure(msg)
    return NormalizeResult(
        image_id=normalized.image_id,
        engine_id=engine_id,
        engine=engine.describe(),
        unnormalized_id=image_id,
        layers_rewritten=len(normalized.layers),
        bytes_rewritten=sum(layer.size for layer in normalized.layers),
        spool_peak=normalized.spool_peak,
        seconds=round(time.monotonic() - started, 3),
        phases=phases,
        read_from=read_from,
        fallback_reason="" if read_from == FROM_STORE else fallback,
    )


def _load_archive(normalized: Normalized, engine: EngineStore, what: str) -> tuple[str, Iterator[bytes]]:
    """(the ID the engine will give the image, the archive to load it from) for the engine's store."""
    if not engine.ids_are_manifests:
        return normalized.image_id, load_chunks(normalized)
    if len(normalized.base_descriptors) != len(normalized.diff_ids) - len(normalized.layers):
        msg = (
            f"{what}: {engine.describe()} saved no OCI manifest naming its base's layers, "
            "so the normalised image cannot be loaded beside them"
        )
        raise NormalizeFailure(msg)
    manifest = oci_manifest(normalized.config_bytes, normalized.base_descriptors, normalized.layers)
    engine_id = "sha256:" + hashlib.sha256(manifest).hexdigest()
    return engine_id, oci_chunks(normalized.config_bytes, manifest, normalized.layers)
