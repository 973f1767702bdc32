"""Podman 4.3.1's Docker-compatible API (``podman system service``), from its recorded answers.

tests/data/podman/ holds what Debian bookworm's podman 4.3.1 answered: ``GET /info``,
``GET /version`` and a ``GET /images/{id}/get`` of the sample donor image;
and its ``POST /build`` stream of the sample build again, every step cached (build-cached.jsonl).
"""

from __future__ import annotations

import io
import json
import logging
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from imagebuild.build.core import BuildOptions, BuildRecord, build_request, prepare_build
from imagebuild.engine.docker import engine_store
from imagebuild.engine.interface import GRAPH_DRIVER, PODMAN, EngineStore, ImageInfo
from imagebuild.errors import BuildError
from imagebuild.normalize.core import _load_archive
from imagebuild.normalize.load_archive import OCI_LAYER
from imagebuild.project import find_project
from imagebuild.testing import FakeEngine, Recording
from tests.unit.imagetars import config, digest, saved
from tests.unit.normalize_support import BASE, built, normalize

Replay = Callable[..., tuple[FakeEngine, BuildRecord]]  # the replay fixture (tests/unit/conftest.py)
REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "podman"
PODMAN_4_3 = EngineStore(version="4.3.1", kind=PODMAN, driver="overlay", api_version="1.41")


def recorded(name: str) -> dict[str, object]:
    answer: dict[str, object] = json.loads((DATA / name).read_text())
    return answer


def test_podman_is_told_by_its_version_components() -> None:
    store = engine_store(recorded("info-4.3.1.json"), recorded("version-4.3.1.json"))
    assert store == PODMAN_4_3
    assert store.name == "Podman 4.3.1 (Docker API 1.41)"
    assert store.describe() == "Podman 4.3.1 (Docker API 1.41), containers/storage (overlay)"
    assert not store.ids_are_manifests  # its image ID is the config's digest


def test_docker_stays_docker() -> None:
    info = {"ServerVersion": "26.1.5+dfsg1", "Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]}
    version = {"ApiVersion": "1.45", "Components": [{"Name": "Engine", "Version": "26.1.5+dfsg1"}]}
    store = engine_store(info, version)
    assert (store.kind, store.describe()) == (GRAPH_DRIVER, "Docker 26.1.5+dfsg1, the graph-driver store (overlay2)")


def test_podman_loads_an_oci_layout_naming_the_base_layers_it_holds(tmp_path: Path) -> None:
    """Podman refuses a legacy archive without every layer ("Some layer tarfiles are missing in the
    tarball"); an OCI layout naming the base's layers by diffID, uncompressed, it loads from its own."""
    layers = BASE + built()
    result = normalize(saved(layers, config(layers)), tmp_path, layers)  # a legacy save, as podman's
    engine_id, chunks = _load_archive(result, PODMAN_4_3, "test image")
    assert engine_id == result.image_id
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
        blobs = {name.removeprefix("blobs/sha256/") for name in tar.getnames() if name.startswith("blobs/")}
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        manifest = json.load(tar.extractfile(f"blobs/sha256/{index['manifests'][0]['digest'][7:]}"))  # type: ignore[arg-type]
    assert manifest["config"]["digest"] == result.image_id
    assert manifest["layers"][: len(BASE)] == [
        {"mediaType": OCI_LAYER, "digest": digest(d), "size": len(d)} for d in BASE
    ]
    assert {digest(d)[7:] for d in BASE}.isdisjoint(blobs)  # not sent: podman has them
    assert {layer.diff_id[7:] for layer in result.layers} <= blobs


def test_buildahs_step_lines_map_onto_the_18_steps(replay: Replay) -> None:
    """Podman's compat /build, recorded: "[2/2] STEP k/50: ..." per stage and "--> Using cache <id>"."""
    _, record = replay(Recording.load(DATA / "build-cached.jsonl"))
    assert [t.number for t in record.steps] == list(range(1, 19))
    assert all(t.cached for t in record.steps)
    assert record.all_cached
    assert record.image_id == "sha256:a2d5fb400f216861f709e4abd9a83d45fe3392a89bb0992f8ae11a8cc11d51b6"


def asked_labels() -> dict[str, str]:
    """The labels a build of the recorded pins from this checkout asks for."""
    project = find_project(REPO, REPO / "tests" / "data" / "build_streams" / "pins.toml")
    labels, _ = build_request(prepare_build(project, project.load("gfx942"), BuildOptions(arch="gfx942")))
    return labels


@dataclass
class PodmanFake(FakeEngine):
    """Podman: its store, and the built image holding ``labels`` (as a cached LABEL step left them)."""

    labels: dict[str, str] = field(default_factory=dict)

    def store(self) -> EngineStore:
        return PODMAN_4_3

    def inspect_image(self, ref: str) -> ImageInfo:
        return replace(super().inspect_image(ref), labels=self.labels)


def test_a_build_on_podman_says_first_that_its_identity_is_podmans_own(
    replay: Replay, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="imagebuild"):
        replay(Recording.load(DATA / "build-cached.jsonl"), engine=PodmanFake(labels=asked_labels()))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith("imagebuild: warning: Podman 4.3.1 (Docker API 1.41) builds with buildah")
    assert "\n" not in warnings[0]


def test_a_build_on_docker_says_nothing_of_it(replay: Replay, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="imagebuild"):
        replay("cached")
    assert not [r for r in caplog.records if "buildah" in r.getMessage()]


def test_a_cached_label_step_with_stale_build_args_fails_the_build_untagged(replay: Replay) -> None:
    """Measured: after a commit, Podman 4.3.1 reused the LABEL step of the commit before."""
    stale = asked_labels() | {"org.opencontainers.image.revision": "e1c6ae68e849d4e57d354fd1f52a17e5674ce637-dirty"}
    engine = PodmanFake(labels=stale)
    with pytest.raises(BuildError) as failed:
        replay(Recording.load(DATA / "build-cached.jsonl"), engine=engine)
    message = str(failed.value)
    assert message.startswith("Podman 4.3.1 (Docker API 1.41) reused a cached step built with other build args: ")
    assert "org.opencontainers.image.revision='e1c6ae68e849d4e57d354fd1f52a17e5674ce637-dirty'" in message
    assert "build again with --no-cache" in message
    assert "\n" not in message
    assert engine.tags == {}
