"""One image identity on every Docker engine of the matrix: 20.10 and 26 (graph driver), 26 (containerd store).

The sample image is built once per engine (the main engine's is the session's shared build); the
identity is the normalised config's digest, which each build record, iidfile and tag must agree on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from sampleworld.engine_matrix import MatrixEngine

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
# Per checkout: several checkouts share the main engine, and a shared tag would be overwritten.
CHECKOUT = hashlib.sha256(str(REPO).encode()).hexdigest()[:8]
TAG = f"imagebuild-test/engines:gfx942-{CHECKOUT}"


@contextlib.contextmanager
def docker_host(engine: MatrixEngine) -> Iterator[DockerEngine]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOCKER_HOST", engine.docker_host)
        client = DockerEngine.from_env()
        try:
            yield client
        finally:
            client.close()


def build_on(engine: MatrixEngine, pins: Path, where: Path) -> dict[str, object]:
    record, iidfile = where / f"{engine.name}.build.json", where / f"{engine.name}.iid"
    argv = ["build", "--pins", str(pins), "--network", "host", "--tag", TAG]
    with docker_host(engine), contextlib.chdir(REPO):
        assert main([*argv, "--record", str(record), "--iidfile", str(iidfile)]) == 0
    result: dict[str, object] = json.loads(record.read_text())
    assert iidfile.read_text() == result["image_id"]  # --iidfile holds the identity, not the engine's ID
    return result


@pytest.fixture(scope="module")
def builds(
    docker_engine_matrix: list[MatrixEngine],
    locked_pins: Path,
    sample_image: dict[str, object],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, dict[str, object]]:
    """Each engine's build record; the main engine's is the session's shared sample image."""
    where = tmp_path_factory.mktemp("engines")
    records = {"main": sample_image}
    for engine in docker_engine_matrix:
        if engine.name != "main":
            records[engine.name] = build_on(engine, locked_pins, where)
    return records


def engine_named(matrix: list[MatrixEngine], name: str) -> MatrixEngine:
    return next(e for e in matrix if e.name == name)


def test_docker_20_and_26_give_one_identity(builds: dict[str, dict[str, object]]) -> None:
    assert builds["docker26-overlay2"]["image_id"] == builds["main"]["image_id"]
    for name in ("main", "docker26-overlay2"):  # the fast path: no docker save on a local overlay2 engine
        normalization = builds[name]["normalization"]
        assert isinstance(normalization, dict)
        assert normalization["read_from"] == "layer store"
        assert normalization["engine_id"] == builds[name]["image_id"]


def test_the_containerd_store_knows_the_image_by_the_manifest_imagebuild_loaded(
    builds: dict[str, dict[str, object]], docker_engine_matrix: list[MatrixEngine]
) -> None:
    record = builds["docker26-containerd"]
    normalization = record["normalization"]
    assert isinstance(normalization, dict)
    assert "containerd image store" in normalization["engine"]
    assert normalization["engine_id"] != record["image_id"]  # a manifest digest there, not the config's
    with docker_host(engine_named(docker_engine_matrix, "docker26-containerd")) as engine:
        assert engine.inspect_image(TAG).id == normalization["engine_id"]  # the tag names what was loaded
        assert engine.inspect_image(TAG).layers == engine.inspect_image(str(normalization["engine_id"])).layers


def test_a_cached_rebuild_on_the_containerd_store_gives_the_same_identity(
    builds: dict[str, dict[str, object]],
    docker_engine_matrix: list[MatrixEngine],
    locked_pins: Path,
    tmp_path: Path,
) -> None:
    again = build_on(engine_named(docker_engine_matrix, "docker26-containerd"), locked_pins, tmp_path)
    assert again["image_id"] == builds["docker26-containerd"]["image_id"]


def test_the_containerd_store_gives_the_graph_driver_identity(builds: dict[str, dict[str, object]]) -> None:
    assert builds["docker26-containerd"]["image_id"] == builds["main"]["image_id"]


@pytest.mark.parametrize("name", ["docker26-overlay2", "docker26-containerd"])
def test_verify_passes_on_the_engine_that_built_it(
    builds: dict[str, dict[str, object]], docker_engine_matrix: list[MatrixEngine], locked_pins: Path, name: str
) -> None:
    assert builds[name]["image_id"]
    with docker_host(engine_named(docker_engine_matrix, name)), contextlib.chdir(REPO):
        assert main(["verify", TAG, "--pins", str(locked_pins)]) == 0


def test_diff_finds_the_containerd_image_identical_to_the_graph_drivers(
    builds: dict[str, dict[str, object]],
    docker_engine_matrix: list[MatrixEngine],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Entry by entry, mtimes included: the containerd store's image, saved, against the main engine's."""
    saved = tmp_path / "containerd.tar"
    with docker_host(engine_named(docker_engine_matrix, "docker26-containerd")) as engine, saved.open("wb") as out:
        for chunk in engine.save(TAG):
            out.write(chunk)
    capsys.readouterr()
    assert main(["diff", str(builds["main"]["image_id"]), str(saved), "--mtime", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["identical"] is True
