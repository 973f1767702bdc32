"""Normalising from the engine's layer store: the layer tars rebuilt byte for byte, checked, or save instead."""

from __future__ import annotations

import io
import logging
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.engine.interface import StoredImage
from imagebuild.engine.tar_split import HeaderFile, TarSplitError, header_chunks, layer_chunks
from imagebuild.normalize.core import normalize_image
from imagebuild.normalize.from_save import normalize_saved
from imagebuild.normalize.from_store import normalize_stored
from imagebuild.normalize.lower import scan_layer
from imagebuild.normalize.model import FROM_SAVE, FROM_STORE, LayerPlan, StoreReadFailure
from imagebuild.normalize.stored_layers import record_entries
from imagebuild.testing import FakeEngine, image_info
from imagebuild.util.streams import open_stream
from tests.unit.imagetars import (
    BASE,
    EPOCH,
    EVERY_KIND,
    Item,
    config,
    digest,
    entries,
    layer,
    saved,
    stored_image,
    stored_layer,
)

BUILT = [EVERY_KIND, layer([Item("app/v.txt", data=b"1\n"), Item("app/.wh.empty", mode=0o600)])]
LAYERS = BASE + BUILT
PLAN = LayerPlan(
    layers=tuple(digest(d) for d in LAYERS),
    base_layers=2,
    base_history=3,
    epochs=(EPOCH, EPOCH),
    created=EPOCH,
)


def test_the_record_and_the_directory_give_the_layer_byte_for_byte(tmp_path: Path) -> None:
    stored = stored_layer(EVERY_KIND, tmp_path)
    assert b"".join(layer_chunks(stored.tar_split, stored.files)) == EVERY_KIND
    assert {info.name for info, _ in entries(EVERY_KIND)} >= {"app/.wh..wh..opq", "app/hard", "srv/caf\udce9"}


def test_a_symlink_in_the_layer_directory_is_never_followed(tmp_path: Path) -> None:
    stored = stored_layer(EVERY_KIND, tmp_path / "layer")
    (tmp_path / "elsewhere").mkdir()
    (stored.files / "srv").rename(tmp_path / "elsewhere" / "srv")
    (stored.files / "srv").symlink_to(tmp_path / "elsewhere" / "srv")
    with pytest.raises(TarSplitError, match=r"Too many levels of symbolic links|Not a directory"):
        b"".join(layer_chunks(stored.tar_split, stored.files))


# In and out of directories, as a walk lists a package tree: the directories kept open between files
# must follow every turn.
TREE = layer(
    [
        Item("a/", tarfile.DIRTYPE, mode=0o755),
        Item("a/b/", tarfile.DIRTYPE, mode=0o755),
        Item("a/b/c/", tarfile.DIRTYPE, mode=0o755),
        Item("a/b/c/one", data=b"1"),
        Item("a/b/c/two", data=b"22"),
        Item("a/b/three", data=b"333"),
        Item("a/d/", tarfile.DIRTYPE, mode=0o755),
        Item("a/d/four", data=b"4444"),
        Item("a/five", data=b"55555"),
        Item("six", data=b"666666"),
        Item("z/", tarfile.DIRTYPE, mode=0o755),
        Item("z/seven", data=b"7777777"),
    ]
)


def open_fds() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())


def test_a_tree_walked_in_and_out_of_directories_is_rebuilt_and_no_directory_stays_open(tmp_path: Path) -> None:
    stored = stored_layer(TREE, tmp_path)
    before = open_fds()
    assert b"".join(layer_chunks(stored.tar_split, stored.files)) == TREE
    assert open_fds() == before


def test_a_symlink_below_a_directory_already_open_is_never_followed(tmp_path: Path) -> None:
    stored = stored_layer(TREE, tmp_path / "layer")
    (tmp_path / "elsewhere").mkdir()
    (stored.files / "a" / "d").rename(tmp_path / "elsewhere" / "d")  # a/ is open by then, for a/b/c/one
    (stored.files / "a" / "d").symlink_to(tmp_path / "elsewhere" / "d")
    before = open_fds()
    with pytest.raises(TarSplitError, match=r"Too many levels of symbolic links|Not a directory"):
        b"".join(layer_chunks(stored.tar_split, stored.files))
    assert open_fds() == before


@pytest.mark.parametrize("data", [EVERY_KIND, TREE], ids=["every kind", "tree"])
def test_the_record_s_headers_read_past_the_content_are_those_of_the_whole_tar(tmp_path: Path, data: bytes) -> None:
    stored = stored_layer(data, tmp_path)
    streamed = scan_layer(open_stream(header_chunks(stored.tar_split)), digests=False)
    seeked = record_entries(stored.tar_split)
    assert [(name, meta) for name, meta, _ in seeked] == [(name, meta) for name, meta, _ in streamed]
    assert [(name, meta) for name, meta, _ in seeked] == [(name, meta) for name, meta, _ in scan_layer(io.BytesIO(data), digests=False)]


def test_a_header_file_reads_segments_and_content_spans_and_refuses_to_seek_back_past_its_item(tmp_path: Path) -> None:
    stored = stored_layer(TREE, tmp_path)
    headers = HeaderFile(stored.tar_split)
    try:
        whole = b"".join(iter(lambda: headers.read(1000), b""))  # the content as zeros
        assert len(whole) == len(TREE)
        assert whole[:512] == TREE[:512]
        with pytest.raises(TarSplitError, match="only forward seeks"):
            headers.seek(0)
    finally:
        headers.close()


def test_a_damaged_record_is_a_tar_split_error_not_a_parse_error(tmp_path: Path) -> None:
    stored = stored_layer(TREE, tmp_path)
    stored.tar_split.write_bytes(stored.tar_split.read_bytes()[:-20])  # its gzip stream cut short
    with pytest.raises(TarSplitError, match="cannot read the layer's headers"):
        record_entries(stored.tar_split)
    with pytest.raises(TarSplitError, match="cannot read the layer's headers"):
        record_entries(tmp_path / "missing.json.gz")


def test_a_file_shorter_than_its_record_is_refused(tmp_path: Path) -> None:
    stored = stored_layer(EVERY_KIND, tmp_path)
    (stored.files / "app" / "big.bin").write_bytes(b"cut")
    with pytest.raises(
        TarSplitError, match=r"'app/big.bin' in .* is 3 bytes, the layer's record says 2304000"
    ):
        b"".join(layer_chunks(stored.tar_split, stored.files))


def test_from_the_store_and_from_save_the_same_image(tmp_path: Path) -> None:
    cfg = config(LAYERS)
    image = stored_image(LAYERS, cfg, tmp_path / "store")
    # Of the base's layers only the tar-split records (their headers) are read; no file of theirs is
    # opened unless a build layer's file matches one in every other respect: they need not even exist.
    image = replace(image, layers=tuple(replace(s, files=tmp_path / "gone") for s in image.layers[:2]) + image.layers[2:])  # fmt: skip
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    from_store = normalize_stored(image, PLAN, tmp_path / "a", what="test image")
    from_save = normalize_saved(io.BytesIO(saved(LAYERS, cfg)), PLAN, tmp_path / "b", what="test image")
    assert from_store.image_id == from_save.image_id
    assert from_store.config_bytes == from_save.config_bytes
    assert [layer.path.read_bytes() for layer in from_store.layers] == [
        layer.path.read_bytes() for layer in from_save.layers
    ]


def test_a_file_changed_in_the_store_is_found_by_its_layers_digest(tmp_path: Path) -> None:
    image = stored_image(LAYERS, config(LAYERS), tmp_path / "store")
    (image.layers[3].files / "app" / "v.txt").write_bytes(b"2\n")  # same size, other content
    (tmp_path / "work").mkdir()
    with pytest.raises(
        StoreReadFailure, match=r"layer 3: .* gives sha256 sha256:\w+, the image says " + digest(BUILT[1])
    ):
        normalize_stored(image, PLAN, tmp_path / "work", what="test image")


def engine_with(tmp_path: Path, stored: StoredImage | None) -> tuple[FakeEngine, str]:
    cfg = config(LAYERS)
    archive = saved(LAYERS, cfg)
    image_id = stored_image(LAYERS, cfg, tmp_path / "probe").config.name  # type: ignore[union-attr]
    engine = FakeEngine(images=[image_info(f"sha256:{image_id}")], saved={f"sha256:{image_id}": archive})
    if stored is not None:
        engine.stored[f"sha256:{image_id}"] = stored
    return engine, f"sha256:{image_id}"


def test_the_engine_store_is_used_when_it_is_readable(tmp_path: Path) -> None:
    engine, image_id = engine_with(tmp_path, stored_image(LAYERS, config(LAYERS), tmp_path / "store"))
    engine.saved.clear()  # so a save would fail
    result = normalize_image(engine, image_id, PLAN, tmp_path / "spool")
    assert (result.read_from, result.fallback_reason, set(result.phases)) == (
        FROM_STORE,
        "",
        {"rewrite", "load"},
    )
    assert engine.has_image(result.image_id)


def test_without_a_readable_store_save_is_used_and_the_reason_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine, image_id = engine_with(tmp_path, None)
    expected = normalize_image(engine, image_id, PLAN, tmp_path / "spool", from_store=False).image_id
    with caplog.at_level(logging.DEBUG, logger="imagebuild"):
        result = normalize_image(engine, image_id, PLAN, tmp_path / "spool")
    assert (result.read_from, result.image_id) == (FROM_SAVE, expected)
    assert result.fallback_reason == f"the engine at fake://engine keeps no layer store for {image_id[:19]}"
    assert [r.levelname for r in caplog.records] == ["DEBUG"]
    assert "from docker save: the engine at fake://engine keeps no layer store" in caplog.text


def test_a_store_that_fails_its_check_falls_back_to_save_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    image = stored_image(LAYERS, config(LAYERS), tmp_path / "store")
    (image.layers[2].files / "app" / "big.bin").write_bytes(bytes(2304000))  # same size, other content
    engine, image_id = engine_with(tmp_path, image)
    with caplog.at_level(logging.DEBUG, logger="imagebuild"):
        result = normalize_image(engine, image_id, PLAN, tmp_path / "spool")
    assert result.read_from == FROM_SAVE
    assert "layer 2: " in result.fallback_reason
    assert "gives sha256" in result.fallback_reason
    assert [r.levelname for r in caplog.records] == ["WARNING", "DEBUG"]
    assert engine.has_image(result.image_id)
