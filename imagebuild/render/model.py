"""The rendered Dockerfile as data: typed lines, the steps they belong to, and the options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from imagebuild.errors import ConfigError
from imagebuild.stages import Instruction
from imagebuild.values import control_problem, dockerfile_literal, shown


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


def label_instruction(labels: Mapping[str, str]) -> str:
    """One ``LABEL "k"="v" ...`` line with every label, keys sorted, taken literally; control characters refused.

    One instruction, not the engine's ``labels`` build option: the classic
    builder turns that option into one LABEL instruction per label, each a
    container commit of its own (13 commits, about 2 s of a cold build).
    """
    for key, value in labels.items():
        problem = control_problem(key) or control_problem(value)
        if problem:
            msg = f"label {shown(key)} = {shown(value)}: {problem}; control characters are not allowed in a label"
            raise ConfigError(msg)
    return "LABEL " + " ".join(
        f"{dockerfile_literal(k)}={dockerfile_literal(labels[k])}" for k in sorted(labels)
    )
