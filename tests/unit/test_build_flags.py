"""build's --tag (repeatable), --pull and --iidfile, on the FakeEngine replaying the recorded success."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.build.core import BuildRecord
from imagebuild.errors import RegistryError
from imagebuild.project import find_project
from imagebuild.testing import FakeEngine
from tests import REPO

Replay = Callable[..., tuple[FakeEngine, BuildRecord]]  # the replay fixture (tests/unit/conftest.py)


def test_every_tag_is_tagged_and_recorded_the_first_is_the_records(tmp_path: Path, replay: Replay) -> None:
    tags = ("registry.example.com/ml/kimi-k3:gfx942", "kimi-k3:latest")
    engine, record = replay("success", tag=tags[0], extra_tags=tags[1:])
    assert engine.tags == dict.fromkeys(tags, record.image_id)
    assert record.tag == tags[0]
    assert record.tags == list(tags)


def test_iidfile_holds_the_image_id_in_dockers_format(tmp_path: Path, replay: Replay) -> None:
    iidfile = tmp_path / "image-id"
    _, record = replay("success", iidfile=iidfile)
    assert (
        iidfile.read_bytes() == record.image_id.encode()
    )  # sha256:<64 hex>, no newline, as docker writes it
    assert record.image_id.startswith("sha256:")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".image-id")] == []  # no temporary left


def test_pull_fetches_base_and_donor_by_digest_before_the_build(replay: Replay, build_streams: Path) -> None:
    pins = find_project(REPO, build_streams / "pins.toml").load("gfx942").pins
    expected = [pins.image("base").reference, pins.image("donor").reference]
    assert all("@sha256:" in ref for ref in expected)
    engine, _ = replay("success", pull=True)
    assert engine.pulls == expected
    engine, _ = replay("success")
    assert engine.pulls == []  # without --pull the engine's own copies are used


def test_a_refused_pull_builds_and_tags_nothing(tmp_path: Path, replay: Replay) -> None:
    engine = FakeEngine(refuse_pull="unauthorized: authentication required")
    with pytest.raises(RegistryError, match="unauthorized"):
        replay("success", pull=True, engine=engine, iidfile=tmp_path / "iid")
    assert engine.requests == []
    assert engine.tags == {}
    assert not (tmp_path / "iid").exists()
