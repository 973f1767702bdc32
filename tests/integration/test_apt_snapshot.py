"""Step 4's OS packages from the sample world's snapshot service: locked, moved on -P apt, checked.

The session's sample image (conftest.sample_image) was built from the oldest snapshot; these tests
publish the newer one (its moving package at another version, sampleworld/apt_archive.py), lock
a copy of the pins with `-P apt`, and rebuild from step 4 only (steps 1-3 come from the cache).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import requests

from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from imagebuild.errors import ExitCode
from imagebuild.inputs.apt_lock import apt_lock_path_for, read_apt_lock
from imagebuild.pins import AptPin, load_pins
from sampleworld import apt_archive
from sampleworld.layout import StateDir
from sampleworld.world import World
from tests.integration.apt_support import newer_snapshot

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("chdir_repo")]


def copy_checkout_pins(locked_pins: Path, into: Path) -> Path:
    for name in ("pins.toml", "pylock.toml", "apt.lock.toml"):
        shutil.copy(locked_pins.with_name(name), into / name)
    return into / "pins.toml"


def dpkg_version(engine: DockerEngine, image: str, package: str) -> str:
    code, out = engine.run(image, ["dpkg-query", "-W", "-f=${Version}", package])
    assert code == 0, out
    return out.strip()


def test_the_sample_build_installs_the_locked_set_and_its_sbom_says_so(
    sample_image: dict[str, object], locked_pins: Path, world: World, engine: DockerEngine
) -> None:
    lock = read_apt_lock(apt_lock_path_for(locked_pins))
    assert lock is not None
    assert lock.snapshot == apt_archive.SNAPSHOTS[0]
    (entry,) = lock.architectures
    ccache = entry.get("ccache")
    assert ccache is not None
    assert not ccache.in_base  # left out of the base: step 4 downloaded it from the snapshot
    image = str(sample_image["image_id"])
    assert dpkg_version(engine, image, "ccache") == ccache.version
    moving, versions = apt_archive.moving_package(StateDir(world.state_dir))
    assert dpkg_version(engine, image, moving) == versions[apt_archive.SNAPSHOTS[0]]
    sbom = json.loads(Path(str(sample_image["sbom"])).read_text())
    component = next(
        c for c in sbom["components"] if c["name"] == "ccache" and c.get("purl", "").startswith("pkg:deb")
    )
    assert component["hashes"] == [{"alg": "SHA-256", "content": ccache.sha256}]
    properties = {p["name"]: p["value"] for p in component["properties"]}
    assert properties["imagebuild:apt-snapshot"] == lock.snapshot
    assert properties["imagebuild:apt-lock"] == "downloaded"


def test_lock_p_apt_moves_to_the_new_snapshot_and_the_rebuild_gets_the_new_version(
    *,
    sample_image: dict[str, object],
    locked_pins: Path,
    world: World,
    engine: DockerEngine,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pins = copy_checkout_pins(locked_pins, tmp_path)
    moving, versions = apt_archive.moving_package(StateDir(world.state_dir))
    with newer_snapshot(world) as newer:
        before = apt_lock_path_for(pins).read_bytes()
        assert main(["lock", "--pins", str(pins)]) == 0  # a plain lock keeps the snapshot and its packages
        assert apt_lock_path_for(pins).read_bytes() == before
        assert main(["lock", "--pins", str(pins), "-P", "apt"]) == 0
        pin = load_pins(pins).get("apt")
        assert isinstance(pin, AptPin)
        assert pin.snapshot == newer
        lock = read_apt_lock(apt_lock_path_for(pins))
        assert lock is not None
        moved = lock.architectures[0].get(moving)
        assert moved is not None
        assert (moved.version, moved.in_base) == (versions[newer], False)
        capsys.readouterr()
        assert main(["plan", "--pins", str(pins), "--changed", "apt", "--json"]) == 0
        plan = json.loads(capsys.readouterr().out)
        rebuilt = [s["step"] for s in plan["steps"]]
        assert rebuilt == list(range(4, 19))
        record = tmp_path / "record.json"
        argv = ["build", "--pins", str(pins), "--network", "host", "--tag", "imagebuild-test/apt:moved"]
        assert main([*argv, "--record", str(record)]) == 0
    built = json.loads(record.read_text())
    assert [s["cached"] for s in built["steps"][:3]] == [True, True, True]
    assert dpkg_version(engine, "imagebuild-test/apt:moved", moving) == versions[newer]
    assert built["image_id"] != sample_image["image_id"]


def test_a_version_the_snapshot_lacks_fails_step_4_naming_the_package(
    sample_image: dict[str, object], locked_pins: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    pins = copy_checkout_pins(locked_pins, tmp_path)
    path = apt_lock_path_for(pins)
    lock = read_apt_lock(path)
    assert lock is not None
    ccache = lock.architectures[0].get("ccache")
    assert ccache is not None
    path.write_text(
        path.read_text().replace(f'version = "{ccache.version}"', 'version = "4.8+really4.7.5-99"')
    )
    argv = ["build", "--pins", str(pins), "--network", "host", "--tag", "imagebuild-test/apt:missing"]
    capfd.readouterr()
    assert main(argv) == ExitCode.BUILD_FAILED
    text = capfd.readouterr().err
    assert "[4/18]" in text
    assert "E: Version '4.8+really4.7.5-99' for 'ccache' was not found" in text
    assert "apt cannot install apt.lock.toml's packages from snapshot" in text


def test_the_snapshot_service_redirects_to_the_newest_and_signs_with_the_world_key(
    world: World, tmp_path: Path
) -> None:
    """As snapshot.debian.org: an ID that is no import redirects to the one before; InRelease verifies."""
    dirs = apt_archive.ArchiveDirs(StateDir(world.state_dir))
    resp = requests.get(f"{world.snapshot_archive}/29991231T000000Z/dists/bookworm/InRelease", timeout=10)
    assert resp.history[0].status_code == 302
    assert f"/{apt_archive.SNAPSHOTS[0]}/dists/bookworm/InRelease" in resp.url
    in_release = tmp_path / "InRelease"
    in_release.write_bytes(resp.content)
    gpgv = subprocess.run(
        ["gpgv", "--keyring", str(dirs.keyring), str(in_release)], capture_output=True, text=True, check=False
    )
    assert gpgv.returncode == 0, gpgv.stderr
    assert "Good signature" in gpgv.stderr
    before = requests.get(f"{world.snapshot_archive}/20000101T000000Z/dists/bookworm/InRelease", timeout=10)
    assert before.status_code == 404  # older than the service keeps
