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
spooled one at a time, scanned for what the build's layers are reduced
against, and dropped at once.

Faster, when the engine allows it (a local engine whose data root this
process can read): the build's layers are read from the engine's own store and
rewritten as they stream by, with no ``save`` at all: on overlay2 rebuilt from
its layer store (imagebuild.engine.tar_split), on the containerd image store
decompressed from their blobs in its content store (imagebuild.engine.content_blobs).
Each is checked against its diffID on the way, so the result is the one
``save`` gives. Otherwise, or if that check fails, ``save`` it is; the result
says which ran and why.

The same on every engine. What the builder or the store adds is made canonical:
every build layer is reduced to what it changes below it (imagebuild.normalize.canonical:
a graph-driver store commits the container's upper directory, the containerd store
the difference), which step made which layer is read from the config's history
(empty build layers are dropped, their step marked ``empty_layer``), and the
classic builder's ``COPY dir:<hash>``, whose hash depends on the builder version
and on the tar the client sent, names the normalised layer's diffID instead
(imagebuild.normalize.config). On the containerd store, where an image ID is a manifest digest,
the image is loaded as an OCI layout with a manifest imagebuild writes, so the
engine's ID for it is known before the load and checked after it.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from imagebuild.engine.interface import PODMAN, EngineStore, StoredImage
from imagebuild.errors import EngineError
from imagebuild.log import logger
from imagebuild.normalize.content_load import normalize_into_content_load
from imagebuild.normalize.from_save import normalize_saved
from imagebuild.normalize.from_store import normalize_stored
from imagebuild.normalize.load_archive import legacy_chunks, oci_chunks, oci_manifest
from imagebuild.normalize.model import (
    FROM_CONTENT,
    FROM_SAVE,
    FROM_STORE,
    ImageStore,
    LayerPlan,
    Normalized,
    NormalizeFailure,
    NormalizeResult,
    StoreReadFailure,
    StoreUnavailable,
    remove_untagged,
)
from imagebuild.normalize.segmented_load import SEGMENT_BYTES
from imagebuild.normalize.streamed_load import SPOOL_BELOW, normalize_into_load, streams_into_load
from imagebuild.util.streams import open_stream

LOWER_CACHE = "lower-state"  # under the spool directory: what base layers hold (imagebuild.normalize.lower_cache)


def load_chunks(image: Normalized) -> Iterator[bytes]:
    """A ``docker load`` archive of the normalised image for a graph-driver store."""
    return legacy_chunks(image.config_bytes, image.diff_ids, image.layers)


def normalize_image(
    store: ImageStore,
    image_id: str,
    plan: LayerPlan,
    spool_dir: Path,
    *,
    from_store: bool = True,
    save_fallback: bool = True,
    spool_below: int = SPOOL_BELOW,
    segment_bytes: int = SEGMENT_BYTES,
) -> NormalizeResult:
    """Normalise ``image_id`` in ``store``; the result is loaded but not tagged.

    Read from the engine's store when it allows it and ``from_store``, else
    (and when that read fails its checks) from ``save``; without ``save_fallback`` NormalizeFailure
    says why the store could not be read instead (a save is the whole image, base included). The spool is a fresh
    directory under ``spool_dir`` (on disk, not /tmp, which may be memory),
    removed afterwards whatever happens; what a containerd-store base holds
    is kept under ``spool_dir/lower-state`` for the next normalisation. Streamed into the load, a
    layer whose files hold less than ``spool_below`` bytes goes through the spool, the others are
    sized first (imagebuild.normalize.streamed_load), in loads of ``segment_bytes`` or more
    (imagebuild.normalize.segmented_load).
    """
    started = time.monotonic()
    spool_dir.mkdir(parents=True, exist_ok=True)
    what = f"image {image_id[:19]}"
    engine = store.store()
    with tempfile.TemporaryDirectory(prefix="normalize-", dir=spool_dir) as workdir:
        normalized, fallback, save_started = None, "the layer store was not asked", started
        streamed: dict[str, float] | None = None
        loaded: list[str] = []
        loaded_as = ""  # the ID the engine gave the image, when it was loaded as it was read
        stored = store.stored_image(image_id) if from_store else None
        source = FROM_CONTENT if stored is not None and stored.manifest is not None else FROM_STORE
        if stored is not None and stored.unavailable:
            fallback = stored.unavailable
        elif stored is not None:
            try:
                normalized, loaded, loaded_as, streamed = _read_store(
                    stored,
                    plan,
                    store,
                    Path(workdir),
                    spool_dir / LOWER_CACHE,
                    what=what,
                    spool_below=spool_below,
                    segment_bytes=segment_bytes,
                )
            except StoreReadFailure as e:
                fallback = str(e)
                if save_fallback:
                    logger.warning("reading %s from the engine's %s failed (%s); using docker save", what, source, e)
        read_from = FROM_SAVE if normalized is None else source
        if normalized is None and not save_fallback:
            raise (StoreUnavailable if stored is None or stored.unavailable else NormalizeFailure)(fallback)
        if normalized is None and plan.normalized and plan.layers[plan.base_layers :][:1] == (plan.normalized[0].diff_id,):
            msg = (
                f"{what} starts with layers the layer cache image gave back, which only the engine's store can "
                f"show as they are ({fallback}); build again with --no-cache"
            )
            raise NormalizeFailure(msg)
        if normalized is None:
            logger.debug("normalising %s from docker save: %s", what, fallback)
            save_started = time.monotonic()
            normalized = normalize_saved(open_stream(store.save(image_id)), plan, Path(workdir), what=what)
        engine_id = loaded_as or normalized.image_id
        if streamed is None:
            load_started = time.monotonic()
            engine_id, chunks = _load_archive(normalized, engine, what)
            loaded = store.load(chunks)
            load_seconds = round(time.monotonic() - load_started, 3)
    # Streamed: the layers were sized first, then rewritten while the engine unpacked them.
    phases = streamed or {"rewrite": normalized.rewrite_seconds, "load": load_seconds}
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
        layers_rewritten=sum(layer.rewritten for layer in normalized.layers),
        bytes_rewritten=sum(layer.size for layer in normalized.layers if layer.rewritten),
        spool_peak=normalized.spool_peak,
        seconds=round(time.monotonic() - started, 3),
        phases=phases,
        read_from=read_from,
        fallback_reason="" if read_from != FROM_SAVE else fallback,
        layers_reused=sum(not layer.rewritten for layer in normalized.layers),
        layers=normalized.notes,
    )


def _read_store(
    stored: StoredImage,
    plan: LayerPlan,
    store: ImageStore,
    workdir: Path,
    lower_cache: Path,
    *,
    what: str,
    spool_below: int,
    segment_bytes: int,
) -> tuple[Normalized, list[str], str, dict[str, float] | None]:
    """The normalisation read from the engine's store: loaded as it is read where the rewrite streams
    into the load (then what the engine loaded, the ID it gave the image, the phases), else spooled
    for the load after it (empty, "", None)."""
    engine = store.store()
    if streams_into(stored, engine):
        started = time.monotonic()
        normalized, loaded, sized = normalize_into_load(
            stored,
            plan,
            store.load,
            what=what,
            lower_cache=lower_cache,
            spool=workdir,
            spool_below=spool_below,
            segment_bytes=segment_bytes,
            remove=lambda prefix: _remove_prefix(store, prefix),
        )
        return normalized, loaded, normalized.image_id, {"size": sized, "stream": round(time.monotonic() - started - sized, 3)}
    if engine.kind != PODMAN and engine.ids_are_manifests and stored.manifest is not None:
        return normalize_into_content_load(stored, plan, store.load, workdir, what=what, lower_cache=lower_cache)
    return normalize_stored(stored, plan, workdir, what=what, lower_cache=lower_cache), [], "", None


def _remove_prefix(store: ImageStore, image_id: str) -> None:
    """Remove an image a segment of the streamed load left (its layers stay where the image holds them);
    one that cannot be removed is left for `docker image prune`, with a warning."""
    try:
        remove_untagged(store, image_id)
    except EngineError as e:
        logger.warning("imagebuild: warning: could not remove %s, loaded on the way: %s", image_id[:19], e)


def streams_into(stored: StoredImage, engine: EngineStore) -> bool:
    """Whether the rewrite goes straight into the load: overlay2's layers into a legacy archive (the
    containerd store's OCI layout names each blob by its digest, known only once it is written)."""
    return engine.kind != PODMAN and not engine.ids_are_manifests and streams_into_load(stored)


def _load_archive(normalized: Normalized, engine: EngineStore, what: str) -> tuple[str, Iterator[bytes]]:
    """(the ID the engine will give the image, the archive to load it from) for the engine's store.

    Podman refuses a legacy archive without every layer's file ("Some layer tarfiles are missing
    in the tarball"), but loads an OCI layout whose base layers it already holds (it finds them by
    their diffID, named as uncompressed layers), and its image ID is the config's digest.
    """
    if engine.kind != PODMAN and not engine.ids_are_manifests:
        return normalized.image_id, load_chunks(normalized)
    if len(normalized.base_descriptors) != len(normalized.diff_ids) - len(normalized.layers):
        msg = (
            f"{what}: {engine.describe()} saved no OCI manifest naming its base's layers, "
            "so the normalised image cannot be loaded beside them"
        )
        raise NormalizeFailure(msg)
    manifest = oci_manifest(normalized.config_bytes, normalized.base_descriptors, normalized.layers)
    engine_id = normalized.image_id if engine.kind == PODMAN else "sha256:" + hashlib.sha256(manifest).hexdigest()
    return engine_id, oci_chunks(normalized.config_bytes, manifest, normalized.layers)
