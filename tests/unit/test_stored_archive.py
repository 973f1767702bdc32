"""export's archive read from the engine's store (overlay2's layer store, the containerd store's content
store): every blob under its digest, checked as it streams."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from pathlib import Path

import pytest

from imagebuild.distribute.compression import Compression
from imagebuild.distribute.export import ExportOptions, ExportResult, export_image
from imagebuild.distribute.local_import import import_manifest
from imagebuild.distribute.stored_archive import StoredArchiveError, stored_archive
from imagebuild.engine.containerd_store import CONTENT, stored_image
from imagebuild.testing import FakeEngine
from tests.unit import imagetars as tars
from tests.unit.imagetars import EVERY_KIND
from tests.unit.store_engines import LAYERS, TAG, containerd_engine, engine_with_a_store, members


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


def exported(engine: FakeEngine, tmp_path: Path) -> tuple[ExportResult, list[str]]:
    """``TAG`` exported uncompressed to ``tmp_path / "out"``, and the lines export reported."""
    lines: list[str] = []
    result = export_image(
        ExportOptions(image=TAG, output=tmp_path / "out", compression=Compression.NONE), engine, report=lines.append
    )
    return result, lines


def test_a_store_that_does_not_give_the_image_falls_back_to_save(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine, image_id = engine_with_a_store(tmp_path)
    (engine.stored[image_id].layers[0].files / "payload").write_bytes(b"x" * (3 << 20))  # same size, other bytes
    result, lines = exported(engine, tmp_path)
    assert "from the engine's layer store failed" in caplog.text
    assert any("read from docker save" in line for line in lines)
    assert result.manifest.image_id == image_id


def test_from_the_content_store_every_blob_is_copied_as_stored_under_the_engine_s_manifest(tmp_path: Path) -> None:
    config = tars.config(LAYERS)
    image_id = tars.content_store_image(LAYERS, config, tmp_path, plain=(2,))  # a pulled base, a loaded layer
    out = io.BytesIO()
    written = stored_archive(stored_image(image_id, data_root=str(tmp_path)), image_id, out)

    files = members(out.getvalue())
    blobs = tmp_path / CONTENT
    assert (written.config_digest, written.manifest_digest) == (tars.digest(json.dumps(config).encode()), image_id)
    assert written.diff_ids == tuple(tars.digest(d) for d in LAYERS)
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert data == (blobs / name.removeprefix("blobs/sha256/")).read_bytes()  # as the store holds it
    index = json.loads(files["index.json"])
    assert index["manifests"][0]["digest"] == image_id  # the engine's own manifest: what the store names it by
    [legacy] = json.loads(files["manifest.json"])
    assert [files[path] for path in legacy["Layers"]][2] == EVERY_KIND
    assert gzip.decompress(files[legacy["Layers"][0]]) == LAYERS[0]
    assert written.layer_bytes == sum(len(files[path]) for path in legacy["Layers"])


@pytest.mark.parametrize("damage", ["a byte", "another manifest"])
def test_a_content_store_that_is_not_the_image_is_refused(tmp_path: Path, damage: str) -> None:
    image_id = tars.content_store_image(LAYERS, tars.config(LAYERS), tmp_path)
    image = stored_image(image_id, data_root=str(tmp_path))
    if damage == "a byte":
        blob = image.layers[1].blob  # type: ignore[union-attr]
        data = bytearray(blob.read_bytes())
        data[-10] ^= 1
        blob.write_bytes(bytes(data))
        with pytest.raises(StoredArchiveError, match=r"read from .* is \d+ bytes with sha256 .*, not the layer"):
            stored_archive(image, image_id, io.BytesIO())
    else:
        with pytest.raises(StoredArchiveError, match="not those of sha256:0000"):
            stored_archive(image, "sha256:" + "0" * 64, io.BytesIO())


@pytest.mark.parametrize("store", ["layer", "content"])
def test_export_reads_the_engine_s_store_and_the_archive_imports_on_either_store(tmp_path: Path, store: str) -> None:
    engine, image_id = engine_with_a_store(tmp_path) if store == "layer" else containerd_engine(tmp_path)
    engine.refuse_save = "save must not be asked"
    result, lines = exported(engine, tmp_path)
    assert any(f"read from the engine's {store} store" in line for line in lines)
    identity = engine.inspect_image(image_id).identity
    if store == "content":  # the engine's own manifest, so that store names the image as before
        assert result.manifest.manifest_digest == image_id
    for node in (FakeEngine(), FakeEngine(manifest_ids=True)):
        imported = import_manifest(result.manifest_path, node, report=lambda _: None)
        assert imported.image_id == identity
        assert node.tags == {TAG: result.manifest.manifest_digest if node.manifest_ids else identity}


def test_a_damaged_content_store_falls_back_to_save(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    engine, image_id = containerd_engine(tmp_path)
    blob = engine.stored[image_id].layers[2].blob  # type: ignore[union-attr]
    blob.write_bytes(bytes(blob.stat().st_size))  # same size, other bytes
    _, lines = exported(engine, tmp_path)
    assert "from the engine's content store failed" in caplog.text
    assert any("read from docker save" in line for line in lines)
