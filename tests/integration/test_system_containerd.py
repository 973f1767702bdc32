"""Docker CE's layout: dockerd on the machine's containerd, whose root is not under dockerd's data root.

Docker CE's and Debian's packages run containerd as a service of its own, and with the containerd
image store (Docker 29's default) the images are in that containerd's content store. Nothing tells
imagebuild where that is (imagebuild.engine.containerd_roots finds it from the running containerd):
the identity must still be known, and normalisation must still read the store, not `docker save`;
the import's room check must ask that containerd's root.
"""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.interface import BuildRequest
from imagebuild.importer.socket_engine import SocketEngine
from imagebuild.normalize.core import normalize_image
from imagebuild.normalize.model import FROM_CONTENT, FROM_SAVE, LayerPlan
from imagebuild.util.streams import open_stream
from sampleworld.engines import NodeEngine
from sampleworld.layout import StateDir
from sampleworld.pytest_plugin import sample_world_state_dir
from sampleworld.system_containerd import layout
from tests.integration.engine_support import engine_at

pytestmark = pytest.mark.docker

EPOCH = 1767232800
# Two layers that differ between two builds only in their times: what normalisation exists for.
DOCKERFILE = "FROM scratch\nCOPY a /a\nCOPY b /d/b\n"


@pytest.fixture
def engine(system_containerd_engine: NodeEngine) -> Iterator[DockerEngine]:
    with engine_at(system_containerd_engine.host) as client:
        yield client


def test_the_identity_and_the_layers_come_from_the_system_containerd_s_content_store(
    engine: DockerEngine, tmp_path: Path
) -> None:
    containerd, node = layout(StateDir(sample_world_state_dir().resolve()))
    assert engine.store().ids_are_manifests
    assert not (node.data_root / "containerd").exists()  # nothing of the store under the data root
    built = _build(engine)
    made: list[str] = []
    try:
        info = engine.inspect_image(built)
        assert (info.identity_unknown, info.config_digest) == ("", _saved_config(engine, built))
        stored = engine.stored_image(built)
        assert stored.unavailable == ""
        assert stored.blobs is not None
        assert stored.blobs.is_relative_to(containerd.content_root)
        plan = LayerPlan(layers=info.layers, base_layers=0, base_history=0, epochs=(EPOCH, EPOCH), created=EPOCH)
        from_content = normalize_image(engine, built, plan, tmp_path, save_fallback=False)
        made.append(from_content.engine_id)
        from_save = normalize_image(engine, built, plan, tmp_path, from_store=False)
        made.append(from_save.engine_id)
        assert (from_content.read_from, from_save.read_from) == (FROM_CONTENT, FROM_SAVE)
        assert from_content.image_id == from_save.image_id
        # The normalised image the engine holds is known by the same identity.
        assert engine.inspect_image(from_content.engine_id).identity == from_content.image_id
    finally:
        for image_id in (*made, built):
            with contextlib.suppress(Exception):
                engine.remove_image(image_id)


def test_the_import_s_room_check_asks_the_root_of_the_containerd_the_dockerd_is_given(
    system_containerd_engine: NodeEngine,
) -> None:
    """Its daemon.json names the containerd's socket; the main engine's containerd, whose root is on
    the same disk, runs first: the check asks the root of the one listening there."""
    containerd, _ = layout(StateDir(sample_world_state_dir().resolve()))
    disk = SocketEngine(system_containerd_engine.host).load_disk()
    assert [(place.directory, place.copies) for place in disk.places] == [(str(containerd.content_root), 2)]


def _build(engine: DockerEngine) -> str:
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", DOCKERFILE.encode()), ("a", b"a\n"), ("b", b"b" * 70_000)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    events = list(engine.build(BuildRequest(context=context.getvalue(), no_cache=True)))
    errors = [e.error for e in events if e.error]
    assert not errors, errors
    image_ids = [e.image_id for e in events if e.image_id]
    assert image_ids, [e.text for e in events]
    return str(image_ids[-1])


def _saved_config(engine: DockerEngine, image_id: str) -> str:
    """The config digest `docker save`'s manifest.json names: the engine's own word, read another way."""
    with tarfile.open(fileobj=open_stream(engine.save(image_id)), mode="r|") as tar:
        for member in tar:
            if member.name == "manifest.json":
                extracted = tar.extractfile(member)
                assert extracted is not None
                manifest = json.loads(extracted.read())
                return "sha256:" + Path(manifest[0]["Config"]).name
    msg = "docker save gave no manifest.json"
    raise AssertionError(msg)
