"""The containerd image store's content store, read for the config digest an image ID's manifest names,
and for the image's layer blobs (normalisation and export read them instead of `docker save`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagebuild.distribute.publish import PublishOptions, publish_image
from imagebuild.engine import containerd_roots
from imagebuild.engine.containerd_store import CONTENT, config_digest, stored_image
from imagebuild.engine.interface import BlobLayer, ImageInfo
from imagebuild.importer import containerd_root
from imagebuild.testing import FakeEngine, image_info
from tests.unit import imagetars as tars

CONFIG = "sha256:" + "c" * 64


def _put(root: Path, document: dict[str, object]) -> str:
    data = json.dumps(document).encode()
    digest = hashlib.sha256(data).hexdigest()
    (root / CONTENT).mkdir(parents=True, exist_ok=True)
    (root / CONTENT / digest).write_bytes(data)
    return f"sha256:{digest}"


def _manifest(root: Path) -> str:
    return _put(root, {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": {"digest": CONFIG}, "layers": []})


def test_a_manifest_names_its_config(tmp_path: Path) -> None:
    assert config_digest(_manifest(tmp_path), data_root=str(tmp_path)) == (CONFIG, "")


def test_an_index_names_the_platform_manifest_and_that_one_the_config(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    other = _put(tmp_path, {"config": {"digest": "sha256:" + "d" * 64}})
    index = _put(
        tmp_path,
        {
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {"digest": other, "platform": {"os": "linux", "architecture": "arm64"}},
                {"digest": manifest, "platform": {"os": "linux", "architecture": "amd64"}},
            ],
        },
    )
    assert config_digest(index, data_root=str(tmp_path)) == (CONFIG, "")


@pytest.mark.parametrize("damage", ["missing", "rewritten", "no-config", "no-platform"])
def test_anything_unexpected_gives_no_digest_and_says_why(tmp_path: Path, damage: str) -> None:
    image_id = _manifest(tmp_path)
    blob = tmp_path / CONTENT / image_id[7:]
    if damage == "missing":
        blob.unlink()
    elif damage == "rewritten":
        blob.write_text(json.dumps({"config": {"digest": "sha256:" + "e" * 64}}))
    elif damage == "no-config":
        image_id = _put(tmp_path, {"layers": []})
    else:
        image_id = _put(tmp_path, {"manifests": [{"digest": image_id, "platform": {"os": "linux", "architecture": "s390x"}}]})
    digest, reason = config_digest(image_id, data_root=str(tmp_path))
    assert digest is None
    assert reason
    assert "\n" not in reason
    expected = {"missing": "no blob", "rewritten": "does not hash to", "no-config": "names no config", "no-platform": "no linux/amd64"}
    assert expected[damage] in reason


def test_an_unknown_identity_is_said_never_guessed() -> None:
    info = ImageInfo(**{**image_info("sha256:" + "a" * 64).__dict__, "identity_unknown": "the store is on another machine"})
    assert info.identity == ""
    assert "identity unknown: the store is on another machine" in info.described
    engine = FakeEngine(images=[info], manifest_ids=True)
    lines: list[str] = []
    result = publish_image(PublishOptions(image=info.id, repository="127.0.0.1:5000/x"), engine, report=lines.append)
    assert result.image_id == ""  # not the manifest digest under another name
    assert any("identity is unknown (the store is on another machine)" in line for line in lines)


LAYERS = [*tars.BASE, tars.EVERY_KIND]


def test_an_image_s_layers_are_its_manifest_s_blobs_lowest_first(tmp_path: Path) -> None:
    cfg = tars.config(LAYERS)
    image_id = tars.content_store_image(LAYERS, cfg, tmp_path, plain=(2,))
    image = stored_image(image_id, data_root=str(tmp_path))
    assert image.unavailable == ""
    assert image.manifest == tmp_path / CONTENT / image_id[7:]
    assert image.config == tmp_path / CONTENT / tars.digest(json.dumps(cfg).encode())[7:]
    assert image.blobs == tmp_path / CONTENT
    assert [layer.diff_id for layer in image.layers] == [tars.digest(d) for d in LAYERS]
    assert all(isinstance(layer, BlobLayer) for layer in image.layers)
    assert [layer.media_type for layer in image.layers] == [tars.GZIP_LAYER, tars.GZIP_LAYER, tars.PLAIN_LAYER]
    assert image.layers[2].digest == tars.digest(tars.EVERY_KIND)  # uncompressed: named by its diffID
    for layer in image.layers:
        assert isinstance(layer, BlobLayer)
        assert (layer.blob.name, layer.blob.stat().st_size) == (layer.digest[7:], layer.size)


def _manifest_of(tmp_path: Path, image_id: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((tmp_path / CONTENT / image_id[7:]).read_bytes())
    return document


def _replace_manifest(tmp_path: Path, image_id: str, change: Callable[[dict[str, Any]], None]) -> str:
    manifest = _manifest_of(tmp_path, image_id)
    change(manifest)
    return tars.put_blob(tmp_path, json.dumps(manifest).encode())


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("blob missing", "the content store has no blob"),
        ("blob cut short", "bytes and its manifest names"),
        ("plain layer named as another", "is named as layer"),
        ("not a layer", "not a layer tar"),
        ("layer count", "names 2 layers, its config 3"),
        ("an index", "names an index, not one image's manifest"),
        ("config missing", "cannot read"),
        ("manifest rewritten", "does not hash to"),
    ],
)
def test_a_store_that_does_not_hold_the_image_as_named_is_not_read(tmp_path: Path, damage: str, said: str) -> None:
    image_id = tars.content_store_image(LAYERS, tars.config(LAYERS), tmp_path, plain=(2,))
    manifest = _manifest_of(tmp_path, image_id)
    blob = tmp_path / CONTENT / manifest["layers"][1]["digest"][7:]
    if damage == "blob missing":
        blob.unlink()
    elif damage == "blob cut short":
        blob.write_bytes(blob.read_bytes()[:-1])
    elif damage == "plain layer named as another":
        image_id = _replace_manifest(tmp_path, image_id, lambda m: m["layers"].reverse())
    elif damage == "not a layer":
        image_id = _replace_manifest(tmp_path, image_id, lambda m: m["layers"][0].update(mediaType="application/vnd.in-toto+json"))
    elif damage == "layer count":
        image_id = _replace_manifest(tmp_path, image_id, lambda m: m["layers"].pop())
    elif damage == "an index":
        image_id = tars.put_blob(tmp_path, json.dumps({"manifests": [{"digest": image_id}]}).encode())
    elif damage == "config missing":
        (tmp_path / CONTENT / manifest["config"]["digest"][7:]).unlink()
    else:
        (tmp_path / CONTENT / image_id[7:]).write_text(json.dumps(manifest) + " ")
    image = stored_image(image_id, data_root=str(tmp_path))
    assert image.layers == ()
    assert said in image.unavailable
    assert "\n" not in image.unavailable


def _containerd(proc: Path, pid: int, comm: str, *argv: str) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "comm").write_text(comm + "\n")
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_a_system_containerd_s_root_is_where_its_command_line_or_config_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(containerd_root, "DEFAULT_CONFIG", tmp_path / "absent.toml")
    named = tmp_path / "named.toml"
    named.write_text('version = 2\nroot = "/srv/containerd"\nstate = "/run/c"\n')
    bare = tmp_path / "bare.toml"
    bare.write_text('disabled_plugins = ["cri"]\n')
    assert containerd_root.root_of(["/usr/bin/containerd"]) == Path("/var/lib/containerd")
    assert containerd_root.root_of(["containerd", "--root", "/a"]) == Path("/a")
    assert containerd_root.root_of(["containerd", "--root=/a", "--config", str(named)]) == Path("/a")
    assert containerd_root.root_of(["containerd", "--config", str(named)]) == Path("/srv/containerd")
    assert containerd_root.root_of(["containerd", f"-c={named}"]) == Path("/srv/containerd")
    assert containerd_root.root_of(["containerd", "-c", str(bare)]) == Path("/var/lib/containerd")
    # What cannot be read or is relative to a directory we do not know names no root.
    (tmp_path / "broken.toml").write_text("root = [")
    assert containerd_root.root_of(["containerd", "-c", str(tmp_path / "broken.toml")]) is None
    assert containerd_root.root_of(["containerd", "--root", "relative"]) is None
    assert containerd_root.root_of(["containerd", "-c", "relative.toml"]) is None


def test_the_content_store_is_looked_for_under_the_data_root_then_each_running_containerd_s(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    config = tmp_path / "system.toml"
    config.write_text(f'root = "{tmp_path / "system"}"\n')
    _containerd(proc, 40, "containerd", "/usr/bin/containerd", "--config", str(config))
    _containerd(proc, 41, "containerd-shim", "containerd-shim-runc-v2", "-namespace", "moby")
    _containerd(proc, 42, "dockerd", "dockerd", "--root", "/not/containerd")
    _containerd(proc, 43, "containerd", "containerd", "--root", str(tmp_path / "docker" / "containerd" / "daemon"))
    (proc / "self").mkdir()
    data_root = str(tmp_path / "docker")
    assert list(containerd_roots.content_dirs(data_root, proc=proc)) == [
        tmp_path / "docker" / CONTENT,  # a containerd dockerd started itself: listed once
        tmp_path / "system" / containerd_roots.CONTENT,
        containerd_root.DEFAULT_ROOT / containerd_roots.CONTENT,
    ]
    assert next(iter(containerd_roots.content_dirs("", proc=proc))) == tmp_path / "system" / containerd_roots.CONTENT


def test_an_image_in_a_system_containerd_s_store_is_read_from_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Docker CE's layout: dockerd uses the machine's containerd, whose root is not under the data root."""
    system = tmp_path / "var-lib-containerd"
    monkeypatch.setattr(containerd_root, "DEFAULT_ROOT", system)
    cfg = tars.config(LAYERS)
    image_id = tars.content_store_image(LAYERS, cfg, tmp_path / "staging", plain=(2,))
    (system / containerd_roots.CONTENT).parent.mkdir(parents=True)
    (tmp_path / "staging" / CONTENT).rename(system / containerd_roots.CONTENT)
    data_root = tmp_path / "docker"
    (data_root / CONTENT).mkdir(parents=True)  # the data root's own store, empty: dockerd's containerd is the system's
    image = stored_image(image_id, data_root=str(data_root))
    assert (image.unavailable, image.blobs, len(image.layers)) == ("", system / containerd_roots.CONTENT, len(LAYERS))
    assert config_digest(image_id, data_root=str(data_root)) == (tars.digest(json.dumps(cfg).encode()), "")
    missing = "sha256:" + "f" * 64
    digest, reason = config_digest(missing, data_root=str(data_root))
    assert digest is None
    assert f"no blob {missing[:19]}" in reason
    assert str(data_root / CONTENT) in reason
    assert str(system / containerd_roots.CONTENT) in reason


def test_a_store_this_user_may_not_read_is_named_with_why_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A docker-group user on Docker CE: /var/lib/docker and the containerd root are root's alone."""
    private = tmp_path / "docker"
    monkeypatch.setattr(containerd_root, "DEFAULT_ROOT", tmp_path / "var-lib-containerd")
    real_is_file = Path.is_file

    def is_file(path: Path) -> bool:
        if path.is_relative_to(private):
            raise PermissionError(13, "Permission denied", str(path))
        return real_is_file(path)

    monkeypatch.setattr(Path, "is_file", is_file)
    image_id = "sha256:" + "a" * 64
    digest, reason = config_digest(image_id, data_root=str(private))
    assert digest is None
    assert f"{private / CONTENT}: Permission denied" in reason
    assert stored_image(image_id, data_root=str(private)).unavailable == reason
