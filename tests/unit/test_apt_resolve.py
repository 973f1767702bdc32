"""The apt resolver's reading of apt's output, and lock's bad-input lines for the apt pin."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from imagebuild.errors import ConfigError
from imagebuild.lock.apt_lock_file import check_apt_snapshot
from imagebuild.lock.apt_resolve import (
    MARK,
    AptResolveError,
    AptResolveRequest,
    parse_plan,
    parse_resolution,
    resolve_script,
)
from imagebuild.pins import AptPin, parse_pins

PIN = {
    "kind": "apt",
    "archive": "http://127.0.0.1:55090/archive/debian",
    "suite": "bookworm",
    "components": ["main"],
    "signed_by": "/usr/share/keyrings/sampleworld-snapshot-archive.gpg",
    "snapshot": "20261101T000000Z",
}
BASE = "sha256:" + "ab" * 32
SHA_CCACHE = "1" * 64
SHA_HIREDIS = "2" * 64
SHA_SSL = "3" * 64


def request(requested: tuple[str, ...] = ("git", "ccache", "libssl-dev")) -> AptResolveRequest:
    (pin,) = parse_pins({"apt": PIN}, Path("pins.toml"))
    assert isinstance(pin, AptPin)
    return AptResolveRequest(
        pin=pin, snapshot="20261101T000000Z", image=f"base@{BASE}", base=BASE, requested=requested
    )


# What the container printed (apt 2.6 on bookworm), the sections as resolve_script writes them.
PLAN = """\
Reading package lists...
Building dependency tree...
git is already the newest version (1:2.39.5-0+deb12u2).
The following NEW packages will be installed:
  ccache libhiredis0.14
The following packages will be upgraded:
  libssl-dev
Inst libhiredis0.14 (0.14.1-3 Debian:bookworm [amd64])
Inst ccache (4.8+really4.7.5-1 Debian:bookworm [amd64])
Inst libssl-dev [3.0.20-1~deb12u2] (3.0.22-1~deb12u2 Debian:bookworm [amd64])
Conf libhiredis0.14 (0.14.1-3 Debian:bookworm [amd64])
"""
SHOW = f"""\
Package: libhiredis0.14
Version: 0.14.1-3
Description: minimalistic C client library for Redis
 a continuation line: not a field
SHA256: {SHA_HIREDIS}

Package: ccache
Version: 4.8+really4.7.5-1
SHA256: {SHA_CCACHE}

Package: libssl-dev
Version: 3.0.22-1~deb12u2
SHA256: {SHA_SSL}
"""


def output(*, plan: str = PLAN, show: str = SHOW, base: str = "git=1:2.39.5-0+deb12u2 ii \n") -> str:
    return (
        f"{MARK}update\nGet:1 http://127.0.0.1:55090/archive/debian/20261101T000000Z bookworm InRelease\n"
        f"{MARK}arch\namd64\n{MARK}plan\n{plan}{MARK}base\n{base}{MARK}show\n{show}{MARK}end\n"
    )


def test_the_plan_gives_every_download_with_its_sha256_and_named_packages_the_base_keeps() -> None:
    entry = parse_resolution(output(), request())
    assert entry.architecture == "amd64"
    assert entry.base == BASE
    assert [(p.name, p.version, p.sha256, p.in_base) for p in entry.packages] == [
        ("ccache", "4.8+really4.7.5-1", SHA_CCACHE, False),
        ("git", "1:2.39.5-0+deb12u2", "", True),
        ("libhiredis0.14", "0.14.1-3", SHA_HIREDIS, False),
        ("libssl-dev", "3.0.22-1~deb12u2", SHA_SSL, False),
    ]


def test_inst_lines_are_read_with_and_without_the_installed_version() -> None:
    assert parse_plan(["Inst aa [1.0] (2.0 x [amd64])", "Inst bb (1:3-1 x [amd64])", "Conf bb (1:3-1)"]) == [
        ("aa", "2.0"),
        ("bb", "1:3-1"),
    ]


def test_a_version_that_is_no_debian_version_never_gets_into_the_lock() -> None:
    with pytest.raises(ConfigError, match="is not a Debian version"):
        parse_plan(["Inst curl ($(id) x [amd64])"])


def test_a_download_without_a_sha256_in_the_signed_index_is_refused() -> None:
    with pytest.raises(AptResolveError, match=r"no SHA256 for ccache=4\.8"):
        parse_resolution(output(show=SHOW.replace(f"SHA256: {SHA_CCACHE}", "MD5sum: 00")), request())


def test_a_package_the_snapshot_lacks_is_named() -> None:
    text = f"{MARK}update\n{MARK}arch\namd64\n{MARK}failed plan\nE: Unable to locate package nosuchpkg\n"
    with pytest.raises(AptResolveError) as caught:
        parse_resolution(text, request(("git", "nosuchpkg")))
    assert "snapshot 20261101T000000Z of bookworm has no package nosuchpkg" in str(caught.value)


def test_a_snapshot_the_service_does_not_keep_says_to_move_the_pin() -> None:
    text = (
        f"{MARK}update\nErr:1 http://127.0.0.1:55090/archive/debian/20261101T000000Z bookworm InRelease\n"
        "  404  Not Found [IP: 127.0.0.1 55090]\nE: The repository '...' does not have a Release file.\n"
        f"{MARK}failed update\n"
    )
    with pytest.raises(AptResolveError) as caught:
        parse_resolution(text, request())
    assert "older than the service keeps" in caught.value.cause
    assert "imagebuild lock -P apt" in caught.value.hint


def test_an_unverifiable_signature_names_the_key_path() -> None:
    text = (
        f"{MARK}update\nW: GPG error: http://127.0.0.1:55090/... InRelease: The following signatures "
        "couldn't be verified because the public key is not available: NO_PUBKEY 0123\n"
        f"E: The repository '...' is not signed.\n{MARK}failed update\n"
    )
    with pytest.raises(AptResolveError, match=r"with /usr/share/keyrings/sampleworld-snapshot-archive\.gpg"):
        parse_resolution(text, request())


def test_output_that_stops_early_is_not_taken_for_a_resolution() -> None:
    with pytest.raises(AptResolveError, match="stopped early"):
        parse_resolution(f"{MARK}update\nsh: 1: apt-get: not found\n", request())


def test_the_script_uses_the_snapshot_only_and_checks_its_signature() -> None:
    script = resolve_script(request())
    assert (
        'echo "deb [signed-by=/usr/share/keyrings/sampleworld-snapshot-archive.gpg check-valid-until=no] '
        'http://127.0.0.1:55090/archive/debian/20261101T000000Z/ bookworm main"'
    ) in script
    assert "trusted=yes" not in script
    assert "find /etc/apt/sources.list.d -mindepth 1 -maxdepth 1 -exec mv" in script
    assert 'apt-get -s install -y --no-install-recommends "git" "ccache" "libssl-dev"' in script


def test_a_snapshot_in_the_future_is_refused_naming_the_pin() -> None:
    pins = parse_pins({"apt": {**PIN, "snapshot": "20270101T000000Z"}}, Path("pins.toml"))
    with pytest.raises(ConfigError) as caught:
        check_apt_snapshot(pins, now=datetime(2026, 12, 2, tzinfo=UTC))
    message = str(caught.value)
    assert "pins.toml [apt]: snapshot 20270101T000000Z is in the future" in message
    assert "imagebuild lock -P apt" in message
    assert "\n" not in message
