"""Integration tier: a real Docker engine and the sample world on loopback.

`scripts/test` (and so .ci/run) starts the engine; these fixtures bring the
sample world up (idempotent, the base image is cached by content) and lock a
working copy of its pins with `imagebuild lock`, exactly as a user would.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sampleworld_fixtures import node_engines  # noqa: F401  (registers the fixture)

from imagebuild.cli import main
from imagebuild.docker_engine import DockerEngine
from imagebuild.errors import EngineError
from sampleworld.layout import DEFAULT_STATE_DIR
from sampleworld.world import World, up


@pytest.fixture(scope="session")
def engine() -> Iterator[DockerEngine]:
    try:
        engine = DockerEngine.from_env()
    except EngineError as e:
        pytest.fail(f"integration tests need a Docker engine: {e}")
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def world(engine: DockerEngine) -> World:
    return up(DEFAULT_STATE_DIR, images=True)


@pytest.fixture(scope="session")
def locked_pins(world: World, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample world's pins, locked by `imagebuild lock` into a working copy."""
    path = tmp_path_factory.mktemp("pins") / "pins.toml"
    shutil.copy(world.pins_path, path)
    shutil.copy(world.pins_path.with_name("pylock.toml"), path.with_name("pylock.toml"))
    assert main(["lock", "--pins", str(path)]) == 0
    return path


@pytest.fixture
def chdir_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)
    return repo
