"""The streamed load in segments: each load carries only its own layers and ends once the load before
it has registered (a load finds earlier layers by their chain, as docker load does), the image is the
one a single load gives, the images the segments leave are removed, and a failure anywhere cuts the
loads not yet ended and removes what the others left."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from imagebuild.engine.chain_ids import chain_ids
from imagebuild.errors import EngineError
from imagebuild.normalize.model import StoreReadFailure
from imagebuild.normalize.streamed_load import normalize_into_load
from imagebuild.testing.archives import untarred
from tests.unit.streamed_support import PLAN, store

REGISTER_S = 0.2  # registering a layer takes this long: a chain is there only after it


class ChainEngine:
    """docker load as far as chains go: the archive unpacked whole, then each layer of the config found
    by its chain, or read from its file, which must hash to its diffID; a load's image is its config."""

    def __init__(self, held: Iterable[str], refuse: int | None = None) -> None:
        self.chains = set(held)
        self.images: set[str] = set()
        self.archives: list[dict[str, bytes]] = []
        self.cut = 0  # archives that ended before their manifest
        self.removed: list[str] = []
        self._refuse, self._lock = refuse, threading.Lock()

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        try:
            files = untarred(b"".join(chunks))
        except Exception:
            with self._lock:
                self.cut += 1
            raise
        if "manifest.json" not in files:
            with self._lock:
                self.cut += 1
            msg = "open manifest.json: no such file or directory"
            raise EngineError(msg)
        with self._lock:
            number = len(self.archives)  # in the order they arrived whole
            self.archives.append(files)
        if number == self._refuse:
            msg = "no space left on device"
            raise EngineError(msg)
        (manifest,) = json.loads(files["manifest.json"])
        config_bytes = files[manifest["Config"]]
        diff_ids = json.loads(config_bytes)["rootfs"]["diff_ids"]
        for chain, diff_id, member in zip(chain_ids(diff_ids), diff_ids, manifest["Layers"], strict=True):
            if chain in self.chains:
                continue
            if member not in files:
                msg = f"open {member}: no such file or directory"
                raise EngineError(msg)
            assert "sha256:" + hashlib.sha256(files[member]).hexdigest() == diff_id
            time.sleep(REGISTER_S)
            self.chains.add(chain)
        image_id = "sha256:" + hashlib.sha256(config_bytes).hexdigest()
        self.images.add(image_id)
        return [image_id]

    def remove(self, image_id: str) -> None:
        self.removed.append(image_id)
        self.images.discard(image_id)


def engine_for(**refuse: int) -> ChainEngine:
    return ChainEngine(chain_ids(PLAN.layers[: PLAN.base_layers]), **refuse)


def test_each_load_carries_its_own_layer_and_the_image_is_the_one_load_gives(tmp_path: Path) -> None:
    one, segments = engine_for(), engine_for()
    whole, loaded_whole, _ = normalize_into_load(
        store(tmp_path / "a"), PLAN, one.load, what="test image", remove=one.remove
    )
    image, loaded, _ = normalize_into_load(
        store(tmp_path / "b"), PLAN, segments.load, what="test image", segment_bytes=1, remove=segments.remove
    )

    assert (image.image_id, image.config_bytes) == (whole.image_id, whole.config_bytes)
    assert loaded == loaded_whole == [image.image_id]
    assert len(one.archives) == 1
    carried = [sorted(name for name in files if name.startswith("build-")) for files in segments.archives]
    assert carried == [["build-2/layer.tar"], ["build-4/layer.tar"], ["build-5/layer.tar"]]
    # The first two loads left images of the layers so far; removed, the image is what is left.
    assert len(segments.removed) == 2
    assert segments.images == {image.image_id}
    assert segments.cut == 0


def test_small_layers_go_in_one_load(tmp_path: Path) -> None:
    engine = engine_for()
    normalize_into_load(store(tmp_path), PLAN, engine.load, what="test image", remove=engine.remove)
    assert (len(engine.archives), engine.removed) == (1, [])


def test_a_refused_load_cuts_the_later_ones_and_what_loaded_is_removed(tmp_path: Path) -> None:
    engine = engine_for(refuse=1)
    before = threading.active_count()
    with pytest.raises(EngineError, match="no space left on device"):
        normalize_into_load(
            store(tmp_path), PLAN, engine.load, what="test image", segment_bytes=1, remove=engine.remove
        )
    assert engine.images == set()  # the first load's image removed again
    assert len(engine.removed) == 1
    assert threading.active_count() == before


def test_a_layer_that_fails_its_check_cuts_the_open_load_and_removes_what_loaded(tmp_path: Path) -> None:
    image = store(tmp_path)
    (tmp_path / "store" / "5" / "diff" / "srv" / "new").write_bytes(
        b"old\n"
    )  # the last layer: same size, other content
    engine = engine_for()
    with pytest.raises(StoreReadFailure, match=r"layer 5: .* gives sha256"):
        normalize_into_load(
            image, PLAN, engine.load, what="test image", segment_bytes=1, remove=engine.remove
        )
    assert engine.images == set()
    assert len(engine.removed) == 2  # the two loads before it had registered
    assert engine.cut == 1
