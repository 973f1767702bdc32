"""WITH_NIXL=1 on the sample world: step 10 builds the stand-ins, verify checks their libraries,
and a rebuild of the layer gives the same image ID.

Steps 1-9 come from the session's sample image (WITH_NIXL=0, same Dockerfile lines up to step 10)
as layer cache, so only steps 10-18 are built, twice: the second build after the first's image and
its untagged layers are removed (the sample image's tag keeps steps 1-9), as test_reproducible does,
and with --drop-cache-image, which leaves the engine only the normalised image.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import docker
from imagebuild.cli import main
from tests.integration.image_support import CHECKOUT, remove_images

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("chdir_repo")]

TAG = f"imagebuild-test/nixl:a-{CHECKOUT}"
TAG_B = f"imagebuild-test/nixl:b-{CHECKOUT}"
WITH_NIXL = ["--build-arg", "WITH_NIXL=1"]


def build(pins: Path, record: Path, tag: str, *extra: str) -> dict[str, object]:
    argv = ["build", "--pins", str(pins), "--network", "host", "--tag", tag, "--record", str(record), *extra]
    assert main([*argv, *WITH_NIXL]) == 0
    result: dict[str, object] = json.loads(record.read_text())
    return result


def test_with_nixl_builds_verifies_and_rebuilds_bit_identically(
    sample_image: dict[str, object], locked_pins: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    remove_images(TAG, TAG_B)
    first = build(locked_pins, tmp_path / "a.json", TAG)
    assert first["image_id"] != sample_image["image_id"]

    capsys.readouterr()
    assert main(["verify", TAG, "--pins", str(locked_pins), *WITH_NIXL, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    nixl = [c for c in report["checks"] if c["group"] == "nixl"]
    assert len(nixl) == 4, nixl
    assert all(c["outcome"] == "passed" for c in nixl), nixl
    # Without the build arg, verify expects a WITH_NIXL=0 image and says the layer is there.
    assert main(["verify", TAG, "--pins", str(locked_pins), "-k", "forbidden"]) != 0

    # Keep the first image only as a file: removing its tag takes its own layers with it.
    archive = tmp_path / "first.tar"
    with archive.open("wb") as f:
        for chunk in docker.from_env().api.get_image(str(first["image_id"])):
            f.write(chunk)
    remove_images(TAG)
    # The rebuild with --drop-cache-image: the built image and the intermediate images of steps 10-18
    # go once it is normalised; the engine gains the normalised image alone, the same as before.
    api = docker.from_env().api
    images_before = set(api.images(all=True, quiet=True))
    second = build(locked_pins, tmp_path / "b.json", TAG_B, "--drop-cache-image")
    normalization = second["normalization"]
    assert isinstance(normalization, dict)
    assert set(api.images(all=True, quiet=True)) - images_before == {second["image_id"]}
    assert normalization["unnormalized_id"] not in set(api.images(all=True, quiet=True))
    assert f"{TAG_B}-cache" not in {t for image in api.images() for t in image["RepoTags"] or ()}
    capsys.readouterr()
    main(["diff", str(archive), TAG_B, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert second["image_id"] == first["image_id"], (report["config"], report["files"])
    assert report["identical"] is True
    remove_images(TAG_B)
