"""The lock policy as pure functions: what is asked, what an answer means."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.lock.plan import classify, judge, needs_resolution, updates_for
from imagebuild.pins import GitPin, ImagePin, PypiPin, ToolchainPin, WheelPin

SRC = Path("pins.toml")
A, B = "a" * 40, "b" * 40
D1, D2, D3 = "sha256:" + "1" * 64, "sha256:" + "2" * 64, "sha256:" + "3" * 64
S1, S2 = "1" * 64, "2" * 64
T1, T2 = "2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"


def git(
    *, tag: str | None = "v1", branch: str | None = None, commit: str | None = A, committed: str | None = None
) -> GitPin:
    return GitPin(name="g", source=SRC, url="u", tag=tag, branch=branch, commit=commit, committed=committed)


def image(digest: str | None = D1, platform_digest: str | None = D2) -> ImagePin:
    return ImagePin(
        name="i",
        source=SRC,
        image="x/y",
        tag="t",
        digest=digest,
        platform_digest=platform_digest,
        python="3.12",
        site_packages="/s",
    )


def wheel(sha: str | None = S1, size: int = 10) -> WheelPin:
    return WheelPin(name="w", source=SRC, url="u", version="1", sha256=sha, size=size)


def pypi(filename: str | None = "f.whl", sha: str | None = S1) -> PypiPin:
    return PypiPin(name="p", source=SRC, project="p", version="1", index="i", filename=filename, sha256=sha)


def test_what_is_asked() -> None:
    assert needs_resolution(git(), upgrade=False)
    assert needs_resolution(git(tag=None), upgrade=False)  # commit only: asked for its commit time
    assert not needs_resolution(git(tag=None, committed=T1), upgrade=True)  # nothing left to ask
    assert needs_resolution(image(), upgrade=False)
    assert not needs_resolution(wheel(), upgrade=False)
    assert needs_resolution(wheel(), upgrade=True)
    assert needs_resolution(wheel(size=0), upgrade=False)
    assert needs_resolution(pypi(filename=None), upgrade=False)
    assert not needs_resolution(ToolchainPin(name="t", source=SRC, version="1.88.0"), upgrade=True)


@pytest.mark.parametrize(
    ("pin", "new", "status"),
    [
        (git(), {"commit": A}, "unchanged"),
        (git(), {"commit": A, "committed": T1}, "filled"),  # the commit time of a locked commit
        (git(committed=T1), {"commit": B, "committed": T2}, "moved"),
        (git(commit=None), {"commit": B}, "filled"),
        (git(), {"commit": B}, "moved"),
        (git(tag=None, branch="main"), {"commit": B}, "updated"),
        (image(), {"digest": D1, "platform_digest": D2}, "unchanged"),
        (image(platform_digest=None), {"digest": D1, "platform_digest": D2}, "filled"),
        (image(), {"digest": D3, "platform_digest": D2}, "moved"),
        (image(), {"digest": D1, "platform_digest": D3}, "updated"),  # another arch profile
        (wheel(size=0), {"sha256": S1, "size": 10}, "filled"),
        (wheel(), {"sha256": S2, "size": 10}, "moved"),
        (pypi(), {"filename": "f.whl", "sha256": S2}, "moved"),
        (pypi(), {"filename": "g.whl", "sha256": S2}, "updated"),
    ],
)
def test_classify(
    pin: GitPin | ImagePin | WheelPin | PypiPin, new: dict[str, str | int], status: str
) -> None:
    assert classify(pin, new) == status


def test_moved_is_applied_only_on_upgrade_and_only_changed_fields_are_written() -> None:
    kept = judge(image(), {"digest": D3, "platform_digest": D2}, upgrade=False)
    assert (kept.status, kept.applied) == ("moved", False)
    assert updates_for((kept,)) == {}
    taken = judge(image(), {"digest": D3, "platform_digest": D2}, upgrade=True)
    assert updates_for((taken,)) == {"i": {"digest": D3}}
    filled = judge(git(commit=None), {"commit": B}, upgrade=False)
    assert updates_for((filled,)) == {"g": {"commit": B}}
