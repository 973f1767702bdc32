"""What may not be rendered: sources without an immutable identity, and syntax the classic builder lacks."""

from __future__ import annotations

import re

from imagebuild.errors import ConfigError, UnpinnedError
from imagebuild.inputs.values import control_problem
from imagebuild.pins import Pin, PinSet
from imagebuild.render.model import Dockerfile, LineKind, RenderOptions

# Syntax that needs BuildKit's frontend; docker-py drives the classic builder.
CLASSIC_BUILDER_FORBIDDEN = {
    "heredoc": re.compile(r"<<-?\s*['\"]?[A-Za-z_]"),
    "RUN --mount": re.compile(r"^RUN\s+--mount", re.MULTILINE),
    "COPY --chmod/--link": re.compile(r"^(COPY|ADD)\s+.*--(chmod|link)\b", re.MULTILINE),
    "# syntax=": re.compile(r"^#\s*syntax\s*=", re.MULTILINE | re.IGNORECASE),
}


def check_pinned(pins: PinSet, consumed: set[str], options: RenderOptions) -> list[str]:
    """Names of consumed pins without an identity; raises unless --allow-unpinned."""
    unpinned = [p for p in pins if p.name in consumed and not p.locked]
    if unpinned and not options.allow_unpinned:
        names = ", ".join(f"[{p.name}] ({_missing(p)})" for p in unpinned)
        msg = f"{pins.path}: no immutable identity yet for {names}; run `imagebuild lock` to resolve them"
        raise UnpinnedError(msg)
    return [f"{p.name} ({_missing(p)})" for p in unpinned]


def _missing(pin: Pin) -> str:
    """What a pin lacks: its identity, the commit time SOURCE_DATE_EPOCH needs, or a lock since its edit.

    An edited pin (its fingerprint disagrees) may carry another commit's time: it counts as unpinned,
    so it is refused, or (--allow-unpinned) marked and left out of SOURCE_DATE_EPOCH.
    """
    if pin.edited:
        return pin.edit_problem()
    if pin.identity is not None:
        return "commit time"
    return pin.tracked


def check_classic_builder(dockerfile: Dockerfile) -> None:
    """Refuse syntax the classic builder cannot parse, naming the step that has it."""
    for line in dockerfile.lines:
        for what, pattern in CLASSIC_BUILDER_FORBIDDEN.items():
            if pattern.search(line.text):
                where = f"step {line.step}" if line.step else "the Dockerfile header"
                msg = f"{where}: uses {what}, which the classic builder (docker-py) cannot parse"
                raise ConfigError(msg)


def check_line_structure(dockerfile: Dockerfile) -> None:
    """Each typed line is exactly one Dockerfile line or instruction; no value may have added one.

    Values are validated when their files are read and quoted when rendered; this is the last
    guard: a line break inside a line must continue an ARG-free instruction (RUN, ENV) with a
    trailing backslash, and nothing may carry another control character.
    """
    for line in dockerfile.lines:
        physical = line.text.split("\n")
        continued = line.kind in (LineKind.INSTRUCTION, LineKind.ENV) and all(
            p.endswith(" \\") for p in physical[:-1]
        )
        # Each physical line is held to the value limit (step 4's locked OS packages make its RUN long).
        problem = next(filter(None, map(control_problem, physical)), None) or (
            None if len(physical) == 1 or continued else "spans lines"
        )
        if problem:
            where = f"step {line.step}" if line.step else "the Dockerfile header"
            msg = f"{where}: a rendered {line.kind} line {problem}: {line.text[:60]!r}; a value reached the Dockerfile unchecked (a bug: report it)"
            raise ConfigError(msg)
