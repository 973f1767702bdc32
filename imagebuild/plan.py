"""The build plan: the steps as data, and which layers a pin change rebuilds."""

from __future__ import annotations

from packaging.utils import canonicalize_name

from imagebuild.errors import ConfigError
from imagebuild.layout import CONSTRAINT_FILE
from imagebuild.python_lock import PythonLock
from imagebuild.render import Dockerfile, RenderedStep
from imagebuild.schema import suggest
from imagebuild.stages import ImageDefinition

CONSTRAINT_MECHANISM = f"""\
Build-toolchain constraint (constraints/ -> {CONSTRAINT_FILE}, step 3):
  ENV PIP_CONSTRAINT      every pip resolution; isolated builds only on pip < 26.2
  PIP_BUILD_CONSTRAINT    set per isolated pip call: isolated builds on pip >= 25.3
  --no-build-isolation    PIP_BUILD_CONSTRAINT unset (pip >= 25.3 refuses both); the
                          image's setuptools is checked against the constraint first
  UV_BUILD_CONSTRAINT     the same for uv
Step 4 proves it: an isolated build of a probe sdist must get a constrained setuptools."""


def invalidated_steps(dockerfile: Dockerfile, pin: str) -> list[RenderedStep]:
    """Steps whose layer cache a change of ``pin`` invalidates.

    The classic builder keys each layer on its instruction and everything before
    it, so the first final-stage line that carries the pin (its ARG declaration,
    a FROM, or a COPY --from its stage) invalidates that step and every later one.
    """
    known = sorted({p for line in dockerfile.lines for p in line.pins})
    if pin not in known:
        msg = f"no pin '{pin}' is consumed by the {dockerfile.arch} image.{suggest(pin, known)} Pins: {', '.join(known)}"
        raise ConfigError(msg)
    first = min(
        line.step
        for line in dockerfile.lines
        if line.final_stage and pin in line.pins and line.step is not None
    )
    return [s for s in dockerfile.steps if s.number >= first]


def package_invalidated_steps(
    dockerfile: Dockerfile, definition: ImageDefinition, lock: PythonLock, package: str
) -> list[RenderedStep]:
    """Steps whose layer cache a change of a locked python package invalidates.

    A step's own packages reach its RUN line, so a change rebuilds from the first
    step that installs the package. The build and guard groups reach the image
    with the constraint file, at the step that sets PIP_CONSTRAINT.
    """
    locked = lock.get(package)
    if locked is None:
        pins = sorted({p for line in dockerfile.lines for p in line.pins})
        known = [*pins, *lock.names()]
        msg = (
            f"'{package}' is neither a pin nor a locked python package of the {dockerfile.arch} image."
            f"{suggest(canonicalize_name(package), known)} Pins: {', '.join(pins)}; packages: {', '.join(lock.names())}"
        )
        raise ConfigError(msg)
    by_group = {s.lock_group: s.number for s in definition.steps if s.python_packages}
    constraint_step = next(s.number for s in definition.steps if CONSTRAINT_FILE in dict(s.env).values())
    first = min(by_group.get(group, constraint_step) for group in locked.groups)
    return [s for s in dockerfile.steps if s.number >= first]


def format_plan(steps: list[RenderedStep]) -> str:
    rows = [("step", "instruction", "title", "pins")]
    rows += [(str(s.number), s.instruction.value, s.title, ", ".join(s.pins) or "-") for s in steps]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        f"{r[0]:>{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip() for r in rows
    )
