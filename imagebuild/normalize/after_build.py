"""What `imagebuild build` does after the engine built the image: normalise it, keep the cache.

The classic builder's layer cache is the parent chain of the image it built. The normalised image
is loaded beside it and has no parents, so the built image is tagged ``<tag>-cache`` to keep that
chain out of ``docker image prune``'s reach, and the engine holds every build layer twice.
``build --cache-normalized`` keeps instead, where the engine's store can be read, a cache image as
``<tag>-cache``: the built image's config over the normalised layers
(imagebuild.normalize.cache_image), which the next build names in ``cache_from``; the built image
is removed, and the engine keeps the build's layers once (elsewhere the built image stays). A build
that the cache served entirely gives the same built (or cache) image again, and its normalised
image is then taken from the previous build record instead of being made again.
``--drop-cache-image`` keeps no cache: the next build starts cold.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from imagebuild.engine.interface import PODMAN, Engine
from imagebuild.errors import EngineError, NormalizeError, machine_limit
from imagebuild.inputs.stage_model import Instruction
from imagebuild.log import format_duration, logger
from imagebuild.normalize.ahead import NormalizeAhead
from imagebuild.normalize.model import (
    FROM_CONTENT,
    FROM_SAVE,
    FROM_STORE,
    RULES,
    LayerNote,
    LayerPlan,
    NormalizeFailure,
    NormalizeResult,
    remove_untagged,
)
from imagebuild.render import Dockerfile

CACHE_SUFFIX = "-cache"
SOURCES = {FROM_STORE: "the engine's layer store", FROM_CONTENT: "the engine's content store", FROM_SAVE: "docker save"}


@dataclass(frozen=True, kw_only=True)
class Normalization:
    """The build's image, normalised: what the build record says about it."""

    image_id: str  # the normalised image's identity (its config digest), the same on every engine
    engine_id: str  # what this engine calls it, and what the tag names: image_id, or a manifest digest
    cache_tag: str  # the layer cache of the next build: the cache image, or the built image
    result: NormalizeResult
    cache_dropped: bool = False  # --drop-cache-image: cache_tag was removed once the image was normalised

    def summary(self) -> str:
        result = self.result
        if self.cache_dropped:
            cache = "the built image and its intermediate images are removed (--drop-cache-image): the next build starts cold"
        elif result.cache_image:
            cache = (
                f"the layer cache is kept as {self.cache_tag}, the built config over the normalised layers: "
                "the engine keeps the build's layers once"
            )
        else:
            cache = f"the built image is kept as {self.cache_tag} for the layer cache"
        if result.reused:
            return (
                f"timestamps normalised: {result.image_id[:19]} (made by the last build of this image; "
                f"{result.engine})" + (f"; {cache}" if self.cache_dropped else "")
            )
        return (
            f"timestamps normalised: {result.image_id[:19]} in {format_duration(result.seconds)}, "
            f"{result.layers_rewritten} layers ({result.bytes_rewritten / 1e6:.0f} MB) read from "
            f"{SOURCES.get(result.read_from, result.read_from)} of {result.engine} and rewritten; "
            + (
                f"before that, {result.ahead.layers} layers ({result.ahead.bytes / 1e6:.0f} MB) while the build "
                f"ran ({format_duration(result.ahead.seconds)} beside it); "
                if result.ahead and result.ahead.prefixes
                else ""
            )
            + (
                f"{result.layers_reused} taken from the engine as they were normalised before (while the build "
                "ran, or by the last build of the same inputs); "
                if result.layers_reused
                else ""
            )
            + cache
        )


def cache_tag(tag: str) -> str:
    """``repo:tag`` -> ``repo:tag-cache`` (``repo`` alone means ``repo:latest``)."""
    name, _, version = tag.rpartition(":") if ":" in tag.rsplit("/", 1)[-1] else (tag, ":", "latest")
    return f"{name}:{version}{CACHE_SUFFIX}"


def cache_from(engine: Engine, record_path: Path) -> tuple[str, ...]:
    """What the build names in ``cache_from``: the layer cache image its last record names, when the engine
    holds it. Only with that record: its notes say which layers the image gives back normalised, so they
    are taken as they are and the steps above them checked (LayerPlan.normalized)."""
    image = _recorded_cache_image(record_path)
    return (image,) if image and keeps_cache_images(engine) and engine.has_image(image) else ()


def keeps_cache_images(engine: Engine) -> bool:
    """Whether the layer cache is a cache image here: on a graph-driver store. Docker 26's containerd
    store fails a step it would take from one ("failed to restore cached image ... failed to read diff
    archive"), and Podman's ``cache_from`` names a registry repository: there the built image stays."""
    store = engine.store()
    return store.kind != PODMAN and not store.ids_are_manifests


def layer_plan(engine: Engine, image_id: str, base_ref: str, dockerfile: Dockerfile) -> LayerPlan:
    """Which layers are the base's, and the epoch of each step after FROM (its layer's mtime clamp)."""
    image, base = engine.inspect_image(image_id), engine.inspect_image(base_ref)
    steps = [s for s in dockerfile.steps if s.instruction is not Instruction.FROM]
    epochs = tuple(s.source_date_epoch for s in steps)
    if image.layers[: len(base.layers)] != base.layers:
        msg = f"the built image {image_id[:19]} does not start with the layers of its base {base_ref}"
        raise NormalizeError(msg)
    return LayerPlan(
        layers=image.layers,
        base_layers=len(base.layers),
        base_history=len(base.history),
        epochs=epochs,
        created=dockerfile.steps[-1].source_date_epoch,
        context_copies=tuple(s.copies_context for s in steps),
    )


def ahead_of_build(
    engine: Engine,
    *,
    base_ref: str,
    dockerfile: Dockerfile,
    spool_dir: Path,
    record_path: Path,
    min_mb: int,
    tell: Callable[[str], None],
) -> NormalizeAhead:
    """Normalising ahead (imagebuild.normalize.ahead) for a build of ``dockerfile`` on ``engine``, started."""
    previous = previous_layers(record_path)
    return NormalizeAhead(
        engine,
        lambda image_id: replace(layer_plan(engine, image_id, base_ref, dockerfile), normalized=held(previous)),
        spool_dir,
        min_bytes=min_mb * 10**6,
        previous=previous,
        tell=tell,
    )


def previous_normalization(record_path: Path, built_id: str, engine: Engine) -> tuple[str, str] | None:
    """(identity, engine ID) of the last build's normalised image, when it normalised this very image
    under today's rules and the engine still has it."""
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    normalized = record.get("normalization") if isinstance(record, dict) else None
    if not isinstance(normalized, dict) or built_id not in (normalized.get("unnormalized_id"), normalized.get("cache_image")):
        return None
    if normalized.get("rules") != RULES:  # made under other rules: another image now
        return None
    image_id, engine_id = record.get("image_id"), normalized.get("engine_id") or record.get("image_id")
    if not isinstance(image_id, str) or not isinstance(engine_id, str) or not engine.has_image(engine_id):
        return None
    return image_id, engine_id


def previous_layers(record_path: Path) -> tuple[LayerNote, ...]:
    """The last build's notes on its build layers (made under today's rules), for reusing those that did
    not change; none when the record has none."""
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        normalized = record["normalization"]
        if normalized.get("rules") != RULES:
            return ()
        return tuple(
            LayerNote(
                built=str(note["built"]), epoch=int(note["epoch"]), pinned=bool(note["pinned"]), diff_id=str(note["diff_id"])
            )
            for note in normalized.get("layers") or ()
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return ()  # no record, or not one this version wrote: every layer is rewritten


def _recorded_cache_image(record_path: Path) -> str:
    try:
        image = json.loads(record_path.read_text(encoding="utf-8"))["normalization"]["cache_image"]
    except (OSError, ValueError, TypeError, KeyError):
        return ""
    return image if isinstance(image, str) else ""


def held(notes: tuple[LayerNote, ...]) -> tuple[LayerNote, ...]:
    """The notes of the layers a normalised image holds (LayerPlan.normalized), lowest first."""
    return tuple(note for note in notes if note.diff_id)


def normalize_build(
    engine: Engine,
    built_id: str,
    *,
    tag: str,
    base_ref: str,
    dockerfile: Dockerfile,
    spool_dir: Path,
    record_path: Path,
    keep_cache_image: bool = True,
    cache_normalized: bool = False,
    ahead: NormalizeAhead | None = None,
) -> Normalization:
    """Normalise the built image (or reuse the last build's result) and tag the built one as the cache
    (``cache_normalized``: a cache image in its place, where the store allows it), or remove it once
    normalised (``keep_cache_image`` False). A failure keeps it tagged either way.
    ``ahead``: what was normalised while the build ran is taken from the engine (its caller removes
    the intermediate images it loaded)."""
    keep = cache_tag(tag)
    replaced = _recorded_cache_image(record_path)  # the last build's cache image, which this build's replaces
    engine.tag(built_id, keep)
    normalized = _normalize_or_reuse(
        engine,
        built_id,
        keep,
        base_ref=base_ref,
        dockerfile=dockerfile,
        spool_dir=spool_dir,
        record_path=record_path,
        cache_image=replaced,
        ahead=ahead,
    )
    if not keep_cache_image:
        # By its name: docker removes the image with the intermediate images only it held (the layer cache).
        engine.remove_image(keep)
        normalized = replace(normalized, cache_dropped=True)
    elif cache_normalized and not normalized.result.reused:  # reused: the built image is the last cache image
        normalized = _keep_cache_image(engine, built_id, keep, normalized)
    if replaced and replaced not in (built_id, normalized.result.cache_image):
        # It holds no layers of its own, but would keep the last build's alive.
        with contextlib.suppress(EngineError):  # gone already (UnknownImageError), or a child image holds it
            remove_untagged(engine, replaced)
    return normalized


def _keep_cache_image(engine: Engine, built_id: str, keep: str, normalized: Normalization) -> Normalization:
    """The layer cache image tagged ``keep`` in the built image's place, which is removed; where there is none
    (keeps_cache_images; an engine read through save) or the load fails, the built image stays ``keep``."""
    if not keeps_cache_images(engine) or normalized.result.read_from == FROM_SAVE:
        return normalized
    from imagebuild.normalize.cache_image import load_cache_image  # its archive writer: only when it is made

    try:
        cache_image = load_cache_image(engine, built_id, normalized.engine_id)
        engine.tag(cache_image, keep)
    except (NormalizeFailure, EngineError) as e:
        logger.warning("imagebuild: warning: the built image is kept as %s for the layer cache: %s", keep, e)
        return normalized
    if cache_image != built_id:  # removed with the intermediate images only it held
        remove_untagged(engine, built_id)
    return replace(normalized, result=replace(normalized.result, cache_image=cache_image))


def _normalize_or_reuse(
    engine: Engine,
    built_id: str,
    keep: str,
    *,
    base_ref: str,
    dockerfile: Dockerfile,
    spool_dir: Path,
    record_path: Path,
    cache_image: str,  # the layer cache image the record names ("" when none)
    ahead: NormalizeAhead | None,
) -> Normalization:
    ahead_notes = ahead.finish() if ahead is not None else ()
    reused = previous_normalization(record_path, built_id, engine)
    if reused is not None:
        identity, engine_id = reused
        result = NormalizeResult(
            image_id=identity,
            engine_id=engine_id,
            engine=engine.store().describe(),
            unnormalized_id=built_id,
            layers_rewritten=0,
            bytes_rewritten=0,
            spool_peak=0,
            seconds=0.0,
            reused=True,
            read_from="",  # nothing was read
            # Kept for the next build: the layers it may take as they are, and the cache image it names.
            layers=previous_layers(record_path),
            cache_image=built_id if built_id == cache_image else "",
        )
        return Normalization(image_id=identity, engine_id=engine_id, cache_tag=keep, result=result)
    from imagebuild.normalize.core import normalize_image  # the rewrite: not on a reused build's path

    last_build = previous_layers(record_path)
    # Normalised ahead: this run's notes, made with the last build's, for the first layers; the last build's above.
    previous = ahead_notes + last_build[len(ahead_notes) :]
    plan = replace(layer_plan(engine, built_id, base_ref, dockerfile), previous=previous, normalized=held(last_build))
    try:
        result = normalize_image(engine, built_id, plan, spool_dir)
    except (NormalizeFailure, EngineError, OSError) as e:
        # A write into a spooled layer names no file: its directory is what to free.
        limit = machine_limit(e, where=f"{spool_dir} (its work files go beside the build record, --record)")
        if isinstance(e, OSError) and not limit:
            raise  # not the machine's limits (the spool's disk filling up, say): a bug
        msg = (
            f"timestamp normalisation of {built_id[:19]} failed: {limit or e}. The built image is kept as {keep}; "
            "rebuild with --no-normalize to skip normalisation"
        )
        raise NormalizeError(msg) from e
    if ahead is not None:
        result = replace(result, ahead=ahead.work)
    return Normalization(image_id=result.image_id, engine_id=result.engine_id, cache_tag=keep, result=result)
