"""The docker tier's disk watch (tests/disk_watch.py): its peak and its budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import disk_watch
from tests.disk_watch import GB, DiskWatch, Filesystem, mount_point, report


def test_the_peak_is_the_least_free_space_seen_against_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readings = iter([50 * GB, 41 * GB, 38 * GB, 45 * GB])
    monkeypatch.setattr(disk_watch, "_free", lambda _path: next(readings))
    watch = DiskWatch([tmp_path, tmp_path / "."])  # one filesystem, read once at the start
    for test in ("a.py::one", "b.py::two", "c.py::three"):
        watch.running = test
        watch._sample()
    (filesystem,) = watch.filesystems.values()
    assert (filesystem.free_at_start, filesystem.least_free, filesystem.peak_use) == (50 * GB, 38 * GB, 12 * GB)
    assert filesystem.least_during == "b.py::two"


def test_a_peak_over_the_budget_fails_with_what_to_do() -> None:
    filesystem = Filesystem(Path("/"), free_at_start=int(60 * GB), least_free=int(43 * GB), least_during="t.py::x")
    lines, over = report([filesystem], budget=16)
    assert over
    assert lines[0] == (
        "disk: at most 17.0 GB more of / in use than at the start (60.0 GB free then, 43.0 GB at the least, during t.py::x)"
    )
    assert "IMAGEBUILD_TEST_DISK_BUDGET_GB=16" in lines[1]
    assert "tests/integration/scratch.py" in lines[1]
    assert report([filesystem], budget=18) == (lines[:1], False)
    assert report([filesystem], budget=None) == (lines[:1], False)


def test_the_mount_point_is_where_the_filesystem_begins(tmp_path: Path) -> None:
    point = mount_point(tmp_path)
    assert tmp_path.resolve().is_relative_to(point)
    assert point == Path("/") or point.parent.stat().st_dev != point.stat().st_dev


def test_a_budget_that_is_not_a_number_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(disk_watch.BUDGET_ENV, "lots")
    with pytest.raises(pytest.UsageError, match="IMAGEBUILD_TEST_DISK_BUDGET_GB='lots'"):
        disk_watch._budget()
