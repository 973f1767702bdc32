"""The docker tier's disk peak: measured while it runs, printed at the end, held under a budget.

A CI machine's free disk is not fixed. One had about 22 GB, and the docker tier, whose exports, saves
and engine stores then peaked at 25 GB, ran out after 21 minutes. A session that runs docker tests
samples the free space of every filesystem the tier writes to (the tmp dir, the sample world's state
dir, the engine's data root, /var/tmp) and prints its peak use of each. With
IMAGEBUILD_TEST_DISK_BUDGET_GB set (scripts/test sets it, and checks that much is free before it
starts), a peak over the budget fails the session: creep shows here, not as ENOSPC on a smaller machine.
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from sampleworld.pytest_plugin import sample_world_state_dir

BUDGET_ENV = "IMAGEBUILD_TEST_DISK_BUDGET_GB"
SAMPLE_EVERY_S = 1.0
GB = 1e9
ENGINE_DATA_ROOT = Path("/var/lib/docker")


def _free(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def mount_point(path: Path) -> Path:
    """The mount point of the filesystem that holds ``path``."""
    path = path.resolve()
    device = path.stat().st_dev
    while path.parent != path and path.parent.stat().st_dev == device:
        path = path.parent
    return path


@dataclass
class Filesystem:
    mount: Path
    free_at_start: int
    least_free: int
    least_during: str = ""  # the test that was running when the least was seen

    @property
    def peak_use(self) -> int:
        return self.free_at_start - self.least_free


class DiskWatch:
    """Samples each filesystem's free space on a daemon thread until stopped."""

    def __init__(self, paths: list[Path]) -> None:
        self.filesystems: dict[int, Filesystem] = {}
        for path in paths:
            device = path.stat().st_dev
            if device not in self.filesystems:
                free = _free(path)
                self.filesystems[device] = Filesystem(mount_point(path), free, free)
        self.running = ""  # the node ID of the test running now (pytest_runtest_setup sets it)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _sample(self) -> None:
        for filesystem in self.filesystems.values():
            free = _free(filesystem.mount)
            if free < filesystem.least_free:
                filesystem.least_free, filesystem.least_during = free, self.running

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            self._sample()


def _budget() -> float | None:
    raw = os.environ.get(BUDGET_ENV)
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        msg = f"{BUDGET_ENV}={raw!r}: give the docker tier's disk budget in GB, e.g. 16"
        raise pytest.UsageError(msg) from None


_watch_key = pytest.StashKey[DiskWatch]()
_lines_key = pytest.StashKey[list[str]]()


def pytest_collection_finish(session: pytest.Session) -> None:
    if not any(item.get_closest_marker("docker") for item in session.items):
        return
    _budget()  # a bad value stops the session before any test
    places = [Path(tempfile.gettempdir()), sample_world_state_dir(), ENGINE_DATA_ROOT, Path("/var/tmp")]
    watch = DiskWatch([path for path in places if path.exists()])
    watch.start()
    session.config.stash[_watch_key] = watch


def report(filesystems: list[Filesystem], budget: float | None) -> tuple[list[str], bool]:
    """The lines to print, and whether the peak use went over ``budget`` GB."""
    lines = [
        f"disk: at most {fs.peak_use / GB:.1f} GB more of {fs.mount} in use than at the start"
        f" ({fs.free_at_start / GB:.1f} GB free then, {fs.least_free / GB:.1f} GB at the least"
        + (f", during {fs.least_during})" if fs.least_during else ")")
        for fs in filesystems
    ]
    total = sum(fs.peak_use for fs in filesystems)
    over = budget is not None and total > budget * GB
    if over:
        lines.append(
            f"disk: {total / GB:.1f} GB at the peak is more than {BUDGET_ENV}={budget:g}: find what the docker"
            " tier keeps that it no longer needs (tests/integration/scratch.py), or raise the budget in scripts/test"
        )
    return lines, over


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    watch = item.config.stash.get(_watch_key, None)
    if watch is not None:
        watch.running = item.nodeid  # its fixtures' setup included: where the exports and builds are


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    watch = session.config.stash.get(_watch_key, None)
    if watch is None:
        return
    watch.stop()
    lines, over = report(list(watch.filesystems.values()), _budget())
    if over:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    session.config.stash[_lines_key] = lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    for line in config.stash.get(_lines_key, []):
        terminalreporter.write_line(line)
