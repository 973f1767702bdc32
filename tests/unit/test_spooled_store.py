"""--format oci and squashfs read the image from the engine's store where they can (overlay2's layer
store, the containerd store's content store), as the docker archive does: the same layers, checked
against their diffIDs, so the same archive bytes as from `docker save`, without the save; from
overlay2's layer store without a spool either."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest

from imagebuild.distribute import export
from imagebuild.distribute.compression import Compression
from imagebuild.distribute.export import ExportOptions, export_image
from imagebuild.distribute.formats import ExportFormat
from imagebuild.distribute.rootfs import flatten_layers
from imagebuild.distribute.spooled_image import StreamedLayer, spool_stored_image, stream_stored_image
from imagebuild.distribute.stored_archive import StoredArchiveError
from imagebuild.engine.containerd_store import stored_image
from imagebuild.engine.interface import StoredImage
from imagebuild.testing import FakeEngine
from tests.prerequisites import skip_or_fail
from tests.unit import imagetars as tars
from tests.unit.store_engines import LAYERS, TAG, containerd_engine, engine_with_a_store


def image_in(store: str, tmp_path: Path) -> tuple[StoredImage, str]:
    """The test image in a layer store, or in a content store with gzip blobs (built or pulled) and an
    uncompressed one (loaded by imagebuild); and the ID the engine knows it by."""
    config = tars.config(LAYERS)
    if store == "layer":
        return tars.stored_image(LAYERS, config, tmp_path / "store"), tars.digest(json.dumps(config).encode())
    image_id = tars.content_store_image(LAYERS, config, tmp_path / "root", plain=(2,))
    return stored_image(image_id, data_root=str(tmp_path / "root")), image_id


@pytest.mark.parametrize("store", ["layer", "content"])
def test_every_layer_is_spooled_as_its_tar_and_the_config_as_stored(tmp_path: Path, store: str) -> None:
    config = tars.config(LAYERS)
    image, image_id = image_in(store, tmp_path)
    spool = tmp_path / "spool"
    spool.mkdir()
    read: list[int] = []
    spooled = spool_stored_image(image, image_id, spool, progress=read.append)
    assert spooled.identity == tars.digest(json.dumps(config).encode())
    assert [layer.path.read_bytes() for layer in spooled.layers] == LAYERS
    assert [layer.diff_id for layer in spooled.layers] == [tars.digest(d) for d in LAYERS]
    assert sum(read) == sum(len(d) for d in LAYERS)


@pytest.mark.parametrize("store", ["layer", "content"])
def test_a_layer_that_is_not_its_diff_id_is_refused(tmp_path: Path, store: str) -> None:
    image, image_id = image_in(store, tmp_path)
    if store == "layer":
        big = image.layers[-1].files / "app" / "big.bin"
        big.write_bytes(bytes(reversed(big.read_bytes())))  # same size, other bytes
    else:
        blob = image.layers[2].blob  # type: ignore[union-attr]
        data = bytearray(blob.read_bytes())
        data[600] ^= 1
        blob.write_bytes(bytes(data))
    spool = tmp_path / "spool"
    spool.mkdir()
    with pytest.raises(StoredArchiveError, match=r"layer sha256:\w+ (rebuilt|read) from .* is sha256:\w+, not the layer"):
        spool_stored_image(image, image_id, spool)
    with pytest.raises(StoredArchiveError, match="not those of sha256:0000"):
        spool_stored_image(image, "sha256:" + "0" * 64, spool)


def oci_export(engine: FakeEngine, out: Path) -> tuple[str, list[str]]:
    """``TAG`` exported as an OCI layout archive: its sha256 (from the manifest export wrote), the lines."""
    lines: list[str] = []
    result = export_image(
        ExportOptions(image=TAG, output=out, compression=Compression.NONE, export_format=ExportFormat.OCI),
        engine,
        report=lines.append,
    )
    archive = out / result.manifest.archive
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == result.manifest.sha256
    return result.manifest.sha256, lines


@pytest.mark.parametrize("store", ["layer", "content"])
def test_an_oci_export_from_the_store_is_the_one_from_docker_save_without_the_save(tmp_path: Path, store: str) -> None:
    engine, image_id = engine_with_a_store(tmp_path) if store == "layer" else containerd_engine(tmp_path)
    engine.refuse_save = "save must not be asked"
    from_store, lines = oci_export(engine, tmp_path / "from-store")
    assert any(f"read from the engine's {store} store" in line for line in lines)
    engine.refuse_save = None
    del engine.stored[image_id]  # a store this process cannot read: the save it is
    from_save, lines = oci_export(engine, tmp_path / "from-save")
    assert any("read from docker save" in line for line in lines)
    assert from_store == from_save


def test_a_damaged_store_falls_back_to_the_save_before_anything_is_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine, image_id = containerd_engine(tmp_path)
    blob = engine.stored[image_id].layers[2].blob  # type: ignore[union-attr]
    blob.write_bytes(bytes(blob.stat().st_size))  # same size, other bytes
    _, lines = oci_export(engine, tmp_path / "out")
    assert "from the engine's content store failed" in caplog.text
    assert any("read from docker save" in line for line in lines)
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no spool or partial file left


def test_an_oci_export_from_the_layer_store_spools_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, _ = engine_with_a_store(tmp_path)
    engine.refuse_save = "save must not be asked"

    def no_spool(*args: object, **kwargs: object) -> None:
        msg = "an overlay2 layer was spooled"
        raise AssertionError(msg)

    monkeypatch.setattr(export, "spool_stored_image", no_spool)
    _, lines = oci_export(engine, tmp_path / "out")
    assert any("layers read from the layer store as they are written" in line for line in lines), lines
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_a_damaged_layer_store_fails_the_streamed_layout_and_the_save_writes_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine, image_id = engine_with_a_store(tmp_path)
    expected, _ = oci_export(engine, tmp_path / "first")
    payload = engine.stored[image_id].layers[-1].files / "payload"  # type: ignore[union-attr]
    payload.write_bytes(bytes(reversed(payload.read_bytes())))  # same size, other bytes: found once written
    written, lines = oci_export(engine, tmp_path / "out")
    assert "from the engine's layer store failed" in caplog.text
    assert "not the layer" in caplog.text
    assert any("read from docker save" in line for line in lines)
    assert written == expected  # the save's layers are the image's
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no partial file left


def streamed_layers(tmp_path: Path) -> list[StreamedLayer]:
    image, image_id = image_in("layer", tmp_path)
    streamed = stream_stored_image(image, image_id)
    assert streamed is not None
    return list(streamed.layers)


def test_a_rootfs_from_the_layer_store_is_the_one_from_the_spooled_tars(tmp_path: Path) -> None:
    spooled = []
    for number, data in enumerate(LAYERS):
        spooled.append(tmp_path / f"layer-{number}.tar")
        spooled[-1].write_bytes(data)
    from_tars, from_store = io.BytesIO(), io.BytesIO()
    extra = {"etc/rc": b"exec \"$@\"\n"}
    assert flatten_layers(spooled, from_tars, extra=extra) == flatten_layers(
        streamed_layers(tmp_path), from_store, extra=extra
    )
    assert from_store.getvalue() == from_tars.getvalue()
    assert b"latin-1 name" in from_store.getvalue()  # a name that is not UTF-8, read from the directory


def test_a_damaged_layer_fails_the_rootfs_before_a_byte_of_it_is_written(tmp_path: Path) -> None:
    layers = streamed_layers(tmp_path)
    ping = layers[-1].stored.files / "app" / "ping"
    ping.write_bytes(b"\x7fELG")  # same size, other bytes
    out = io.BytesIO()
    with pytest.raises(StoredArchiveError, match=r"rebuilt from .* is sha256:\w+, not the layer"):
        flatten_layers(layers, out)
    assert out.getvalue() == b""


def test_a_squashfs_export_from_the_layer_store_is_the_saves_and_spools_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("tar2sqfs") is None:
        skip_or_fail("tar2sqfs (squashfs-tools-ng) is not installed")
    engine, image_id = engine_with_a_store(tmp_path)

    def export_squashfs(out: Path) -> tuple[str, list[str]]:
        lines: list[str] = []
        options = ExportOptions(image=TAG, output=out, compression=Compression.ZSTD, export_format=ExportFormat.SQUASHFS)
        return export_image(options, engine, report=lines.append).manifest.sha256, lines

    real_spool = export.spool_stored_image
    monkeypatch.setattr(export, "spool_stored_image", lambda *a, **k: pytest.fail("an overlay2 layer was spooled"))
    engine.refuse_save = "save must not be asked"
    from_store, lines = export_squashfs(tmp_path / "from-store")
    assert any("layers read from the layer store as they are written" in line for line in lines), lines
    monkeypatch.setattr(export, "spool_stored_image", real_spool)
    engine.refuse_save = None
    del engine.stored[image_id]
    from_save, _ = export_squashfs(tmp_path / "from-save")
    assert from_store == from_save
