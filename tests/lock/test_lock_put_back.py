"""A lock that fails part-way leaves every file as it was: pins.toml, apt.lock.toml and pylock.toml.

The pins lock writes pins.toml, then the apt lock apt.lock.toml, then the python lock pylock.toml.
When a later one fails (a resolution, or the disk filling up), the ones written before it are put
back: exit 5 says pins.toml is unchanged, and a half-locked project would build other sources than
its python lock was resolved for. The three locks are stood in for here; each one's own writing is
tested on its own (test_lock_fake.py, test_python_lock.py, the integration tier's apt lock).
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from imagebuild.errors import LockError
from imagebuild.lock import LockRequest, lock_project
from imagebuild.lock import run as lock_run
from imagebuild.pins import load_pins
from imagebuild.project import Project, find_project
from tests import REPO

FILES = ("pins.toml", "pylock.toml", "apt.lock.toml")


@pytest.fixture
def project(tmp_path: Path) -> Project:
    for name in FILES:  # a locked project: the build recordings' inputs
        shutil.copy(REPO / "tests" / "data" / "build_streams" / name, tmp_path / name)
    return find_project(REPO, tmp_path / "pins.toml")


def contents(project: Project) -> dict[str, bytes]:
    return {name: (project.pins_path.parent / name).read_bytes() for name in FILES}


def writing_pins_and_apt(monkeypatch: pytest.MonkeyPatch, project: Project) -> None:
    """The pins lock and the apt lock each rewrite their file, as an upgrade would."""

    def lock(options: object, *args: object, **kwargs: object) -> SimpleNamespace:
        pins = load_pins(project.pins_path)
        project.pins_path.write_text("# locked anew\n")
        return SimpleNamespace(pins=pins, wrote=True)

    def lock_apt(**kwargs: object) -> SimpleNamespace:
        (project.pins_path.parent / "apt.lock.toml").write_text("# resolved anew\n")
        return SimpleNamespace(wrote=True)

    monkeypatch.setattr(lock_run, "lock", lock)
    monkeypatch.setattr(lock_run, "lock_apt", lock_apt)


def lock_failing_in(monkeypatch: pytest.MonkeyPatch, project: Project, part: str, failure: BaseException) -> None:
    """Lock the project with ``part`` (lock_apt or lock_python) raising ``failure``: it is raised."""

    def failing(*args: object, **kwargs: object) -> None:
        raise failure

    monkeypatch.setattr(lock_run, part, failing)
    with pytest.raises(type(failure)):
        lock_project(project, LockRequest(arch="gfx942", jobs=1, timeout=1.0, deadline=1.0))


@pytest.mark.parametrize(
    "failure",
    [LockError("uv found no solution"), OSError(errno.ENOSPC, "No space left on device", "pylock.toml")],
    ids=["resolution", "full disk"],
)
def test_a_failed_python_lock_puts_back_the_pins_and_the_apt_lock(
    project: Project, monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    before = contents(project)
    writing_pins_and_apt(monkeypatch, project)
    lock_failing_in(monkeypatch, project, "lock_python", failure)
    assert contents(project) == before


def test_a_failed_apt_lock_puts_back_the_pins(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    before = contents(project)
    writing_pins_and_apt(monkeypatch, project)
    lock_failing_in(monkeypatch, project, "lock_apt", LockError("the snapshot has no such package"))
    assert contents(project) == before


def test_an_apt_lock_that_did_not_exist_is_removed_again(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    (project.pins_path.parent / "apt.lock.toml").unlink()
    before = contents_if_present(project)
    writing_pins_and_apt(monkeypatch, project)
    lock_failing_in(monkeypatch, project, "lock_python", LockError("uv found no solution"))
    assert contents_if_present(project) == before
    assert not (project.pins_path.parent / "apt.lock.toml").exists()


def contents_if_present(project: Project) -> dict[str, bytes]:
    return {name: path.read_bytes() for name in FILES if (path := project.pins_path.parent / name).exists()}
