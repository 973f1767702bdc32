"""`imagebuild build`: send the prepared context to the engine, normalise, tag only on success, record.

``build_image`` takes a build ``prepare_build`` (imagebuild.build.prepare) made, and does its jobs in
order, one function each: the places it writes, the names to tag, the request (the checkout's labels
as build args), --pull, the build streamed into its log, normalisation, tagging, the one record of
the build's facts, and the SBOM and provenance derived from that record.

The context is the one ``imagebuild render`` writes to docker/ARCH/ (imagebuild.render.context), made
by the same function: the build sends those files, plus build args for the labels a committed
file cannot hold (the checkout's revision, ...) and for any tunable the user overrides. So a
plain ``docker build docker/ARCH`` with the same build args builds the same image.

Progress is shown per step of the final stage (imagebuild.build.progress) from the
classic builder's stream (imagebuild.build.stream). A failure names the step,
its title and the pins it consumed, shows the log tail, keeps the full log in
a file and tags nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild import __version__
from imagebuild.build.attestations import (
    AttestationPaths,
    AttestationWarmup,
    attestations_describe,
    base_diff_ids,
    write_attestations,
)
from imagebuild.build.checkout_labels import checkout_build_args, checkout_labels, image_labels
from imagebuild.build.compile_cache import CacheCounts, cache_steps_run, serving
from imagebuild.build.failure import failure_message, where
from imagebuild.build.podman_checks import check_labels, podman_identity
from imagebuild.build.prepare import BuildOptions, PreparedBuild, check_build_args, prepare_build
from imagebuild.build.progress import TICK_S, BuildProgress
from imagebuild.build.pull_progress import pull_images
from imagebuild.build.record import BuildRecord
from imagebuild.build.stream import ANSI_RE, StepTiming, StepTracker
from imagebuild.engine.interface import PODMAN, BuildRequest, Engine
from imagebuild.errors import AttestationError, BuildError, EngineError
from imagebuild.inputs.layout import BUILD_LOG_SUFFIX, build_record_path, default_tag
from imagebuild.log import logger
from imagebuild.normalize.after_build import Normalization, ahead_of_build, cache_from, normalize_build
from imagebuild.normalize.ahead import NormalizeAhead
from imagebuild.secrets import redact
from imagebuild.util.clock import Clock, SystemClock
from imagebuild.util.files import write_atomically

if TYPE_CHECKING:
    from imagebuild.attest.keys import SigningKey

__all__ = [
    "BuildOptions",
    "BuildRecord",
    "PreparedBuild",
    "StepTiming",
    "build_image",
    "check_build_args",
    "image_labels",
    "prepare_build",
]


@dataclass(frozen=True, kw_only=True)
class BuildPlaces:
    """Where a build writes: its log and its record (the SBOM and provenance, named by the image, beside it)."""

    log: Path
    record: Path

    @classmethod
    def of(cls, prepared: PreparedBuild) -> BuildPlaces:
        """The options' paths (prepare_build checked them), else build/ARCH.* in the checkout; the log
        beside the record."""
        arch = prepared.inputs.arch.name
        record = prepared.options.record_path or build_record_path(prepared.project.root, arch)
        log = prepared.options.log_path or record.with_name(f"{arch}{BUILD_LOG_SUFFIX}")
        for directory in {log.parent, record.parent}:
            directory.mkdir(parents=True, exist_ok=True)
        return cls(log=log, record=record)


@dataclass(frozen=True, kw_only=True)
class Started:
    """When the engine was asked to build: by the steady clock (durations) and the wall clock (records)."""

    steady: float
    wall: datetime


def build_image(
    prepared: PreparedBuild,
    engine: Engine,
    *,
    progress: BuildProgress | None = None,
    clock: Clock | None = None,
) -> BuildRecord:
    """Build and tag the image; BuildError (nothing tagged) when a step fails.

    ``prepared`` is ``prepare_build``'s: nothing is read from the checkout again. The engine is the
    caller's: it is neither opened nor closed here.
    """
    show = progress or BuildProgress.quiet()
    steady = clock or SystemClock()
    options, arch = prepared.options, prepared.inputs.arch.name
    places = BuildPlaces.of(prepared)
    tags = names_to_tag(options, arch)
    labels, request = build_request(prepared)
    show.message(
        f"building {tags[0]} for {arch} on {engine.address} ({len(request.context) // 1024} KiB context)"
    )
    store = engine.store()
    if store.kind == PODMAN:
        logger.warning("imagebuild: warning: %s", podman_identity(store))
    if options.pull:
        pull_images(prepared.inputs, engine, show, steady)
    if options.cache_normalized and not options.no_cache:
        request = replace(request, cache_from=cache_from(engine, places.record))
    ahead = start_ahead(prepared, engine, places, show) if store.kind != PODMAN else None
    tracker = StepTracker(prepared.dockerfile, steady, show, committed=ahead.committed if ahead else None)
    started = Started(steady=steady.now(), wall=datetime.now(UTC))
    normalized = None
    try:
        with serving(options.compile_cache, network=options.network) as cache:
            image_id = run_build(prepared, engine, request, tracker, clock=steady, show=show, log_path=places.log)
        if cache is not None:
            show.message(cache.summary())
            if warning := cache.unasked(cache_steps_run(prepared.dockerfile, tracker.timings)):
                logger.warning(warning)
        if store.kind == PODMAN:
            check_labels(engine, store, image_id, labels, places.log)
        if options.normalize:
            normalized = normalize_image(prepared, engine, image_id, tag=tags[0], places=places, show=show, ahead=ahead)
            image_id = normalized.image_id
    finally:
        if ahead is not None:  # what it loaded: the image holds the layers it needs (or the build failed)
            ahead.remove_prefixes(keep=normalized.engine_id if normalized else "")
    finished = datetime.now(UTC)
    # On the containerd image store the engine knows the image by its manifest digest, not its identity.
    tag_image(
        engine,
        normalized.engine_id if normalized else image_id,
        tags,
        identity=image_id,
        iidfile=options.iidfile,
    )
    record = build_record(
        prepared,
        image_id=image_id,
        tags=tags,
        labels=labels,
        request=request,
        tracker=tracker,
        started=started,
        finished=finished,
        total_seconds=round(steady.now() - started.steady, 3),
        normalized=normalized,
        places=places,
        compile_cache=cache,
    )
    write_atomically(places.record, json.dumps(record.to_json(), indent=2) + "\n")
    return attest(record, engine, show=show, key=options.signing_key, base_ref=prepared.inputs.base_reference)


def names_to_tag(options: BuildOptions, arch: str) -> list[str]:
    """Every name to tag on success, the record's first (the default tag when none is given)."""
    return list(dict.fromkeys((options.tag or default_tag(arch), *options.extra_tags)))


def build_request(prepared: PreparedBuild) -> tuple[dict[str, str], BuildRequest]:
    """The image's labels, and the request that sends the prepared context.

    The same files `imagebuild render` writes to docker/ARCH/; the checkout's labels, which a
    committed file cannot hold, come as build args. The labels are in the context's Dockerfile
    (one LABEL instruction), not build options.
    """
    checkout = checkout_labels(prepared.project, prepared.inputs.arch.name)
    options = prepared.options
    request = BuildRequest(
        context=prepared.context.tar(),
        build_args=checkout_build_args(checkout) | options.build_args,
        network_mode=options.network,
        no_cache=options.no_cache,
    )
    return prepared.context.labels | checkout, request


def run_build(
    prepared: PreparedBuild,
    engine: Engine,
    request: BuildRequest,
    tracker: StepTracker,
    *,
    clock: Clock,
    show: BuildProgress,
    log_path: Path,
) -> str:
    """Stream the build into its log and the tracker; the built image's ID.

    A failed step is a BuildError, a lost engine an EngineError, each naming the step and the log.
    """
    # Heartbeats come from a timer: a step may print nothing for many minutes.
    timer = clock.every(TICK_S, tracker.tick)
    try:
        image_id, error = stream_build(engine, request, tracker, log_path)
    except EngineError as e:
        place = where(prepared.dockerfile, prepared.inputs, tracker, "was interrupted")
        msg = f"{place}: {e}; nothing was tagged (log: {log_path})"
        raise EngineError(msg) from e
    finally:
        timer.cancel()
        show.close()
    if error is not None or image_id is None:
        raise BuildError(
            failure_message(
                prepared.dockerfile,
                prepared.inputs,
                tracker,
                error or "the build ended without an image",
                log_path,
                network=request.network_mode,
            )
        )
    tracker.finish()
    return image_id


def stream_build(
    engine: Engine, request: BuildRequest, tracker: StepTracker, log_path: Path
) -> tuple[str | None, str | None]:
    """Run the build, writing the full log; (image id, error) as the engine reported them."""
    image_id: str | None = None
    error: str | None = None
    warmup = AttestationWarmup()
    with log_path.open("w", encoding="utf-8") as log:
        for event in engine.build(request):
            if event.text:
                # A step may print a credential (a URL it was given, an env dump): never into the log.
                text = redact(event.text)
                log.write(ANSI_RE.sub("", text))  # the log is read in an editor or a CI page: no colour codes
                tracker.feed(text)
                warmup.feed(event.text)
            if event.error:
                error = redact(event.error)
                log.write(f"ERROR: {error}\n")
            if event.image_id:
                image_id = event.image_id
    return image_id, error


def start_ahead(
    prepared: PreparedBuild, engine: Engine, places: BuildPlaces, show: BuildProgress
) -> NormalizeAhead | None:
    """Normalising the build's intermediate images while it runs (imagebuild.normalize.ahead), unless off."""
    options = prepared.options
    if not options.normalize or options.normalize_ahead_mb is None:
        return None
    return ahead_of_build(
        engine,
        base_ref=prepared.inputs.base_reference,
        dockerfile=prepared.dockerfile,
        spool_dir=places.record.parent,
        record_path=places.record,
        min_mb=options.normalize_ahead_mb,
        tell=show.message,
    )


def normalize_image(
    prepared: PreparedBuild,
    engine: Engine,
    image_id: str,
    *,
    tag: str,
    places: BuildPlaces,
    show: BuildProgress,
    ahead: NormalizeAhead | None = None,
) -> Normalization:
    """Clamp the built image's timestamps to SOURCE_DATE_EPOCH (imagebuild.normalize)."""
    normalized = normalize_build(
        engine,
        image_id,
        tag=tag,
        base_ref=prepared.inputs.base_reference,
        dockerfile=prepared.dockerfile,
        spool_dir=places.record.parent,
        record_path=places.record,
        keep_cache_image=prepared.options.keep_cache_image,
        cache_normalized=prepared.options.cache_normalized,
        ahead=ahead,
    )
    show.message(normalized.summary())
    return normalized


def tag_image(
    engine: Engine, engine_id: str, tags: list[str], *, identity: str, iidfile: Path | None
) -> None:
    """Tag the image (``engine_id``: the engine's name for it) with every name, and write --iidfile
    (``identity``: the same on every engine): only once the build has succeeded."""
    for name in tags:
        engine.tag(engine_id, name)
    if iidfile is not None:
        write_atomically(iidfile, identity)  # docker's format: the ID, no newline


def build_record(
    prepared: PreparedBuild,
    *,
    image_id: str,
    tags: list[str],
    labels: dict[str, str],
    request: BuildRequest,
    tracker: StepTracker,
    started: Started,
    finished: datetime,
    total_seconds: float,
    normalized: Normalization | None,
    places: BuildPlaces,
    compile_cache: CacheCounts | None = None,
) -> BuildRecord:
    """The one record of the build's facts, from which its record file, SBOM and provenance are made."""
    inputs, dockerfile = prepared.inputs, prepared.dockerfile
    documents = AttestationPaths.beside(places.record, inputs.arch.name, image_id)
    manifest_digest = normalized.engine_id if normalized and normalized.engine_id != image_id else ""
    return BuildRecord(
        image_id=image_id,
        tag=tags[0],
        tags=tags,
        arch=inputs.arch.name,
        labels=labels,
        pins=inputs.pins,
        lock=inputs.python_lock,
        inputs_digest=prepared.context.inputs_digest,
        files=prepared.files,
        build_args=request.build_args,
        no_cache=request.no_cache,
        network=request.network_mode,
        source_date_epoch=dockerfile.steps[-1].source_date_epoch,
        tool_version=__version__,
        started=started.wall,
        finished=finished,
        steps=tracker.timings,
        total_seconds=total_seconds,
        all_cached=all(t.cached for t in tracker.timings) and len(tracker.timings) == len(dockerfile.steps),
        normalization=normalized.result.to_json() if normalized else None,
        log=places.log,
        sbom=documents.sbom,
        provenance=documents.provenance,
        manifest_digest=manifest_digest,
        signed=documents.envelopes() if prepared.options.signing_key else (),
        recipes=prepared.context.recipes,
        apt_lock=inputs.apt_lock,
        compile_cache=compile_cache.to_json() if compile_cache else None,
    )


def attest(
    record: BuildRecord,
    engine: Engine,
    *,
    show: BuildProgress,
    key: SigningKey | None = None,
    base_ref: str = "",
) -> BuildRecord:
    """Write the SBOM and provenance unless the ones there describe this image from these inputs; the
    record, with the layers of the base ``base_ref`` (only the SBOM marks them) when they were written.

    A fully cached rebuild makes no new image: its documents stand, and making them again (a container
    run, schema validation, the base's layers asked of the engine) would cost it most of its time.
    """
    if attestations_describe(record):
        show.message(
            f"SBOM and provenance of {record.image_id[:19]} are current: {record.sbom}, {record.provenance}"
        )
        return record
    if base_ref:
        record = replace(record, base_diff_ids=base_diff_ids(engine, base_ref))
    try:
        write_attestations(record, engine, key=key)
    except AttestationError as e:
        msg = f"built and tagged {record.tag} ({record.image_id}); {e}"
        raise AttestationError(msg) from e
    signed = f"; signed: {', '.join(str(p) for p in record.signed)}" if record.signed else ""
    show.message(f"SBOM: {record.sbom}; provenance: {record.provenance}{signed}")
    return record
