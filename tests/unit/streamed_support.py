"""The image the streamed-load tests normalise: a hand-made overlay2 store of a two-layer base and four
build layers (one that reduces to nothing), and its plan."""

from __future__ import annotations

import tarfile
from dataclasses import replace
from pathlib import Path

from imagebuild.engine.interface import StoredImage
from imagebuild.normalize.model import LayerPlan
from tests.unit import imagetars as tars
from tests.unit.imagetars import BASE, EVERY_KIND, Item, layer

UNCHANGED = layer([Item("app/", tarfile.DIRTYPE, mode=0o755)])  # reduces to nothing: an empty layer
SECOND = layer([Item("app/", tarfile.DIRTYPE, mode=0o755), Item("app/v.txt", data=b"1\n"), Item("etc/.wh.os-release")])
# A file of EVERY_KIND's written again with the same bytes (left out, its digest compared) and a new one.
THIRD = layer([Item("app/big.bin", data=bytes(2304000), mode=0o644), Item("srv/new", data=b"new\n")])
LAYERS = [*BASE, EVERY_KIND, UNCHANGED, SECOND, THIRD]
EPOCHS = (tars.EPOCH - 300, tars.EPOCH - 200, tars.EPOCH - 100, tars.EPOCH)
PLAN = LayerPlan(
    layers=tuple(tars.digest(d) for d in LAYERS), base_layers=2, base_history=3, epochs=EPOCHS, created=tars.EPOCH
)


def store(where: Path, layers: list[bytes] = LAYERS) -> StoredImage:
    """The image in a hand-made overlay2 store, with a layer database (which the streamed path asks for)."""
    (where / "layerdb").mkdir(parents=True)
    return replace(tars.stored_image(layers, tars.config(layers), where / "store"), layer_db=where / "layerdb")
