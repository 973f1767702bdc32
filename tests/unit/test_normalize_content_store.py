"""Normalising from the containerd image store's content store: the layers decompressed from their blobs,
checked, the same image as from `docker save`; a damaged store falls back to save; unchanged layers reused;
what the base holds kept for the next normalisation."""

from __future__ import annotations

import io
import json
import logging
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.engine.containerd_store import stored_image
from imagebuild.normalize.core import LOWER_CACHE, normalize_image
from imagebuild.normalize.from_save import normalize_saved
from imagebuild.normalize.from_store import normalize_stored
from imagebuild.normalize.lower_cache import FORMAT, cached_entries
from imagebuild.normalize.model import FROM_CONTENT, FROM_SAVE, LayerPlan, Normalized
from imagebuild.normalize.stored_layers import layer_entries
from imagebuild.testing import FakeEngine, image_info
from tests.unit import imagetars as tars
from tests.unit.imagetars import BASE, EPOCH, EVERY_KIND, Item, layer

SECOND = layer([Item("app/", tarfile.DIRTYPE, mode=0o755), Item("app/v.txt", data=b"1\n"), Item("etc/.wh.os-release")])
THIRD = layer([Item("app/v.txt", data=b"2\n"), Item("srv/new", data=b"new\n")])
LAYERS = [*BASE, EVERY_KIND, SECOND]
EPOCHS = (EPOCH - 200, EPOCH - 100)


def plan(layers: list[bytes], previous: Normalized | None = None) -> LayerPlan:
    return LayerPlan(
        layers=tuple(tars.digest(d) for d in layers),
        base_layers=2,
        base_history=3,
        epochs=EPOCHS[: len(layers) - 2],
        created=EPOCH,
        previous=previous.notes if previous is not None else (),
    )


def engine_with(data_root: Path, layers: list[bytes] = LAYERS, plain: tuple[int, ...] = ()) -> tuple[FakeEngine, str]:
    """A fake containerd-store engine holding the image in its content store, and able to save it."""
    image_id = tars.content_store_image(layers, tars.config(layers), data_root, plain=plain)
    engine = FakeEngine(images=[image_info(image_id)], manifest_ids=True)
    engine.saved[image_id] = tars.content_store_saved(data_root, image_id)
    engine.stored[image_id] = stored_image(image_id, data_root=str(data_root))
    return engine, image_id


def test_the_content_store_gives_the_image_docker_save_gives(tmp_path: Path) -> None:
    image_id = tars.content_store_image(LAYERS, tars.config(LAYERS), tmp_path / "root")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    stored = normalize_stored(stored_image(image_id, data_root=str(tmp_path / "root")), plan(LAYERS), tmp_path / "a", what="test image")
    saved = normalize_saved(io.BytesIO(tars.content_store_saved(tmp_path / "root", image_id)), plan(LAYERS), tmp_path / "b", what="test image")
    assert stored.image_id == saved.image_id
    assert stored.config_bytes == saved.config_bytes
    assert stored.base_descriptors == saved.base_descriptors  # the base's gzip blobs, as the manifest names them
    assert [d["mediaType"] for d in stored.base_descriptors] == [tars.GZIP_LAYER, tars.GZIP_LAYER]
    assert [x.path.read_bytes() for x in stored.layers if x.path] == [x.path.read_bytes() for x in saved.layers if x.path]


def test_normalisation_reads_the_content_store_and_never_asks_for_save(tmp_path: Path) -> None:
    engine, image_id = engine_with(tmp_path / "root")
    expected = normalize_image(engine, image_id, plan(LAYERS), tmp_path / "spool", from_store=False)
    engine.refuse_save = "save must not be asked"
    result = normalize_image(engine, image_id, plan(LAYERS), tmp_path / "spool")
    assert (result.read_from, result.fallback_reason, set(result.phases)) == (FROM_CONTENT, "", {"rewrite", "load"})
    assert (result.image_id, result.engine_id) == (expected.image_id, expected.engine_id)
    loaded = tars.entries(engine.received[-1])
    assert {info.name for info, _ in loaded} == {"oci-layout", "index.json", *(f"blobs/sha256/{d[7:]}" for d in (
        result.image_id, result.engine_id, *(note.diff_id for note in result.layers)))}  # fmt: skip
    # Each layer was sent as soon as it was spooled; the config, the manifest and the index naming them last.
    names = [info.name for info, _ in loaded]
    layers = [f"blobs/sha256/{note.diff_id[7:]}" for note in result.layers]
    documents = [f"blobs/sha256/{d[7:]}" for d in (result.image_id, result.engine_id)]
    assert names == ["oci-layout", *layers, *documents, "index.json"]
    assert 0 < result.spool_peak < result.bytes_rewritten  # one layer at a time in the spool, the larger


@pytest.mark.parametrize("damage", ["flipped", "replaced"])
def test_a_blob_that_does_not_give_its_layer_falls_back_to_save_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    engine, image_id = engine_with(tmp_path / "root", plain=(3,) if damage == "replaced" else ())
    expected = normalize_image(engine, image_id, plan(LAYERS), tmp_path / "spool", from_store=False).image_id
    blob = engine.stored[image_id].layers[3].blob  # type: ignore[union-attr]
    data = bytearray(blob.read_bytes())
    if damage == "flipped":  # the gzip stream no longer decompresses
        data[len(data) // 2] ^= 0xFF
    else:  # an uncompressed layer of other bytes, of the same size
        data[data.index(b"1\n")] = ord("2")
    blob.write_bytes(bytes(data))  # the save was taken before: it gives the layer
    with caplog.at_level(logging.DEBUG, logger="imagebuild"):
        result = normalize_image(engine, image_id, plan(LAYERS), tmp_path / "spool")
    assert (result.read_from, result.image_id) == (FROM_SAVE, expected)
    # The content store's read was cut off before its index (the fake engine keeps only what arrived whole).
    assert (engine.loads, len(engine.received)) == (3, 2)
    assert result.fallback_reason.startswith(f"image {image_id[:19]} layer 3: ")
    assert ("not a valid gzip stream" if damage == "flipped" else "gives sha256") in result.fallback_reason
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "from the engine's content store failed" in warnings[0].getMessage()


def test_a_missing_blob_means_save_without_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    engine, image_id = engine_with(tmp_path / "root")
    engine.stored[image_id].layers[3].blob.unlink()  # type: ignore[union-attr]
    engine.stored[image_id] = stored_image(image_id, data_root=str(tmp_path / "root"))
    with caplog.at_level(logging.DEBUG, logger="imagebuild"):
        result = normalize_image(engine, image_id, plan(LAYERS), tmp_path / "spool")
    assert result.read_from == FROM_SAVE
    assert result.fallback_reason.startswith("the content store has no blob")
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def engine_holds(normalized: Normalized, data_root: Path) -> None:
    """The normalised layers as blobs of the content store, as the engine keeps them once they are loaded."""
    for made in normalized.layers:
        assert made.path is not None
        tars.put_blob(data_root, made.path.read_bytes())


def normalise(layers: list[bytes], where: Path, previous: Normalized | None = None) -> Normalized:
    """``layers`` normalised from the content store under ``where / "root"`` (shared by the runs that share ``where``)."""
    image_id = tars.content_store_image(layers, tars.config(layers), where / "root")
    work = where / f"work-{len(list(where.glob('work-*')))}"
    work.mkdir(parents=True)
    image = stored_image(image_id, data_root=str(where / "root"))
    return normalize_stored(image, plan(layers, previous), work, what="test image")


def test_unchanged_layers_are_taken_from_the_content_store_and_the_image_is_the_same(tmp_path: Path) -> None:
    first = normalise(LAYERS, tmp_path)
    engine_holds(first, tmp_path / "root")
    rebuilt = [*BASE, EVERY_KIND, THIRD]  # the last step changed
    reused = normalise(rebuilt, tmp_path, previous=first)
    rewritten = normalise(rebuilt, tmp_path / "again")
    assert (reused.image_id, reused.config_bytes, reused.notes) == (rewritten.image_id, rewritten.config_bytes, rewritten.notes)
    assert [x.path is None for x in reused.layers] == [True, False]
    assert (reused.layers[0].size, reused.layers[0].entries) == (rewritten.layers[0].size, rewritten.layers[0].entries)
    assert reused.layers[1].path is not None
    assert rewritten.layers[1].path is not None
    assert reused.layers[1].path.read_bytes() == rewritten.layers[1].path.read_bytes()


def test_a_layer_the_content_store_no_longer_holds_is_rewritten(tmp_path: Path) -> None:
    first = normalise(LAYERS, tmp_path)
    again = normalise(LAYERS, tmp_path / "again", previous=first)  # its root holds none of first's layers
    assert [x.path is not None for x in again.layers] == [True, True]
    assert again.image_id == first.image_id


def test_a_rebuild_loads_only_what_changed(tmp_path: Path) -> None:
    engine, image_id = engine_with(tmp_path / "root")
    first = normalize_image(engine, image_id, plan(LAYERS), tmp_path / "spool")
    loaded = {info.name: data for info, data in tars.entries(engine.received[-1])}
    for note in first.layers:
        tars.put_blob(tmp_path / "root", loaded[f"blobs/sha256/{note.diff_id[7:]}"])
    rebuilt_engine, rebuilt_id = engine_with(tmp_path / "root", [*BASE, EVERY_KIND, THIRD])
    previous = replace(plan([*BASE, EVERY_KIND, THIRD]), previous=first.layers)
    again = normalize_image(rebuilt_engine, rebuilt_id, previous, tmp_path / "spool")
    assert (again.layers_reused, again.layers_rewritten) == (1, 1)
    carried = {info.name for info, _ in tars.entries(rebuilt_engine.received[-1])}
    assert f"blobs/sha256/{first.layers[0].diff_id[7:]}" not in carried  # named by the manifest, not sent
    sent = {info.name: data for info, data in tars.entries(rebuilt_engine.received[-1])}
    manifest = json.loads(sent[f"blobs/sha256/{again.engine_id[7:]}"])
    reused = loaded[f"blobs/sha256/{first.layers[0].diff_id[7:]}"]
    assert manifest["layers"][2] == {"mediaType": tars.PLAIN_LAYER, "digest": first.layers[0].diff_id, "size": len(reused)}


def test_what_the_base_holds_is_kept_and_read_back_the_same(tmp_path: Path) -> None:
    layers = [*BASE, layer([Item("srv/caf\udce9", data=b"x", pax={"SCHILY.xattr.user.k": "v\udcff"})]), SECOND]
    image_id = tars.content_store_image(layers, tars.config(layers), tmp_path / "root")
    image = stored_image(image_id, data_root=str(tmp_path / "root"))
    made = [layer_entries(x) for x in image.layers[:3]]
    kept = cached_entries(tmp_path / "cache", "sha256:" + "c" * 64, lambda: made)
    again = cached_entries(tmp_path / "cache", "sha256:" + "c" * 64, lambda: pytest.fail("made again"))
    for one, other in ((made, kept), (made, again)):
        assert [[(n, m, d() if d else None) for n, m, d in x] for x in one] == [[(n, m, d() if d else None) for n, m, d in x] for x in other]
    assert (tmp_path / "cache" / f"{'c' * 64}.v{FORMAT}.json.gz").stat().st_mode & 0o777 == 0o644


def test_a_damaged_cache_is_made_again(tmp_path: Path) -> None:
    (tmp_path / f"{'c' * 64}.v{FORMAT}.json.gz").write_bytes(b"\x1f\x8bnot gzip")
    assert cached_entries(tmp_path, "sha256:" + "c" * 64, lambda: [[]]) == [[]]
    assert cached_entries(tmp_path, "sha256:" + "c" * 64, lambda: pytest.fail("made again")) == [[]]


def test_a_normalisation_on_the_same_base_reads_what_the_first_kept_and_not_the_base_blobs(tmp_path: Path) -> None:
    engine, image_id = engine_with(tmp_path / "root")
    first = normalize_image(engine, image_id, plan(LAYERS), tmp_path / "spool")
    assert list((tmp_path / "spool" / LOWER_CACHE).glob("*.json.gz"))
    rebuilt_engine, rebuilt_id = engine_with(tmp_path / "root", [*BASE, EVERY_KIND, THIRD])
    for base_layer in engine.stored[image_id].layers[:2]:  # same size, not gzip: reading it would fail
        base_layer.blob.write_bytes(bytes(base_layer.blob.stat().st_size))  # type: ignore[union-attr]
    again = normalize_image(rebuilt_engine, rebuilt_id, plan([*BASE, EVERY_KIND, THIRD]), tmp_path / "spool")
    without = normalise([*BASE, EVERY_KIND, THIRD], tmp_path / "fresh")
    assert (first.read_from, again.read_from) == (FROM_CONTENT, FROM_CONTENT)
    assert again.image_id == without.image_id


def test_a_rebuild_reads_what_the_cold_normalisation_kept_of_the_blobs_it_read(tmp_path: Path) -> None:
    root, cache = tmp_path / "root", tmp_path / "cache"
    first_id = tars.content_store_image(LAYERS, tars.config(LAYERS), root)
    (tmp_path / "work-1").mkdir()
    first = normalize_stored(stored_image(first_id, data_root=str(root)), plan(LAYERS), tmp_path / "work-1",
                             what="test image", lower_cache=cache)  # fmt: skip
    engine_holds(first, root)
    rebuilt = [*BASE, EVERY_KIND, THIRD]
    image = stored_image(tars.content_store_image(rebuilt, tars.config(rebuilt), root), data_root=str(root))
    assert image.blobs is not None
    # EVERY_KIND's built blob and its normalised one: same size, other bytes, so reading either fails.
    for blob in (image.layers[2].blob, image.blobs / first.layers[0].diff_id.removeprefix("sha256:")):  # type: ignore[union-attr]
        blob.write_bytes(bytes(blob.stat().st_size))
    (tmp_path / "work-2").mkdir()
    again = normalize_stored(image, plan(rebuilt, first), tmp_path / "work-2", what="test image", lower_cache=cache)
    assert [x.path is None for x in again.layers] == [True, False]  # EVERY_KIND's taken from the engine
    assert again.image_id == normalise(rebuilt, tmp_path / "fresh").image_id
