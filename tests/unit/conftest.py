"""Fixtures of the unit tests: a throw-away checkout, and builds replayed from recorded streams."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagebuild.build import compile_cache
from imagebuild.build.core import BuildOptions, BuildRecord, build_image, prepare_build
from imagebuild.build.progress import BuildProgress
from imagebuild.project import find_project
from imagebuild.testing import FakeClock, FakeEngine, Recording, image_root_files
from sampleworld.layout import BAD_SHA
from tests import REPO


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throw-away copy of the checkout's inputs, as the working directory."""
    for name in ("stages", "constraints", "docker"):
        shutil.copytree(REPO / name, tmp_path / name)
    for name in ("pins.toml", "pylock.toml"):
        shutil.copy(REPO / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def dead_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory, with DOCKER_HOST on a socket nothing listens on: a command that got past
    its own checks would ask it and exit 3, so a refusal with exit 2 came before the engine."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")
    return tmp_path


@pytest.fixture
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty docker CLI config as the only one read, and no engine named by the environment."""
    directory = tmp_path / "docker-config"
    directory.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(directory))
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.delenv(name, raising=False)
    return directory


# Replaying recorded builds (tests/data/build_streams) --------------------------------------------------

BUILD_STREAMS = REPO / "tests" / "data" / "build_streams"
FAKE_TAG = "imagebuild-test/fake:gfx942"
Replay = Callable[..., tuple[FakeEngine, BuildRecord]]


@pytest.fixture(autouse=True)
def compile_cache_address_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compile cache's address is fixed and the machine's: a docker-tier build running beside these
    tests may answer there, and a fake build would then warn (the warning's own test says when)."""
    monkeypatch.setattr(compile_cache, "something_listens", lambda port=0: False)


@pytest.fixture
def build_streams() -> Path:
    """The recorded sample-world build streams and the locked pins they were built from."""
    return BUILD_STREAMS


@pytest.fixture
def vllm_bad_pins(tmp_path: Path) -> Path:
    """The recorded pins with vLLM at a commit its repository lacks (what the failure stream built)."""
    text = (BUILD_STREAMS / "pins.toml").read_text()
    commit = find_project(REPO, BUILD_STREAMS / "pins.toml").load("gfx942").pins.get("vllm").identity
    assert commit
    path = tmp_path / "pins.toml"
    # Unfingerprinted, as by hand: a fingerprinted identity typed over is refused before the build.
    path.write_text(re.sub(r"^fingerprint = .*\n", "", text.replace(commit, BAD_SHA), flags=re.M))
    for lock in ("pylock.toml", "apt.lock.toml"):  # the same python and OS package locks beside it
        if (BUILD_STREAMS / lock).is_file():
            shutil.copy(BUILD_STREAMS / lock, tmp_path / lock)
    return path


def recorded_distributions() -> list[tuple[str, str]]:
    """(name, version) of what the recorded sample image holds (tests/data/build_streams/inventory.txt)."""
    line = (BUILD_STREAMS / "inventory.txt").read_text().strip()
    return [(str(n), str(v)) for n, v in json.loads(line.partition(":")[2])]


@pytest.fixture
def replay(tmp_path: Path) -> Replay:
    """replay(NAME or Recording, pins=, progress=, engine=, **BuildOptions): build_image on a FakeEngine
    replaying it, in fake time."""

    def run(
        recording: str | Recording,
        *,
        pins: Path | None = None,
        progress: BuildProgress | None = None,
        engine: FakeEngine | None = None,
        **options_given: Any,
    ) -> tuple[FakeEngine, BuildRecord]:
        if isinstance(recording, str):
            recording = Recording.load(BUILD_STREAMS / f"{recording}.jsonl")
        project = find_project(REPO, pins or BUILD_STREAMS / "pins.toml")
        clock = FakeClock()
        engine = engine or FakeEngine()
        engine.builds.append(recording)
        engine.clock = clock
        if engine.built_layers is None:  # the distributions the recorded image's python listed, as files
            engine.built_layers = [image_root_files(recorded_distributions())]
        options = BuildOptions(
            **{
                "arch": "gfx942",
                "tag": FAKE_TAG,
                "network": "host",
                "record_path": tmp_path / "record.json",
                "log_path": tmp_path / "build.log",
                # The fake's images are data, not layers; normalisation runs in the docker tests.
                "normalize": False,
                **options_given,
            }
        )
        prepared = prepare_build(project, project.load("gfx942"), options)
        record = build_image(prepared, engine, progress=progress, clock=clock)
        return engine, record

    return run
