"""stages/: the image's steps as data.

``stages/image.toml`` describes the two stages and the build tunables; each
``stages/NN-slug.toml`` is one step of the final stage, taken in number order.
A step says what it is (title), why it sits where it does, and what it does:
FROM a pin, WORKDIR, COPY (from the build context or from the donor stage) or
RUN a list of commands. Commands that fetch sources or run pip are structured
tables, not shell strings, so the renderer can apply the checks every source
and every pip build needs (full-SHA checkout verified, sha256 verified, the
build-toolchain constraint) and no step can forget them.

Paths of the image's layout are written by name (``${VERSIONS_FILE}``,
``${CHECK_TOOL}``, ... see imagebuild.inputs.layout.STAGE_NAMES) and replaced by the
path here, at load time: every consumer (renderer, plan, verify) sees the path,
and the rendered Dockerfile carries it literally, not as an ARG.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from imagebuild.errors import ConfigError
from imagebuild.inputs.debian import DEB_PACKAGE
from imagebuild.inputs.layers import with_tunables
from imagebuild.inputs.layout import STAGE_NAMES
from imagebuild.inputs.schema import Table, read_toml, suggest
from imagebuild.inputs.stage_commands import check_installs, env_pairs, parse_command
from imagebuild.inputs.stage_model import (
    AptInstall,
    Command,
    ImageDefinition,
    ImageSpec,
    Instruction,
    OptionalLayer,
    Step,
)
from imagebuild.inputs.values import (
    ABSOLUTE_PATH_TEMPLATE,
    CONTEXT_PATH,
    ENV_NAME,
    STAGE_NAME,
    TUNABLE,
    shown,
)

STEP_FILE_RE = re.compile(r"^(\d{2})-([a-z0-9][a-z0-9_-]*)\.toml$")
LAYOUT_NAME_RE = re.compile(r"\$\{(" + "|".join(STAGE_NAMES) + r")\}")


_STEP_KEYS: dict[Instruction, tuple[str, ...]] = {
    Instruction.FROM: ("image",),
    Instruction.WORKDIR: ("path",),
    Instruction.COPY: ("src", "dest", "from"),
    Instruction.RUN: ("commands", "python_packages", "apt_packages", "enabled_by", "disabled_commands"),
}
_COMMON_STEP_KEYS = ("title", "why", "instruction", "env", "env_after")
def _requirements(t: Table, key: str) -> tuple[str, ...]:
    """PEP 508 names with optional extras and version specifiers: what the python lock resolves.

    URLs, paths and markers are refused: a source is a pin, and the lock is resolved for one target.
    """
    found: list[str] = []
    seen: set[str] = set()
    for text in t.strings(key):
        try:
            req = Requirement(text)
        except InvalidRequirement as e:
            msg = f"{t.where}: {key} entry {shown(text)} is not a requirement ({str(e).splitlines()[0]})"
            raise ConfigError(msg) from e
        if req.url or req.marker:
            msg = f"{t.where}: {key} entry {shown(text)} has a URL or marker; name a package and versions only (sources belong in pins.toml)"
            raise ConfigError(msg)
        name = canonicalize_name(req.name)
        if name in seen:
            msg = f"{t.where}: {key} names '{req.name}' twice; merge the entries"
            raise ConfigError(msg)
        seen.add(name)
        found.append(str(req))
    return tuple(found)


def expand_layout_names(value: Any) -> Any:
    """``value`` (a TOML value) with every ${NAME} of imagebuild.inputs.layout.STAGE_NAMES replaced by its path."""
    if isinstance(value, str):
        return LAYOUT_NAME_RE.sub(lambda m: STAGE_NAMES[m[1]], value)
    if isinstance(value, list):
        return [expand_layout_names(v) for v in value]
    if isinstance(value, dict):
        return {k: expand_layout_names(v) for k, v in value.items()}
    return value


def _parse_step(path: Path, number: int, slug: str) -> Step:
    t = Table(expand_layout_names(read_toml(path)), str(path))
    text = t.string("instruction")
    names = [i.value for i in Instruction]
    if text not in names:
        msg = f"{path}: unknown instruction {shown(text)}.{suggest(text, names)} Known: {', '.join(names)}"
        raise ConfigError(msg)
    instruction = Instruction(text)
    t.check_keys(_COMMON_STEP_KEYS + _STEP_KEYS[instruction])
    common: dict[str, Any] = {
        "number": number,
        "slug": slug,
        "source": path,
        "title": t.string("title"),
        "why": t.paragraph("why"),
        "instruction": instruction,
        "env": env_pairs(t, "env"),
        "env_after": env_pairs(t, "env_after"),
    }
    if instruction is Instruction.FROM:
        return Step(**common, image=t.string("image"))
    if instruction is Instruction.WORKDIR:
        return Step(**common, path=t.string("path", kind=ABSOLUTE_PATH_TEMPLATE))
    if instruction is Instruction.COPY:
        from_pin = t.optional_string("from")
        # From the donor stage: a path in that image; else a path in the build context.
        src = t.string("src", kind=ABSOLUTE_PATH_TEMPLATE if from_pin else CONTEXT_PATH)
        return Step(**common, src=src, dest=t.string("dest", kind=ABSOLUTE_PATH_TEMPLATE), from_pin=from_pin)
    raw = t.data.get("commands")
    if not isinstance(raw, list) or not raw:
        msg = f"{path}: a RUN step needs a non-empty 'commands' list"
        raise ConfigError(msg)
    commands = tuple(parse_command(c, f"{path} commands[{i}]") for i, c in enumerate(raw))
    python_packages = _requirements(t, "python_packages")
    check_installs(path, commands, python_packages)
    apt_packages = _apt_packages(t, commands)
    layer = _optional_layer(t, path, commands)
    return Step(
        **common, commands=commands, python_packages=python_packages, apt_packages=apt_packages, layer=layer
    )


def _optional_layer(t: Table, path: Path, commands: tuple[Command, ...]) -> OptionalLayer | None:
    """``enabled_by`` and ``disabled_commands``: both or neither (the tunable is checked in load_stages)."""
    arg = t.optional_string("enabled_by", kind=ENV_NAME)
    raw = t.data.get("disabled_commands")
    if arg is None and raw is None:
        return None
    if arg is None or not isinstance(raw, list) or not raw:
        msg = f"{path}: an optional layer needs both 'enabled_by' (a tunable) and a non-empty 'disabled_commands' list"
        raise ConfigError(msg)
    disabled = tuple(parse_command(c, f"{path} disabled_commands[{i}]") for i, c in enumerate(raw))
    check_installs(path, disabled, ())
    return OptionalLayer(arg=arg, enabled=commands, disabled=disabled)


def _apt_packages(t: Table, commands: tuple[Command, ...]) -> tuple[str, ...]:
    """The step's OS packages (Debian names, each once), installed by exactly one { apt = PIN } command."""
    names = tuple(t.strings("apt_packages", kind=DEB_PACKAGE))
    installs = sum(isinstance(c, AptInstall) for c in commands)
    if len(set(names)) != len(names):
        msg = f"{t.where}: apt_packages names a package twice; name each once"
        raise ConfigError(msg)
    if names and installs != 1:
        msg = f'{t.where}: apt_packages needs exactly one {{ apt = "PIN" }} command to install them (has {installs})'
        raise ConfigError(msg)
    if installs and not names:
        msg = f"{t.where}: an {{ apt = ... }} install needs the packages it installs in apt_packages"
        raise ConfigError(msg)
    return names


def _load_spec(path: Path) -> ImageSpec:
    t = Table(read_toml(path), str(path))
    t.check_keys(("donor_stage", "final_stage", "args", "python"))
    donor = t.table("donor_stage")
    donor.check_keys(("name", "pin"))
    final = t.table("final_stage")
    final.check_keys(("entrypoint", "shell", "base_env"))
    args = t.string_map("args", names=ENV_NAME, values=TUNABLE)
    for name in args:
        if name in STAGE_NAMES:
            msg = f"{path} [args]: '{name}' is an image-layout name (imagebuild.inputs.layout); rename the tunable"
            raise ConfigError(msg)
    python = Table(t.data.get("python") or {}, f"{path} [python]")
    python.check_keys(("build_requires", "guard_requires"))
    return ImageSpec(
        source=path,
        donor_stage=donor.string("name", kind=STAGE_NAME),
        donor_pin=donor.string("pin"),
        entrypoint=tuple(final.strings("entrypoint")),
        shell=tuple(final.strings("shell")),
        base_env=tuple(final.strings("base_env", kind=ENV_NAME)),
        args=tuple(args.items()),
        build_requires=_requirements(python, "build_requires"),
        guard_requires=_requirements(python, "guard_requires"),
    )


def load_stages(stages_dir: Path) -> ImageDefinition:
    if not stages_dir.is_dir():
        msg = f"{stages_dir}: stages directory not found; run imagebuild from the repository root or pass --stages"
        raise ConfigError(msg)
    spec = _load_spec(stages_dir / "image.toml")
    by_number: dict[int, Path] = {}
    steps: list[Step] = []
    for path in sorted(stages_dir.glob("*.toml")):
        if path.name == "image.toml":
            continue
        match = STEP_FILE_RE.fullmatch(path.name)
        if not match:
            msg = f"{path}: step files are named NN-slug.toml (two-digit step number, lowercase slug)"
            raise ConfigError(msg)
        number = int(match[1])
        if number in by_number:
            msg = f"{path}: duplicate step {number}, also defined by {by_number[number].name}; renumber one of them"
            raise ConfigError(msg)
        by_number[number] = path
        steps.append(_parse_step(path, number, match[2]))
    expected = list(range(1, len(steps) + 1))
    if [s.number for s in steps] != expected:
        msg = f"{stages_dir}: steps must be numbered 01..{len(steps):02d} without gaps; found {sorted(by_number)}"
        raise ConfigError(msg)
    if not steps or steps[0].instruction is not Instruction.FROM:
        msg = f"{stages_dir}: step 01 must be the FROM of the final stage"
        raise ConfigError(msg)
    extra_from = [s for s in steps[1:] if s.instruction is Instruction.FROM]
    if extra_from:
        msg = f"{extra_from[0].source}: only step 01 may be a FROM; the final stage is one stage"
        raise ConfigError(msg)
    _check_copy_stages(spec, steps)
    for step in steps:
        if step.layer and step.layer.arg not in dict(spec.args):
            msg = f"{step.source}: enabled_by = {shown(step.layer.arg)} is not a tunable of {spec.source} [args].{suggest(step.layer.arg, dict(spec.args))}"
            raise ConfigError(msg)
    apt_steps = [s.source.name for s in steps if s.apt_packages]
    if len(apt_steps) > 1:  # apt.lock.toml holds one package set, resolved against the base
        msg = f"{stages_dir}: only one step may install apt_packages; {', '.join(apt_steps)} both do"
        raise ConfigError(msg)
    # The defaults are checked by their kind here, where the layers they switch are known.
    definition = ImageDefinition(spec=spec, steps=tuple(steps))
    return with_tunables(definition, dict(spec.args), f"{spec.source} [args]")


def _check_copy_stages(spec: ImageSpec, steps: list[Step]) -> None:
    """A COPY ``from`` names a stage by its pin, and the donor's is the only stage to copy from:
    refused here, with the other stage errors, rather than halfway through a render."""
    for step in steps:
        if step.from_pin and step.from_pin != spec.donor_pin:
            msg = f"{step.source}: COPY from '{step.from_pin}': only the donor stage pin '{spec.donor_pin}' is a stage"
            raise ConfigError(msg)
