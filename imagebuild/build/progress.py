"""How a build shows its progress on stderr: plain log lines, a live line on a terminal, groups in GitHub Actions.

Every step gets a line when it starts and one when it ends (with its time and
whether it was cached); while it runs, a heartbeat with the elapsed time and
its last output line, at most every 30 s (a vLLM compile is silent for long
stretches and must not look hung). On a terminal (``--progress tty``, or
``auto`` when stderr is one) a single live line is redrawn instead of the
start lines and heartbeats. ``--progress plain`` also prints every line of
each step's output as it comes (as ``docker build --progress plain`` does),
colour codes and overwritten progress bars taken out. Under GitHub Actions (GITHUB_ACTIONS=true, not a
terminal) each step's output is folded into a collapsible ``::group::`` and
workflow commands are switched off inside it, so a build's output cannot
issue them. A ``--pull`` shows each layer's bytes and rate (imagebuild.build.pull_progress).
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum
from typing import TextIO

from imagebuild.build.pull_progress import PullProgress, Stream
from imagebuild.build.stream import RunningStep, StepTiming, display_text
from imagebuild.log import format_duration
from imagebuild.util.clock import Clock

HEARTBEAT_S = 30.0  # plain mode: at most one heartbeat line per step this often
TICK_S = 1.0  # how often the build tells the display how long the current step has run


class ProgressMode(StrEnum):
    AUTO = "auto"
    PLAIN = "plain"
    TTY = "tty"


class BuildProgress:
    """Shows a build's steps; every method may be called from the build or the timer thread."""

    def __init__(
        self,
        stream: Stream,
        *,
        tty: bool = False,
        groups: bool = False,
        verbose: bool = False,
        output: bool = False,
        heartbeat_s: float = HEARTBEAT_S,
        width: int | None = None,
    ) -> None:
        self._stream = stream
        self._tty, self._groups, self._verbose = tty, groups and not tty, verbose
        self._output = output and not tty  # --progress plain: every step's output, as it comes
        self._heartbeat_s = heartbeat_s
        self._width = width
        self._lock = threading.RLock()
        self._live = ""  # tty: the live line as last drawn ('' when none is shown)
        self._running: RunningStep | None = None
        self._last_heartbeat = 0.0
        self._group_token: str | None = None  # groups: the open group's stop-commands token

    @classmethod
    def quiet(cls) -> BuildProgress:
        return cls(_Discard())

    # Events -------------------------------------------------------------------------

    def message(self, text: str) -> None:
        with self._lock:
            self._print(text)

    def step_started(self, number: int, total: int, title: str) -> None:
        with self._lock:
            self._running = RunningStep(number=number, total=total, title=title, elapsed=0.0, last_line="")
            self._last_heartbeat = 0.0
            if self._groups:
                self._group_token = secrets.token_hex(16)
                self._write(f"::group::[{number}/{total}] {title}\n::stop-commands::{self._group_token}\n")
            elif self._tty:
                self._draw()
            else:
                self._print(f"[{number}/{total}] {title} ...")

    def step_output(self, line: str) -> None:
        with self._lock:
            if self._groups or self._verbose or self._output:
                self._print(display_text(line) if self._output and not self._verbose else line)
            shown = display_text(line).strip()
            if self._running is not None and shown:
                self._running = replace(self._running, last_line=shown)
                if self._tty and not self._verbose:
                    self._draw()

    def step_running(self, step: RunningStep) -> None:
        with self._lock:
            self._running = step
            if self._tty:
                self._draw()
            elif step.elapsed - self._last_heartbeat >= self._heartbeat_s:
                self._last_heartbeat = step.elapsed
                last = f"; last output: {step.last_line}" if step.last_line else "; no output yet"
                self._print(
                    f"[{step.number}/{step.total}] {step.title}: running for {format_duration(step.elapsed)}{last}"
                )

    def step_finished(self, timing: StepTiming, total: int) -> None:
        with self._lock:
            self._running = None
            self._end_group()
            cached = " (cached)" if timing.cached else ""
            self._print(
                f"[{timing.number}/{total}] {timing.title} ... {format_duration(timing.seconds)}{cached}"
            )

    def pull_listener(self, reference: str, clock: Clock) -> PullProgress:
        """What shows a pull of ``reference`` (per layer: redrawn on a terminal, a line every 30 s otherwise)."""
        return PullProgress(self._stream, reference, clock, tty=self._tty, width=self._width)

    def close(self) -> None:
        """The build ended (or failed): close an open group, take the live line away."""
        with self._lock:
            self._running = None
            self._end_group()
            self._clear()

    # Output -------------------------------------------------------------------------

    def _end_group(self) -> None:
        if self._group_token is not None:
            self._write(f"::{self._group_token}::\n::endgroup::\n")
            self._group_token = None

    def _print(self, text: str) -> None:
        """A permanent line, above the live line on a terminal."""
        self._clear()
        self._write(text + "\n")
        if self._tty and self._running is not None:
            self._draw()

    def _draw(self) -> None:
        step = self._running
        if step is None:
            return
        last = f"  {step.last_line}" if step.last_line else ""
        text = f"[{step.number}/{step.total}] {step.title}  {format_duration(step.elapsed)}{last}"
        width = self._width or shutil.get_terminal_size().columns
        text = text[: max(width - 1, 10)]
        self._write(f"\r\x1b[2K{text}")
        self._live = text

    def _clear(self) -> None:
        if self._live:
            self._write("\r\x1b[2K")
            self._live = ""

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()


def make_progress(
    mode: ProgressMode, stream: TextIO, *, verbose: bool, env: Mapping[str, str] | None = None
) -> BuildProgress:
    """The display ``--progress MODE`` asks for; auto is tty when ``stream`` is a terminal."""
    environ = os.environ if env is None else env
    tty = mode is ProgressMode.TTY or (mode is ProgressMode.AUTO and stream.isatty())
    groups = environ.get("GITHUB_ACTIONS") == "true"
    return BuildProgress(stream, tty=tty, groups=groups, verbose=verbose, output=mode is ProgressMode.PLAIN)


class _Discard:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass
