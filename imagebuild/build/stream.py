"""Following the classic builder's output: which step of the final stage runs, cached or not, for how long.

The classic builder numbers every instruction it runs ("Step k/M : RUN ..."),
ARG and ENV included, and says " ---> Using cache" for a cache hit. The
rendered Dockerfile knows which of its steps each instruction belongs to, so
the stream maps onto the 18 steps. The engine's text arrives in arbitrary
pieces (a "Step" line and its newline are two messages; a long line may be
split), so lines are put back together before they are read.

Podman's compat ``/build`` runs buildah, which numbers the instructions of each stage on its own
("[2/2] STEP k/M: RUN ...", no stage prefix for a single stage; global ARGs are not numbered) and
says "--> Using cache <id>": the final stage's instructions are the last M the Dockerfile has.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from imagebuild.render import Dockerfile, LineKind
from imagebuild.util.clock import Clock

STEP_RE = re.compile(r"^Step (\d+)/(\d+) : ")
BUILDAH_STEP_RE = re.compile(r"^(?:\[(\d+)/(\d+)\] )?STEP (\d+)/(\d+): ")
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # the classic builder paints stderr red
LOG_TAIL_LINES = 40
RUNNING_MARK = "---> Running in "  # the classic builder starts a container: no cache hit
COMMITTED_RE = re.compile(r"^ ---> ([0-9a-f]{12,64})$")  # the classic builder's image after an instruction


@dataclass(frozen=True, kw_only=True)
class StepTiming:
    number: int
    title: str
    seconds: float
    cached: bool


@dataclass(frozen=True, kw_only=True)
class RunningStep:
    number: int
    total: int
    title: str
    elapsed: float
    last_line: str  # the last non-empty output line of the step, stripped ('' before any)


class StepListener(Protocol):
    """Told what the build is doing (imagebuild.build.progress shows it)."""

    def step_started(self, number: int, total: int, title: str) -> None: ...
    def step_output(self, line: str) -> None: ...
    def step_running(self, step: RunningStep) -> None: ...
    def step_finished(self, timing: StepTiming, total: int) -> None: ...


def display_text(line: str) -> str:
    """A line as a terminal left it: colour codes gone, only what follows the last carriage return."""
    return ANSI_RE.sub("", line).rsplit("\r", 1)[-1].rstrip()


class StepTracker:
    """Reads the build's output; keeps per-step timings, cache hits and the log tail.

    ``tick`` may be called from a timer thread while ``feed`` runs: both hold
    one lock, so the listener sees one event at a time.
    """

    def __init__(
        self,
        dockerfile: Dockerfile,
        clock: Clock,
        listener: StepListener,
        *,
        committed: Callable[[str, int, bool], None] | None = None,
    ) -> None:
        """``committed(image, step, cached)``: told each image the classic builder commits after an
        instruction of the final stage (its short ID, the step, whether it came from the cache); it must
        not block."""
        # The classic builder numbers every instruction, ARG and ENV included.
        self._step_of = [
            line.step
            for line in dockerfile.lines
            if line.kind in (LineKind.ARG, LineKind.ENV, LineKind.INSTRUCTION)
        ]
        self._titles = {s.number: s.title for s in dockerfile.steps}
        self.total = len(dockerfile.steps)
        self._clock, self._listener, self._committed = clock, listener, committed
        self._lock = threading.Lock()
        self._partial = ""  # text after the last newline
        self.current: int | None = None  # step of the final stage being built
        self._started = clock.now()
        self._step_cached = True  # every instruction of the current step was a cache hit so far
        self._instruction_cached: bool | None = None  # None: no instruction under way
        self._last_line = ""
        self.timings: list[StepTiming] = []
        self.tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)

    def feed(self, text: str) -> None:
        """Output text as the engine sent it; complete lines are read now, the rest with the next text."""
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
            for line in lines:
                self._line(line)

    def tick(self) -> None:
        """Tell the listener how long the current step has been running."""
        with self._lock:
            if self.current is None:
                return
            self._listener.step_running(
                RunningStep(
                    number=self.current,
                    total=self.total,
                    title=self._titles[self.current],
                    elapsed=self._clock.now() - self._started,
                    last_line=self._last_line,
                )
            )

    def finish(self) -> None:
        """The build succeeded: read what is left and close the last step."""
        with self._lock:
            if self._partial:
                self._line(self._partial)
                self._partial = ""
            self._end_instruction()
            self._finish_step()
            self.current = None

    def _line(self, raw: str) -> None:
        text = raw.rstrip("\r")
        self.tail.append(display_text(text))
        match = STEP_RE.match(text) or BUILDAH_STEP_RE.match(text)
        if match:
            self._end_instruction()
            index = self._instruction_index(match)
            step = self._step_of[index] if 0 <= index < len(self._step_of) else None
            if step != self.current:
                self._finish_step()
                self.current, self._started, self._step_cached = step, self._clock.now(), True
                self._last_line = ""
                if step is not None:
                    self._listener.step_started(step, self.total, self._titles[step])
            # FROM has no cache entry of its own: it is as "cached" as its image reference.
            self._instruction_cached = text[match.end() :].startswith("FROM ")
        elif text.strip() == "---> Using cache" or text.startswith("--> Using cache "):
            self._instruction_cached = True
        elif (image := COMMITTED_RE.match(text)) and self._committed is not None and self.current is not None:
            self._committed(image[1], self.current, bool(self._instruction_cached))
        shown = display_text(text).strip()
        if shown:
            self._last_line = shown
        self._listener.step_output(text)

    def _instruction_index(self, match: re.Match[str]) -> int:
        """The instruction's place among the Dockerfile's, from either builder's numbering; -1: none."""
        if match.re is STEP_RE:
            return int(match[1]) - 1
        stage, stages, number, total = match[1] or "1", match[2] or "1", int(match[3]), int(match[4])
        if stage != stages:  # an earlier stage (the donor's): not one of the steps
            return -1
        return len(self._step_of) - total + number - 1

    def _end_instruction(self) -> None:
        if self._instruction_cached is not None:
            self._step_cached = self._step_cached and self._instruction_cached
        self._instruction_cached = None

    def _finish_step(self) -> None:
        if self.current is None:
            return
        timing = StepTiming(
            number=self.current,
            title=self._titles[self.current],
            seconds=round(self._clock.now() - self._started, 3),
            cached=self._step_cached,
        )
        self.timings.append(timing)
        self._listener.step_finished(timing, self.total)
