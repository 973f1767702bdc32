"""An image the containerd store holds but did not unpack is never taken as imported.

Docker 27 and later answer a load they could not unpack (a full disk) with a line of output, not an
error: the request succeeds and `docker load` exits 0, the image kept with its content, not unpacked
(measured on Docker 28.5.2). From API 1.48 on, `GET /images/{id}/json?manifests=1` says of each
manifest whether its content is all there (`Available`) and how much of it is unpacked. The answers
below are Docker 28.5.2's, cut to the fields read.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagebuild.distribute.export import ExportOptions, export_image
from imagebuild.distribute.local_import import import_manifest
from imagebuild.errors import EngineError, ImageBuildError
from imagebuild.importer import load_room
from imagebuild.importer.docker_api import (
    ABSENT,
    CONTENT_MISSING,
    HELD,
    NOT_UNPACKED,
    WHOLE,
    image_state,
    read_load,
)
from imagebuild.importer.failures import EngineUnavailable
from imagebuild.importer.manifest import read_manifest
from imagebuild.importer.socket_engine import SocketEngine
from imagebuild.testing import FakeEngine
from tests.unit.engine_support import EngineHandler, serving

TAG = "imagebuild/kimi-k3:gfx942"
IMAGE = "sha256:" + "38" * 32
NO_SPACE = (
    'apply layer error for "moby-dangling@sha256:3800c1df": failed to extract layer sha256:464fff8e: '
    "write /var/lib/docker/containerd/daemon/tmpmounts/containerd-mount1/usr/lib/git-core/scalar: no space left on device"
)


def _summary(*, available: Any = True, unpacked: Any = 1124581376, image_id: str = IMAGE, kind: str = "image") -> dict[str, Any]:
    return {
        "ID": image_id,
        "Available": available,
        "Kind": kind,
        "ImageData": {"Platform": {"architecture": "amd64", "os": "linux"}, "Size": {"Unpacked": unpacked}},
    }


@pytest.mark.parametrize(
    ("inspected", "state"),
    [
        ({"Id": IMAGE, "Manifests": [_summary()]}, WHOLE),
        ({"Id": IMAGE, "Manifests": [_summary(unpacked=0)]}, NOT_UNPACKED),
        ({"Id": IMAGE, "Manifests": [_summary(available=False, unpacked=0)]}, CONTENT_MISSING),
        ({"Id": IMAGE}, HELD),  # Docker 26 (API 1.45), graph drivers, Podman: not said
        ({"Id": IMAGE, "Manifests": None}, HELD),
        ({"Id": IMAGE, "Manifests": [_summary(image_id="sha256:" + "ab" * 32)]}, HELD),  # an index's platform manifest
        ({"Id": IMAGE, "Manifests": [_summary(kind="attestation")]}, HELD),
        ({"Id": IMAGE, "Manifests": [_summary(unpacked=False)]}, HELD),  # not a size: not read as 0
        ({"Id": IMAGE, "Manifests": [_summary(available="yes")]}, HELD),
        ({"Id": IMAGE, "Manifests": [{"ID": IMAGE, "Kind": "image", "Available": True, "ImageData": []}]}, HELD),
    ],
)
def test_what_the_inspect_says_of_the_image_s_own_manifest(inspected: dict[str, Any], state: str) -> None:
    assert image_state(inspected, IMAGE) == state


def test_an_unpack_the_engine_reports_as_output_is_the_load_s_failure() -> None:
    messages = [
        {"stream": f"Loaded image ID: {IMAGE}\n"},
        {"stream": f"Error unpacking image {IMAGE}: {NO_SPACE}\n"},
    ]
    assert read_load(messages, lambda name: name) == ([IMAGE], f"Error unpacking image {IMAGE}: {NO_SPACE}")
    refused = [{"errorDetail": {"message": "unexpected EOF"}, "error": "unexpected EOF"}]
    assert read_load(refused, lambda name: name) == ([], "unexpected EOF")
    named = [{"stream": "Loaded image: other:1\n"}]
    assert read_load(named, lambda name: {"other:1": IMAGE}[name]) == ([IMAGE], None)


def _export(tmp_path: Path) -> tuple[Path, str]:
    source = FakeEngine()
    source.add_saved_image(TAG, labels={"io.imagebuild.arch": "gfx942"})
    manifest = export_image(ExportOptions(image=TAG, output=tmp_path / "out"), source, report=lambda _: None).manifest_path
    return manifest, str(json.loads(manifest.read_text())["manifest_digest"])


def test_a_load_whose_unpack_fails_in_a_line_of_output_fails_and_leaves_nothing(tmp_path: Path) -> None:
    manifest, digest = _export(tmp_path)
    node = FakeEngine(manifest_ids=True, says_unpacked=True, fail_unpack=NO_SPACE)
    said: list[str] = []
    with pytest.raises(EngineError, match=f"Error unpacking image {digest}: .*no space left on device"):
        import_manifest(manifest, node, report=said.append)
    assert f"the engine kept {digest} of the failed load: removed, so the next import loads it again" in said
    assert node.images == []
    assert node.tags == {}
    node.fail_unpack = None  # room made
    assert not import_manifest(manifest, node, report=lambda _: None).already_present
    assert node.image_state(digest) == WHOLE


def test_an_image_held_not_unpacked_is_loaded_again_which_unpacks_it(tmp_path: Path) -> None:
    """What a plain `docker load` on a full disk leaves: listed, its content all there, not unpacked."""
    manifest, digest = _export(tmp_path)
    archive = manifest.parent / str(json.loads(manifest.read_text())["archive"])
    node = FakeEngine(manifest_ids=True, says_unpacked=True, fail_unpack=NO_SPACE)
    with pytest.raises(EngineError, match="Error unpacking image"):
        node.load([archive.read_bytes()])
    assert digest in node.image_ids()
    assert node.image_state(digest) == NOT_UNPACKED
    node.fail_unpack = None
    said: list[str] = []
    result = import_manifest(manifest, node, report=said.append)
    assert not result.already_present
    assert f"the engine holds {digest} not unpacked (an unpack that failed): loading it again, which unpacks it" in said
    assert node.image_state(digest) == WHOLE
    assert node.tags == {TAG: digest}
    assert import_manifest(manifest, node, report=lambda _: None).already_present


def test_loaded_again_it_needs_room_to_unpack_it_not_to_store_its_content_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The content store holds every blob already: a load passes each through its ingest directory and
    drops it before it unpacks any, so the disk needs the layers once, unpacked."""
    manifest, digest = _export(tmp_path)
    sent = sum(layer.size for layer in read_manifest(manifest).layers)
    node = FakeEngine(manifest_ids=True, says_unpacked=True, data_root=str(tmp_path))
    archive = manifest.parent / str(json.loads(manifest.read_text())["archive"])
    node.fail_unpack = NO_SPACE
    with pytest.raises(EngineError):
        node.load([archive.read_bytes()])
    node.fail_unpack = None
    monkeypatch.setattr(load_room, "free_bytes", lambda _path: sent - 1)
    with pytest.raises(ImageBuildError) as raised:
        import_manifest(manifest, node, report=lambda _: None)
    needs = f"needs {sent / 1e9:.2f} GB there ({sent / 1e9:.2f} GB of layers, once in {tmp_path}: them unpacked (the content store holds them already))"
    assert needs in str(raised.value)
    assert node.loads == 1  # the plain load's alone
    monkeypatch.setattr(load_room, "free_bytes", lambda _path: sent)
    assert not import_manifest(manifest, node, report=lambda _: None).already_present
    assert node.image_state(digest) == WHOLE
    # An image not held needs its layers twice there: its content stored, and unpacked.
    node.remove_image(digest)
    with pytest.raises(ImageBuildError, match=f"twice in {tmp_path}: the engine's content store, and them unpacked"):
        import_manifest(manifest, node, report=lambda _: None)


def test_an_unpack_failure_said_in_other_words_is_found_by_asking_the_engine(tmp_path: Path) -> None:
    """The words are the engine's to change: after a load the importer asks whether the image is unpacked."""

    class QuietNode(FakeEngine):
        def load(self, chunks: Any) -> list[str]:
            loaded = super().load(chunks)
            self.not_unpacked.update(loaded)  # and no line said so
            return loaded

    manifest, digest = _export(tmp_path)
    node = QuietNode(manifest_ids=True, says_unpacked=True)
    said: list[str] = []
    with pytest.raises(EngineError, match=f"loaded {digest} but did not unpack it; see its log"):
        import_manifest(manifest, node, report=said.append)
    assert f"the engine kept {digest} of the failed load: removed, so the next import loads it again" in said
    assert node.images == []


class _Node(EngineHandler):
    asked: list[str]
    inspected: dict[str, Any] | None  # None: no such image

    def do_GET(self) -> None:
        self.asked.append(self.path)
        path = urllib.parse.urlsplit(self.path).path
        if path == "/info":
            self.answer(200, {"Driver": "overlayfs", "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]})
        elif path == f"/images/{IMAGE}/json" and self.inspected is not None:
            self.answer(200, self.inspected)
        else:
            self.answer(404, {"message": f"No such image: {path}"})

    def do_POST(self) -> None:
        self.asked.append(self.path)
        length = self.headers.get("Content-Length")
        if length is not None:
            self.rfile.read(int(length))
        else:  # chunked
            while size := int(self.rfile.readline().strip() or b"0", 16):
                self.rfile.read(size + 2)
            self.rfile.readline()
        lines = [{"stream": f"Loaded image ID: {IMAGE}\n"}, {"stream": f"Error unpacking image {IMAGE}: {NO_SPACE}\n"}]
        self.answer(200, raw=b"".join(json.dumps(line).encode() + b"\r\n" for line in lines))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[type[_Node]]:
    handler = type("Node", (_Node,), {"asked": [], "inspected": None})
    with serving(tmp_path / "docker.sock", handler):
        yield handler


def test_the_shipped_importer_asks_the_engine_s_own_api_version_for_the_manifests(node: type[_Node], tmp_path: Path) -> None:
    engine = SocketEngine(f"unix://{tmp_path}/docker.sock")
    assert engine.image_state(IMAGE) == ABSENT
    node.inspected = {"Id": IMAGE, "Manifests": [_summary(unpacked=0)]}
    assert engine.image_state(IMAGE) == NOT_UNPACKED
    assert engine.has_image(IMAGE)
    assert f"/images/{IMAGE}/json?manifests=1" in node.asked  # unversioned: the engine's own version
    with pytest.raises(EngineUnavailable, match=f"refused to load the archive: Error unpacking image {IMAGE}: .*no space left"):
        engine.load([b"x" * 10])
