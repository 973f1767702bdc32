"""Podman 4.3.1's Docker-compatible API (``podman system service``), from its recorded answers.

tests/data/podman/ holds what Debian bookworm's podman 4.3.1 answered: ``GET /info``,
``GET /version`` and a ``GET /images/{id}/get`` of the sample donor image.
"""

from __future__ import annotations

import json
from pathlib import Path

from imagebuild.engine.docker import engine_store
from imagebuild.engine.interface import GRAPH_DRIVER, PODMAN, EngineStore

DATA = Path(__file__).parents[1] / "data" / "podman"
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
