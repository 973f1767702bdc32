"""Finding an image in a local overlay2 engine's data root: used only when every fact agrees."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from imagebuild.engine.chain_ids import chain_ids
from imagebuild.engine.overlay2_store import stored_image
from tests.unit.imagetars import Item, layer

LAYERS = [layer([Item("a", data=b"a")]), layer([Item("b", data=b"b")]), layer([Item("c", data=b"c")])]
DIFF_IDS = ["sha256:" + hashlib.sha256(d).hexdigest() for d in LAYERS]


def data_root(root: Path) -> tuple[str, dict[str, Any]]:
    """A data root as Docker 20.10 lays it out, holding an image of LAYERS; (image ID, its inspect answer)."""
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": DIFF_IDS}}).encode()
    image_hex = hashlib.sha256(config).hexdigest()
    content = root / "image/overlay2/imagedb/content/sha256"
    content.mkdir(parents=True)
    (content / image_hex).write_bytes(config)
    directories = []
    for index, (diff_id, chain) in enumerate(zip(DIFF_IDS, chain_ids(DIFF_IDS), strict=True)):
        record = root / "image/overlay2/layerdb/sha256" / chain.removeprefix("sha256:")
        record.mkdir(parents=True)
        (record / "diff").write_text(diff_id)
        (record / "cache-id").write_text(f"cache{index}")
        (record / "tar-split.json.gz").write_bytes(b"")
        (record / "size").write_text(str(index))
        directory = root / "overlay2" / f"cache{index}" / "diff"
        directory.mkdir(parents=True)
        directories.append(str(directory))
    inspected = {
        "GraphDriver": {
            "Name": "overlay2",
            "Data": {"UpperDir": directories[2], "LowerDir": f"{directories[1]}:{directories[0]}"},
        },
        "RootFS": {"Layers": DIFF_IDS},
    }
    return f"sha256:{image_hex}", inspected


def test_the_layers_are_found_lowest_first_with_their_records(tmp_path: Path) -> None:
    image_id, inspected = data_root(tmp_path)
    image = stored_image(image_id, inspected=inspected, data_root=str(tmp_path))
    assert image.unavailable == ""
    assert [layer.diff_id for layer in image.layers] == DIFF_IDS
    assert [layer.files.parent.name for layer in image.layers] == ["cache0", "cache1", "cache2"]
    assert image.layers[0].tar_split.parent.name == chain_ids(DIFF_IDS)[0].removeprefix("sha256:")
    assert image.config is not None
    assert image.config.name == image_id.removeprefix("sha256:")


def test_what_each_layer_s_files_hold_comes_from_its_record_when_it_can_be_read(tmp_path: Path) -> None:
    image_id, inspected = data_root(tmp_path)
    records = tmp_path / "image/overlay2/layerdb/sha256"
    (records / chain_ids(DIFF_IDS)[1].removeprefix("sha256:") / "size").write_text("many")
    (records / chain_ids(DIFF_IDS)[2].removeprefix("sha256:") / "size").unlink()
    image = stored_image(image_id, inspected=inspected, data_root=str(tmp_path))
    assert [getattr(layer, "held_bytes", "?") for layer in image.layers] == [0, None, None]  # a hint, never an error


def test_another_storage_driver_is_not_read(tmp_path: Path) -> None:
    image_id, inspected = data_root(tmp_path)
    inspected["GraphDriver"]["Name"] = "overlayfs"  # the containerd snapshotter's name
    image = stored_image(image_id, inspected=inspected, data_root=str(tmp_path))
    assert image.unavailable == "the engine's storage driver is overlayfs, not overlay2"


def test_directories_the_layer_database_does_not_confirm_are_not_read(tmp_path: Path) -> None:
    image_id, inspected = data_root(tmp_path)
    upper, lower = inspected["GraphDriver"]["Data"]["UpperDir"], inspected["GraphDriver"]["Data"]["LowerDir"]
    inspected["GraphDriver"]["Data"]["UpperDir"], inspected["GraphDriver"]["Data"]["LowerDir"] = (
        lower.split(":")[0],
        f"{upper}:{lower.split(':')[1]}",
    )  # the top two swapped
    image = stored_image(image_id, inspected=inspected, data_root=str(tmp_path))
    assert image.unavailable.startswith("overlay2 names ")
    assert "the layer database another directory" in image.unavailable


@pytest.mark.parametrize("damage", ["config", "root"])
def test_a_data_root_that_does_not_hold_the_image_is_not_read(tmp_path: Path, damage: str) -> None:
    image_id, inspected = data_root(tmp_path)
    content = tmp_path / "image/overlay2/imagedb/content/sha256" / image_id.removeprefix("sha256:")
    if damage == "config":
        content.write_text("{}")
        expected = f"{content} is not the config of {image_id[:19]}"
    else:
        shutil.rmtree(tmp_path / "image")
        expected = f"cannot read the engine's data root {tmp_path}: "
    image = stored_image(image_id, inspected=inspected, data_root=str(tmp_path))
    assert image.unavailable.startswith(expected)
    assert image.layers == ()


def test_a_layer_count_that_does_not_match_is_not_read(tmp_path: Path) -> None:
    image_id, inspected = data_root(tmp_path)
    inspected["GraphDriver"]["Data"].pop("LowerDir")
    image = stored_image(image_id, inspected=inspected, data_root=str(tmp_path))
    assert image.unavailable == "overlay2 reports 1 layer directories for 3 layers"


def test_chain_ids_follow_the_oci_definition() -> None:
    chains = chain_ids(DIFF_IDS[:2])
    assert chains[0] == DIFF_IDS[0]  # ChainID(0) = DiffID(0)
    assert chains[1] == "sha256:" + hashlib.sha256(f"{DIFF_IDS[0]} {DIFF_IDS[1]}".encode()).hexdigest()
