"""The build plan: the steps as data, and which layers a pin change rebuilds."""

from __future__ import annotations

from packaging.utils import canonicalize_name

from imagebuild.errors import ConfigError
from imagebuild.inputs.layout import BUILD_CONSTRAINT_FILE, CONSTRAINT_FILE
from imagebuild.inputs.schema import suggest
from imagebuild.render import Dockerfile, RenderedStep

CONSTRAINT_MECHANISM = f"""\
Build-toolchain constraint (constraints/ -> {CONSTRAINT_FILE}, step 3; with the locked build
dependencies' exact versions -> {BUILD_CONSTRAINT_FILE}):
  ENV PIP_CONSTRAINT      {CONSTRAINT_FILE}: every pip resolution
  PIP_BUILD_CONSTRAINT    set per isolated pip call to {BUILD_CONSTRAINT_FILE} (pip >= 25.3),
  PIP_CONSTRAINT            and PIP_CONSTRAINT too, which isolated builds read on pip < 26.2
  --no-build-isolation    PIP_BUILD_CONSTRAINT unset (pip >= 25.3 refuses both); the image's
                          setuptools is checked first, and replaced by the locked one if it fails
  UV_BUILD_CONSTRAINT     {BUILD_CONSTRAINT_FILE}, for uv
Every install is hash-locked (pylock.toml, a pinned wheel) or a source tree; none resolves.
Step 4 proves it: an isolated build of a probe sdist must get a constrained setuptools."""


def invalidated_steps(dockerfile: Dockerfile, name: str) -> list[RenderedStep]:
    """Steps whose layer cache a change of pin or locked python package ``name`` invalidates.

    The classic builder keys each layer on its instruction and everything before it, so the
    first final-stage line that carries the pin (its ARG declaration, a FROM, or a COPY --from
    its stage) or the package (the RUN that installs it hash-locked, or the COPY of the build
    constraint that pins it) invalidates that step and every later one.
    """
    package = canonicalize_name(name)
    carrying = [
        line.step
        for line in dockerfile.lines
        if line.final_stage and line.step is not None and (name in line.pins or package in line.packages)
    ]
    if not carrying:
        pins = sorted({p for line in dockerfile.lines for p in line.pins})
        packages = sorted({p for line in dockerfile.lines for p in line.packages})
        msg = (
            f"'{name}' is neither a pin nor a locked python package of the {dockerfile.arch} image."
            f"{suggest(name, [*pins, *packages])} Pins: {', '.join(pins)}; packages: {', '.join(packages)}"
        )
        raise ConfigError(msg)
    return [s for s in dockerfile.steps if s.number >= min(carrying)]


def format_plan(steps: list[RenderedStep]) -> str:
    rows = [("step", "instruction", "title", "pins")]
    rows += [(str(s.number), s.instruction.value, s.title, ", ".join(s.pins) or "-") for s in steps]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        f"{r[0]:>{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip() for r in rows
    )
