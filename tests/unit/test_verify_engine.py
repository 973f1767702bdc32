"""verify takes its engine from the caller, like build: what it starts it removes, what it was given it leaves open."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.errors import EngineError, VerifyError
from imagebuild.project import find_project
from imagebuild.testing import FakeEngine, image_info
from imagebuild.verify import VerifyOptions, prepare_verify, runner, verify

REPO = Path(__file__).resolve().parents[2]
PINS = REPO / "tests" / "data" / "build_streams" / "pins.toml"


def test_a_missing_image_is_named_and_no_container_started() -> None:
    engine = FakeEngine()
    inputs = find_project(REPO, PINS).load("gfx942")
    with pytest.raises(
        EngineError, match="no image 'imagebuild/kimi-k3:gfx942' in the Docker engine at fake://engine"
    ):
        verify(prepare_verify(inputs, VerifyOptions(image="imagebuild/kimi-k3:gfx942")), engine)
    assert engine.started == []
    assert not engine.closed


def test_the_container_is_removed_when_the_checks_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(**_: object) -> tuple[()]:
        msg = "the image checks could not run (pytest exit 4)"
        raise VerifyError(msg)

    monkeypatch.setattr(runner, "run_checks", broken)
    engine = FakeEngine(images=[image_info("sha256:" + "a" * 64, tags=["img"])])
    inputs = find_project(REPO, PINS).load("gfx942")
    said: list[str] = []
    with pytest.raises(VerifyError, match="could not run"):
        verify(prepare_verify(inputs, VerifyOptions(image="img")), engine, progress=said.append)
    assert engine.removed == engine.started == ["fake-container-1"]
    assert not engine.closed
    assert any(str(PINS) in line for line in said)


def test_verify_needs_the_docker_cli_for_testinfra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    inputs = find_project(REPO, PINS).load("gfx942")
    with pytest.raises(VerifyError, match="through the `docker` CLI"):
        verify(prepare_verify(inputs, VerifyOptions(image="img")), FakeEngine())
