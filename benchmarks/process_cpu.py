"""CPU seconds of a process and its children from /proc: what an engine's dockerd (its untar, its
containerd) spent while a benchmark's command ran, which the command's own rusage does not see."""

from __future__ import annotations

import os
from pathlib import Path

ENGINE_PIDS: dict[str, int] = {}  # docker host -> the dockerd answering there


def engine_cpu(host: str) -> float:
    """CPU seconds the engine's dockerd has used so far: its own, the children it waited for (its untar)
    and the ones still running (the containerd it started, where the containerd image store unpacks,
    diffs and compresses layers)."""
    pid = ENGINE_PIDS.get(host)
    if pid is None:
        return 0.0
    return _process_cpu(pid) + sum(_process_cpu(child) for child in _children(pid))


def _process_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # it ended meanwhile: its seconds are its parent's once waited for
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found
