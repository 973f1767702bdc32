"""Normalising from ``docker save``: every engine can give it (the containerd image store only this)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

from imagebuild.engine.saved_image import ArchiveError, read_saved_image
from imagebuild.normalize.canonical import LayerReducer
from imagebuild.normalize.load_archive import OCI_LAYER
from imagebuild.normalize.lower import Digest, Meta, lower_state, scan_layer
from imagebuild.normalize.model import (
    LayerPlan,
    Normalized,
    NormalizedLayer,
    NormalizeFailure,
    assemble,
)
from imagebuild.normalize.rewrite import LayerError, rewrite_layer
from imagebuild.util.streams import spool


@dataclass(frozen=True, kw_only=True)
class _Spooled:
    diff_id: str
    path: Path | None  # None: a base layer, dropped
    size: int


def normalize_saved(saved: BinaryIO, plan: LayerPlan, workdir: Path, *, what: str) -> Normalized:
    """Read a saved image from ``saved`` and rewrite its build layers into ``workdir``.

    Every layer is spooled while it is hashed; a base layer is then scanned (its entries and their
    content digests: what the build's layers are reduced against) and dropped at once, so the spool
    holds one base layer at most besides the build's. Reading the base costs a second read of each
    base layer: the layer store path (from_store) reads none of it.
    """
    # Dropped from the spool at once; a layer that is also one the build made (two empty ones) is kept.
    base = set(plan.kept) - set(plan.layers[plan.base_layers :])
    counter = iter(range(1 << 30))
    spooled_bytes = [0, 0]  # now, peak

    scanned: dict[str, list[tuple[str, Meta, Digest | None]]] = {}  # base layer -> its entries

    def take(name: str, data: BinaryIO) -> _Spooled:
        path = workdir / f"raw-{next(counter)}.tar"
        diff_id, size = spool(data, path)
        spooled_bytes[1] = max(spooled_bytes[1], spooled_bytes[0] + size)
        if diff_id in base:
            with path.open("rb") as layer:  # what is below the build's layers: read once more, then gone
                scanned[diff_id] = scan_layer(layer, digests=True)
            path.unlink()
            return _Spooled(diff_id=diff_id, path=None, size=size)
        spooled_bytes[0] += size
        return _Spooled(diff_id=diff_id, path=path, size=size)

    started = time.monotonic()
    try:
        # The base's layers are read too: reducing the build's layers needs what is below them.
        image = read_saved_image(saved, take, what=what)
    except ArchiveError as e:
        raise NormalizeFailure(str(e)) from e
    read_done = time.monotonic()
    if image.diff_ids != plan.layers:
        msg = f"{what}: the saved layers are not the ones the engine reported for the image"
        raise NormalizeFailure(msg)
    built = image.layers[plan.base_layers :]
    rewritten: list[NormalizedLayer] = []
    steps = plan.build_layers(image.config, what)
    lower = lower_state(scanned[d] for d in plan.kept)
    for index, (layer, step) in enumerate(zip(built, steps, strict=True)):
        assert layer.path is not None
        out = workdir / f"layer-{index}.tar"
        try:
            with layer.path.open("rb") as source, out.open("wb") as sink:
                result = rewrite_layer(
                    source,
                    sink,
                    step.epoch,
                    what=f"{what} layer {plan.base_layers + index}",
                    reducer=LayerReducer(lower, step.epoch),
                    pin_times=step.copies_context,
                )
        except LayerError as e:
            raise NormalizeFailure(str(e)) from e
        lower.apply(result.held, result.written_mtimes)
        spooled_bytes[0] += result.size
        spooled_bytes[1] = max(spooled_bytes)
        if not any(layer.path == other.path for other in built[index + 1 :]):
            layer.path.unlink()  # identical layers (two empty ones) share one spool file
            spooled_bytes[0] -= layer.size
        # The save path reuses nothing (normalize.reuse reads the engine's store): no facts to keep.
        rewritten.append(replace(NormalizedLayer.written(result, out, step), facts=None))
    return assemble(
        image.config,
        plan,
        rewritten,
        spool_peak=spooled_bytes[1],
        read_seconds=round(read_done - started, 3),
        rewrite_seconds=round(time.monotonic() - read_done, 3),
        base_descriptors=image.layer_descriptors[: plan.base_layers]
        or tuple(
            {"mediaType": OCI_LAYER, "digest": layer.diff_id, "size": layer.size}
            for layer in image.layers[: plan.base_layers]
        ),
    )


