"""Process supervision: start commands in their own process groups, tee their output, stop every
process they spawned, and turn termination signals into an orderly teardown."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO

from .messages import EXIT_SIGNAL_BASE, LauncherError, say

TAIL_LINES = 40
# Turned into an orderly teardown (sentinel, then stop vLLM) instead of dying on the spot.
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def require_executable(command: str, env: Mapping[str, str], *, what: str) -> str:
    executable = shutil.which(command, path=env.get("PATH"))
    if executable is None:
        msg = f"{what}: {command} is not on PATH ({env.get('PATH')}): run inside the image or fix PATH"
        raise LauncherError(msg)
    return executable


class Child:
    """A command in its own session, so stopping it reaches every process it spawned (vLLM's workers).
    With tee_to, its output goes line by line to the console, the file and a tail kept for errors."""

    def __init__(self, proc: subprocess.Popen[bytes], *, marker: str, log: IO[bytes] | None) -> None:
        self.proc = proc
        self.marker = marker
        self.marker_seen = threading.Event()
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._log = log
        self._pump: threading.Thread | None = None
        if proc.stdout is not None and log is not None:
            self._pump = threading.Thread(target=self._copy, args=(proc.stdout, log), daemon=True)
            self._pump.start()

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        what: str,
        tee_to: Path | None = None,
        marker: str = "",
    ) -> Child:
        executable = require_executable(argv[0], env, what=what)
        log = tee_to.open("ab") if tee_to is not None else None
        try:
            proc = subprocess.Popen(
                list(argv),
                executable=executable,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if log else None,
                stderr=subprocess.STDOUT if log else None,
                start_new_session=True,
            )
        except OSError as error:
            if log is not None:
                log.close()
            msg = f"{what}: cannot start {executable} ({error})"
            raise LauncherError(msg) from error
        return cls(proc, marker=marker, log=log)

    def _copy(self, stream: IO[bytes], log: IO[bytes]) -> None:
        console = sys.stdout.buffer
        for line in iter(stream.readline, b""):
            with contextlib.suppress(OSError, ValueError):  # a closed console must not stop the log
                console.write(line)
                console.flush()
            log.write(line)
            log.flush()
            text = line.decode(errors="replace").rstrip()
            self._tail.append(text)
            if self.marker and self.marker in text:
                self.marker_seen.set()
        stream.close()

    def poll(self) -> int | None:
        return self.proc.poll()

    def tail(self) -> str:
        return "\n".join(self._tail)

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)

    def group_alive(self) -> bool:
        """Whether any process of the group still runs; zombies do not count (see group_running)."""
        if self.proc.poll() is not None:
            # When the launcher is PID 1 of a container, orphaned workers are re-parented to it and
            # stay zombies until reaped here.
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-self.proc.pid, os.WNOHANG)[0]:
                    pass
        return group_running(self.proc.pid)

    def close(self) -> None:
        """After the group is gone: let the copier drain the pipe, then close the log."""
        if self._pump is not None:
            self._pump.join(timeout=2.0)
        drained = self._pump is None or not self._pump.is_alive()
        if self._log is not None and drained:
            self._log.close()


def group_running(pgid: int) -> bool:
    """Whether process group pgid has a member that is not a zombie. Orphaned members are reaped by
    PID 1 in its own time, and killpg(pgid, 0) succeeds until then, so on Linux /proc decides."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            state, _ppid, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue  # the process ended while we looked
        if group == str(pgid) and state != "Z":
            return True
    return False


def stop_all(children: Sequence[Child], grace_s: float) -> None:
    """SIGTERM every child's group, SIGKILL what is left after grace_s. Idempotent."""
    for child in children:
        child.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(child.group_alive() for child in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    for child in children:
        if child.group_alive():
            say(f"process group {child.proc.pid} ignored SIGTERM for {grace_s:g} s: SIGKILL")
            child.signal_group(signal.SIGKILL)
    for child in children:
        child.proc.wait()
        kill_deadline = time.monotonic() + 2.0
        while child.group_alive() and time.monotonic() < kill_deadline:
            time.sleep(0.05)
        child.close()


def _stopped(signum: int) -> LauncherError:
    return LauncherError(f"received {signal.Signals(signum).name}: stopped", exit_code=EXIT_SIGNAL_BASE + signum)


class _Hold:
    """While a block runs under held_signals: the signals that arrived, raised when it ends."""

    def __init__(self) -> None:
        self.active = False
        self.arrived: list[int] = []


_HOLD = _Hold()


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Turn the first termination signal into a LauncherError, so every `finally` runs: the sentinel is
    raised and vLLM stopped. Further signals are ignored from then on (ignore_signals)."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        # Ignored from here, not only from teardown's first line: a second signal before that line (SLURM
        # and a runtime's trap send several; a loaded node runs Python late) would raise again out of the
        # `finally` on its way there, and vLLM would be left running.
        ignore_signals()
        if _HOLD.active:
            _HOLD.arrived.append(signum)
            return
        raise _stopped(signum)

    previous = {signum: signal.signal(signum, handler) for signum in HANDLED_SIGNALS}
    try:
        yield
    finally:
        # Once teardown has begun (ignore_signals), the process is on its way out: a late signal (SLURM
        # signals every process of the step, a runtime's trap may pass one on too) must not end it by the
        # default action, unsaid and with its exit status lost. So what teardown ignores stays ignored.
        for signum, old in previous.items():
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, old)


@contextlib.contextmanager
def held_signals() -> Iterator[None]:
    """A termination signal that arrives inside the block raises when the block ends, not inside it.

    For starting a child and recording it where teardown looks: raised between Popen and that record,
    the signal would leave the child (vLLM, holding its GPUs) running, unknown to teardown."""
    _HOLD.active, _HOLD.arrived = True, []
    try:
        yield
    finally:
        _HOLD.active = False
    if _HOLD.arrived:
        raise _stopped(_HOLD.arrived[0])


def ignore_signals() -> None:
    """For teardown: a second SIGTERM (Slurm signals every process of the step) must not cut it short."""
    for signum in HANDLED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
