"""Build layers normalised by the last run from the same inputs are taken from the engine, with the
same result as rewriting them."""

from __future__ import annotations

import os
import tarfile
from dataclasses import replace
from pathlib import Path

from imagebuild.engine.chain_ids import chain_ids
from imagebuild.engine.interface import StoredImage, StoredLayer
from imagebuild.normalize.from_store import normalize_stored
from imagebuild.normalize.model import LayerPlan, Normalized
from tests.unit import imagetars as tars
from tests.unit.imagetars import BASE, EVERY_KIND, Item, layer

UNCHANGED = layer([Item("app/", tarfile.DIRTYPE, mode=0o755)])  # reduces to nothing: an empty layer
SECOND = layer([Item("app/", tarfile.DIRTYPE, mode=0o755), Item("app/v.txt", data=b"1\n")])
# Above the reused layers: a file of theirs written again with other bytes (its parent keeps the time
# the normalised layer below gave it), one with the same bytes (left out), and a new one.
THIRD = layer(
    [
        Item("app/", tarfile.DIRTYPE, mode=0o755),
        Item("app/big.bin", data=b"other\n", mode=0o755),
        Item("app/v.txt", data=b"1\n"),
        Item("srv/", tarfile.DIRTYPE, mode=0o755),
        Item("srv/new", data=b"new\n"),
    ]
)
EPOCHS = (tars.EPOCH - 300, tars.EPOCH - 200, tars.EPOCH - 100, tars.EPOCH)


def plan(layers: list[bytes]) -> LayerPlan:
    return LayerPlan(
        layers=tuple(tars.digest(d) for d in layers), base_layers=2, base_history=3, epochs=EPOCHS, created=tars.EPOCH
    )


def engine_holds(normalized: Normalized, where: Path) -> Path:
    """A layer database holding ``normalized``'s layers (as the engine keeps the last normalised image)."""
    chains = chain_ids(normalized.diff_ids)
    for layer_file in normalized.layers:
        assert layer_file.path is not None
        record = where / chains[normalized.diff_ids.index(layer_file.diff_id)].removeprefix("sha256:")
        record.mkdir(parents=True)
        (record / "diff").write_text(layer_file.diff_id)
        (record / "tar-split.json.gz").write_bytes(tars.tar_split_record(layer_file.path.read_bytes()))
    return where


def normalise(
    layers: list[bytes],
    where: Path,
    *,
    previous: Normalized | None = None,
    db: Path | None = None,
    cache: Path | None = None,
    emptied: tuple[int, ...] = (),
) -> Normalized:
    """``layers`` normalised from a hand-made store; ``emptied``: the layers whose tar-split records are
    emptied first (nothing can be read from them)."""
    image: StoredImage = replace(tars.stored_image(layers, tars.config(layers), where / "store"), layer_db=db)
    for number in emptied:
        stored = image.layers[number]
        assert isinstance(stored, StoredLayer)
        stored.tar_split.write_bytes(b"")
    (where / "work").mkdir()
    the_plan = replace(plan(layers), previous=previous.notes if previous else ())
    return normalize_stored(image, the_plan, where / "work", what="test image", lower_cache=cache)


def test_the_unchanged_layers_are_taken_from_the_engine_and_the_image_is_the_same(tmp_path: Path) -> None:
    first = normalise([*BASE, EVERY_KIND, UNCHANGED, SECOND, layer([Item("x", data=b"1")])], tmp_path / "1")
    db = engine_holds(first, tmp_path / "layerdb")
    rebuilt = [*BASE, EVERY_KIND, UNCHANGED, SECOND, THIRD]  # the last step changed
    reused = normalise(rebuilt, tmp_path / "2", previous=first, db=db)
    rewritten = normalise(rebuilt, tmp_path / "3")

    assert reused.image_id == rewritten.image_id
    assert reused.config_bytes == rewritten.config_bytes
    assert reused.notes == rewritten.notes
    assert [layer.path is None for layer in reused.layers] == [True, True, False]  # the empty one is dropped
    assert reused.layers[-1].path is not None
    assert rewritten.layers[-1].path is not None
    assert reused.layers[-1].path.read_bytes() == rewritten.layers[-1].path.read_bytes()
    assert [n.diff_id for n in first.notes[:3]] == [n.diff_id for n in reused.notes[:3]]
    assert reused.notes[1].diff_id == ""  # UNCHANGED held nothing


def test_what_reused_layers_held_and_wrote_is_kept_so_the_next_rebuild_reads_none_of_their_headers(
    tmp_path: Path,
) -> None:
    first = normalise([*BASE, EVERY_KIND, UNCHANGED, SECOND, layer([Item("x", data=b"1")])], tmp_path / "1")
    db = engine_holds(first, tmp_path / "layerdb")
    rebuilt = [*BASE, EVERY_KIND, UNCHANGED, SECOND, THIRD]
    cache = tmp_path / "lower-state"
    reused = normalise(rebuilt, tmp_path / "2", previous=first, db=db, cache=cache)
    kept = sorted(path.name for path in cache.iterdir())
    # Read for EVERY_KIND and SECOND, and kept by THIRD's rewrite.
    assert len([name for name in kept if name.endswith(".times.json.gz")]) == 3
    assert len([name for name in kept if name.endswith(".headers.json.gz")]) == 5  # the base, the 3 reused, THIRD

    # Nothing can be read of the reused layers any more, built or normalised (the engine still holds
    # the normalised ones): what they held and wrote comes from the cache, and the image is the same.
    for record in db.glob("*/tar-split.json.gz"):
        record.write_bytes(b"")
    again = normalise(rebuilt, tmp_path / "3", previous=first, db=db, cache=cache, emptied=(2, 3, 4))
    assert again.image_id == reused.image_id == normalise(rebuilt, tmp_path / "4").image_id
    assert [layer.path is None for layer in again.layers] == [True, True, False]


def test_the_first_rebuild_reads_what_the_cold_normalisation_kept(tmp_path: Path) -> None:
    cache = tmp_path / "lower-state"
    first = normalise([*BASE, EVERY_KIND, UNCHANGED, SECOND, layer([Item("x", data=b"1")])], tmp_path / "1", cache=cache)
    kept = sorted(path.name for path in cache.iterdir())
    assert len([name for name in kept if name.endswith(".times.json.gz")]) == 3  # the layers that hold anything
    assert len([name for name in kept if name.endswith(".headers.json.gz")]) == 5  # the base, the 4 build layers

    # Nothing can be read of the built or normalised layers but what the cold normalisation kept.
    db = engine_holds(first, tmp_path / "layerdb")
    for record in db.glob("*/tar-split.json.gz"):
        record.write_bytes(b"")
    rebuilt = [*BASE, EVERY_KIND, UNCHANGED, SECOND, THIRD]
    again = normalise(rebuilt, tmp_path / "2", previous=first, db=db, cache=cache, emptied=(2, 3, 4))
    assert again.image_id == normalise(rebuilt, tmp_path / "3").image_id
    assert [layer.path is None for layer in again.layers] == [True, True, False]


def test_kept_facts_that_cannot_be_read_are_made_again_and_old_ones_are_removed(tmp_path: Path) -> None:
    first = normalise([*BASE, EVERY_KIND, UNCHANGED, SECOND, layer([Item("x", data=b"1")])], tmp_path / "1")
    db = engine_holds(first, tmp_path / "layerdb")
    rebuilt = [*BASE, EVERY_KIND, UNCHANGED, SECOND, THIRD]
    cache = tmp_path / "lower-state"
    reused = normalise(rebuilt, tmp_path / "2", previous=first, db=db, cache=cache)
    for kept in cache.glob("*.times.json.gz"):
        kept.write_bytes(b"not gzip")
    stale = cache / "0123.v1.times.json.gz"
    stale.write_bytes(b"")
    os.utime(stale, (0, 0))  # untouched since 1970
    again = normalise(rebuilt, tmp_path / "3", previous=first, db=db, cache=cache)
    assert again.image_id == reused.image_id
    assert not stale.exists()
    for kept in cache.glob("*.times.json.gz"):
        assert kept.read_bytes()[:2] == b"\x1f\x8b"  # made again


def test_a_layer_the_engine_no_longer_holds_is_rewritten_and_so_is_every_layer_above(tmp_path: Path) -> None:
    layers = [*BASE, EVERY_KIND, UNCHANGED, SECOND, THIRD]
    first = normalise(layers, tmp_path / "1")
    db = engine_holds(first, tmp_path / "layerdb")
    (db / chain_ids(first.diff_ids)[2].removeprefix("sha256:") / "diff").unlink()  # EVERY_KIND's is gone
    again = normalise(layers, tmp_path / "2", previous=first, db=db)
    assert [layer.path is not None for layer in again.layers] == [True, True, True]
    assert again.image_id == first.image_id


def test_another_epoch_below_means_rewriting_from_there(tmp_path: Path) -> None:
    layers = [*BASE, EVERY_KIND, UNCHANGED, SECOND, THIRD]
    first = normalise(layers, tmp_path / "1")
    db = engine_holds(first, tmp_path / "layerdb")
    moved = replace(first, notes=(first.notes[0], replace(first.notes[1], epoch=1), *first.notes[2:]))
    again = normalise(layers, tmp_path / "2", previous=moved, db=db)
    assert [layer.path is None for layer in again.layers] == [True, False, False]
    assert again.image_id == first.image_id
