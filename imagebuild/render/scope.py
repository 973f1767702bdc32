"""ARG scope of the final stage: every ARG that may be declared, its value and owner, and what a text needs.

ARGs come from three places (pins, the arch profile, the image's tunables) and
must not collide, look like a secret, or shadow an image-layout name. A step
declares the ARGs its text references just before it, so a late pin's change
leaves earlier layers cached.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from imagebuild.errors import ConfigError
from imagebuild.inputs.arch import ArchProfile
from imagebuild.inputs.layout import STAGE_NAMES
from imagebuild.inputs.schema import suggest
from imagebuild.inputs.stage_model import ImageDefinition, Step
from imagebuild.pins import PinSet
from imagebuild.render.model import RenderOptions
from imagebuild.secrets import secret_reason

REF_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[-+][^}]*)?\}")


@dataclass(frozen=True, kw_only=True)
class ArgScope:
    """Every ARG the final stage may declare, with its value and owning pin: fixed for one render."""

    values: Mapping[str, str]  # every ARG that may be declared, with its value
    owners: Mapping[str, str]  # ARG -> pin name


@dataclass(frozen=True, kw_only=True)
class Declared:
    """What the final stage has declared by the end of a step; each step returns the next one."""

    args: frozenset[str] = frozenset()
    env: frozenset[str] = frozenset()  # ENV names set so far
    pins: frozenset[str] = frozenset()  # pins consumed by the steps so far
    epoch: int | None = None  # the SOURCE_DATE_EPOCH declared so far


def check_arg_name(name: str, where: str, value: str = "") -> None:
    reason = secret_reason(name, value)
    if reason:
        msg = (
            f"{where}: ARG '{name}' refused: {reason}. Build args are recorded in the image "
            f"history; use public sources or a docker credential helper instead"
        )
        raise ConfigError(msg)
    if name in STAGE_NAMES:
        msg = f"{where}: ARG '{name}' is an image-layout name (imagebuild.inputs.layout.STAGE_NAMES); rename it"
        raise ConfigError(msg)


def build_scope(
    definition: ImageDefinition, pins: PinSet, arch: ArchProfile, options: RenderOptions
) -> ArgScope:
    # Tunables are declared with their defaults; a build overrides them with build args.
    tunables = dict(definition.spec.args)
    values: dict[str, str] = {}
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
    owners = {name: pin.name for pin in pins for name in pin.build_args()}
    return ArgScope(values=values, owners=owners)


def refs(text: str) -> list[str]:
    """Names ``text`` references as ${NAME} (upper case: lower-case ones are the shell's own)."""
    return [m[1] for m in REF_RE.finditer(text) if m[1].isupper()]


def needed_args(
    text: str, step: Step, scope: ArgScope, declared: Declared, definition: ImageDefinition
) -> list[str]:
    """ARGs this text needs declared (in first-use order); unknown references are errors."""
    needed: list[str] = []
    for name in refs(text):
        if name in declared.args or name in declared.env or name in needed:
            continue
        if name in scope.values:
            needed.append(name)
        elif name not in definition.spec.base_env:
            known = [*scope.values, *declared.env, *definition.spec.base_env, *STAGE_NAMES]
            msg = (
                f"{step.source}: ${{{name}}} is not a pin, arch value or build tunable, nor an ENV "
                f"set by an earlier step.{suggest(name, known)}"
            )
            raise ConfigError(msg)
    return needed
