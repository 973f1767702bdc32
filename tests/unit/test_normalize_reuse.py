"""Build layers normalised by the last run from the same inputs are taken from the engine, with the
same result as rewriting them."""

from __future__ import annotations

import tarfile
from dataclasses import replace
from pathlib import Path

from imagebuild.engine.chain_ids import chain_ids
from imagebuild.engine.interface import StoredImage
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


def normalise(layers: list[bytes], where: Path, *, previous: Normalized | None = None, db: Path | None = None) -> Normalized:
    image: StoredImage = replace(tars.stored_image(layers, tars.config(layers), where / "store"), layer_db=db)
    (where / "work").mkdir()
    the_plan = replace(plan(layers), previous=previous.notes if previous else ())
    return normalize_stored(image, the_plan, where / "work", what="test image")


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
