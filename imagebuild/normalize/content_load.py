"""Normalising from the containerd store's content store into the engine's load, a layer at a time.

Its load takes an OCI image layout, which names each blob by its digest, so a rewritten layer is
spooled first (imagebuild.normalize.from_store.rewrite_to): its digest is known once it is written.
But each one goes into the load as soon as it is spooled (and leaves the spool), while the next is
rewritten, and the config, the manifest and the index naming them come last (the engine reads the
index once the whole archive is there). The engine ingests one layer's blob while the next is
rewritten, instead of after all of them, and the spool holds one layer at a time, not all of them.
A failure cuts the stream before its index, so the engine loads nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from imagebuild.engine.interface import BlobLayer, StoredImage, StoredLayer
from imagebuild.normalize.config import BuildLayer
from imagebuild.normalize.from_store import normalize_stored, rewrite_to
from imagebuild.normalize.load_archive import blob_digest, oci_blob, oci_end, oci_manifest, oci_start
from imagebuild.normalize.lower import LowerState
from imagebuild.normalize.model import LayerPlan, Normalized, NormalizedLayer, NormalizeFailure
from imagebuild.util.pushed import PushedChunks


def normalize_into_content_load(
    image: StoredImage,
    plan: LayerPlan,
    load: Callable[[Iterable[bytes]], list[str]],
    workdir: Path,
    *,
    what: str,
    lower_cache: Path | None = None,
) -> tuple[Normalized, list[str], str, dict[str, float]]:
    """Normalise ``image`` (read from the containerd store's content store) while ``load`` sends it.

    Returns the normalised image, what the engine says it loaded, the ID it gives the image (the
    digest of the manifest written here) and the phases: ``rewrite``, until the last layer was
    rewritten and sent, during which the engine ingested what came; ``load``, the engine's work after.
    """
    started = time.monotonic()
    written: list[float] = []
    spooled: list[int] = [0]

    def write(sink: PushedChunks[tuple[Normalized, str]]) -> tuple[Normalized, str]:
        for chunk in oci_start():
            sink.write(chunk)

        def sent(
            layer: StoredLayer | BlobLayer, step: BuildLayer, lower: LowerState, number: int, _: tuple[str, ...]
        ) -> NormalizedLayer:
            made = rewrite_to(layer, step, lower, workdir / f"layer-{number}.tar", what=f"{what} layer {number}")
            if made.path is None:
                return made
            if made.entries:  # an empty one is dropped: not carried
                for chunk in oci_blob(made.diff_id, made.path):
                    sink.write(chunk)
                spooled.append(made.size)
            made.path.unlink()  # sent: the spool holds one layer at a time
            return replace(made, path=None, member=f"blobs/sha256/{made.diff_id.removeprefix('sha256:')}")

        normalized = normalize_stored(image, plan, workdir, what=what, lower_cache=lower_cache, write_layer=sent)
        if len(normalized.base_descriptors) != len(normalized.diff_ids) - len(normalized.layers):
            msg = f"{what}: the content store names no blob for some of its base's layers, so it cannot be loaded beside them"
            raise NormalizeFailure(msg)
        manifest = oci_manifest(normalized.config_bytes, normalized.base_descriptors, normalized.layers)
        for chunk in oci_end(normalized.config_bytes, manifest):
            sink.write(chunk)
        written.append(time.monotonic())
        return normalized, blob_digest(manifest)

    pushed: PushedChunks[tuple[Normalized, str]] = PushedChunks(write)
    chunks = pushed.chunks()
    try:
        loaded = load(chunks)
    finally:
        chunks.close()  # an engine that stopped reading early: the writer stops too
    normalized, engine_id = pushed.result
    ended = time.monotonic()
    phases = {"rewrite": round(written[0] - started, 3), "load": round(ended - written[0], 3)}
    return replace(normalized, spool_peak=max(spooled)), loaded, engine_id, phases
