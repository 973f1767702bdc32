"""`imagebuild build`: render, make the context, build through the engine, tag only on success.

Progress is reported per step of the final stage (``[n/18] title ... 2m13s``)
by mapping the classic builder's "Step k/M" lines onto the rendered Dockerfile.
A failure names the step, its title and the pins it consumed, shows the log
tail, keeps the full log in a file and tags nothing.
"""

from __future__ import annotations

import json
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from imagebuild.attestations import AttestationPaths, BuildFacts, attestation_labels, write_attestations
from imagebuild.context import context_files, make_context
from imagebuild.engine import BuildRequest, Engine
from imagebuild.errors import AttestationError, BuildError, ConfigError
from imagebuild.labels import image_labels
from imagebuild.layout import build_log_path, build_record_path, default_tag
from imagebuild.log import format_duration
from imagebuild.project import Inputs, Project
from imagebuild.render import ConstraintMode, Dockerfile, LineKind, RenderOptions, render
from imagebuild.secrets import secret_reason
from imagebuild.util.files import write_atomically

STEP_RE = re.compile(r"^Step (\d+)/(\d+) : ")
LOG_TAIL_LINES = 40


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    arch: str
    tag: str | None = None  # default imagebuild/kimi-k3:<arch>
    no_cache: bool = False
    network: str | None = None
    build_args: dict[str, str] = field(default_factory=dict)
    record_path: Path | None = None  # default build/<arch>.build.json
    log_path: Path | None = None  # default build/<arch>.build.log
    constraint_mode: ConstraintMode = ConstraintMode.ON


@dataclass(frozen=True, kw_only=True)
class StepTiming:
    number: int
    title: str
    seconds: float
    cached: bool


@dataclass(frozen=True, kw_only=True)
class BuildRecord:
    image_id: str
    tag: str
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

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def check_build_args(build_args: dict[str, str]) -> None:
    for name, value in build_args.items():
        reason = secret_reason(name, value)
        if reason:
            msg = f"--build-arg {name}: refused, {reason}; build args are recorded in the image history"
            raise ConfigError(msg)


class _Progress:
    """Follows the build stream and turns it into per-step timings and cache hits."""

    def __init__(
        self, dockerfile: Dockerfile, report: Callable[[str], None], echo: Callable[[str], None]
    ) -> None:
        # The classic builder numbers every instruction, ARG and ENV included.
        self.step_of = [
            line.step
            for line in dockerfile.lines
            if line.kind in (LineKind.ARG, LineKind.ENV, LineKind.INSTRUCTION)
        ]
        self.titles = {s.number: s.title for s in dockerfile.steps}
        self.total = len(dockerfile.steps)
        self.report, self.echo = report, echo
        self.current: int | None = None  # step of the final stage being built
        self.started = time.monotonic()
        self.step_cached = True  # every instruction of the current step was a cache hit so far
        self.instruction_cached: bool | None = None  # None: no instruction under way
        self.timings: list[StepTiming] = []
        self.tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)

    def line(self, text: str) -> None:
        self.tail.append(text)
        self.echo(text)
        match = STEP_RE.match(text)
        if match:
            self._end_instruction()
            index = int(match[1]) - 1
            step = self.step_of[index] if index < len(self.step_of) else None
            if step != self.current:
                self._finish_step()
                self.current, self.started, self.step_cached = step, time.monotonic(), True
            # FROM has no cache entry of its own: it is as "cached" as its image reference.
            self.instruction_cached = text[match.end() :].startswith("FROM ")
        elif text.strip() == "---> Using cache":
            self.instruction_cached = True

    def _end_instruction(self) -> None:
        if self.instruction_cached is not None:
            self.step_cached = self.step_cached and self.instruction_cached
        self.instruction_cached = None

    def _finish_step(self) -> None:
        if self.current is None:
            return
        seconds = time.monotonic() - self.started
        timing = StepTiming(
            number=self.current,
            title=self.titles[self.current],
            seconds=round(seconds, 3),
            cached=self.step_cached,
        )
        self.timings.append(timing)
        cached = " (cached)" if timing.cached else ""
        self.report(f"[{self.current}/{self.total}] {timing.title} ... {format_duration(seconds)}{cached}")

    def finish(self) -> None:
        self._end_instruction()
        self._finish_step()
        self.current = None


def build_image(
    project: Project,
    inputs: Inputs,
    options: BuildOptions,
    engine: Engine,
    *,
    report: Callable[[str], None],
    echo: Callable[[str], None],
) -> BuildRecord:
    check_build_args(options.build_args)
    dockerfile = render(
        inputs.definition,
        inputs.pins,
        inputs.arch,
        inputs.constraints,
        RenderOptions(build_args=options.build_args, constraint_mode=options.constraint_mode),
    )
    tag = options.tag or default_tag(inputs.arch.name)
    log_path = options.log_path or build_log_path(project.root, inputs.arch.name)
    record_path = options.record_path or build_record_path(project.root, inputs.arch.name)
    attestations = AttestationPaths.beside(record_path, inputs.arch.name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    context = make_context(context_files(dockerfile, inputs))
    labels = image_labels(project, inputs) | attestation_labels(attestations, context)
    report(f"building {tag} for {inputs.arch.name} on {engine.address} ({len(context) // 1024} KiB context)")

    progress = _Progress(dockerfile, report, echo)
    started = time.monotonic()
    started_at = datetime.now(UTC)
    image_id: str | None = None
    error: str | None = None
    with log_path.open("w", encoding="utf-8") as log:
        request = BuildRequest(
            context=context, labels=labels, network_mode=options.network, no_cache=options.no_cache
        )
        for event in engine.build(request):
            if event.text:
                log.write(event.text)
                for text in event.text.splitlines():
                    progress.line(text)
            if event.error:
                log.write(f"ERROR: {event.error}\n")
                error = event.error
            if event.image_id:
                image_id = event.image_id
    if error is not None or image_id is None:
        raise BuildError(
            _failure_message(
                dockerfile, inputs, progress, error or "the build ended without an image", log_path
            )
        )
    progress.finish()
    finished_at = datetime.now(UTC)
    engine.tag(image_id, tag)
    record = BuildRecord(
        image_id=image_id,
        tag=tag,
        arch=inputs.arch.name,
        labels=labels,
        pins={p.name: p.require_identity() for p in inputs.pins},
        steps=progress.timings,
        total_seconds=round(time.monotonic() - started, 3),
        all_cached=all(t.cached for t in progress.timings) and len(progress.timings) == len(dockerfile.steps),
        log=str(log_path),
        started_at=started_at.isoformat(),
        finished_at=finished_at.isoformat(),
        sbom=str(attestations.sbom),
        provenance=str(attestations.provenance),
    )
    write_atomically(record_path, json.dumps(record.to_json(), indent=2) + "\n")
    facts = BuildFacts(
        image_id=image_id,
        tag=tag,
        started=started_at,
        finished=finished_at,
        context=context,
        dockerfile_text=dockerfile.text,
        build_args=options.build_args,
        no_cache=options.no_cache,
        network=options.network,
    )
    try:
        write_attestations(project, inputs, facts, engine, attestations)
    except AttestationError as e:
        msg = f"{tag} ({image_id}) was built and tagged, but its SBOM and provenance were not written: {e}"
        raise AttestationError(msg) from e
    report(f"SBOM: {attestations.sbom}; provenance: {attestations.provenance}")
    return record


def _failure_message(
    dockerfile: Dockerfile, inputs: Inputs, progress: _Progress, error: str, log_path: Path
) -> str:
    step = next((s for s in dockerfile.steps if s.number == progress.current), None)
    if step is None:
        where = "the build failed before the final stage (donor image or base image)"
    else:
        pins = ", ".join(f"{p} = {inputs.pins.get(p).identity or 'unpinned'}" for p in step.pins) or "none"
        where = (
            f"step {step.number}/{len(dockerfile.steps)} '{step.title}' failed ({step.source}; pins: {pins})"
        )
    tail = "\n".join(f"  | {line}" for line in progress.tail)
    return f"{where}: {error}\nlast {len(progress.tail)} lines of the build log:\n{tail}\nfull log: {log_path}; nothing was tagged"
