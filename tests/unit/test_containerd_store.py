"""The containerd image store's content store, read for the config digest an image ID's manifest names."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from imagebuild.distribute.publish import PublishOptions, publish_image
from imagebuild.engine.containerd_store import CONTENT, config_digest
from imagebuild.engine.interface import ImageInfo
from imagebuild.testing import FakeEngine, image_info

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
    expected = {"missing": "cannot read", "rewritten": "does not hash to", "no-config": "names no config", "no-platform": "no linux/amd64"}
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
