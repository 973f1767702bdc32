"""export's archive read from the engine's layer store: every blob under its digest, checked as it streams."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from imagebuild.distribute.compression import Compression
from imagebuild.distribute.export import ExportOptions, export_image
from imagebuild.distribute.local_import import import_manifest
from imagebuild.distribute.stored_archive import StoredArchiveError, stored_archive
from imagebuild.engine.interface import StoredImage
from imagebuild.testing import FakeEngine
from tests.unit import imagetars as tars
from tests.unit.imagetars import BASE, EVERY_KIND

LAYERS = [*BASE, EVERY_KIND]
TAG = "imagebuild/kimi-k3:gfx942"


def members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}  # type: ignore[union-attr]


def test_the_archive_holds_the_config_and_every_layer_under_its_digest(tmp_path: Path) -> None:
    config = tars.config(LAYERS)
    image = tars.stored_image(LAYERS, config, tmp_path / "store")
    identity = "sha256:" + hashlib.sha256(json.dumps(config).encode()).hexdigest()
    out = io.BytesIO()
    written = stored_archive(image, identity, out)

    files = members(out.getvalue())
    assert written.config_digest == identity
    assert written.diff_ids == tuple(tars.digest(d) for d in LAYERS)
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.removeprefix("blobs/sha256/")
    [legacy] = json.loads(files["manifest.json"])
    assert legacy["RepoTags"] is None
    assert [files[path] for path in legacy["Layers"]] == LAYERS  # byte for byte, as docker save gives them
    index = json.loads(files["index.json"])
    manifest = json.loads(files[f"blobs/sha256/{index['manifests'][0]['digest'].removeprefix('sha256:')}"])
    assert manifest["config"]["digest"] == identity
    assert [layer["digest"] for layer in manifest["layers"]] == list(written.diff_ids)


def test_a_file_changed_in_the_store_is_refused(tmp_path: Path) -> None:
    config = tars.config(LAYERS)
    image = tars.stored_image(LAYERS, config, tmp_path / "store")
    big = image.layers[-1].files / "app" / "big.bin"
    big.write_bytes(bytes(reversed(big.read_bytes())))  # same size, other bytes
    identity = "sha256:" + hashlib.sha256(json.dumps(config).encode()).hexdigest()
    with pytest.raises(StoredArchiveError, match=r"rebuilt from .* is \d+ bytes with sha256 .*, not the layer"):
        stored_archive(image, identity, io.BytesIO())


def test_another_image_s_config_is_refused(tmp_path: Path) -> None:
    image = tars.stored_image(LAYERS, tars.config(LAYERS), tmp_path / "store")
    with pytest.raises(StoredArchiveError, match="not those of sha256:0000"):
        stored_archive(image, "sha256:" + "0" * 64, io.BytesIO())


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


def test_export_reads_the_layer_store_and_the_archive_imports(tmp_path: Path) -> None:
    engine, image_id = engine_with_a_store(tmp_path)
    engine.refuse_save = "save must not be asked"
    lines: list[str] = []
    result = export_image(
        ExportOptions(image=TAG, output=tmp_path / "out", compression=Compression.NONE), engine, report=lines.append
    )
    assert any("read from the engine's layer store" in line for line in lines)
    node = FakeEngine()
    assert import_manifest(result.manifest_path, node, report=lambda _: None).image_id == image_id
    assert node.tags == {TAG: image_id}


def test_a_store_that_does_not_give_the_image_falls_back_to_save(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine, image_id = engine_with_a_store(tmp_path)
    (engine.stored[image_id].layers[0].files / "payload").write_bytes(b"x" * (3 << 20))  # same size, other bytes
    lines: list[str] = []
    result = export_image(
        ExportOptions(image=TAG, output=tmp_path / "out", compression=Compression.NONE), engine, report=lines.append
    )
    assert "from the engine's layer store failed" in caplog.text
    assert any("read from docker save" in line for line in lines)
    assert result.manifest.image_id == image_id
