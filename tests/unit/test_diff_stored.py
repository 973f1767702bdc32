"""`imagebuild diff` of engine images read from the engine's store: the report `docker save` gives,
each layer the two images share read once, and `docker save` again where the store's copy is not
the layer its diffID names. Of two archives, a layer both hold is indexed once too."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import tarfile
from pathlib import Path

import pytest

from imagebuild.diff import stored
from imagebuild.diff.report import diff_json
from imagebuild.diff.sources import diff_images
from imagebuild.engine import containerd_store
from imagebuild.errors import ConfigError, EngineError
from imagebuild.testing import FakeEngine, image_info
from tests.unit.imagetars import AFTER, Item, config, content_store_image, layer, saved, stored_image

BASE = [
    layer([Item("etc/", tarfile.DIRTYPE, mode=0o755), Item("etc/os-release", data=b"base\n"), Item("etc/motd", data=b"hi\n")]),
    layer([Item("usr/bin/python3", data=b"py", mode=0o755)]),
]
OLD = layer([Item("app/versions.txt", data=b"ROUTER=1\n", mtime=AFTER), Item("etc/.wh.motd")])
NEW = layer([Item("app/versions.txt", data=b"ROUTER=2\n", mtime=AFTER), Item("app/extra", data=b"x")])
IMAGES = {"old": [*BASE, OLD], "new": [*BASE, NEW]}


def _engine(tmp_path: Path, *, store: str) -> FakeEngine:
    """Both images saved, and kept in the store ``store`` names ("" for none)."""
    engine = FakeEngine(manifest_ids=store == "containerd")
    for tag, layers in IMAGES.items():
        image_id = "sha256:" + tag[0] * 64
        if store == "containerd":
            image_id = content_store_image(layers, config(layers), tmp_path / "root")
            engine.stored[image_id] = containerd_store.stored_image(image_id, data_root=str(tmp_path / "root"))
        elif store == "overlay2":
            engine.stored[image_id] = stored_image(layers, config(layers), tmp_path / tag)
        engine.images.append(image_info(image_id, tags=[tag]))
        engine.saved[image_id] = saved(layers, config(layers))
    return engine


def _report(engine: FakeEngine) -> dict[str, object]:
    document = diff_json(diff_images("old", "new", engine=engine))
    for key in ("a_id", "b_id"):  # a hand-made content store writes its own config bytes
        del document[key]
    return document


@pytest.mark.parametrize("store", ["overlay2", "containerd"])
def test_the_store_gives_the_report_docker_save_gives_without_saving(
    tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        from_save = _report(_engine(tmp_path / "save", store=""))
    assert "diff: reading old through docker save, the whole image (the engine at" in caplog.text
    engine = _engine(tmp_path, store=store)
    engine.refuse_save = "save was not to be asked"
    indexed: list[str] = []
    index_layer = stored.index_layer
    monkeypatch.setattr(stored, "index_layer", lambda source: indexed.append("") or index_layer(source))
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert _report(engine) == from_save
    where = "content store" if store == "containerd" else "layer store"
    assert f"diff: reading new from the engine's {where}" in caplog.text
    assert from_save["files"]  # the images do differ: the comparison ran
    assert len(indexed) == 4  # the base's two layers once, and each image's own


def test_a_stored_layer_that_is_not_its_diff_id_leaves_that_side_to_docker_save(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from_save = _report(_engine(tmp_path / "save", store=""))
    engine = _engine(tmp_path, store="overlay2")
    changed = engine.stored["sha256:" + "n" * 64].layers[2].files / "app/extra"  # type: ignore[union-attr]
    changed.write_bytes(b"y")  # the same size, other bytes: the tar rebuilt is another
    with caplog.at_level(logging.WARNING):
        assert _report(engine) == from_save
    assert "reading new from the engine's store failed" in caplog.text
    assert "using docker save" in caplog.text


def test_a_damaged_blob_in_the_containerd_store_falls_back_and_a_failing_save_says_so(tmp_path: Path) -> None:
    engine = _engine(tmp_path, store="containerd")
    image_id = engine.inspect_image("new").id
    blob = engine.stored[image_id].layers[2].blob  # type: ignore[union-attr]
    blob.write_bytes(gzip.compress(OLD, mtime=0))  # a valid layer, but another one
    engine.stored[image_id] = containerd_store.stored_image(image_id, data_root=str(tmp_path / "root"))
    engine.refuse_save = "the engine refused the save"
    with pytest.raises(EngineError, match="the engine refused the save"):
        diff_images("old", "new", engine=engine)
    engine.refuse_save = None
    assert json.dumps(_report(engine))  # read from the save instead


def _archives(tmp_path: Path, *, oci: bool) -> tuple[str, str]:
    tmp_path.mkdir(exist_ok=True)
    for tag, layers in IMAGES.items():
        (tmp_path / f"{tag}.tar").write_bytes(saved(layers, config(layers), oci=oci))
    return str(tmp_path / "old.tar"), str(tmp_path / "new.tar")


def test_two_oci_archives_index_the_layers_they_share_once_and_report_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A layer blob is named by its digest (an uncompressed one's is its diffID): the second archive's
    copy of the base is hashed against its name, not indexed again. The legacy layout names layers
    otherwise, so each side is indexed whole, and the report is the same."""
    def report(directory: Path, *, oci: bool) -> dict[str, object]:
        document = diff_json(diff_images(*_archives(directory, oci=oci)))
        return {key: value for key, value in document.items() if key not in ("a", "b")}  # the file names

    legacy = report(tmp_path / "legacy", oci=False)
    indexed: list[str] = []
    index_layer = stored.index_layer
    monkeypatch.setattr(stored, "index_layer", lambda source: indexed.append("") or index_layer(source))
    assert report(tmp_path / "oci", oci=True) == legacy
    assert legacy["files"]  # the images do differ: the comparison ran
    assert len(indexed) == 4  # the base's two layers once, and each image's own


def test_a_shared_blob_whose_bytes_are_not_its_name_is_a_damaged_archive(tmp_path: Path) -> None:
    old, new = _archives(tmp_path, oci=True)
    base = BASE[0]
    damaged = Path(new).read_bytes().replace(b"base\n", b"BASE\n", 1)  # same size, other bytes
    Path(new).write_bytes(damaged)
    name = f"blobs/sha256/{hashlib.sha256(base).hexdigest()}"
    with pytest.raises(ConfigError, match=f"{name} reads as sha256:[0-9a-f]{{64}}, not the digest its name says"):
        diff_images(old, new)
