"""Where a build writes its record and log, checked before the engine is asked, and what it says of a
checkout git will not read: a shared checkout used by another user than its owner."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest

from imagebuild.build.checkout_labels import checkout_labels
from imagebuild.build.core import BuildOptions, BuildPlaces, prepare_build
from imagebuild.errors import ConfigError
from imagebuild.inputs.layout import OCI_LABEL_PREFIX
from imagebuild.project import find_project


def _prepare(project: Path, streams: Path, **options: object) -> BuildPlaces:
    found = find_project(project, streams / "pins.toml")  # locked pins: the Dockerfile renders
    prepared = prepare_build(found, found.load("gfx942"), BuildOptions(arch="gfx942", **options))  # type: ignore[arg-type]
    return BuildPlaces.of(prepared)


def test_the_log_is_beside_the_record_in_build_by_default_or_where_record_names(
    project: Path, build_streams: Path, tmp_path: Path
) -> None:
    assert _prepare(project, build_streams) == BuildPlaces(log=project / "build" / "gfx942.build.log", record=project / "build" / "gfx942.build.json")
    elsewhere = tmp_path / "records" / "mine.json"
    elsewhere.parent.mkdir()
    assert _prepare(project, build_streams, record_path=elsewhere) == BuildPlaces(log=elsewhere.parent / "gfx942.build.log", record=elsewhere)


def test_a_build_dir_that_cannot_be_made_is_one_line_naming_it_and_the_way_out(project: Path, build_streams: Path) -> None:
    (project / "build").write_text("a file where the build's directory goes\n")
    with pytest.raises(ConfigError) as e:
        _prepare(project, build_streams)
    message = str(e.value)
    assert "\n" not in message
    assert f"{project / 'build'}: " in message
    assert "--record FILE" in message


def test_a_build_dir_or_log_this_user_may_not_write_is_said_before_the_engine(
    project: Path, build_streams: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared checkout whose build/ belongs to another user (root passes every os.access check, so
    the check is made to answer as it would for them)."""
    (project / "build").mkdir()
    (project / "build" / "gfx942.build.log").write_text("an earlier build's log\n")
    denied: set[Path] = {project / "build"}
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) not in denied)
    with pytest.raises(ConfigError, match=rf"\({project / 'build'} is not writable\)"):
        _prepare(project, build_streams)
    denied = {project / "build" / "gfx942.build.log"}
    with pytest.raises(ConfigError, match=r"gfx942\.build\.log is not writable"):
        _prepare(project, build_streams)


@pytest.mark.parametrize("name", ["gfx942.build.json", "gfx942.build.log"])
@pytest.mark.parametrize("kind", ["fifo", "symlink to a device", "directory"])
def test_a_default_record_or_log_that_is_no_regular_file_is_said_before_the_engine(
    project: Path, build_streams: Path, name: str, kind: str
) -> None:
    """As --record and --log are checked: a FIFO there would hang the build's log, a link to a
    device would take it."""
    where = project / "build" / name
    where.parent.mkdir()
    if kind == "fifo":
        os.mkfifo(where)
    elif kind == "directory":
        where.mkdir()
    else:
        where.symlink_to("/dev/null")
    with pytest.raises(ConfigError) as e:
        _prepare(project, build_streams)
    assert f"({where} is not a regular file" in str(e.value)
    assert "--record FILE" in str(e.value)
    assert where.is_symlink() or not where.is_file()  # left as it was, not replaced by a record or log


@pytest.mark.skipif(os.geteuid() != 0, reason="gives the checkout to another user: needs root")
def test_a_checkout_git_will_not_read_is_labelled_unknown_with_a_warning_saying_why(
    project: Path, build_streams: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another user's checkout: git refuses it as of dubious ownership, so the labels fall back."""
    for args in (["init", "-q"], ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", "-C", str(project), *args], check=True, capture_output=True, timeout=30)
    for path in (project, *project.joinpath(".git").rglob("*"), project / ".git"):
        os.lchown(path, 54321, 54321)
    found = find_project(project, build_streams / "pins.toml")
    with caplog.at_level(logging.WARNING, logger="imagebuild"):
        labels = checkout_labels(found, "gfx942")
    assert labels[f"{OCI_LABEL_PREFIX}revision"].startswith("unknown")
    warned = [r.getMessage() for r in caplog.records if "git could not read the checkout" in r.getMessage()]
    assert len(warned) == 1
    assert "dubious ownership" in warned[0]
    assert "\n" not in warned[0]
