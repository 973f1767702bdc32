"""Hash-locked installs and the cache layout they allow, on the sample world.

* A lock entry whose sha256 is not what the index serves fails the build at the step that
  installs it, naming the package; nothing is tagged.
* A flydsl pin change rebuilds from step 15: the vLLM compile (step 7) and everything before
  it stay cached, because flydsl is installed only after it.
* With --cache-normalized the cache is a config over the normalised layers: the engine keeps the
  build's layers once, the flydsl change still takes steps 1-14 from it, and gives the image a
  build on the built layers gives.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.chain_ids import chain_ids
from imagebuild.engine.docker import DockerEngine
from imagebuild.errors import EngineError
from imagebuild.inputs.python_lock import require_python_lock
from imagebuild.pins import load_pins
from sampleworld.world import World
from tests.integration.image_support import CHECKOUT, remove_images

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("chdir_repo")]



def copy_pins(locked_pins: Path, directory: Path) -> Path:
    pins = directory / "pins.toml"
    shutil.copy(locked_pins, pins)
    for name in ("pylock.toml", "apt.lock.toml"):
        shutil.copy(locked_pins.with_name(name), directory / name)
    return pins


def build(pins: Path, record: Path, tag: str, *extra: str) -> int:
    argv = ["build", "--pins", str(pins), "--network", "host", "--tag", tag, "--record", str(record)]
    return main([*argv, "--progress", "plain", *extra])


def test_a_tampered_lock_hash_fails_the_build_at_its_step_naming_the_package(
    locked_pins: Path, tmp_path: Path, engine: DockerEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    pins = copy_pins(locked_pins, tmp_path)
    lock = pins.with_name("pylock.toml")
    served = require_python_lock(lock).get("tqdm")
    assert served is not None
    tampered = hashlib.sha256(b"not what the index serves").hexdigest()
    lock.write_text(lock.read_text().replace(served.sha256, tampered))
    tag = f"imagebuild-test/must-not-exist:tampered-{CHECKOUT}"
    assert build(pins, tmp_path / "record.json", tag) == 4
    err = capsys.readouterr().err
    assert "step 4/18 'Constraint proof, then MoRI from source' failed" in err
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in err
    assert f"tqdm=={served.version} from " in err
    assert f"Expected sha256 {tampered}" in err
    assert "nothing was tagged" in err
    with pytest.raises(EngineError):
        engine.inspect_image(tag)


def test_a_flydsl_change_rebuilds_from_step_15_keeping_the_vllm_compile(
    locked_pins: Path, world: World, tmp_path: Path, engine: DockerEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    tag = f"imagebuild-test/flydsl-change:gfx942-{CHECKOUT}"
    assert build(locked_pins, tmp_path / "before.json", tag) == 0
    # flydsl 0.2.2 (the donor's version) is on the sample index too: pin it and re-lock, as a user would.
    pins = flydsl_pins(locked_pins, tmp_path)
    assert require_python_lock(pins.with_name("pylock.toml")).get("flydsl").version == "0.2.2"  # type: ignore[union-attr]
    capsys.readouterr()

    assert main(["plan", "--pins", str(pins), "--changed", "flydsl", "--json"]) == 0
    planned = [row["step"] for row in json.loads(capsys.readouterr().out)["steps"]]
    assert planned[0] > 7

    assert build(pins, tmp_path / "after.json", tag) == 0
    before = json.loads((tmp_path / "before.json").read_text())
    after = json.loads((tmp_path / "after.json").read_text())
    cached = [s["number"] for s in after["steps"] if s["cached"]]
    # Steps 1-14 (MoRI, AITER, the vLLM compile, the graft) come from the cache. Steps 15-18 are
    # built, unless an earlier session already built this very change (the engine keeps its cache).
    assert cached[: planned[0] - 1] == list(range(1, planned[0]))
    assert after["image_id"] != before["image_id"]
    code, versions = engine.run(tag, ["cat", "/app/versions.txt"])
    assert code == 0
    assert "FLYDSL_REPIN=0.2.2 (after proven_k3 graft)" in versions
    assert world.wheel_sha256["flydsl-0.2.2-py3-none-any.whl"] in pins.read_text()


def flydsl_pins(locked_pins: Path, directory: Path) -> Path:
    """The locked pins with flydsl 0.2.2 (the donor's version, on the sample index too), re-locked."""
    pins = copy_pins(locked_pins, directory)
    text = pins.read_text()
    flydsl = text[text.index("[flydsl]") :]
    flydsl = flydsl[: flydsl.index("\n[")] if "\n[" in flydsl else flydsl
    changed = re.sub(r'version = "0\.2\.4"', 'version = "0.2.2"', flydsl)
    changed = re.sub(r'filename = "[^"]*"', 'filename = ""', changed)
    changed = re.sub(r'sha256 = "[^"]*"', 'sha256 = ""', changed)
    pins.write_text(text.replace(flydsl, changed))
    assert main(["lock", "--pins", str(pins), "-P", "flydsl"]) == 0
    return pins


def test_a_cache_over_the_normalised_layers_keeps_them_once_and_gives_the_same_images(
    locked_pins: Path, tmp_path: Path, engine: DockerEngine
) -> None:
    tag = f"imagebuild-test/cache-normalized:gfx942-{CHECKOUT}"
    # Cold: a built image no other tag holds (a build from the session's cache would give its built image).
    assert build(locked_pins, tmp_path / "first.json", tag, "--cache-normalized", "--no-cache") == 0
    first = json.loads((tmp_path / "first.json").read_text())
    cache = engine.inspect_image(f"{tag}-cache")
    assert first["normalization"]["cache_image"] == cache.id
    assert cache.layers == engine.inspect_image(tag).layers  # a config of its own, over the image's layers
    assert first["normalization"]["unnormalized_id"] not in engine.image_ids()  # gone, its layers with it

    # Fully cached: the build gives the cache image itself, and the image is the last build's.
    assert build(locked_pins, tmp_path / "first.json", tag, "--cache-normalized") == 0
    again = json.loads((tmp_path / "first.json").read_text())
    assert again["all_cached"]
    assert (again["normalization"]["unnormalized_id"], again["normalization"]["reused"]) == (cache.id, True)
    assert again["image_id"] == first["image_id"]

    # A late pin change: steps 1-14 come back from the cache image as normalised layers and are taken
    # as they are; the image is the one a cold build gives.
    pins = flydsl_pins(locked_pins, tmp_path)
    assert build(pins, tmp_path / "first.json", tag, "--cache-normalized") == 0
    changed = json.loads((tmp_path / "first.json").read_text())
    assert [s["number"] for s in changed["steps"] if s["cached"]][:14] == list(range(1, 15))
    assert given_back(engine, locked_pins, changed)
    assert changed["normalization"]["layers_reused"] >= 12  # every layer of steps 1-14: none rewritten
    assert cache.id not in engine.image_ids()  # the last cache image went with the cache it replaced
    other = f"imagebuild-test/cache-normalized:cold-{CHECKOUT}"
    try:
        assert build(pins, tmp_path / "cold.json", other, "--no-cache") == 0
        assert json.loads((tmp_path / "cold.json").read_text())["image_id"] == changed["image_id"]
    finally:
        remove_images(other)

    # Back, with another --record: it names no cache image, so the build takes no step from it (the
    # layers it gives back could be neither taken as they are nor the steps above them checked).
    assert build(locked_pins, tmp_path / "fresh.json", tag, "--cache-normalized") == 0
    back = json.loads((tmp_path / "fresh.json").read_text())
    assert not given_back(engine, locked_pins, back)
    assert back["normalization"]["layers_reused"] == 0
    built = back["normalization"]["unnormalized_id"]  # the session's built image, when its cache served
    assert built not in engine.image_ids() or engine.inspect_image(built).tags  # removed unless a name holds it
    assert back["image_id"] == first["image_id"]


def given_back(engine: DockerEngine, pins: Path, record: dict[str, object]) -> bool:
    """Whether the build's first build layer was the normalised one (the layer cache image gave it back)."""
    base = engine.inspect_image(load_pins(pins).image("base").reference).layers
    normalization = record["normalization"]
    assert isinstance(normalization, dict)
    note = normalization["layers"][0]
    return bool(chain_ids([*base, note["diff_id"]])[-1] == note["built"])
