"""The render loop: header, donor stage, then each step with its comments, ARGs, ENV and instruction.

Pure: each step is rendered from what the steps before it declared (``scope.Declared``) and
returns the next declaration state with its lines, so nothing is mutated along the way.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field, replace

from imagebuild.inputs.apt_lock import AptLock
from imagebuild.inputs.arch import ArchProfile
from imagebuild.inputs.layout import BUILD_CONSTRAINT_FILE, CONSTRAINT_FILE, CONTEXT_ROOTFS
from imagebuild.inputs.python_lock import LOCK_FILE_NAME, PythonLock
from imagebuild.inputs.stage_model import BUILD_GROUP, ImageDefinition, Instruction, Pip, Step
from imagebuild.inputs.values import dockerfile_literal, quoted_template
from imagebuild.pins import GitPin, PinSet
from imagebuild.pins.arch_pins import check_profile_pins
from imagebuild.pins.epoch import ARG_NAME as EPOCH_ARG
from imagebuild.pins.epoch import epoch_of
from imagebuild.project import Inputs
from imagebuild.render.apt import AptSelection, select_apt
from imagebuild.render.commands import command_lines
from imagebuild.render.model import (
    ConstraintMode,
    Dockerfile,
    Line,
    LineKind,
    RenderedStep,
    RenderOptions,
)
from imagebuild.render.policy import check_classic_builder, check_line_structure, check_pinned
from imagebuild.render.scope import ArgScope, Declared, build_scope, check_arg_name, needed_args, refs

COMMENT_WIDTH = 96


def render_inputs(inputs: Inputs, options: RenderOptions | None = None) -> Dockerfile:
    """The Dockerfile a checkout's loaded inputs give (pure: the same inputs, the same text)."""
    # Where the image needs them: lock reads pins files that hold no image pins at all.
    check_profile_pins(inputs.definition, inputs.pins, inputs.arch)
    return render(
        inputs.definition,
        inputs.pins,
        inputs.arch,
        inputs.constraints,
        options,
        lock=inputs.python_lock,
        apt_lock=inputs.apt_lock,
    )


def render(
    definition: ImageDefinition,
    pins: PinSet,
    arch: ArchProfile,
    constraints: str,
    options: RenderOptions | None = None,
    *,
    lock: PythonLock | None = None,
    apt_lock: AptLock | None = None,
) -> Dockerfile:
    """The Dockerfile; ``lock`` is the python lock (pylock.toml) the locked pip installs read,
    ``apt_lock`` the OS packages (apt.lock.toml) the apt install of step 4 reads."""
    options = options or RenderOptions()
    apt = select_apt(definition, pins, arch, apt_lock, allow_unpinned=options.allow_unpinned)
    scope = build_scope(definition, pins, arch, options)
    base = definition.steps[0]
    assert base.image is not None
    base_pin = pins.image(base.image)
    donor_pin = pins.image(definition.spec.donor_pin) if definition.spec.donor_pin else None
    lines: list[Line] = [Line(text="", kind=LineKind.BLANK)]
    for pin in (base_pin, donor_pin) if donor_pin else (base_pin,):
        name = f"{pin.arg_prefix}_IMAGE"
        check_arg_name(name, str(pins.path))
        lines.append(
            Line(
                text=f"ARG {name}={dockerfile_literal(scope.values[name])}",
                kind=LineKind.ARG,
                pins=frozenset({pin.name}),
            )
        )
    if donor_pin:  # an arch profile may have no donor (donor = ""): then no step copies from one
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
    declared = Declared()
    for defined in definition.steps:
        step_lines, rendered, declared = _render_step(
            defined,
            definition,
            pins,
            scope,
            declared=declared,
            lock=lock,
            apt=apt,
            options=options,
            base_prefix=base_pin.arg_prefix,
        )
        lines += step_lines
        steps.append(rendered)
    consumed = ({donor_pin.name} if donor_pin else set()).union(*(s.pins for s in steps))
    unpinned = check_pinned(pins, consumed, options) + ([apt.unpinned] if apt and apt.unpinned else [])
    header = _header(arch, pins, constraints, unpinned)
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
    check_line_structure(dockerfile)
    return dockerfile


def _render_step(
    defined: Step,
    definition: ImageDefinition,
    pins: PinSet,
    scope: ArgScope,
    *,
    declared: Declared,
    lock: PythonLock | None,
    apt: AptSelection | None,
    options: RenderOptions,
    base_prefix: str,
) -> tuple[list[Line], RenderedStep, Declared]:
    """One step's lines (comments, the ARGs it needs first, ENV, the instruction), its summary, and
    what the final stage has declared after it (``declared`` is left as it was)."""
    body = _step_body(defined, definition, pins, lock, options.constraint_mode, apt=apt)
    step = _without_constraint_env(defined) if options.constraint_mode is ConstraintMode.OFF else defined
    needs = _step_needs(step, body, definition, scope=scope, declared=declared, base_prefix=base_prefix)
    consumed = declared.pins | needs.pins
    step_epoch = epoch_of(pins, consumed)
    # Declared where it rises, so it breaks the layer cache only where its pins already do.
    epoch_rises = step.instruction is Instruction.RUN and step_epoch != declared.epoch
    lines = [
        *_heading(step, len(definition.steps), needs.pins),
        *_arg_lines(needs.args, scope, step.number),
        *([_epoch_arg(step_epoch, pins, consumed, step.number)] if epoch_rises else []),
        *_instruction_lines(step, body, definition),
    ]
    rendered = RenderedStep(
        number=step.number,
        instruction=step.instruction,
        title=step.title,
        why=step.why,
        pins=tuple(sorted(needs.pins)),
        source=f"stages/{step.source.name}",
        source_date_epoch=step_epoch,
        copies_context=step.instruction is Instruction.COPY and step.from_pin is None,
        compile_cache=any(isinstance(c, Pip) and c.compile_cache for c in step.commands),
    )
    after = Declared(
        args=declared.args | set(needs.args),
        env=declared.env | {name for name, _ in (*step.env, *step.env_after)},
        pins=consumed,
        epoch=step_epoch if epoch_rises else declared.epoch,
    )
    return lines, rendered, after


@dataclass(frozen=True, kw_only=True)
class _StepNeeds:
    args: tuple[str, ...]  # ARGs to declare just before the step, in first-use order
    pins: frozenset[str]  # pins whose values the step carries


def _step_needs(
    step: Step,
    body: _StepBody,
    definition: ImageDefinition,
    *,
    scope: ArgScope,
    declared: Declared,
    base_prefix: str,
) -> _StepNeeds:
    """What the step references that is not declared yet, and the pins it consumes."""
    # Everything the step references, ENV set after it included, is declared before it.
    refs_text = "\n".join([*(v for _, v in step.env + step.env_after), body.refs_text])
    needed = needed_args(refs_text, step, scope, declared, definition)
    if step.instruction is Instruction.FROM:
        needed = [n for n in needed if n != f"{base_prefix}_IMAGE"]  # declared before the donor stage
    owned = {scope.owners[n] for n in refs(refs_text) if n in scope.owners}
    return _StepNeeds(args=tuple(needed), pins=frozenset(body.pins | owned))


def _heading(step: Step, total: int, used_pins: frozenset[str]) -> list[Line]:
    """The step's blank line and comments: number and title, why it sits here, the pins it carries."""
    number = step.number
    lines = [Line(text="", kind=LineKind.BLANK, step=number, final_stage=True)]
    lines += _comment(f"[{number}/{total}] {step.title}", number, final=True)
    lines += _comment(step.why, number, final=True)
    if used_pins:
        lines += _comment("pins: " + ", ".join(sorted(used_pins)), number, final=True)
    return lines


def _arg_lines(names: tuple[str, ...], scope: ArgScope, step: int) -> list[Line]:
    lines = []
    for name in names:
        owner = scope.owners.get(name)
        lines.append(
            Line(
                text=f"ARG {name}={dockerfile_literal(scope.values[name])}",
                kind=LineKind.ARG,
                step=step,
                pins=frozenset({owner}) if owner else frozenset(),
                final_stage=True,
            )
        )
    return lines


def _epoch_arg(epoch: int, pins: PinSet, consumed: frozenset[str], step: int) -> Line:
    """SOURCE_DATE_EPOCH's new value; the git pins consumed so far are what it comes from."""
    git_pins = frozenset(p.name for p in pins if p.name in consumed and isinstance(p, GitPin))
    return Line(
        text=f"ARG {EPOCH_ARG}={dockerfile_literal(str(epoch))}",
        kind=LineKind.ARG,
        step=step,
        pins=git_pins,
        final_stage=True,
    )


def _instruction_lines(step: Step, body: _StepBody, definition: ImageDefinition) -> list[Line]:
    """ENV set before, the instruction (ENTRYPOINT and SHELL after a FROM), ENV set after."""
    number = step.number
    lines = [_env_line(step.env, number)] if step.env else []
    lines.append(
        Line(
            text=body.text,
            kind=LineKind.INSTRUCTION,
            step=number,
            pins=frozenset(body.pins),
            packages=frozenset(body.packages),
            final_stage=True,
        )
    )
    if step.instruction is Instruction.FROM:
        lines += _after_from(definition, number)
    if step.env_after:
        lines.append(_env_line(step.env_after, number))
    return lines


@dataclass
class _StepBody:
    text: str  # the instruction, e.g. "RUN a \\\n && b"
    refs_text: str  # everything that may reference ${ARG}s
    pins: set[str]
    packages: set[str] = field(default_factory=set)  # locked python packages it installs or constrains


def _step_body(
    step: Step,
    definition: ImageDefinition,
    pins: PinSet,
    lock: PythonLock | None,
    mode: ConstraintMode,
    *,
    apt: AptSelection | None = None,
) -> _StepBody:
    if step.instruction is Instruction.FROM:
        assert step.image is not None
        pin = pins.image(step.image)
        return _StepBody(text=f"FROM ${{{pin.arg_prefix}_IMAGE}}", refs_text="", pins={pin.name})
    if step.instruction is Instruction.WORKDIR:
        return _StepBody(text=f"WORKDIR {step.path}", refs_text=step.path or "", pins=set())
    if step.instruction is Instruction.COPY:
        used: set[str] = set()
        flag = ""
        if step.from_pin:  # load_stages allows only the donor stage's pin
            flag = f"--from={definition.spec.donor_stage} "
            used.add(step.from_pin)
        text = f"COPY {flag}{step.src} {step.dest}"
        # The context's rootfs carries the build constraint: the locked build dependencies' versions.
        rootfs = not step.from_pin and (step.src or "").split("/")[0] == CONTEXT_ROOTFS
        built = {p.name for p in lock.group(BUILD_GROUP)} if rootfs and lock is not None else set()
        return _StepBody(text=text, refs_text=text, pins=used, packages=built)
    shell_lines: list[str] = []
    used = set()
    installed: set[str] = set()
    for cmd in step.commands:
        cmd_lines, consumed, packages = command_lines(cmd, step, pins, lock, mode, apt=apt)
        shell_lines += cmd_lines
        used |= consumed
        installed |= packages
    text = "RUN " + " \\\n && ".join(shell_lines)
    return _StepBody(text=text, refs_text=text, pins=used, packages=installed)


def _without_constraint_env(step: Step) -> Step:
    """The step minus ENV that points tools at the constraint files (ConstraintMode.OFF only)."""
    files = (CONSTRAINT_FILE, BUILD_CONSTRAINT_FILE)
    return replace(
        step,
        env=tuple(p for p in step.env if p[1] not in files),
        env_after=tuple(p for p in step.env_after if p[1] not in files),
    )


def _env_line(pairs: tuple[tuple[str, str], ...], step: int) -> Line:
    body = " \\\n    ".join(f"{k}={quoted_template(v)}" for k, v in pairs)
    return Line(text=f"ENV {body}", kind=LineKind.ENV, step=step, final_stage=True)


def _comment(text: str, step: int | None = None, final: bool = False) -> list[Line]:
    wrapped = textwrap.wrap(text, width=COMMENT_WIDTH) or [""]
    return [
        Line(text=f"# {w}".rstrip(), kind=LineKind.COMMENT, step=step, final_stage=final) for w in wrapped
    ]


def _after_from(definition: ImageDefinition, step: int) -> list[Line]:
    spec = definition.spec
    # JSON form: each element one argv word, whatever it holds.
    entry = json.dumps(list(spec.entrypoint), ensure_ascii=False)
    shell = json.dumps(list(spec.shell), ensure_ascii=False)
    return [
        Line(text=f"ENTRYPOINT {entry}", kind=LineKind.INSTRUCTION, step=step, final_stage=True),
        Line(text=f"SHELL {shell}", kind=LineKind.INSTRUCTION, step=step, final_stage=True),
    ]


def _header(arch: ArchProfile, pins: PinSet, constraints: str, unpinned: list[str]) -> list[Line]:
    lines = [
        *_comment(f"Kimi-K3 vLLM serving image for {arch.description}."),
        *_comment(
            f"Generated by `imagebuild render --arch {arch.name}` from stages/, {pins.path.name}, "
            f"{LOCK_FILE_NAME} and constraints/, with every file it COPYs beside it: this directory is "
            "the whole build context (`docker build DIR`). Do not edit: change those and re-render."
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
