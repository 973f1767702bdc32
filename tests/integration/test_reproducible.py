"""Bit-identical rebuilds: the same locked pins give the same image ID; one pin changes only its files.

Both builds of the first test start cold: this module's images are removed
before each (`docker rmi` of our tags takes the build's untagged parents, the
classic builder's layer cache, with them) and --no-cache makes sure no other
test's images serve a step either.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import docker
from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from imagebuild.pins import GitPin, load_pins
from sampleworld.world import World
from tests.integration.apt_support import newer_snapshot
from tests.integration.image_support import CHECKOUT, remove_images
from tests.integration.scratch import module_scratch

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("chdir_repo")]

# Per checkout: several checkouts share one Docker engine, and a shared tag would be overwritten.
TAG = f"imagebuild-test/repro:a-{CHECKOUT}"
TAG_B = f"imagebuild-test/repro:b-{CHECKOUT}"
NEXT_ROUTER_BRANCH = "ravgupta/moriio-timeout"  # one commit after the pinned router (sampleworld)


def build(pins: Path, record: Path, tag: str, *extra: str) -> dict[str, object]:
    argv = ["build", "--pins", str(pins), "--network", "host", "--tag", tag, "--record", str(record)]
    assert main([*argv, *extra]) == 0
    result: dict[str, object] = json.loads(record.read_text())
    return result


def diff(capsys: pytest.CaptureFixture[str], a: str, b: str) -> tuple[int, dict[str, object]]:
    capsys.readouterr()
    code = main(["diff", a, b, "--json"])
    report: dict[str, object] = json.loads(capsys.readouterr().out)
    return code, report


@pytest.fixture(scope="module")
def records(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with module_scratch(request, tmp_path_factory, "records") as path:  # a 1 GB save among them
        yield path


@pytest.fixture(scope="module")
def first(locked_pins: Path, records: Path) -> dict[str, object]:
    remove_images(TAG, TAG_B)
    return build(locked_pins, records / "first.json", TAG, "--no-cache")


def test_two_cold_builds_give_the_same_image_id(
    *,
    first: dict[str, object],
    locked_pins: Path,
    records: Path,
    engine: DockerEngine,
    world: World,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """...a "day" apart: the snapshot service publishes a newer snapshot between them (its moving
    package at another version), and the locked snapshot keeps step 4's packages as they were."""
    normalization = first["normalization"]
    assert isinstance(normalization, dict)
    # Steps 2-18 but step 8, whose layer changes nothing once reduced; the base's layers are left alone.
    assert normalization["layers_rewritten"] == 16
    base = engine.inspect_image(load_pins(locked_pins).image("base").reference)
    assert engine.inspect_image(TAG).layers[: len(base.layers)] == base.layers
    built = engine.inspect_image(f"{TAG}-cache")
    assert built.id == normalization["unnormalized_id"]
    _, report = diff(capsys, f"{TAG}-cache", TAG)
    assert report["files"] == [], "normalisation leaves the flattened file tree as it was, times aside"
    changed = {str(c["key"]) for c in report["config"]}  # type: ignore[attr-defined]
    assert changed
    assert all(key.endswith("created_by") for key in changed)  # the COPYs name their layers now

    # Keep the first image only as a file, so nothing of the first build is left in the engine.
    archive = records / "first.tar"
    with archive.open("wb") as f:
        for chunk in docker.from_env().api.get_image(str(first["image_id"])):
            f.write(chunk)
    remove_images(TAG)
    # The first build's layer cache is gone. (Its result may live on under another test's tag:
    # a build of the same pins in the same session gives the same image, which is the point.)
    assert built.id not in engine.image_ids()  # intermediate images included
    with newer_snapshot(world):
        second = build(locked_pins, records / "second.json", TAG, "--no-cache")
    assert second["normalization"]["unnormalized_id"] != built.id  # type: ignore[index]  # a real rebuild
    assert second["image_id"] == first["image_id"]
    code, report = diff(capsys, str(archive), TAG)
    assert (code, report["identical"]) == (0, True)


def test_a_fully_cached_build_reuses_the_normalised_image(
    first: dict[str, object], locked_pins: Path, records: Path
) -> None:
    again = build(locked_pins, records / "second.json", TAG)  # the record the last build wrote
    assert again["all_cached"]
    assert again["image_id"] == first["image_id"]
    assert again["normalization"]["reused"] is True  # type: ignore[index]


def test_a_changed_pin_changes_exactly_its_files(
    first: dict[str, object],
    locked_pins: Path,
    world: World,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pins = tmp_path / "pins.toml"
    for name in ("pylock.toml", "apt.lock.toml"):
        shutil.copy(locked_pins.with_name(name), tmp_path / name)
    old_router = load_pins(locked_pins).get("router")
    assert isinstance(old_router, GitPin)
    assert old_router.branch is not None
    pins.write_text(locked_pins.read_text().replace(old_router.branch, NEXT_ROUTER_BRANCH))
    assert main(["lock", "--pins", str(pins), "--upgrade-pin", "router"]) == 0
    new_router = load_pins(pins).get("router")
    assert isinstance(new_router, GitPin)
    assert new_router.commit == world.refs["raviguptaamd/router.git"][f"refs/heads/{NEXT_ROUTER_BRANCH}"]
    changed = build(pins, tmp_path / "record.json", TAG_B)
    steps = changed["steps"]
    assert isinstance(steps, list)
    assert [s["number"] for s in steps if not s["cached"]] == list(range(9, 19))  # vLLM stays cached

    code, report = diff(capsys, str(first["image_id"]), TAG_B)
    assert code == 1
    files = report["files"]
    assert isinstance(files, list)
    assert {(f["path"], f["change"]) for f in files} == {
        ("app/versions.txt", "changed"),
        ("usr/local/bin/vllm-router", "changed"),
    }
    # The router's pin label, the digest of the build inputs (the Dockerfile names the commit), and
    # the history: each RUN from the router step on records the commit among its build args, and
    # each LABEL its value.
    labels = {"io.imagebuild.pin.router", "io.imagebuild.inputs-digest"}
    for change in report["config"]:  # type: ignore[attr-defined]
        key, text = change["key"], f"{change['a']} {change['b']}"
        if key.startswith("history["):
            assert new_router.commit in text or "io.imagebuild.inputs-digest=" in text, change
        else:
            assert key.removeprefix("label ") in labels, change
    layers = report["layers"]
    assert isinstance(layers, list)
    for layer in layers:
        assert {f["path"] for f in layer["files"]} <= {"app/versions.txt", "usr/local/bin/vllm-router"}, layer
    versions = re.findall(r"VLLM_ROUTER_REF=(\w+)", _read(TAG_B, "/app/versions.txt"))
    assert versions == [new_router.commit]


def _read(image: str, path: str) -> str:
    output: bytes = docker.from_env().containers.run(image, ["cat", path], remove=True, entrypoint=[])
    return output.decode()
