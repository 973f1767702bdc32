"""Reading saved images and normalising them, on hand-made archives (no engine)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from imagebuild.engine.saved_image import ArchiveError, read_saved_image
from imagebuild.normalize.config import canonical_created_by, normalized_config
from imagebuild.normalize.core import load_chunks
from imagebuild.normalize.from_save import normalize_saved
from imagebuild.normalize.model import LayerPlan, NormalizeFailure
from imagebuild.util.streams import spool
from tests.unit.imagetars import BEFORE, EPOCH, Item, config, digest, entries, layer, saved
from tests.unit.normalize_support import BASE, EPOCHS, built, normalize, plan

ITEMS_ONE = [Item("a", data=b"a")]


def spooled(tmp_path: Path) -> Any:
    counter = iter(range(100))

    def take(_name: str, data: Any) -> Any:
        path = tmp_path / f"{next(counter)}.tar"
        diff_id, size = spool(data, path)
        return type("Spooled", (), {"diff_id": diff_id, "path": path, "size": size})()

    return take


@pytest.mark.parametrize("oci", [False, True], ids=["legacy", "oci-layout"])
def test_both_save_layouts_are_read_in_config_order(tmp_path: Path, oci: bool) -> None:
    layers = BASE + built()
    image = read_saved_image(io.BytesIO(saved(layers, config(layers), oci=oci)), spooled(tmp_path), what="x")
    assert [layer.diff_id for layer in image.layers] == [digest(d) for d in layers]
    assert [layer.path.read_bytes() for layer in image.layers] == layers
    assert image.image_id == "sha256:" + hashlib.sha256(image.config_bytes).hexdigest()


PODMAN_SAVE = Path(__file__).parents[1] / "data" / "podman" / "save-4.3.1-donor.tar"


def test_podmans_save_layout_is_read(tmp_path: Path) -> None:
    """Podman 4.3.1's GET /images/{id}/get, recorded: the layer is ``<diffID hex>.tar`` at the top.

    Its ``<id>/layer.tar`` is only a symlink to that file; manifest.json names the top-level one.
    """
    with PODMAN_SAVE.open("rb") as stream:
        image = read_saved_image(stream, spooled(tmp_path), what="x")
    assert image.image_id == "sha256:6ea24ddf22f3c6ae82eac8a155a1de6bd016c7defce95980338229037d49c7d5"
    assert [layer.diff_id for layer in image.layers] == [
        "sha256:cf830f3e56b2a526a960595251d1ad44092323c84eab3214c5468a09fc7e2eb9"
    ]


def test_a_layer_whose_bytes_do_not_match_its_diff_id_is_refused(tmp_path: Path) -> None:
    layers = BASE + built()
    cfg = config(layers)
    cfg["rootfs"]["diff_ids"][2] = "sha256:" + "0" * 64
    with pytest.raises(ArchiveError, match=r"layer 2 .* has sha256 sha256:.*, the config says sha256:0000"):
        read_saved_image(io.BytesIO(saved(layers, cfg)), spooled(tmp_path), what="x")


def test_not_an_archive_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match=r"neither manifest\.json nor index\.json"):
        read_saved_image(io.BytesIO(layer(ITEMS_ONE)), spooled(tmp_path), what="x")


def test_build_layers_are_clamped_to_their_own_epoch_and_base_layers_kept(tmp_path: Path) -> None:
    layers = BASE + built()
    result = normalize(saved(layers, config(layers)), tmp_path, layers)
    assert result.diff_ids[:2] == tuple(digest(d) for d in BASE)  # base: same digests
    assert len(result.layers) == 2  # only the build's layers were rewritten
    first, second = (entries(layer.path.read_bytes()) for layer in result.layers)
    assert {info.name: info.mtime for info, _ in first} == {"app": EPOCHS[0], "app/v.txt": EPOCHS[0]}
    assert {info.name: info.mtime for info, _ in second} == {
        "app/v.txt": EPOCHS[1],
        "etc/.wh.os-release": EPOCHS[1],
        "src": BEFORE,
    }
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [
        "layer-0.tar",
        "layer-1.tar",
    ]  # no raw spool left


def test_two_builds_differing_only_in_times_normalise_to_one_image(tmp_path: Path) -> None:
    one, two = BASE + built(), BASE + built(shift=777)
    cfg_two = config(two)  # the base's history is the same; the build's entries have later times
    cfg_two["created"] = "2027-03-03T03:03:03.3Z"
    for entry in cfg_two["history"][3:]:
        entry["created"] = "2027-03-03T03:03:03.3Z"
    cfg_two["container"] = "d" * 64
    cfg_two["config"]["Image"] = "sha256:" + "f" * 64
    assert digest(one[3]) != digest(two[3])
    first = normalize(saved(one, config(one)), tmp_path / "a", one)
    second = normalize(saved(two, cfg_two, oci=True), tmp_path / "b", two)
    assert first.image_id == second.image_id
    assert first.config_bytes == second.config_bytes


def test_config_times_and_build_only_fields() -> None:
    layers = BASE + built()
    cfg = config(layers)
    out = json.loads(normalized_config(cfg, ["sha256:" + "1" * 64] * 4, base_history=3, created=EPOCHS[-1]))
    assert out["created"] == "2026-01-01T03:00:00Z"
    assert [h["created"] for h in out["history"]] == ["2026-11-30T11:46:24.41Z"] * 3 + [
        "2026-01-01T03:00:00Z"
    ] * 2
    assert {"container", "container_config", "docker_version"}.isdisjoint(out)
    assert "Image" not in out["config"]  # the unnormalised parent
    assert out["config"]["Env"] == cfg["config"]["Env"]
    assert out["rootfs"]["diff_ids"] == ["sha256:" + "1" * 64] * 4


def test_load_archive_carries_only_the_rewritten_layers(tmp_path: Path) -> None:
    layers = BASE + built()
    result = normalize(saved(layers, config(layers)), tmp_path, layers)
    archive = b"".join(load_chunks(result))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        names = tar.getnames()
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        config_bytes = tar.extractfile(manifest[0]["Config"]).read()  # type: ignore[union-attr]
    assert manifest[0]["Layers"] == [f"{d[7:]}/layer.tar" for d in result.diff_ids]  # every layer named...
    assert sorted(n for n in names if n.endswith("layer.tar")) == sorted(
        f"{layer.diff_id[7:]}/layer.tar" for layer in result.layers
    )  # ...only the rewritten ones present
    assert "sha256:" + hashlib.sha256(config_bytes).hexdigest() == result.image_id


def test_a_history_that_does_not_fit_the_dockerfile_is_refused(tmp_path: Path) -> None:
    layers = BASE + built()
    short = LayerPlan(layers=tuple(map(digest, layers)), base_layers=2, base_history=3, epochs=EPOCHS[:1], created=1)
    with pytest.raises(NormalizeFailure, match="its history has 2 build steps, but the Dockerfile makes 1"):
        normalize_saved(io.BytesIO(saved(layers, config(layers))), short, tmp_path, what="x")


def test_an_empty_step_gives_one_image_whether_the_store_made_a_layer_for_it_or_not(tmp_path: Path) -> None:
    """Graph-driver stores commit an empty layer for a step that changed nothing; containerd's none."""
    first, second = built()
    empty = layer([])
    graph = [*BASE, first, empty, second]
    containerd = [*BASE, first, second]
    epochs = (EPOCHS[0], EPOCH + 1800, EPOCHS[1])

    def run(layers: list[bytes], cfg: dict[str, Any], where: Path) -> Any:
        where.mkdir()
        plan = LayerPlan(layers=tuple(map(digest, layers)), base_layers=2, base_history=3, epochs=epochs, created=epochs[-1])
        return normalize_saved(io.BytesIO(saved(layers, cfg, oci=True)), plan, where, what="x")

    graph_config = config(graph)  # history: step 0, ENV, step 1 (the base's); step 2, 3 (the empty one), 4
    containerd_config = json.loads(json.dumps(graph_config))
    containerd_config["history"][4]["empty_layer"] = True
    del containerd_config["rootfs"]["diff_ids"][3]
    one = run(graph, graph_config, tmp_path / "graph")
    two = run(containerd, containerd_config, tmp_path / "containerd")
    assert one.config_bytes == two.config_bytes
    assert one.image_id == two.image_id
    assert len(one.layers) == len(two.layers) == 2  # the empty layer is dropped...
    history = json.loads(one.config_bytes)["history"]
    assert history[4]["empty_layer"] is True  # ...and its step says it made none
    assert json.loads(one.config_bytes)["rootfs"]["diff_ids"] == list(one.diff_ids)


def test_empty_container_config_fields_are_left_out_as_the_containerd_store_leaves_them() -> None:
    layers = BASE + built()
    graph = config(layers)
    graph["config"] |= {"Hostname": "", "Domainname": "", "User": "", "Tty": False, "AttachStdin": False}
    containerd = config(layers)
    for key in ("Image", "Entrypoint", "Cmd"):  # null on a graph-driver store, absent on containerd's
        del containerd["config"][key]
    made = {"base_history": 3, "created": EPOCHS[-1]}
    assert normalized_config(graph, [], **made) == normalized_config(containerd, [], **made)  # type: ignore[arg-type]
    kept = config(layers)
    kept["config"]["User"] = "vllm"  # a value that means something stays
    assert json.loads(normalized_config(kept, [], **made))["config"]["User"] == "vllm"  # type: ignore[arg-type]


def test_copy_names_the_normalised_layer_not_the_builders_hash() -> None:
    line = "/bin/bash -o pipefail -c #(nop) COPY dir:23abf21f87a0667d9704d5c55b4d4765401f2ee0978d38177551f45cf1b4624e in /usr/x "
    assert canonical_created_by(line, "sha256:" + "ab" * 32) == f"/bin/bash -o pipefail -c #(nop) COPY dir@sha256:{'ab' * 32} in /usr/x "
    assert canonical_created_by(line.replace("dir:", "file:"), "").endswith("COPY file@empty in /usr/x ")
    run = "|4 A=1 /bin/sh -c echo COPY dir:" + "0" * 64
    assert canonical_created_by(run, "sha256:1") == run  # a RUN's text is its own


def test_the_copy_hash_of_two_builders_normalises_to_one_image(tmp_path: Path) -> None:
    """Docker 20.10 and 26 hash the same COPY --from differently; the image must not say which built it."""
    layers = BASE + built()
    images = []
    for number, builder_hash in enumerate(("23abf21f" * 8, "fc859476" * 8)):
        cfg = config(layers)
        cfg["history"][3]["created_by"] = f"/bin/sh -c #(nop) COPY dir:{builder_hash} in /usr/lib/aiter "
        where = tmp_path / str(number)
        where.mkdir()
        images.append(normalize_saved(io.BytesIO(saved(layers, cfg)), plan(layers), where, what="x"))
    assert images[0].image_id == images[1].image_id
    created_by = json.loads(images[0].config_bytes)["history"][3]["created_by"]
    assert created_by == f"/bin/sh -c #(nop) COPY dir@{images[0].diff_ids[2]} in /usr/lib/aiter "
