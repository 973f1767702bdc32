"""Hand-made images for the normaliser's tests: a two-layer base, two build layers, their plan."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

from imagebuild.normalize.from_save import normalize_saved
from imagebuild.normalize.model import LayerPlan
from tests.unit.imagetars import AFTER, BEFORE, EPOCH, Item, digest, layer

BASE = [
    layer([Item("etc/", tarfile.DIRTYPE, mode=0o755, mtime=AFTER), Item("etc/os-release", data=b"base\n")]),
    layer([Item("usr/bin/python3", data=b"py", mode=0o755)]),
]
EPOCHS = (EPOCH, EPOCH + 3600)


def built(shift: int = 0) -> list[bytes]:
    """Two build layers; ``shift`` moves every build-time mtime, as a second build would."""
    return [
        layer(
            [Item("app/", tarfile.DIRTYPE, mode=0o755, mtime=AFTER + shift), Item("app/v.txt", data=b"1\n")]
        ),
        layer(
            [
                Item("app/v.txt", data=b"1\n2\n", mtime=AFTER + shift),
                Item("etc/.wh.os-release"),
                Item("src/", tarfile.DIRTYPE, mtime=BEFORE),
            ]
        ),
    ]


def plan(layers: list[bytes]) -> LayerPlan:
    return LayerPlan(
        layers=tuple(digest(d) for d in layers),
        base_layers=2,
        base_history=3,
        epochs=EPOCHS,
        created=EPOCHS[-1],
    )


def normalize(archive: bytes, tmp_path: Path, layers: list[bytes]) -> Any:
    work = tmp_path / "work"
    work.mkdir(parents=True, exist_ok=True)
    return normalize_saved(io.BytesIO(archive), plan(layers), work, what="test image")
