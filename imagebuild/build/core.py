"""`imagebuild build`: render, make the context, build through the engine, tag only on success.

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
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from imagebuild.build.attestations import (
    AttestationPaths,
    BuildFacts,
    attestations_describe,
    load_attestation_modules_in_background,
    write_attestations,
)
from imagebuild.build.checkout_labels import checkout_build_args, checkout_labels, image_labels
from imagebuild.build.progress import TICK_S, BuildProgress
from imagebuild.build.stream import StepTiming, StepTracker
from imagebuild.engine.interface import BuildRequest, Engine
from imagebuild.errors import AttestationError, BuildError, ConfigError, EngineError
from imagebuild.inputs.layout import build_log_path, build_record_path, default_tag
from imagebuild.inputs.schema import suggest
from imagebuild.inputs.values import ENV_NAME, TUNABLE
from imagebuild.normalize.after_build import normalize_build
from imagebuild.project import Inputs, Project
from imagebuild.render import ConstraintMode, Dockerfile, RenderOptions, render_inputs
from imagebuild.render.context import build_context
from imagebuild.secrets import redact, secret_reason
from imagebuild.util.clock import Clock, SystemClock
from imagebuild.util.files import write_atomically

RUNNING_MARK = "---> Running in "  # the classic builder starts a container: no cache hit

__all__ = [
    "BuildOptions",
    "BuildRecord",
    "StepTiming",
    "build_image",
    "check_build_args",
    "image_labels",
    "prepare_build",
]


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    arch: str
    tag: str | None = None  # default imagebuild.inputs.layout.default_tag(arch); the record's tag
    extra_tags: tuple[str, ...] = ()  # tagged too, on success
    pull: bool = False  # pull the base and donor images even when the engine has them
    iidfile: Path | None = None  # the image ID (sha256:...) written here, as docker build --iidfile does
    no_cache: bool = False
    network: str | None = None
    build_args: dict[str, str] = field(default_factory=dict)
    record_path: Path | None = None  # default build/<arch>.build.json
    log_path: Path | None = None  # default build/<arch>.build.log
    constraint_mode: ConstraintMode = ConstraintMode.ON
    normalize: bool = True  # clamp timestamps to SOURCE_DATE_EPOCH after the build (imagebuild.normalize)


@dataclass(frozen=True, kw_only=True)
class BuildRecord:
    image_id: str
    tag: str
    tags: list[str]  # every name tagged, the record's tag first
    arch: str
    labels: dict[str, str]
    pins: dict[str, str]
    steps: list[StepTiming]
    total_seconds: float
    all_cached: bool
    log: str
    started_at: str  # ISO 8601, UTC
    finished_at: str
    sbom: str  # CycloneDX 1.6 JSON, next to the record
    provenance: str  # in-toto Statement with a SLSA v1 provenance predicate
    source_date_epoch: int  # of the last step: the normalised image's created time
    normalization: dict[str, object] | None  # None with --no-normalize

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def check_build_args(build_args: dict[str, str], inputs: Inputs) -> None:
    """A build arg overrides a tunable of stages/image.toml, and is no secret (args are in the history)."""
    spec = inputs.definition.spec
    tunables = dict(spec.args)
    for name, value in build_args.items():
        ENV_NAME.check(name, "--build-arg", name)
        reason = secret_reason(name, value)
        if reason:
            msg = f"--build-arg {name}: refused, {reason}; build args are recorded in the image history"
            raise ConfigError(msg)
        if name not in tunables:
            hint = (
                "change the pins file instead"
                if name in inputs.pins.build_args()
                else f"tunables: {', '.join(tunables)}"
            )
            msg = (
                f"--build-arg {name}: not a build tunable of {spec.source}.{suggest(name, tunables)} ({hint})"
            )
            raise ConfigError(msg)
        # A tunable may be expanded unquoted by a stage (make -j${MAX_JOBS}): its kind is narrow.
        TUNABLE.check(value, "--build-arg", name)


def prepare_build(inputs: Inputs, options: BuildOptions) -> Dockerfile:
    """Check the build's arguments and render its Dockerfile: all that can fail before the engine is asked."""
    check_build_args(options.build_args, inputs)
    return render_inputs(inputs, RenderOptions(constraint_mode=options.constraint_mode))


def build_image(
    project: Project,
    inputs: Inputs,
    options: BuildOptions,
    engine: Engine,
    *,
    progress: BuildProgress | None = None,
    clock: Clock | None = None,
) -> BuildRecord:
    """Build and tag the image; BuildError (nothing tagged) when a step fails.

    The engine is the caller's: it is neither opened nor closed here.
    """
    dockerfile = prepare_build(inputs, options)
    show = progress or BuildProgress.quiet()
    steady = clock or SystemClock()
    tag = options.tag or default_tag(inputs.arch.name)
    tags = list(dict.fromkeys((tag, *options.extra_tags)))
    log_path = options.log_path or build_log_path(project.root, inputs.arch.name)
    record_path = options.record_path or build_record_path(project.root, inputs.arch.name)
    attestations = AttestationPaths.beside(record_path, inputs.arch.name)
    for directory in {log_path.parent, record_path.parent}:
        directory.mkdir(parents=True, exist_ok=True)
    # The same files `imagebuild render` writes to docker/ARCH/; the checkout's labels come as build args.
    built = build_context(dockerfile, inputs)
    checkout = checkout_labels(project, inputs.arch.name)
    labels = built.labels | checkout
    build_args = checkout_build_args(checkout) | options.build_args
    context = built.tar()
    show.message(
        f"building {tag} for {inputs.arch.name} on {engine.address} ({len(context) // 1024} KiB context)"
    )

    if options.pull:
        _pull_images(inputs, engine, show)
    tracker = StepTracker(dockerfile, steady, show)
    started = steady.now()
    started_at = datetime.now(UTC)
    # The labels are in the context's Dockerfile (one LABEL instruction), not build options.
    request = BuildRequest(
        context=context, build_args=build_args, network_mode=options.network, no_cache=options.no_cache
    )
    # Heartbeats come from a timer: a step may print nothing for many minutes.
    timer = steady.every(TICK_S, tracker.tick)
    try:
        image_id, error = _stream(engine, request, tracker, log_path)
    except EngineError as e:
        where = _where(dockerfile, inputs, tracker, "was interrupted")
        msg = f"{where}: {e}; nothing was tagged (log: {log_path})"
        raise EngineError(msg) from e
    finally:
        timer.cancel()
        show.close()
    if error is not None or image_id is None:
        raise BuildError(
            _failure_message(
                dockerfile, inputs, tracker, error or "the build ended without an image", log_path
            )
        )
    tracker.finish()
    normalization = None
    if options.normalize:
        normalization = normalize_build(
            engine,
            image_id,
            tag=tag,
            base_ref=inputs.pins.image(inputs.definition.base_pin).reference,
            dockerfile=dockerfile,
            spool_dir=record_path.parent,
            record_path=record_path,
        )
        show.message(normalization.summary())
        image_id = normalization.image_id
    finished_at = datetime.now(UTC)
    # On the containerd image store the engine knows the image by its manifest digest, not its identity.
    engine_ref = normalization.engine_id if normalization else image_id
    for name in tags:
        engine.tag(engine_ref, name)
    if options.iidfile is not None:
        write_atomically(options.iidfile, image_id)  # docker's format: the ID, no newline
    record = BuildRecord(
        image_id=image_id,
        tag=tag,
        tags=tags,
        arch=inputs.arch.name,
        labels=labels,
        pins={p.name: p.require_identity() for p in inputs.pins},
        steps=tracker.timings,
        total_seconds=round(steady.now() - started, 3),
        all_cached=all(t.cached for t in tracker.timings) and len(tracker.timings) == len(dockerfile.steps),
        log=str(log_path),
        started_at=started_at.isoformat(),
        finished_at=finished_at.isoformat(),
        sbom=str(attestations.sbom),
        provenance=str(attestations.provenance),
        source_date_epoch=dockerfile.steps[-1].source_date_epoch,
        normalization=normalization.result.to_json() if normalization else None,
    )
    write_atomically(record_path, json.dumps(record.to_json(), indent=2) + "\n")
    facts = BuildFacts(
        image_id=image_id,
        tag=tag,
        started=started_at,
        finished=finished_at,
        context=built.inputs_tar,
        dockerfile_text=built.dockerfile,
        build_args=build_args,
        no_cache=options.no_cache,
        network=options.network,
    )
    _attest(project, inputs, facts, engine, paths=attestations, show=show)
    return record


def _pull_images(inputs: Inputs, engine: Engine, show: BuildProgress) -> None:
    """--pull: the base and donor images from their registries, even when the engine has them.

    By digest when locked, so a pull never changes what is built, only where it comes from.
    """
    for pin in inputs.pins.images():
        show.message(f"pulling {pin.reference} ({pin.name})")
        image_id = engine.pull(pin.reference)
        show.message(f"pulled {pin.reference}: {image_id[:19]}")


def _attest(
    project: Project,
    inputs: Inputs,
    facts: BuildFacts,
    engine: Engine,
    *,
    paths: AttestationPaths,
    show: BuildProgress,
) -> None:
    """Write the SBOM and provenance, unless the ones there already describe this image from these inputs.

    A fully cached rebuild makes no new image: its documents stand, and making
    them again (a container run and schema validation) would cost a cached
    build most of its time.
    """
    if attestations_describe(paths, facts.image_id, facts.context):
        show.message(
            f"SBOM and provenance of {facts.image_id[:19]} are current: {paths.sbom}, {paths.provenance}"
        )
        return
    try:
        write_attestations(project, inputs, facts, engine, paths)
    except AttestationError as e:
        msg = f"{facts.tag} ({facts.image_id}) was built and tagged, but its SBOM and provenance were not written: {e}"
        raise AttestationError(msg) from e
    show.message(f"SBOM: {paths.sbom}; provenance: {paths.provenance}")


def _stream(
    engine: Engine, request: BuildRequest, tracker: StepTracker, log_path: Path
) -> tuple[str | None, str | None]:
    """Run the build, writing the full log; (image id, error) as the engine reported them."""
    image_id: str | None = None
    error: str | None = None
    working = False
    with log_path.open("w", encoding="utf-8") as log:
        for event in engine.build(request):
            if event.text:
                # A step may print a credential (a URL it was given, an env dump): never into the log.
                text = redact(event.text)
                log.write(text)
                tracker.feed(text)
                if not working and RUNNING_MARK in event.text:
                    # A step really runs, so a new image and new attestations will follow: load their
                    # makers while the engine works. A fully cached build never gets here.
                    working = True
                    load_attestation_modules_in_background()
            if event.error:
                error = redact(event.error)
                log.write(f"ERROR: {error}\n")
            if event.image_id:
                image_id = event.image_id
    return image_id, error


def _where(dockerfile: Dockerfile, inputs: Inputs, tracker: StepTracker, what: str) -> str:
    """'step 7/18 'vLLM ...' failed (stages/07-vllm.toml; pins: vllm = ...)', or where before the steps."""
    step = next((s for s in dockerfile.steps if s.number == tracker.current), None)
    if step is None:
        return f"the build {what} before the final stage (donor image or base image)"
    pins = ", ".join(f"{p} = {inputs.pins.get(p).identity or 'unpinned'}" for p in step.pins) or "none"
    return f"step {step.number}/{len(dockerfile.steps)} '{step.title}' {what} ({step.source}; pins: {pins})"


def _failure_message(
    dockerfile: Dockerfile, inputs: Inputs, tracker: StepTracker, error: str, log_path: Path
) -> str:
    tail = "\n".join(f"  | {line}" for line in tracker.tail)
    return (
        f"{_where(dockerfile, inputs, tracker, 'failed')}: {error}\n"
        f"last {len(tracker.tail)} lines of the build log:\n{tail}\nfull log: {log_path}; nothing was tagged"
    )
