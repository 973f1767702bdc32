"""sampleworld.proc's stops: what the sample world started ends, however it treats SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sampleworld import proc

READY = "print('ready', flush=True); "
# Outlives SIGTERM, as a conmon waiting out podman's exit delay does.
IGNORES_TERM = READY + "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
OBEYS_TERM = READY + "import time; time.sleep(60)"
GRACE_S = 1.0


@contextmanager
def started(code: str, count: int = 1) -> Iterator[list[int]]:
    """``count`` children running ``code``, each past its first line; their pids."""
    children = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(count)]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
        yield [child.pid for child in children]
    finally:
        for child in children:
            child.kill()  # a no-op for the ones proc stopped (and reaped)
            child.wait(timeout=5)
            assert child.stdout is not None
            child.stdout.close()


def test_pids_that_ignore_sigterm_share_one_grace_period_then_are_killed() -> None:
    with started(IGNORES_TERM, count=3) as pids:
        began = time.monotonic()
        proc.stop_pids(pids, timeout=GRACE_S)
        took = time.monotonic() - began
        assert not any(proc.pid_alive(pid) for pid in pids)
    assert took >= GRACE_S  # SIGTERM did nothing: they ended by the SIGKILL after the grace period
    assert took < 2 * GRACE_S, f"{took:.1f}s: one grace period each, not one for all"  # each: >= 3 s


def test_a_pid_that_obeys_sigterm_ends_without_waiting_out_its_grace_period() -> None:
    with started(OBEYS_TERM) as (pid,):
        began = time.monotonic()
        proc.stop_pid(pid, timeout=30)
        assert not proc.pid_alive(pid)
        assert time.monotonic() - began < 10


def test_a_pid_already_gone_is_no_error() -> None:
    with started(READY) as (pid,):
        proc.stop_pid(pid, timeout=GRACE_S)  # ends it
        proc.stop_pids([pid], timeout=GRACE_S)
