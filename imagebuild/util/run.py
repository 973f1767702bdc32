"""Every subprocess imagebuild starts goes through :func:`run_command`.

One place for what each call needs: the tool found with shutil.which (a clear
error when it is missing, not a FileNotFoundError), the command echoed at
``-v``, a timeout (nothing may hang a build or a lock), and errors that name
the command. Callers that classify failures themselves (git) pass
``check=False`` and read the exit status and stderr.

Each command runs in a process group of its own: tools hand work to helpers
(git to ``git-remote-https`` and ssh), and a timeout, Ctrl-C or a cancelled
lock must kill the helpers too, not orphan them. A :class:`ProcessGroup`
tracks the commands of one piece of work so another thread can kill them all.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO

from imagebuild.errors import CommandError
from imagebuild.log import logger

STDERR_TAIL_CHARS = 2000
REAP_TIMEOUT_S = 5


class Failure(StrEnum):
    MISSING = "missing"  # the tool is not on PATH
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"  # killed by ProcessGroup.kill_all
    EXIT = "exit"  # a non-zero exit status (only with check=True)


@dataclass(frozen=True, kw_only=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class ProcessGroup:
    """The commands running for one piece of work; ``kill_all`` kills them and refuses new ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[int] = set()
        self.closed = False

    def start(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None, cwd: Path | None
    ) -> subprocess.Popen[str]:
        with self._lock:
            if self.closed:
                msg = f"`{shlex.join(argv)}` not started: the work was cancelled"
                raise CommandError(msg, command=shlex.join(argv), failure=Failure.CANCELLED)
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,  # its own process group, out of reach of the terminal's Ctrl-C
            )
            self._live.add(proc.pid)
            return proc

    def finished(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._live.discard(proc.pid)

    def kill_all(self) -> None:
        with self._lock:
            self.closed = True
            for pid in self._live:
                kill_group(pid)


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (the command and every helper it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def run_command(
    argv: Sequence[str],
    *,
    timeout: float,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    processes: ProcessGroup | None = None,
) -> Completed:
    """Run ``argv`` to completion, capturing its output as text.

    ``env`` replaces the environment (pass ``{**os.environ, ...}`` to extend it).
    Raises CommandError when the tool is missing, on timeout, when ``processes``
    was cancelled, and (with ``check``) on a non-zero exit status, with the tail
    of stderr. On timeout or any exception here (Ctrl-C) the command's whole
    process group is killed before this returns.
    """
    shown = shlex.join(argv)
    tool = shutil.which(argv[0], path=(env or os.environ).get("PATH"))
    if tool is None:
        msg = f"`{argv[0]}` is not installed or not on PATH (needed for `{shown}`)"
        raise CommandError(msg, command=shown, failure=Failure.MISSING)
    logger.debug("$ %s", shown)
    group = processes or ProcessGroup()
    proc = group.start([tool, *argv[1:]], env=env, cwd=cwd)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as e:
        _reap(proc)
        msg = f"`{shown}` did not finish within {timeout:g} s"
        raise CommandError(msg, command=shown, failure=Failure.TIMEOUT) from e
    except BaseException:
        _reap(proc)
        raise
    finally:
        group.finished(proc)
    if group.closed:
        msg = f"`{shown}` was killed: the work was cancelled"
        raise CommandError(msg, command=shown, failure=Failure.CANCELLED)
    if check and proc.returncode != 0:
        tail = stderr.strip()[-STDERR_TAIL_CHARS:] or stdout.strip()[-STDERR_TAIL_CHARS:]
        msg = f"`{shown}` failed with exit status {proc.returncode}" + (f":\n{tail}" if tail else "")
        raise CommandError(msg, command=shown, failure=Failure.EXIT, returncode=proc.returncode)
    return Completed(argv=tuple(argv), returncode=proc.returncode, stdout=stdout, stderr=stderr)


def _reap(proc: subprocess.Popen[str]) -> None:
    kill_group(proc.pid)
    try:
        proc.communicate(timeout=REAP_TIMEOUT_S)
    except subprocess.TimeoutExpired:  # a helper left its own group and holds the pipes
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()


def run_feeding(argv: Sequence[str], feed: Callable[[IO[bytes]], object], *, timeout: float) -> Completed:
    """Run ``argv`` with ``feed(stdin)`` writing its input (a stream too large to hold), then wait.

    As run_command: the tool found first, the command echoed at -v, its process group killed on a
    timeout or on any exception while feeding (the feeder's own errors propagate); a non-zero exit,
    or the tool closing its input early, is a CommandError with the tail of its stderr. stdout is
    discarded (the tools fed here write files).
    """
    shown = shlex.join(argv)
    tool = shutil.which(argv[0])
    if tool is None:
        msg = f"`{argv[0]}` is not installed or not on PATH (needed for `{shown}`)"
        raise CommandError(msg, command=shown, failure=Failure.MISSING)
    logger.debug("$ %s", shown)
    proc = subprocess.Popen(
        [tool, *argv[1:]], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    stderr: list[bytes] = []
    reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read() if proc.stderr else b""), daemon=True)
    reader.start()
    assert proc.stdin is not None  # stdin=PIPE
    broken = False
    try:
        try:
            feed(proc.stdin)
            proc.stdin.close()
        except BrokenPipeError:  # the tool stopped reading: its exit status and stderr say why
            broken = True
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired as e:
        kill_group(proc.pid)
        proc.wait()
        msg = f"`{shown}` did not finish within {timeout:g} s"
        raise CommandError(msg, command=shown, failure=Failure.TIMEOUT) from e
    except BaseException:
        kill_group(proc.pid)
        proc.wait()
        raise
    finally:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()
        reader.join(REAP_TIMEOUT_S)
        if proc.stderr is not None:
            proc.stderr.close()
    text = b"".join(stderr).decode(errors="replace")
    if proc.returncode != 0 or broken:
        tail = text.strip()[-STDERR_TAIL_CHARS:]
        msg = f"`{shown}` failed with exit status {proc.returncode}" + (f":\n{tail}" if tail else "")
        raise CommandError(msg, command=shown, failure=Failure.EXIT, returncode=proc.returncode)
    return Completed(argv=tuple(argv), returncode=proc.returncode, stdout="", stderr=text)
