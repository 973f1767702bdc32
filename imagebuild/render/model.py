"""The rendered Dockerfile as data: typed lines, the steps they belong to, and the options."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from imagebuild.inputs.stage_model import Instruction


class ConstraintMode(StrEnum):
    """How pip calls are constrained. OFF exists only so tests can prove the checks can fail."""

    ON = "on"
    OFF = "off"


@dataclass(frozen=True, kw_only=True)
class RenderOptions:
    allow_unpinned: bool = False
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
    packages: frozenset[str] = frozenset()  # locked python packages this line installs or constrains
    final_stage: bool = False


@dataclass(frozen=True, kw_only=True)
class RenderedStep:
    number: int
    instruction: Instruction
    title: str
    why: str
    pins: tuple[str, ...]
    source: str
    source_date_epoch: int  # the step's SOURCE_DATE_EPOCH (imagebuild.pins.epoch); its layer's mtime clamp
    # A COPY from the build context: its files' times are the client's (imagebuild's context tar says 0,
    # the docker CLI the checkout's), not an input, so normalisation gives every entry the step's epoch.
    copies_context: bool = False
    compile_cache: bool = False  # a pip build of this RUN compiles through the compile cache


@dataclass(frozen=True, kw_only=True)
class Dockerfile:
    arch: str
    lines: tuple[Line, ...]
    steps: tuple[RenderedStep, ...]
    context_dirs: tuple[str, ...]  # build-context directories the COPY steps read

    @property
    def text(self) -> str:
        return "".join(f"{line.text}\n" for line in self.lines)
