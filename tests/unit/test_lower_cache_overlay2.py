"""What an overlay2 base holds is kept by its chain ID, headers only: the next normalisation on that base
reads it back instead of scanning the tar-split records, keeps no digest (that would read every file of
the base) and still compares a rewritten file's content with the base's, from the layer's directory."""

from __future__ import annotations

import gzip
import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.engine.chain_ids import chain_ids
from imagebuild.engine.interface import StoredImage
from imagebuild.normalize import from_store
from imagebuild.normalize.from_store import normalize_stored
from imagebuild.normalize.model import LayerPlan
from tests.unit import imagetars as tars
from tests.unit.imagetars import BASE, EVERY_KIND, Item, layer

# Writes a file of EVERY_KIND's (in the base here) again with the same bytes: left out only when the
# two digests are compared.
ABOVE = layer([Item("app/big.bin", data=bytes(range(256)) * 9000, mode=0o755), Item("app/v.txt", data=b"2\n"), Item("srv/new", data=b"n\n")])
LOWER = [*BASE, EVERY_KIND]
LAYERS = [*LOWER, ABOVE]
PLAN = LayerPlan(layers=tuple(tars.digest(d) for d in LAYERS), base_layers=3, base_history=4, epochs=(tars.EPOCH,), created=tars.EPOCH)


def image(where: Path) -> StoredImage:
    return replace(tars.stored_image(LAYERS, tars.config(LAYERS), where / "store"), layer_db=where / "db")


def test_the_second_normalisation_reads_the_base_from_the_cache_and_gives_the_same_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored, cache = image(tmp_path), tmp_path / "cache"
    uncached = normalize_stored(stored, PLAN, tmp_path, what="test image")
    first = normalize_stored(stored, PLAN, tmp_path, what="test image", lower_cache=cache)
    kept = cache / (chain_ids(PLAN.kept)[-1].removeprefix("sha256:") + ".v1.headers.json.gz")
    # Beside the base's stack: what the build layer held and the times its normalised layer wrote.
    assert sorted(path.name for path in cache.iterdir()) == sorted(
        [kept.name, f"{PLAN.layers[-1].removeprefix('sha256:')}.v1.headers.json.gz",
         f"{first.layers[-1].diff_id.removeprefix('sha256:')}.v1.times.json.gz"]
    )  # fmt: skip
    document = json.loads(gzip.decompress(kept.read_bytes()))
    assert len(document) == 3
    assert all(item[-1] is None for layer in document for item in layer)  # no digest kept

    def no_scan(*_: object) -> None:
        pytest.fail("the base was scanned again")

    monkeypatch.setattr(from_store, "layer_entries", no_scan)
    again = normalize_stored(stored, PLAN, tmp_path, what="test image", lower_cache=cache)
    assert uncached.image_id == first.image_id == again.image_id
    [written] = again.layers
    assert written.path is not None
    with tarfile.open(written.path) as tar:  # the same bytes were compared (from the directory) and left out
        assert tar.getnames() == ["app/v.txt", "srv/new"]
