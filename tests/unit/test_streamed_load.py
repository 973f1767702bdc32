"""Normalising from overlay2's layer store into the engine's load with no spool: the same image and
layer bytes as the spooled path, an archive docker load accepts (each file it names hashes to its
diffID), and a store that fails its check cut off before the manifest, then save instead. Small
layers are spooled rather than sized first: the same bytes either way."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.engine.interface import StoredImage, StoredLayer
from imagebuild.errors import EngineError
from imagebuild.normalize.core import LOWER_CACHE, normalize_image
from imagebuild.normalize.from_store import normalize_stored
from imagebuild.normalize.model import FROM_SAVE, FROM_STORE, Normalized
from imagebuild.normalize.streamed_load import SPOOL_BELOW, normalize_into_load
from imagebuild.testing import FakeEngine, image_info
from imagebuild.testing.archives import untarred
from tests.unit import imagetars as tars
from tests.unit.streamed_support import LAYERS, PLAN, store


def spooled(image: StoredImage, where: Path) -> Normalized:
    where.mkdir()
    return normalize_stored(image, PLAN, where, what="test image")


def held(image: StoredImage, *held_bytes: int | None) -> StoredImage:
    """``image`` with its layer database's record of what each layer's files hold."""
    layers = [replace(layer, held_bytes=size) for layer, size in zip(image.layers, held_bytes, strict=True)]
    assert all(isinstance(layer, StoredLayer) for layer in layers)
    return replace(image, layers=layers)


def loaded_files(image: StoredImage, spool: Path | None = None) -> tuple[Normalized, dict[str, bytes], float]:
    archives: list[bytes] = []

    def load(chunks: Iterable[bytes]) -> list[str]:
        archives.append(b"".join(chunks))
        return ["loaded"]

    normalized, loaded, sizing = normalize_into_load(image, PLAN, load, what="test image", spool=spool)
    assert loaded == ["loaded"]
    assert sizing >= 0
    return normalized, untarred(archives[0]), sizing


def test_the_streamed_image_is_the_spooled_one_byte_for_byte(tmp_path: Path) -> None:
    image = store(tmp_path)
    expected = spooled(image, tmp_path / "spool")
    normalized, files, _ = loaded_files(image)

    assert (normalized.image_id, normalized.config_bytes) == (expected.image_id, expected.config_bytes)
    assert normalized.spool_peak == 0
    assert [layer.member for layer in normalized.layers] == ["build-2/layer.tar", "build-4/layer.tar", "build-5/layer.tar"]
    streamed = [files[layer.member] for layer in normalized.layers]
    assert streamed == [layer.path.read_bytes() for layer in expected.layers if layer.path is not None]
    assert len(expected.layers) == 3  # UNCHANGED held nothing once reduced: dropped, not sent


def test_the_archive_is_one_docker_load_accepts(tmp_path: Path) -> None:
    normalized, files, _ = loaded_files(store(tmp_path))
    (manifest,) = json.loads(files["manifest.json"])
    config = json.loads(files[manifest["Config"]])
    assert manifest["Config"] == normalized.image_id.removeprefix("sha256:") + ".json"
    assert config["rootfs"]["diff_ids"] == list(normalized.diff_ids)
    sent = [(name, diff_id) for name, diff_id in zip(manifest["Layers"], config["rootfs"]["diff_ids"], strict=True) if name in files]
    assert len(sent) == 3  # the base's files are named, not sent: the engine holds them
    for name, diff_id in sent:  # as docker load checks each layer it registers
        assert "sha256:" + hashlib.sha256(files[name]).hexdigest() == diff_id


@pytest.mark.parametrize(
    "sizes", [(None, None, 10, 10, 10, 10), (None, None, 10, 10, 10, SPOOL_BELOW)], ids=["all small", "last large"]
)
def test_small_layers_are_spooled_not_sized_and_give_the_same_bytes(
    tmp_path: Path, sizes: tuple[int | None, ...]
) -> None:
    image = held(store(tmp_path), *sizes)
    expected = spooled(image, tmp_path / "spool")
    (tmp_path / "small").mkdir()
    normalized, files, sizing = loaded_files(image, tmp_path / "small")

    assert (normalized.image_id, normalized.config_bytes) == (expected.image_id, expected.config_bytes)
    streamed = [files[layer.member] for layer in normalized.layers]
    assert streamed == [layer.path.read_bytes() for layer in expected.layers if layer.path is not None]
    sent = [layer.size for layer in expected.layers if layer.path is not None]
    assert normalized.spool_peak == max(sent if sizes[-1] == 10 else sent[:-1])  # one at a time, then removed
    assert list((tmp_path / "small").iterdir()) == []
    assert (sizing == 0) == (sizes[-1] == 10)


def test_a_small_layer_that_fails_its_check_is_cut_off_and_save_is_used(tmp_path: Path) -> None:
    image = held(store(tmp_path), None, None, 10, 10, 10, 10)
    (tmp_path / "store" / "5" / "diff" / "srv" / "new").write_bytes(b"old\n")  # same size, other content
    image_id = "sha256:" + image.config.name  # type: ignore[union-attr]
    engine = FakeEngine(images=[image_info(image_id)], saved={image_id: tars.saved(LAYERS, tars.config(LAYERS))})
    engine.stored[image_id] = image
    result = normalize_image(engine, image_id, PLAN, tmp_path / "spool")

    assert result.read_from == FROM_SAVE
    assert "layer 5: " in result.fallback_reason
    assert "gives sha256" in result.fallback_reason
    assert (engine.loads, len(engine.received)) == (2, 1)  # the first archive broke off before its manifest


def test_through_normalize_image_the_engine_gets_the_image_and_no_spool_is_used(tmp_path: Path) -> None:
    image = store(tmp_path)
    image_id = "sha256:" + image.config.name  # type: ignore[union-attr]
    engine = FakeEngine(images=[image_info(image_id)])
    engine.stored[image_id] = image
    result = normalize_image(engine, image_id, PLAN, tmp_path / "spool")

    assert (result.read_from, result.fallback_reason, set(result.phases)) == (FROM_STORE, "", {"size", "stream"})
    assert (result.spool_peak, result.layers_rewritten, result.layers_reused) == (0, 3, 0)
    assert result.image_id == spooled(image, tmp_path / "spooled").image_id
    assert engine.has_image(result.image_id)
    assert engine.loads == 1


def test_through_normalize_image_small_layers_go_through_its_spool_directory(tmp_path: Path) -> None:
    image = held(store(tmp_path), None, None, 10, 10, 10, 10)
    image_id = "sha256:" + image.config.name  # type: ignore[union-attr]
    engine = FakeEngine(images=[image_info(image_id)])
    engine.stored[image_id] = image
    result = normalize_image(engine, image_id, PLAN, tmp_path / "spool")

    assert result.phases["size"] == 0
    assert result.spool_peak == max(layer.size for layer in spooled(image, tmp_path / "spooled").layers)
    assert result.image_id == spooled(image, tmp_path / "again").image_id
    assert [p.name for p in (tmp_path / "spool").iterdir()] == [LOWER_CACHE]  # its work directory is gone


def test_a_store_that_fails_its_check_is_cut_off_and_save_is_used(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    image = store(tmp_path)
    (tmp_path / "store" / "5" / "diff" / "srv" / "new").write_bytes(b"old\n")  # same size, other content
    image_id = "sha256:" + image.config.name  # type: ignore[union-attr]
    saved = tars.saved(LAYERS, tars.config(LAYERS))
    engine = FakeEngine(images=[image_info(image_id)], saved={image_id: saved})
    engine.stored[image_id] = image
    with caplog.at_level(logging.WARNING, logger="imagebuild"):
        result = normalize_image(engine, image_id, PLAN, tmp_path / "spool")

    assert result.read_from == FROM_SAVE
    assert "layer 5: " in result.fallback_reason
    assert "gives sha256" in result.fallback_reason
    assert "using docker save" in caplog.text
    # Two loads were asked; the first one's stream broke off in the reading (the fake engine keeps
    # only what it received whole), so only the save path's archive was loaded.
    assert (engine.loads, len(engine.received)) == (2, 1)
    assert engine.has_image(result.image_id)


def test_an_engine_that_refuses_the_stream_stops_the_rewrite(tmp_path: Path) -> None:
    image = store(tmp_path)
    image_id = "sha256:" + image.config.name  # type: ignore[union-attr]
    engine = FakeEngine(images=[image_info(image_id)], refuse_load="no space left on device")
    engine.stored[image_id] = image
    before = threading.active_count()
    with pytest.raises(EngineError, match="no space left on device"):
        normalize_image(engine, image_id, PLAN, tmp_path / "spool")
    assert threading.active_count() == before


@pytest.mark.parametrize("small", [False, True], ids=["sized first", "spooled"])
def test_each_rewrite_keeps_what_it_read_and_wrote_for_the_next_rebuild(tmp_path: Path, small: bool) -> None:
    image = held(store(tmp_path), None, None, 10, 10, 10, 10) if small else store(tmp_path)
    cache = tmp_path / "lower-state"
    normalized, _, _ = normalize_into_load(
        image, PLAN, lambda chunks: [str(len(b"".join(chunks)))], what="test image", lower_cache=cache,
        spool=tmp_path if small else None,
    )  # fmt: skip
    kept = {path.name for path in cache.iterdir()}
    for diff_id in PLAN.layers[2:]:  # UNCHANGED's too, though it holds nothing once reduced
        assert f"{diff_id.removeprefix('sha256:')}.v1.headers.json.gz" in kept
    assert len(normalized.layers) == 3
    for made in normalized.layers:
        assert f"{made.diff_id.removeprefix('sha256:')}.v1.times.json.gz" in kept
        assert made.facts is None  # kept on disk, not in the result
