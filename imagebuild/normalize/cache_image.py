"""The next build's layer cache kept once: the built image's config over the normalised layers.

The classic builder takes a step from its cache when an image it holds, or one named in the build's
``cache_from``, has the same parent and the step's command as the history entry's ``created_by``.
The normalised image cannot serve as that cache: its history names a ``COPY`` by its normalised
layer, where the builder compares its own ``COPY dir:<hash>`` (imagebuild.normalize.config). The
built image can, but keeps every build layer a second time beside the normalised ones.

So once the image is normalised, imagebuild loads one more config, the cache image: the built
image's config and history over the normalised image's layers, with ``empty_layer`` marking each
step whose layer normalisation dropped (the builder counts layers by history). Only the config is
sent, and on the containerd store a manifest naming the normalised image's layers: the engine holds
every layer already. The built image is then removed, so the engine keeps the build's layers once.

The next build names the cache image in ``cache_from``. The steps it serves come back as the
normalised layers, under their normalised diffIDs, and normalisation takes them as they are
(``LayerPlan.normalized``): rewriting a normalised layer again would reduce it against normalised
layers below it, which is not what a cold build does. The layers the build makes above them are the
ones a cold build makes (their lower files' times differ only in what the epoch clamps).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from imagebuild.normalize.load_archive import legacy_chunks, oci_chunks
from imagebuild.normalize.model import ImageStore, NormalizeFailure


def cache_config(built: bytes, normalized: bytes) -> bytes:
    """The cache image's config: ``built``'s, with ``normalized``'s layers and its dropped layers' steps
    marked ``empty_layer``. NormalizeFailure when the two are not one build's."""
    try:
        built_config, normalized_config = json.loads(built), json.loads(normalized)
        built_history, normalized_history = built_config["history"], normalized_config["history"]
        diff_ids = normalized_config["rootfs"]["diff_ids"]
    except (ValueError, TypeError, KeyError) as e:
        msg = f"the built and normalised configs cannot make a layer cache image: {e!r}"
        raise NormalizeFailure(msg) from e
    if len(built_history) != len(normalized_history):
        msg = f"the built image has {len(built_history)} history entries, its normalised image {len(normalized_history)}"
        raise NormalizeFailure(msg)
    history = [
        {**entry, "empty_layer": True} if made.get("empty_layer") and not entry.get("empty_layer") else entry
        for entry, made in zip(built_history, normalized_history, strict=True)
    ]
    layers = sum(not entry.get("empty_layer") for entry in history)
    if layers != len(diff_ids):
        msg = f"the cache image's history names {layers} layers, the normalised image has {len(diff_ids)}"
        raise NormalizeFailure(msg)
    config: dict[str, Any] = {**built_config, "rootfs": normalized_config["rootfs"], "history": history}
    return json.dumps(config, separators=(",", ":")).encode()


def load_cache_image(store: ImageStore, built_id: str, normalized_id: str) -> str:
    """Load the cache image of ``built_id`` over the layers of ``normalized_id`` (both engine IDs); its
    engine ID. NormalizeFailure when the engine's store cannot give the configs or the load fails."""
    built, normalized = store.stored_image(built_id), store.stored_image(normalized_id)
    if built.config is None or normalized.config is None:
        msg = built.unavailable or normalized.unavailable or "the engine's store holds no config for them"
        raise NormalizeFailure(msg)
    try:
        config = cache_config(built.config.read_bytes(), normalized.config.read_bytes())
        manifest = normalized.manifest.read_bytes() if normalized.manifest is not None else None
    except OSError as e:
        msg = f"cannot read the configs from the engine's store: {e}"
        raise NormalizeFailure(msg) from e
    if store.store().ids_are_manifests:
        if manifest is None:
            msg = "the containerd store gave no manifest of the normalised image"
            raise NormalizeFailure(msg)
        manifest = _with_config(manifest, config)
        engine_id, chunks = _digest(manifest), oci_chunks(config, manifest, ())
    else:
        diff_ids = json.loads(config)["rootfs"]["diff_ids"]
        engine_id, chunks = _digest(config), legacy_chunks(config, diff_ids, ())
    loaded = store.load(chunks)
    if engine_id not in loaded:
        msg = f"the engine loaded {', '.join(loaded) or 'nothing'} instead of the layer cache image {engine_id[:19]}"
        raise NormalizeFailure(msg)
    return engine_id


def _with_config(manifest: bytes, config: bytes) -> bytes:
    """The normalised image's manifest (the layers the engine holds it by), naming ``config`` instead."""
    document = json.loads(manifest)
    document["config"] = {**document["config"], "digest": _digest(config), "size": len(config)}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
