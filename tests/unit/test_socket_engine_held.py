"""The shipped importer's engine (SocketEngine) says which layer chains a node's engine holds: every
top-level image's layers and their prefixes on a graph-driver Docker, nothing on Podman or on the
containerd store (their loads do not find layers by chain); and where a load is written, for its room."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagebuild.engine.chain_ids import chain_ids
from imagebuild.importer.socket_engine import SocketEngine
from tests.unit.engine_support import EngineHandler, serving

LAYERS = {
    "sha256:" + "1" * 64: ["sha256:" + "a" * 64, "sha256:" + "b" * 64],  # the base
    "sha256:" + "2" * 64: ["sha256:" + "a" * 64, "sha256:" + "c" * 64],  # another image on the same first layer
}


class _Node(EngineHandler):
    # Set per test by the fixture (a subclass each): the engine's /info, /version components, requests.
    info: dict[str, Any]
    components: list[dict[str, str]]
    asked: list[str]

    def do_GET(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        self.asked.append(self.path)
        if path == "/info":
            body: Any = self.info
        elif path == "/version":
            body = {"Version": "x", "ApiVersion": "1.41", "Components": self.components}
        elif path == "/v1.41/libpod/info":  # Podman's own API, where it says its image copy directory
            body = {"store": {"graphRoot": "/var/lib/containers/storage", "imageCopyTmpDir": "/srv/copies"}}
        elif path == "/images/json":
            body = [{"Id": image_id} for image_id in LAYERS]
        elif path.startswith("/images/") and path.endswith("/json") and path[8:-5] in LAYERS:
            body = {"Id": path[8:-5], "RootFS": {"Type": "layers", "Layers": LAYERS[path[8:-5]]}}
        else:
            self.answer(404, {"message": f"no {path}"})
            return
        self.answer(200, body)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[type[_Node]]:
    handler = type("Node", (_Node,), {"asked": [], "info": {"Driver": "overlay2"}, "components": [{"Name": "Engine"}]})
    with serving(tmp_path / "docker.sock", handler):
        yield handler


def test_a_graph_driver_engine_holds_every_chain_of_its_top_level_images(node: type[_Node], tmp_path: Path) -> None:
    held = SocketEngine(f"unix://{tmp_path}/docker.sock").held_chains()
    assert held == frozenset(chain for layers in LAYERS.values() for chain in chain_ids(layers))
    assert "/images/json" in node.asked  # the top-level images: no ?all=1, intermediates are prefixes


def test_podman_and_the_containerd_store_hold_nothing_the_importer_may_leave_out(node: type[_Node], tmp_path: Path) -> None:
    node.components = [{"Name": "Podman Engine"}]
    assert SocketEngine(f"unix://{tmp_path}/docker.sock").held_chains() == frozenset()
    node.components = [{"Name": "Engine"}]
    node.info = {"Driver": "overlayfs", "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}
    assert SocketEngine(f"unix://{tmp_path}/docker.sock").held_chains() == frozenset()


def test_a_load_is_checked_where_each_engine_writes_it(node: type[_Node], tmp_path: Path) -> None:
    node.info = {"Driver": "overlay2", "DockerRootDir": "/var/lib/docker"}
    docker = SocketEngine(f"unix://{tmp_path}/docker.sock").load_disk()
    assert [(p.directory, p.copies) for p in docker.places] == [("/var/lib/docker", 2)]
    node.components = [{"Name": "Podman Engine"}]
    node.info = {"Driver": "overlay", "DockerRootDir": "/var/lib/containers/storage"}
    podman = SocketEngine(f"unix://{tmp_path}/docker.sock").load_disk()
    assert [(p.directory, p.copies) for p in podman.places] == [("/srv/copies", 3), ("/var/lib/containers/storage", 1)]
