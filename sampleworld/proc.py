"""Every subprocess of the sample world goes through here: tool lookup, timeouts, errors naming it."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from sampleworld.errors import SampleWorldError

# After SIGKILL, however short the grace: a process in uninterruptible sleep (an unmount) ends late.
KILL_WAIT_S = 15.0


def which(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        msg = f"`{tool}` is not installed; run scripts/ensure-docker.sh (it installs the tools)"
        raise SampleWorldError(msg)
    return found


def run(
    cmd: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    timeout: float = 600,
) -> str:
    """Run a command to completion and return its stdout; fail with the tail of its output."""
    argv = [which(cmd[0]), *cmd[1:]]
    full_env = {**os.environ, **env} if env is not None else None
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=full_env, input=stdin, capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        msg = f"`{shlex.join(cmd)}` did not finish within {timeout:.0f}s"
        raise SampleWorldError(msg) from e
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).decode(errors="replace")[-3000:]
        msg = f"`{shlex.join(cmd)}` failed with exit code {done.returncode}:\n{tail}"
        raise SampleWorldError(msg)
    return done.stdout.decode(errors="replace")


# Runs in a short-lived python of its own: starts the server in a new session with its output in the log
# and prints the server's pid. The server is then not our child, so it outlives us without a zombie or a
# Popen that warns "subprocess is still running" when collected (pytest turns that into an error).
_LAUNCHER = """
import subprocess, sys
with open(sys.argv[1], "ab") as log:
    child = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
print(child.pid)
"""


def spawn(
    cmd: Sequence[str], *, log_path: Path, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> int:
    """Start a long-running server detached from us, its output appended to log_path; returns its pid."""
    argv = [which(cmd[0]), *cmd[1:]]
    out = run([sys.executable, "-c", _LAUNCHER, str(log_path), *argv], cwd=cwd, env=env, timeout=60)
    return int(out.strip())


def pid_alive(pid: int) -> bool:
    """True while pid runs; a zombie (exited, not yet reaped) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _reap(pid: int) -> None:
    # Only our own children can be reaped; anything else was reparented and is reaped by init.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop_pid(pid: int, *, timeout: float = 15) -> None:
    """SIGTERM one pid we started, SIGKILL it if it lingers."""
    stop_pids([pid], timeout=timeout)


def stop_pids(pids: Sequence[int], *, timeout: float = 15) -> None:
    """SIGTERM pids we started, all at once; SIGKILL those that linger: one grace period for all."""
    left = list(pids)
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, max(timeout, KILL_WAIT_S))):
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while left and time.monotonic() < deadline:
            for pid in left:
                _reap(pid)
            left = [pid for pid in left if pid_alive(pid)]
            if left:
                time.sleep(0.1)
        if not left:
            return
    msg = f"pids {left} survived SIGKILL"
    raise SampleWorldError(msg)
