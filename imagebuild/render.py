"""Render the Dockerfile: a pure function of stages, pins, arch and constraints.

Same inputs, same bytes. The output is a list of typed lines (so ``plan`` can
reason about cache order) serialised to text. Rules enforced here:

* donor stage first; ARGs consumed by a FROM declared before the first FROM;
* images by digest, git sources at a full SHA with HEAD verified, downloaded
  files checked with ``sha256sum -c``;
* every ARG declared just before its first consumer, so changing a late pin
  does not rebuild early layers (the classic builder keys each layer on the
  instructions before it);
* every pip call gets the build-toolchain constraint mechanism that fits it;
* nothing the classic builder (docker-py) cannot parse, no secret-like ARG.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from imagebuild.arch import ArchProfile
from imagebuild.errors import ConfigError, UnpinnedError
from imagebuild.pins import GitPin, PinSet, PypiPin, WheelPin
from imagebuild.schema import suggest
from imagebuild.secrets import secret_reason
from imagebuild.stages import (
    Command,
    FetchFile,
    GitCheckout,
    ImageDefinition,
    Instruction,
    Pip,
    PypiDownload,
    Shell,
    Step,
)

CONSTRAINT_FILE = "/etc/pip-constraints.txt"
SETUPTOOLS_GUARD = "/opt/imagebuild/bin/imagebuild-check setuptools-guard"
REF_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[-+][^}]*)?\}")
# Syntax that needs BuildKit's frontend; docker-py drives the classic builder.
CLASSIC_BUILDER_FORBIDDEN = {
    "heredoc": re.compile(r"<<-?\s*['\"]?[A-Za-z_]"),
    "RUN --mount": re.compile(r"^RUN\s+--mount", re.MULTILINE),
    "COPY --chmod/--link": re.compile(r"^(COPY|ADD)\s+.*--(chmod|link)\b", re.MULTILINE),
    "# syntax=": re.compile(r"^#\s*syntax\s*=", re.MULTILINE | re.IGNORECASE),
}


class ConstraintMode(StrEnum):
    """How pip calls are constrained. OFF exists only so tests can prove the checks can fail."""

    ON = "on"
    OFF = "off"


@dataclass(frozen=True, kw_only=True)
class RenderOptions:
    allow_unpinned: bool = False
    build_args: Mapping[str, str] = field(default_factory=dict)  # overrides of the image's tunables
    constraint_mode: ConstraintMode = ConstraintMode.ON


class LineKind(StrEnum):
    COMMENT = "comment"
    ARG = "arg"
    ENV = "env"
    INSTRUCTION = "instruction"
    BLANK = "blank"


@dataclass(frozen=True, kw_only=True)
class Line:
    text: str
    kind: LineKind
    step: int | None = None  # the step this line belongs to (None: header, donor stage)
    pins: frozenset[str] = frozenset()  # pins whose values this line carries
    final_stage: bool = False


@dataclass(frozen=True, kw_only=True)
class RenderedStep:
    number: int
    instruction: Instruction
    title: str
    why: str
    pins: tuple[str, ...]
    source: str


@dataclass(frozen=True, kw_only=True)
class Dockerfile:
    arch: str
    lines: tuple[Line, ...]
    steps: tuple[RenderedStep, ...]
    context_dirs: tuple[str, ...]  # build-context directories the COPY steps read

    @property
    def text(self) -> str:
        return "".join(f"{line.text}\n" for line in self.lines)


@dataclass
class _Scope:
    """What is declared so far in the final stage."""

    values: dict[str, str]  # every ARG that may be declared, with its value
    owners: dict[str, str]  # ARG -> pin name
    declared: set[str] = field(default_factory=set)
    env: set[str] = field(default_factory=set)


def check_arg_name(name: str, where: str, value: str = "") -> None:
    reason = secret_reason(name, value)
    if reason:
        msg = (
            f"{where}: ARG '{name}' refused: {reason}. Build args are recorded in the image "
            f"history; use public sources or a docker credential helper instead"
        )
        raise ConfigError(msg)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _arg_values(
    definition: ImageDefinition, pins: PinSet, arch: ArchProfile, options: RenderOptions
) -> _Scope:
    tunables = dict(definition.spec.args)
    for name, value in options.build_args.items():
        if name not in tunables:
            hint = (
                "change pins.toml instead"
                if name in pins.build_args()
                else f"tunables: {', '.join(tunables)}"
            )
            msg = f"--build-arg {name}: not a build tunable of {definition.spec.source}.{suggest(name, tunables)} ({hint})"
            raise ConfigError(msg)
        tunables[name] = value
    values: dict[str, str] = {}
    owners: dict[str, str] = {}
    sources: list[tuple[str, Mapping[str, str]]] = [
        *((f"pin [{p.name}] in {pins.path}", p.build_args()) for p in pins),
        (f"arch profile {arch.name}", arch.build_args()),
        (str(definition.spec.source), tunables),
    ]
    for where, args in sources:
        for name, value in args.items():
            check_arg_name(name, where, value)
            if name in values:
                msg = f"{where}: ARG {name} is also provided elsewhere; rename one of them"
                raise ConfigError(msg)
            values[name] = value
    for pin in pins:
        for name in pin.build_args():
            owners[name] = pin.name
    return _Scope(values=values, owners=owners)


def _refs(text: str) -> list[str]:
    return [m[1] for m in REF_RE.finditer(text) if m[1].isupper()]


# Commands -------------------------------------------------------------------


SourcePin = TypeVar("SourcePin", GitPin, WheelPin, PypiPin)


def _typed_pin(pins: PinSet, name: str, kind: type[SourcePin], step: Step) -> SourcePin:
    pin = pins.get(name)
    if not isinstance(pin, kind):
        msg = f"{step.source}: '{name}' is a {pin.kind} pin; this command needs a {kind.kind} pin"
        raise ConfigError(msg)
    return pin


def _pip_args(cmd: Pip) -> str:
    # No wheel cache in the image: it only makes the layer bigger.
    sub, _, rest = cmd.args.partition(" ")
    return f"{sub} --no-cache-dir {rest}" if sub in ("install", "download", "wheel") else cmd.args


def _pip(cmd: Pip, mode: ConstraintMode) -> list[str]:
    env = " ".join(f"{k}={_quote(v)}" for k, v in cmd.env)
    prefix = f"{env} " if env else ""
    args = _pip_args(cmd)
    if cmd.build_isolation is False:
        # The image's own setuptools builds this: it must satisfy the constraint itself.
        # PIP_BUILD_CONSTRAINT is unset because pip >= 25.3 refuses it with --no-build-isolation.
        guard = [SETUPTOOLS_GUARD] if mode is ConstraintMode.ON else []
        return [*guard, f"{prefix}env -u PIP_BUILD_CONSTRAINT python3 -m pip {args} --no-build-isolation"]
    if cmd.build_isolation is True and mode is ConstraintMode.ON:
        # pip >= 26.2 no longer applies PIP_CONSTRAINT inside build isolation; this does (pip >= 25.3).
        return [f"PIP_BUILD_CONSTRAINT={CONSTRAINT_FILE} {prefix}python3 -m pip {args}"]
    return [f"{prefix}python3 -m pip {args}"]


def _git(cmd: GitCheckout, pin: GitPin) -> list[str]:
    repo, commit, d = f"${{{pin.arg_prefix}_REPO}}", f"${{{pin.arg_prefix}_COMMIT}}", cmd.into
    blobless = " --filter=blob:none" if cmd.blobless else ""
    lines = [
        f'git clone --quiet{blobless} "{repo}" {d}',
        # A commit no branch reaches any more (force-push) is still fetchable by SHA.
        f'{{ git -C {d} cat-file -e "{commit}^{{commit}}" 2>/dev/null || git -C {d} fetch --quiet origin "{commit}"; }}',
        f'git -C {d} -c advice.detachedHead=false checkout --quiet "{commit}"',
        f'{{ [ "$(git -C {d} rev-parse HEAD)" = "{commit}" ] || {{ echo "imagebuild: {pin.name} checkout is not at {commit}" >&2; exit 1; }}; }}',
    ]
    if cmd.submodules:
        lines.append(f"git -C {d} submodule update --init --recursive")
    return lines


def _fetch(cmd: FetchFile, pin: WheelPin) -> list[str]:
    p, d = pin.arg_prefix, cmd.into
    path = f'"{d}/${{{p}_WHEEL_FILE}}"'
    return [
        f"mkdir -p {d}",
        f'curl -fsSL --retry 3 -o {path} "${{{p}_WHEEL_URL}}"',
        f'echo "${{{p}_WHEEL_SHA256}}  {d}/${{{p}_WHEEL_FILE}}" | sha256sum -c -',
    ]


def _pypi(cmd: PypiDownload, pin: PypiPin, mode: ConstraintMode) -> list[str]:
    p, d = pin.arg_prefix, cmd.into
    download = Pip(
        args=f'download --no-deps --only-binary=:all: --dest {d} "{pin.project}==${{{p}_VERSION}}"',
        build_isolation=True,
    )
    return [*_pip(download, mode), f'echo "${{{p}_SHA256}}  {d}/${{{p}_FILE}}" | sha256sum -c -']


def _command_lines(
    cmd: Command, step: Step, pins: PinSet, mode: ConstraintMode
) -> tuple[list[str], set[str]]:
    """Shell lines for one command and the pins it consumes."""
    if isinstance(cmd, Shell):
        return [cmd.text], set()
    if isinstance(cmd, Pip):
        return _pip(cmd, mode), set()
    if isinstance(cmd, GitCheckout):
        return _git(cmd, _typed_pin(pins, cmd.pin, GitPin, step)), {cmd.pin}
    if isinstance(cmd, FetchFile):
        return _fetch(cmd, _typed_pin(pins, cmd.pin, WheelPin, step)), {cmd.pin}
    return _pypi(cmd, _typed_pin(pins, cmd.pin, PypiPin, step), mode), {cmd.pin}


# Steps -----------------------------------------------------------------------


@dataclass
class _StepBody:
    text: str  # the instruction, e.g. "RUN a \\\n && b"
    refs_text: str  # everything that may reference ${ARG}s
    pins: set[str]


def _step_body(step: Step, definition: ImageDefinition, pins: PinSet, mode: ConstraintMode) -> _StepBody:
    if step.instruction is Instruction.FROM:
        assert step.image is not None
        pin = pins.image(step.image)
        return _StepBody(text=f"FROM ${{{pin.arg_prefix}_IMAGE}}", refs_text="", pins={pin.name})
    if step.instruction is Instruction.WORKDIR:
        return _StepBody(text=f"WORKDIR {step.path}", refs_text=step.path or "", pins=set())
    if step.instruction is Instruction.COPY:
        used: set[str] = set()
        flag = ""
        if step.from_pin:
            if step.from_pin != definition.spec.donor_pin:
                msg = f"{step.source}: COPY from '{step.from_pin}': only the donor stage pin '{definition.spec.donor_pin}' is a stage"
                raise ConfigError(msg)
            flag = f"--from={definition.spec.donor_stage} "
            used.add(step.from_pin)
        text = f"COPY {flag}{step.src} {step.dest}"
        return _StepBody(text=text, refs_text=text, pins=used)
    shell_lines: list[str] = []
    used = set()
    for cmd in step.commands:
        lines, consumed = _command_lines(cmd, step, pins, mode)
        shell_lines += lines
        used |= consumed
    text = "RUN " + " \\\n && ".join(shell_lines)
    return _StepBody(text=text, refs_text=text, pins=used)


def _resolve_refs(text: str, step: Step, scope: _Scope, definition: ImageDefinition) -> list[str]:
    """ARGs this text needs declared (in first-use order); unknown references are errors."""
    needed: list[str] = []
    for name in _refs(text):
        if name in scope.declared or name in scope.env or name in needed:
            continue
        if name in scope.values:
            needed.append(name)
        elif name not in definition.spec.base_env:
            known = [*scope.values, *scope.env, *definition.spec.base_env]
            msg = (
                f"{step.source}: ${{{name}}} is not a pin, arch value or build tunable, nor an ENV "
                f"set by an earlier step.{suggest(name, known)}"
            )
            raise ConfigError(msg)
    return needed


def _env_line(pairs: tuple[tuple[str, str], ...], step: int, pins: frozenset[str]) -> Line:
    body = " \\\n    ".join(f"{k}={_quote(v)}" for k, v in pairs)
    return Line(text=f"ENV {body}", kind=LineKind.ENV, step=step, pins=pins, final_stage=True)


def _comment(text: str, step: int | None = None, final: bool = False) -> list[Line]:
    wrapped = textwrap.wrap(text, width=96) or [""]
    return [
        Line(text=f"# {w}".rstrip(), kind=LineKind.COMMENT, step=step, final_stage=final) for w in wrapped
    ]


def render(
    definition: ImageDefinition,
    pins: PinSet,
    arch: ArchProfile,
    constraints: str,
    options: RenderOptions | None = None,
) -> Dockerfile:
    options = options or RenderOptions()
    scope = _arg_values(definition, pins, arch, options)
    base = definition.steps[0]
    assert base.image is not None
    base_pin, donor_pin = pins.image(base.image), pins.image(definition.spec.donor_pin)
    lines: list[Line] = [Line(text="", kind=LineKind.BLANK)]
    for pin in (base_pin, donor_pin):
        name = f"{pin.arg_prefix}_IMAGE"
        check_arg_name(name, str(pins.path))
        lines.append(
            Line(
                text=f"ARG {name}={_quote(scope.values[name])}", kind=LineKind.ARG, pins=frozenset({pin.name})
            )
        )
    lines += [
        Line(text="", kind=LineKind.BLANK),
        *_comment(f"Donor stage: only a COPY source for the graft. {donor_pin.image}:{donor_pin.tag}"),
        Line(
            text=f"FROM ${{{donor_pin.arg_prefix}_IMAGE}} AS {definition.spec.donor_stage}",
            kind=LineKind.INSTRUCTION,
            pins=frozenset({donor_pin.name}),
        ),
    ]
    steps: list[RenderedStep] = []
    total = len(definition.steps)
    for defined in definition.steps:
        body = _step_body(defined, definition, pins, options.constraint_mode)
        off = options.constraint_mode is ConstraintMode.OFF
        step = _without_constraint_env(defined) if off else defined
        # Everything the step references, ENV set after it included, is declared before it.
        refs_text = "\n".join([*(v for _, v in step.env + step.env_after), body.refs_text])
        needed = _resolve_refs(refs_text, step, scope, definition)
        if step.instruction is Instruction.FROM:
            needed = [n for n in needed if n != f"{base_pin.arg_prefix}_IMAGE"]
        used_pins = set(body.pins) | {scope.owners[n] for n in _refs(refs_text) if n in scope.owners}
        lines.append(Line(text="", kind=LineKind.BLANK, step=step.number, final_stage=True))
        lines += _comment(f"[{step.number}/{total}] {step.title}", step.number, final=True)
        lines += _comment(step.why, step.number, final=True)
        if used_pins:
            lines += _comment("pins: " + ", ".join(sorted(used_pins)), step.number, final=True)
        for name in needed:
            owner = scope.owners.get(name)
            lines.append(
                Line(
                    text=f"ARG {name}={_quote(scope.values[name])}",
                    kind=LineKind.ARG,
                    step=step.number,
                    pins=frozenset({owner}) if owner else frozenset(),
                    final_stage=True,
                )
            )
            scope.declared.add(name)
        if step.env:
            lines.append(_env_line(step.env, step.number, frozenset()))
            scope.env.update(k for k, _ in step.env)
        lines.append(
            Line(
                text=body.text,
                kind=LineKind.INSTRUCTION,
                step=step.number,
                pins=frozenset(body.pins),
                final_stage=True,
            )
        )
        if step.instruction is Instruction.FROM:
            lines += _after_from(definition, step.number)
        if step.env_after:
            lines.append(_env_line(step.env_after, step.number, frozenset()))
            scope.env.update(k for k, _ in step.env_after)
        steps.append(
            RenderedStep(
                number=step.number,
                instruction=step.instruction,
                title=step.title,
                why=step.why,
                pins=tuple(sorted(used_pins)),
                source=f"stages/{step.source.name}",
            )
        )
    consumed = {donor_pin.name}.union(*(s.pins for s in steps))
    header = _header(arch, pins, constraints, _check_pinned(pins, consumed, options))
    dockerfile = Dockerfile(
        arch=arch.name,
        lines=tuple(header + lines),
        steps=tuple(steps),
        context_dirs=tuple(
            sorted(
                {
                    s.src.split("/")[0]
                    for s in definition.steps
                    if s.instruction is Instruction.COPY and not s.from_pin and s.src
                }
            )
        ),
    )
    check_classic_builder(dockerfile)
    return dockerfile


def _without_constraint_env(step: Step) -> Step:
    """The step minus ENV that points tools at the constraint file (ConstraintMode.OFF only)."""
    from dataclasses import replace

    return replace(
        step,
        env=tuple(p for p in step.env if p[1] != CONSTRAINT_FILE),
        env_after=tuple(p for p in step.env_after if p[1] != CONSTRAINT_FILE),
    )


def _after_from(definition: ImageDefinition, step: int) -> list[Line]:
    spec = definition.spec
    entry = "[" + ", ".join(_quote(e) for e in spec.entrypoint) + "]"
    shell = "[" + ", ".join(_quote(s) for s in spec.shell) + "]"
    return [
        Line(text=f"ENTRYPOINT {entry}", kind=LineKind.INSTRUCTION, step=step, final_stage=True),
        Line(text=f"SHELL {shell}", kind=LineKind.INSTRUCTION, step=step, final_stage=True),
    ]


def _header(arch: ArchProfile, pins: PinSet, constraints: str, unpinned: list[str]) -> list[Line]:
    lines = [
        *_comment(f"Kimi-K3 vLLM serving image for {arch.description}."),
        *_comment(
            f"Generated by `imagebuild render --arch {arch.name}` from stages/, {pins.path.name} and "
            "constraints/. Do not edit: change those and re-render."
        ),
        *_comment(
            f"Build-toolchain constraints ({CONSTRAINT_FILE}): "
            + "; ".join(c for c in constraints.splitlines() if c.strip() and not c.startswith("#"))
        ),
    ]
    if unpinned:
        lines += _comment(
            "WARNING: UNPINNED, NOT REPRODUCIBLE. No immutable identity yet for: "
            + ", ".join(unpinned)
            + ". Run `imagebuild lock` before building."
        )
    return lines


def _check_pinned(pins: PinSet, consumed: set[str], options: RenderOptions) -> list[str]:
    """Names of consumed pins without an identity; raises unless --allow-unpinned."""
    unpinned = [p for p in pins if p.name in consumed and p.identity is None]
    if unpinned and not options.allow_unpinned:
        names = ", ".join(f"[{p.name}] ({p.tracked})" for p in unpinned)
        msg = f"{pins.path}: no immutable identity yet for {names}; run `imagebuild lock` to resolve them"
        raise UnpinnedError(msg)
    return [f"{p.name} ({p.tracked})" for p in unpinned]


def check_classic_builder(dockerfile: Dockerfile) -> None:
    """Refuse syntax the classic builder cannot parse, naming the step that has it."""
    for line in dockerfile.lines:
        for what, pattern in CLASSIC_BUILDER_FORBIDDEN.items():
            if pattern.search(line.text):
                where = f"step {line.step}" if line.step else "the Dockerfile header"
                msg = f"{where}: uses {what}, which the classic builder (docker-py) cannot parse"
                raise ConfigError(msg)


__all__ = ["ConstraintMode", "Dockerfile", "Line", "LineKind", "RenderOptions", "RenderedStep", "render"]
