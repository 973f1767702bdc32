"""Where a local Docker engine with the overlay2 driver keeps an image: used by engine.docker (and
``held_layer`` by normalisation, to find a layer an earlier run loaded).

``docker save`` exports the whole image, and Docker 20.10 writes all of it to
its data root first; normalisation needs only the layers the build made. The
engine keeps each layer as a directory of files (overlay2's ``diff``) plus a
tar-split record of the tar it was committed as (headers, order, padding), and
rebuilds exactly that tar from the two on ``save``. When this process can read
the data root, imagebuild.engine.tar_split does the same for just the layers it
needs.

Everything is checked against the engine's own answers before it is used: the
driver's directories (``GraphDriver.Data`` of ``docker image inspect``, top
first) must be the ones the layer database names for the image's chain IDs,
and the stored config must hash to the image ID. The layer tars themselves are
checked against their diffIDs while they are read. Anything unexpected gives
``unavailable`` with the reason, and the caller uses ``save``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from imagebuild.engine.chain_ids import chain_ids
from imagebuild.engine.interface import StoredImage, StoredLayer

DRIVER = "overlay2"


def stored_image(image_id: str, *, inspected: Mapping[str, Any], data_root: str) -> StoredImage:
    """The image's config and layers in the data root, or ``unavailable`` saying why not.

    ``inspected`` is the engine's answer to ``docker image inspect``.
    """
    graph_driver = inspected.get("GraphDriver") or {}
    driver = str(graph_driver.get("Name") or "")
    driver_data = {str(k): str(v) for k, v in (graph_driver.get("Data") or {}).items()}
    diff_ids: Sequence[str] = tuple((inspected.get("RootFS") or {}).get("Layers") or ())
    if driver != DRIVER:
        return StoredImage(unavailable=f"the engine's storage driver is {driver or 'unknown'}, not {DRIVER}")
    store = Path(data_root) / "image" / DRIVER
    config = store / "imagedb" / "content" / "sha256" / image_id.removeprefix("sha256:")
    # Top first, as overlayfs stacks them; an image of one layer has no LowerDir.
    top_first = [driver_data.get("UpperDir", ""), *filter(None, driver_data.get("LowerDir", "").split(":"))]
    directories = [Path(d) for d in reversed(top_first)]
    if len(directories) != len(diff_ids) or not all(
        d.is_absolute() and d.name == "diff" for d in directories
    ):
        return StoredImage(
            unavailable=f"{DRIVER} reports {len(directories)} layer directories for {len(diff_ids)} layers"
        )
    try:
        if hashlib.sha256(config.read_bytes()).hexdigest() != image_id.removeprefix("sha256:"):
            return StoredImage(unavailable=f"{config} is not the config of {image_id[:19]}")
        layers = tuple(
            _layer(store, diff_id, chain, directory)
            for diff_id, chain, directory in zip(diff_ids, chain_ids(diff_ids), directories, strict=True)
        )
    except (OSError, UnicodeDecodeError) as e:
        return StoredImage(unavailable=f"cannot read the engine's data root {data_root}: {e}")
    except _Mismatch as e:
        return StoredImage(unavailable=str(e))
    if not os.access(layers[-1].files, os.R_OK | os.X_OK):
        return StoredImage(unavailable=f"cannot read the engine's layer directory {layers[-1].files}")
    return StoredImage(config=config, layers=layers, layer_db=store / "layerdb" / "sha256")


def held_layer(layer_db: Path, chain: str, diff_id: str) -> Path | None:
    """The tar-split record of the layer the engine holds under ``chain``, when it is ``diff_id``."""
    record = layer_db / chain.removeprefix("sha256:")
    try:
        if (record / "diff").read_text(encoding="ascii").strip() != diff_id:
            return None
    except (OSError, UnicodeDecodeError):
        return None
    return record / "tar-split.json.gz"


class _Mismatch(Exception):
    pass


def _layer(store: Path, diff_id: str, chain: str, directory: Path) -> StoredLayer:
    """One layer, its directory confirmed by the layer database (``layerdb/sha256/<chain ID>``)."""
    record = store / "layerdb" / "sha256" / chain.removeprefix("sha256:")
    if (record / "diff").read_text(encoding="ascii").strip() != diff_id:
        msg = f"the layer database entry {record} is not layer {diff_id[:19]}"
        raise _Mismatch(msg)
    if (record / "cache-id").read_text(encoding="ascii").strip() != directory.parent.name:
        msg = f"{DRIVER} names {directory} for layer {diff_id[:19]}, the layer database another directory"
        raise _Mismatch(msg)
    return StoredLayer(
        diff_id=diff_id, files=directory, tar_split=record / "tar-split.json.gz", held_bytes=_held_bytes(record)
    )


def _held_bytes(record: Path) -> int | None:
    """The bytes of the layer's files, from its ``size`` record (a hint: None when absent or unreadable)."""
    try:
        return int((record / "size").read_text(encoding="ascii").strip())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
