"""The engine matrix (sampleworld/engine_matrix.py) without starting anything: names, paths, argv, index parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sampleworld import engine_matrix
from sampleworld.debian_dist import BINARIES, dist_dir, parse_packages
from sampleworld.engine_matrix import ENGINE_NAMES, MANAGED, managed_engine
from sampleworld.errors import SampleWorldError
from sampleworld.layout import StateDir

STATE = StateDir(Path("/state/.sampleworld"))

PACKAGES_INDEX = """\
Package: containerd
Version: 1.7.24~ds1-6+deb13u1
Architecture: amd64
Depends: runc (>= 0.1.0~),
 libc6 (>= 2.34)
Filename: pool/main/c/containerd/containerd_1.7.24~ds1-6+deb13u1_amd64.deb
SHA256: ed708deb96fe476a3bce4efa5c0538dfbcf717ab9a7c7944ba7260342c25899c

Package: docker.io
Version: 26.1.5+dfsg1-9+deb13u1+b1
Architecture: amd64
Filename: pool/main/d/docker.io/docker.io_26.1.5+dfsg1-9+deb13u1+b1_amd64.deb
SHA256: 53ae1a99f15113f0a0d2226808ec0d24ee31b3b87b87ab8ec35be09a1a2ee13b

Package: docker.io
Version: 26.1.5+dfsg1-9+deb13u1+b1
Architecture: arm64
Filename: pool/main/d/docker.io/docker.io_26.1.5+dfsg1-9+deb13u1+b1_arm64.deb
SHA256: 0000000000000000000000000000000000000000000000000000000000000000
"""


def test_the_matrix_is_main_then_docker26_on_both_stores_then_testing_s_docker() -> None:
    assert ENGINE_NAMES == ("main", "docker26-overlay2", "docker26-containerd", "forky-containerd")
    assert [spec.suite for spec in MANAGED] == ["trixie", "trixie", "forky"]


def test_packages_index_gives_the_amd64_stanza_with_its_sha256() -> None:
    found = parse_packages(PACKAGES_INDEX, ("docker.io", "containerd"), "trixie")
    assert found["docker.io"]["SHA256"].startswith("53ae1a99")
    assert found["containerd"]["Filename"].endswith("containerd_1.7.24~ds1-6+deb13u1_amd64.deb")
    assert "libc6" in found["containerd"]["Depends"]  # continuation lines are kept


def test_a_package_missing_from_the_index_is_an_error() -> None:
    with pytest.raises(SampleWorldError, match="trixie's Packages index lists no runc"):
        parse_packages(PACKAGES_INDEX, ("docker.io", "runc"), "trixie")


def test_the_private_bin_dir_has_no_runc() -> None:
    # trixie's runc needs glibc 2.38; the shims must find bookworm's /usr/sbin/runc.
    assert "runc" not in BINARIES
    assert {"dockerd", "containerd", "containerd-shim-runc-v2"} <= set(BINARIES)


def test_each_engine_has_its_own_dirs_socket_and_bridge() -> None:
    engines = [managed_engine(STATE, spec) for spec in MANAGED]
    for field in ("root", "run_dir", "socket", "data_root", "exec_root", "pid_file", "bridge"):
        values = {getattr(engine, field) for engine in engines}
        assert len(values) == len(engines), field
    for spec, engine in zip(MANAGED, engines, strict=True):
        assert len(engine.bridge) <= 15
        assert len(str(engine.socket)) < 100  # unix socket paths are limited
        argv = engine.argv(engine.storage_driver or "")
        assert argv[0] == str(dist_dir(STATE, spec.suite) / "bin" / "dockerd")
        assert f"--bridge={engine.bridge}" in argv
        assert "--bridge=none" not in argv  # it deletes the host's docker0
        env = engine.env()
        assert env is not None
        assert env["PATH"].startswith(f"{dist_dir(STATE, spec.suite) / 'bin'}:")


def test_each_suite_unpacks_into_its_own_directory_and_no_other_suite_is_fetched() -> None:
    assert dist_dir(STATE, "trixie") != dist_dir(STATE, "forky")
    with pytest.raises(SampleWorldError, match="no Debian suite 'sid' for the engine matrix; it fetches trixie, forky"):
        dist_dir(STATE, "sid")


def test_overlay2_engine_names_its_driver_and_the_containerd_engine_the_snapshotter() -> None:
    overlay2, *containerd_stores = (managed_engine(STATE, spec) for spec in MANAGED)
    assert "--storage-driver=overlay2" in overlay2.argv(overlay2.storage_driver or "")
    assert json.loads(overlay2.daemon_config) == {}
    for containerd in containerd_stores:
        assert not any(a.startswith("--storage-driver") for a in containerd.argv(containerd.storage_driver or ""))
        assert json.loads(containerd.daemon_config) == {"features": {"containerd-snapshotter": True}}


def test_matrix_engine_reports_docker_host() -> None:
    row = engine_matrix.MatrixEngine(name="x", docker_host="unix:///run/x.sock", kind="classic", managed=True)
    assert row.env == {"DOCKER_HOST": "unix:///run/x.sock"}
    assert row.to_dict()["DOCKER_HOST"] == "unix:///run/x.sock"


def test_up_does_not_rebuild_stand_ins_the_registry_already_holds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A fresh engine (DOCKER_HOST at a Docker 26 engine) must pull base and donor, not rebuild and re-push
    # them: a rebuild gets new timestamps, so new digests, and the locked pins would go stale.
    from sampleworld import base_image, dockerutil, donor_image, registry, world

    state = StateDir(tmp_path)  # the base's recipe holds this world's archive key (generated here)
    current = {
        donor_image.LABEL: donor_image.recipe(),
        base_image.BASE_LABEL: base_image.base_recipe(state, base_image.rootfs_recipe()),
    }
    monkeypatch.setattr(registry, "pushed_labels", lambda repository, tag: current)
    # Written and pushed by API, no engine: not this test's subject, and it needs the registry running.
    monkeypatch.setattr(donor_image, "ensure_donor_mi355x", lambda: "")

    def no_engine() -> None:
        msg = "an engine was asked for although the registry holds both stand-ins"
        raise AssertionError(msg)

    monkeypatch.setattr(dockerutil, "client", no_engine)
    world._push_images(state)


def test_up_builds_what_the_registry_lacks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from sampleworld import dockerutil, donor_image, registry, world

    monkeypatch.setattr(registry, "pushed_labels", lambda repository, tag: None)
    monkeypatch.setattr(donor_image, "ensure_donor_mi355x", lambda: "")

    class Asked(Exception):
        pass

    def engine() -> None:
        raise Asked

    monkeypatch.setattr(dockerutil, "client", engine)
    with pytest.raises(Asked):
        world._push_images(StateDir(tmp_path))
