"""How much of the machine is idle: whether work that can wait (normalising ahead) would slow the build."""

from __future__ import annotations

import os
import time
from pathlib import Path

PROC_STAT = Path("/proc/stat")
IDLE_FIELDS = (3, 4)  # idle and iowait, after user, nice and system (proc(5))


def idle_cores(sample_s: float = 0.5, *, stat: Path = PROC_STAT) -> float:
    """The cores left idle over the next ``sample_s`` seconds (0 to the machine's count), from the
    kernel's counters; every core when they cannot be read (no /proc: nothing to go by)."""
    cores = float(os.cpu_count() or 1)
    before = _counters(stat)
    time.sleep(sample_s)
    after = _counters(stat)
    if before is None or after is None:
        return cores
    total = sum(after) - sum(before)
    idle = sum(after[i] - before[i] for i in IDLE_FIELDS)
    return cores * idle / total if total > 0 else cores


def _counters(stat: Path) -> list[int] | None:
    try:
        first = stat.read_text(encoding="ascii").split("\n", 1)[0].split()
        counters = [int(field) for field in first[1:]]
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return counters if first[:1] == ["cpu"] and len(counters) > max(IDLE_FIELDS) else None
