"""Fake engines holding an image in a store this process reads (overlay2's layer store, the containerd
store's content store) as well as in their save: for the export tests that read either."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path

from imagebuild.engine.containerd_store import stored_image
from imagebuild.engine.interface import StoredImage
from imagebuild.testing import FakeEngine, image_info
from tests.unit import imagetars as tars
from tests.unit.imagetars import BASE, EVERY_KIND

LAYERS = [*BASE, EVERY_KIND]
TAG = "imagebuild/kimi-k3:gfx942"


def members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}  # type: ignore[union-attr]


def engine_with_a_store(tmp_path: Path) -> tuple[FakeEngine, str]:
    """A fake engine holding an image both as `save` streams it and in a layer store."""
    engine = FakeEngine()
    image_id = engine.add_saved_image(TAG)
    saved = members(engine.saved[image_id])
    layer = next(data for name, data in saved.items() if name.endswith("/layer.tar"))
    config = tmp_path / "config"
    config.write_bytes(saved[f"{image_id[7:]}.json"])
    engine.stored[image_id] = StoredImage(config=config, layers=(tars.stored_layer(layer, tmp_path / "layer"),))
    return engine, image_id


def containerd_engine(tmp_path: Path) -> tuple[FakeEngine, str]:
    """A fake containerd-store engine holding an image in its content store (and able to save it)."""
    engine = FakeEngine(manifest_ids=True)
    image_id = tars.content_store_image(LAYERS, tars.config(LAYERS), tmp_path / "root")
    engine.saved[image_id] = tars.content_store_saved(tmp_path / "root", image_id)
    identity = tars.digest(json.dumps(tars.config(LAYERS)).encode())
    engine.images.append(replace(image_info(image_id, tags=[TAG]), config_digest=identity))
    engine.tags[TAG] = image_id
    engine.stored[image_id] = stored_image(image_id, data_root=str(tmp_path / "root"))
    return engine, image_id
