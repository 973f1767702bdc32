"""Normalisation reads the build's layers from the engine's layer store, and gets what `docker save` gives.

The fast path (imagebuild.engine.tar_split) rebuilds each layer tar from the
overlay2 diff directory and the engine's tar-split record; these tests run
both paths on the same built images and compare the normalised image IDs,
which name every layer's bytes.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.interface import BuildRequest, ImageInfo, StoredLayer
from imagebuild.engine.tar_split import layer_chunks
from imagebuild.errors import EngineError
from imagebuild.normalize import from_store
from imagebuild.normalize.after_build import layer_plan
from imagebuild.normalize.cache_image import load_cache_image
from imagebuild.normalize.core import normalize_image
from imagebuild.normalize.model import FROM_SAVE, FROM_STORE, LayerPlan, NormalizeFailure
from imagebuild.normalize.segmented_load import SEGMENT_BYTES
from imagebuild.normalize.streamed_load import SPOOL_BELOW
from imagebuild.pins import load_pins
from imagebuild.project import find_project
from imagebuild.render import RenderOptions, render_inputs
from imagebuild.util.streams import open_stream
from tests import REPO

pytestmark = pytest.mark.docker

EPOCH = 1767232800
CAPABILITY = "0100000200040000000000000000000000000000"  # v2 file capability: cap_net_bind_service
# Every kind of entry overlay2 stores differently from a tar: a hard link, a symlink, a capability
# xattr; then, one step later, an opaque directory (removed and made again) and whiteouts.
DOCKERFILE = f"""\
FROM {{base}}
RUN mkdir -p /d/sub /d/keep && echo a > /d/sub/f && echo k > /d/keep/k && ln /d/keep/k /d/keep/hard \\
 && ln -s keep/k /d/sym && echo x > /d/ping \\
 && python3 -c "import os; os.setxattr('/d/ping', 'security.capability', bytes.fromhex('{CAPABILITY}'))"
RUN rm -rf /d/sub && mkdir /d/sub && echo b > /d/sub/g && rm /d/sym /d/keep/k
"""


def test_the_sample_image_normalises_to_one_id_from_the_store_and_from_save(
    sample_image: dict[str, object], locked_pins: Path, engine: DockerEngine, tmp_path: Path
) -> None:
    normalization = sample_image["normalization"]
    assert isinstance(normalization, dict)
    if not normalization["reused"]:  # a build the cache served entirely read nothing
        assert (normalization["read_from"], normalization["fallback_reason"]) == (FROM_STORE, "")
    built = str(normalization["unnormalized_id"])
    inputs = find_project(REPO, locked_pins).load("gfx942")
    dockerfile = render_inputs(inputs, RenderOptions())
    plan = layer_plan(engine, built, inputs.pins.image(inputs.definition.base_pin).reference, dockerfile)
    from_store = normalize_image(engine, built, plan, tmp_path)
    sized = normalize_image(engine, built, plan, tmp_path, spool_below=0)
    from_save = normalize_image(engine, built, plan, tmp_path, from_store=False)
    images = engine.image_ids()
    # A load per layer, each ended once the one before it registered: the images they leave are removed.
    segmented = normalize_image(engine, built, plan, tmp_path, segment_bytes=1)
    assert engine.image_ids() == images
    assert (from_store.read_from, sized.read_from, from_save.read_from) == (FROM_STORE, FROM_STORE, FROM_SAVE)
    assert from_store.image_id == sized.image_id == from_save.image_id == segmented.image_id == sample_image["image_id"]
    # From overlay2's layer store the rewrite streams into the engine's load. Every layer of this image
    # is small, so each goes through the spool on its own (the largest is the peak) and none is sized
    # first; with spool_below=0 each is sized first and nothing is spooled.
    assert (set(from_store.phases), from_store.phases["size"]) == ({"size", "stream"}, 0)
    assert 0 < from_store.spool_peak < from_store.bytes_rewritten
    assert (sized.phases["size"] > 0, sized.spool_peak) == (True, 0)
    # 17 steps after FROM make a layer on this engine; step 8's changes nothing once reduced to what it
    # changes below it (its layer holds only directories copied up), so it is dropped, as the containerd
    # store never makes it.
    assert from_store.layers_rewritten == from_save.layers_rewritten == 16


def test_links_xattrs_whiteouts_and_opaque_dirs_normalise_alike_from_both(
    locked_pins: Path, engine: DockerEngine, tmp_path: Path
) -> None:
    base = engine.inspect_image(load_pins(locked_pins).image("base").reference)
    built = _build(engine, DOCKERFILE.format(base=base.id))
    normalized: set[str] = set()
    try:
        image = engine.inspect_image(built)
        stored = engine.stored_image(built)
        assert stored.unavailable == ""
        names = {entry for layer in stored.layers[len(base.layers) :] for entry in _entries(layer)}
        assert ("d/keep/k", tarfile.LNKTYPE, "d/keep/hard", False) in names  # walk order: "hard" < "k"
        assert ("d/sym", tarfile.SYMTYPE, "keep/k", False) in names
        assert ("d/ping", tarfile.REGTYPE, "", True) in names  # its capability, as a PAX xattr record
        assert ("d/sub/.wh..wh..opq", tarfile.REGTYPE, "", False) in names
        # Overlay shares one whiteout inode, so Docker's archive code sees the second whiteout as a hard
        # link to the first and leaves that link's target in the header it then turns into a plain file:
        # a quirk that a re-derived tar would have to copy, and that the tar-split record keeps.
        assert {("d/.wh.sym", tarfile.REGTYPE), ("d/keep/.wh.k", tarfile.REGTYPE)} <= {n[:2] for n in names}
        plan = _plan(image, base)
        from_store = normalize_image(engine, built, plan, tmp_path)
        normalized.add(from_store.image_id)
        from_save = normalize_image(engine, built, plan, tmp_path, from_store=False)
        normalized.add(from_save.image_id)
        assert (from_store.read_from, from_save.read_from) == (FROM_STORE, FROM_SAVE)
        assert from_store.image_id == from_save.image_id
    finally:
        for image_id in (*normalized, built):
            with contextlib.suppress(Exception):
                engine.remove_image(image_id)


# A first step whose files a second step may keep the time of (cp -a); the second step's epoch is a day later.
CACHED = "FROM {base}\nRUN mkdir /k && echo a > /k/a\nRUN {step} && echo {nonce} > /n\n"
TWO_EPOCHS = (EPOCH - 86400, EPOCH)


@pytest.mark.parametrize(
    ("step", "same"), [("echo b > /k/b", True), ("cp -a /k/a /k/c", False)], ids=["new files", "a time kept"]
)
def test_a_build_on_the_layer_cache_image_gives_the_cold_identity_or_refuses(
    *, step: str, same: bool, locked_pins: Path, engine: DockerEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first step comes back from the layer cache image (imagebuild.normalize.cache_image) as its
    normalised layer and is taken as it is; the second, made again, gives the cold build's layer. Where
    it keeps a time of the first one's files, which is that step's epoch on the cache image but the
    build's clock on a cold build, normalisation says so instead of giving another identity."""
    base = engine.inspect_image(load_pins(locked_pins).image("base").reference)
    made: set[str] = set()
    try:
        first = _build(engine, CACHED.format(base=base.id, step=step, nonce=1))
        made.add(first)
        normalized = normalize_image(engine, first, _plan(engine.inspect_image(first), base, TWO_EPOCHS), tmp_path)
        cache = load_cache_image(engine, first, normalized.engine_id)
        made |= {normalized.engine_id, cache}
        assert engine.inspect_image(cache).layers == engine.inspect_image(normalized.engine_id).layers
        engine.remove_image(first)  # the built layers are gone: only the cache image can serve the first step

        again = _build(engine, CACHED.format(base=base.id, step=step, nonce=2), cache_from=(cache,))
        cold = _build(engine, CACHED.format(base=base.id, step=step, nonce=2))
        made |= {again, cold}
        rebuilt = engine.inspect_image(again)
        assert rebuilt.layers[len(base.layers)] == normalized.layers[0].diff_id  # the normalised layer, back
        expected = normalize_image(engine, cold, _plan(engine.inspect_image(cold), base, TWO_EPOCHS), tmp_path)
        made.add(expected.engine_id)
        plan = replace(_plan(rebuilt, base, TWO_EPOCHS), previous=normalized.layers, normalized=normalized.layers[:1])
        if same:
            result = normalize_image(engine, again, plan, tmp_path)
            assert (result.image_id, result.layers_reused) == (expected.image_id, 1)
        else:
            with pytest.raises(NormalizeFailure, match=r"keeps the time of a file below it \(k/c, 1 in all\)"):
                normalize_image(engine, again, plan, tmp_path)
            # Unchecked, it would have given another image than the cold build's.
            monkeypatch.setattr(from_store, "_check_times_kept", lambda *_: None)
            unchecked = normalize_image(engine, again, plan, tmp_path)
            made.add(unchecked.engine_id)
            assert unchecked.image_id != expected.image_id
    finally:
        for image_id in made:
            with contextlib.suppress(Exception):
                engine.remove_image(image_id)


@pytest.mark.parametrize(
    "below_and_segment",
    [(0, SEGMENT_BYTES), (SPOOL_BELOW, SEGMENT_BYTES), (0, 1)],
    ids=["sized first", "spooled", "a load per layer"],
)
def test_a_stream_cut_off_by_a_damaged_layer_leaves_the_engine_as_it_was(
    engine: DockerEngine,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    below_and_segment: tuple[int, int],
) -> None:
    """The rewrite streams into a real load; a layer that fails its diffID check once its bytes are
    sent cuts the request before the manifest, and the engine keeps nothing of it (with a load per
    layer, the 20 MB layer's load registered first: the image it left is removed).

    FROM scratch, so the fallback's docker save is of these two layers only, not of a 1 GB base."""
    spool_below, segment_bytes = below_and_segment
    files = {"big": os.urandom(20_000_000), "small": b"one\n"}
    built = _build(engine, "FROM scratch\nCOPY big /big\nCOPY small /small\n", files=files)
    try:
        image, stored = engine.inspect_image(built), engine.stored_image(built)
        assert stored.unavailable == ""
        small = stored.layers[-1]
        assert isinstance(small, StoredLayer)
        (small.files / "small").write_text("two\n")  # same size, other content: the store no longer gives the layer
        plan = _plan(image, base=None)
        before = engine.image_ids()
        # The store's read fails its check after the 20 MB layer was sent, so the stream is cut and
        # docker save is asked instead, which refuses the same damaged layer (its tar-split checksum).
        with caplog.at_level(logging.WARNING, logger="imagebuild"), pytest.raises(EngineError, match="file integrity checksum failed"):
            normalize_image(engine, built, plan, tmp_path, spool_below=spool_below, segment_bytes=segment_bytes)
        assert f"image {built[:19]} layer {len(image.layers) - 1}: " in caplog.text
        assert "using docker save" in caplog.text
        assert engine.image_ids() == before
        assert engine.has_image(built)  # the engine still answers on a new connection
    finally:
        with contextlib.suppress(Exception):
            engine.remove_image(built)


def _plan(image: ImageInfo, base: ImageInfo | None, epochs: tuple[int, int] = (EPOCH, EPOCH)) -> LayerPlan:
    """The plan of an image built from ``base`` (None: scratch) with two steps, both at EPOCH unless
    ``epochs`` says."""
    return LayerPlan(
        layers=image.layers,
        base_layers=len(base.layers) if base else 0,
        base_history=len(base.history) if base else 0,
        epochs=epochs,
        created=epochs[-1],
    )


def _entries(layer: StoredLayer) -> set[tuple[str, bytes, str, bool]]:
    """(name, type, link target, has a capability xattr) of each entry of the layer tar the store gives."""
    with tarfile.open(fileobj=open_stream(layer_chunks(layer.tar_split, layer.files)), mode="r|") as tar:
        return {
            (i.name, i.type, i.linkname, "SCHILY.xattr.security.capability" in i.pax_headers) for i in tar
        }


def _build(
    engine: DockerEngine, dockerfile: str, *, cache_from: tuple[str, ...] = (), files: dict[str, bytes] | None = None
) -> str:
    """Build ``dockerfile`` (with ``files`` in its context) untagged (the test removes it by ID), every
    step again unless ``cache_from`` names the images to take steps from; return the image ID."""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), **(files or {})}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    request = BuildRequest(context=context.getvalue(), no_cache=not cache_from, cache_from=cache_from)
    events = list(engine.build(request))
    errors = [e.error for e in events if e.error]
    assert not errors, errors
    image_ids = [e.image_id for e in events if e.image_id]
    assert image_ids, [e.text for e in events]
    return str(image_ids[-1])
