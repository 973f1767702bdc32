"""The lock policy as pure functions: what is asked, what an answer means."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.lock.plan import classify, judge, kept, needs_resolution, updates_for
from imagebuild.pins import GitPin, ImagePin, LockState, PypiPin, ToolchainPin, WheelPin

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
    # A commit and its time, as lock wrote them: nothing left to ask.
    assert not needs_resolution(git(tag=None, committed=T1).with_fingerprint(), upgrade=True)
    # The same, written by hand (no fingerprint vouches for the time): asked once for it.
    assert needs_resolution(git(tag=None, committed=T1), upgrade=False)
    assert needs_resolution(image(), upgrade=False)
    assert not needs_resolution(wheel(), upgrade=False)
    assert needs_resolution(wheel(), upgrade=True)
    assert needs_resolution(replace(wheel().with_fingerprint(), url="v"), upgrade=False)  # url edited
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
    held = judge(image(), {"digest": D3, "platform_digest": D2}, upgrade=False)
    assert (held.status, held.applied) == ("moved", False)
    assert updates_for((held,)) == {}
    taken = judge(image(), {"digest": D3, "platform_digest": D2}, upgrade=True)
    fingerprint = image(digest=D3).fingerprint_for({"digest": D3, "platform_digest": D2})
    assert updates_for((taken,)) == {"i": {"digest": D3, "fingerprint": fingerprint}}
    filled = judge(git(commit=None), {"commit": B, "tag_object": "", "committed": T1}, upgrade=False)
    written = {
        "commit": B,
        "committed": T1,
        "fingerprint": git(commit=B, committed=T1).with_fingerprint().fingerprint,
    }
    assert updates_for((filled,)) == {"g": written}


# --- annotated tags ----------------------------------------------------------------------------

TAG_OBJECT = "f" * 40


def test_a_pinned_tag_object_is_the_same_pin_normalised_to_its_commit() -> None:
    """MAD's Dockerfile pins v1.2.2's tag object; the tag still names the commit it peels to."""
    pinned = git(commit=TAG_OBJECT, committed=None)
    change = judge(pinned, {"commit": A, "tag_object": TAG_OBJECT, "committed": T1}, upgrade=False)
    assert (change.status, change.applied) == ("normalized", True)
    assert (
        f"{TAG_OBJECT} is the tag object of tag v1: recorded as the commit it points at, {A}" in change.detail
    )
    assert dict(change.written) == {
        "commit": A,
        "tag_object": TAG_OBJECT,
        "committed": T1,
        "fingerprint": GitPin(
            name="g",
            source=SRC,
            url="u",
            tag="v1",
            branch=None,
            commit=A,
            tag_object=TAG_OBJECT,
            committed=T1,
        )
        .with_fingerprint()
        .fingerprint,
    }


def test_a_tag_whose_object_or_commit_changed_stays_an_alarm() -> None:
    recorded = replace(git(committed=T1), tag_object=TAG_OBJECT).with_fingerprint()
    retagged = judge(recorded, {"commit": A, "tag_object": "e" * 40, "committed": T1}, upgrade=False)
    assert (retagged.status, retagged.applied) == ("moved", False)
    moved = judge(recorded, {"commit": B, "tag_object": TAG_OBJECT, "committed": T2}, upgrade=False)
    assert (moved.status, moved.applied) == ("moved", False)
    assert updates_for((retagged, moved)) == {}


# --- the input file is the user's intent --------------------------------------------------------


def test_an_edited_ref_is_resolved_again_without_upgrade() -> None:
    locked = git(tag=None, branch="old-branch", committed=T1).with_fingerprint()
    edited = replace(locked, branch="main")
    assert edited.lock_state is LockState.DECLARED_CHANGED
    assert not edited.locked  # render and build refuse it until lock ran
    change = judge(edited, {"commit": B, "tag_object": "", "committed": T2}, upgrade=False)
    assert (change.status, change.applied) == ("updated", True)
    assert change.edit == "pins.toml changed: g now tracks branch main"
    assert updates_for((change,))["g"]["commit"] == B
    # The same ref at the same commit still gets a fingerprint for the new ref.
    same = judge(edited, {"commit": A, "tag_object": "", "committed": T1}, upgrade=False)
    assert (same.status, same.applied) == ("updated", True)
    assert updates_for((same,)) == {"g": {"fingerprint": edited.with_fingerprint().fingerprint}}


def test_an_edited_tag_is_not_a_moved_tag() -> None:
    edited = replace(git(committed=T1).with_fingerprint(), tag="v2")
    change = judge(edited, {"commit": B, "tag_object": "", "committed": T2}, upgrade=False)
    assert (change.status, change.applied) == ("updated", True)


def test_a_hand_edited_commit_gets_its_own_time() -> None:
    """A commit typed over a locked one keeps the old time: lock fetches the right one, applied."""
    edited = replace(git(tag=None, committed=T1).with_fingerprint(), commit=B)
    assert edited.lock_state is LockState.IDENTITY_EDITED
    assert edited.commit_time is None  # no SOURCE_DATE_EPOCH from a time that may be another commit's
    change = judge(edited, {"commit": B, "tag_object": "", "committed": T2}, upgrade=False)
    assert (change.status, change.applied) == ("updated", True)
    assert updates_for((change,))["g"]["committed"] == T2


def test_a_kept_hand_edited_commit_is_fingerprinted_only_with_its_own_time() -> None:
    edited = replace(git(committed=T1).with_fingerprint(), commit=B)  # tag v1 names A
    unchecked = judge(edited, {"commit": A, "tag_object": "", "committed": T1}, upgrade=False)
    assert (unchecked.status, unchecked.applied) == ("moved", False)
    assert updates_for((unchecked,)) == {}
    checked = judge(
        edited, {"commit": A, "tag_object": "", "committed": T1}, upgrade=False, recorded={"committed": T2}
    )
    written = updates_for((checked,))["g"]
    assert written["committed"] == T2
    assert written["fingerprint"] == replace(edited, committed=T2).with_fingerprint().fingerprint


def test_a_complete_file_pin_is_fingerprinted_offline() -> None:
    change = kept(wheel())
    assert (change.status, change.applied, change.checked) == ("filled", True, False)
    assert dict(change.written) == {"fingerprint": wheel().with_fingerprint().fingerprint}
    assert kept(wheel().with_fingerprint()).status == "unchanged"
