"""Integration tier: a real Docker engine and the sample world on loopback.

`scripts/test` (and so .ci/run) starts the engine; these fixtures bring the
sample world up (idempotent, the base image is cached by content) and lock a
working copy of its pins with `imagebuild lock`, exactly as a user would.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from imagebuild.errors import EngineError
from sampleworld.pytest_plugin import sample_world_state_dir
from sampleworld.world import World, up
from tests import REPO
from tests.integration.cluster_support import publish_sample
from tests.integration.image_support import CHECKOUT
from tests.prerequisites import skip_or_fail

SAMPLE_IMAGE_TAG = f"imagebuild-test/kimi-k3:gfx942-{CHECKOUT}"
SAMPLE_GFX950_TAG = f"imagebuild-test/kimi-k3:gfx950-{CHECKOUT}"


@pytest.fixture(scope="session")
def engine() -> Iterator[DockerEngine]:
    try:
        engine = DockerEngine.from_env()
    except EngineError as e:
        skip_or_fail(f"integration tests need a Docker engine: {e}")
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def world(engine: DockerEngine) -> World:
    # The state dir sample_world uses too (IMAGEBUILD_SAMPLEWORLD_STATE, else the checkout's), so a
    # worktree's session reuses the world the main checkout already runs instead of a second one.
    return up(sample_world_state_dir(), images=True)


@pytest.fixture(scope="session")
def locked_pins(world: World, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample world's pins, locked by `imagebuild lock` into a working copy."""
    path = tmp_path_factory.mktemp("pins") / "pins.toml"
    shutil.copy(world.pins_path, path)
    shutil.copy(world.pins_path.with_name("pylock.toml"), path.with_name("pylock.toml"))
    assert main(["lock", "--pins", str(path)]) == 0
    return path


@pytest.fixture(scope="session")
def sample_image(locked_pins: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The full 18-step image built against the sample world, once per session; its build record.

    Tagged per checkout (checkouts share one engine); the cluster tests use its image ID."""
    record = tmp_path_factory.mktemp("build") / "record.json"
    argv = ["build", "--pins", str(locked_pins), "--network", "host", "--record", str(record)]
    with contextlib.chdir(REPO):
        assert main([*argv, "--tag", SAMPLE_IMAGE_TAG]) == 0
    result: dict[str, object] = json.loads(record.read_text())
    return result


@pytest.fixture(scope="session")
def gfx950_pins(locked_pins: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The locked sample pins, locked again for gfx950 (lock asks only the arch's pins): the MI355X
    donor's platform digest is filled; every other pin, the python and the apt lock stay as they are."""
    path = tmp_path_factory.mktemp("pins-gfx950") / "pins.toml"
    for name in ("pins.toml", "pylock.toml", "apt.lock.toml"):
        shutil.copy(locked_pins.with_name(name), path.with_name(name))
    assert main(["lock", "--arch", "gfx950", "--pins", str(path)]) == 0
    return path


@pytest.fixture(scope="session")
def sample_image_gfx950(gfx950_pins: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The 17-step gfx950 (MI355X) image built against the sample world, once per session; its record.

    Steps 1-3 are gfx942's (the first arch-specific ARG is step 4's), so they come from the layer
    cache when the gfx942 sample image was built on this engine before."""
    record = tmp_path_factory.mktemp("build-gfx950") / "record.json"
    argv = ["build", "--arch", "gfx950", "--pins", str(gfx950_pins), "--network", "host"]
    with contextlib.chdir(REPO):
        assert main([*argv, "--record", str(record), "--tag", SAMPLE_GFX950_TAG]) == 0
    result: dict[str, object] = json.loads(record.read_text())
    return result


@pytest.fixture(scope="session")
def published_sample_image(sample_image: dict[str, object], world: World) -> str:
    """`imagebuild publish` of the sample image to the sample registry, once per session: the
    reference it prints (REPOSITORY@sha256:...), what every node of a registry job pulls."""
    return publish_sample(world, str(sample_image["image_id"]))


@pytest.fixture(scope="session")
def sample_export(
    sample_image: dict[str, object], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Path]:
    """The sample image exported (default compression) once per session and format, each to a
    directory of its own that every cluster node sees: export --format FORMAT -> its manifest.
    A squashfs export costs minutes here, so every test that needs one shares it."""
    made: dict[str, Path] = {}

    def get(export_format: str) -> Path:
        if export_format not in made:
            shared = tmp_path_factory.mktemp(f"shared-{export_format}")
            began = time.monotonic()
            argv = ["export", str(sample_image["image_id"]), "-o", str(shared), "--format", export_format]
            assert main(argv) == 0
            (manifest,) = shared.glob("*.json")
            size = json.loads(manifest.read_text())["size"]
            print(f"export --format {export_format}: {time.monotonic() - began:.1f}s, {size / 1e6:.1f} MB")
            made[export_format] = manifest
        return made[export_format]

    return get


@pytest.fixture
def chdir_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(REPO)
    return REPO
