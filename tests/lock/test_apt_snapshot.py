"""The apt pin's snapshot: resolved against the sample world's stand-in, kept like the other pins."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from imagebuild.errors import LockError
from imagebuild.inputs.arch import ArchProfile
from imagebuild.lock import lock
from imagebuild.lock.apt_snapshot import newest_snapshot
from imagebuild.lock.http import Http
from imagebuild.lock.source_errors import FetchError
from imagebuild.pins import AptPin, load_pins
from sampleworld.snapshot_server import SnapshotServer, start_snapshot_server
from tests.lock.servers import LocalServer, options, send

FIRST, SECOND = "20260101T000000Z", "20260102T000000Z"
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def publish(root: Path, snapshot: str, release: bytes) -> None:
    dists = root / "archive" / "debian" / snapshot / "dists" / "bookworm"
    dists.mkdir(parents=True)
    (dists / "InRelease").write_bytes(release)


@pytest.fixture
def snapshots(tmp_path: Path) -> Iterator[tuple[Path, SnapshotServer]]:
    root = tmp_path / "snapshots"
    publish(root, FIRST, b"Origin: Debian\nDate: Thu, 01 Jan 2026 00:00:00 UTC\n")
    server = start_snapshot_server(root)
    yield root, server
    server.close()


def pins_text(archive: str, snapshot: str = "") -> str:
    return f"""\
# the apt pin alone
[apt]
kind = "apt"
archive = "{archive}"
suite = "bookworm"
components = ["main"]
signed_by = "/usr/share/keyrings/sampleworld-snapshots.gpg"
snapshot = "{snapshot}"
"""


def pin(archive: str, snapshot: str = "", tmp: Path | None = None) -> AptPin:
    path = (tmp or Path("/tmp")) / "apt-pins.toml"
    path.write_text(pins_text(archive, snapshot))
    (found,) = load_pins(path)
    assert isinstance(found, AptPin)
    return found


def test_the_newest_snapshot_is_where_the_service_redirects_the_current_time(
    snapshots: tuple[Path, SnapshotServer], tmp_path: Path
) -> None:
    root, server = snapshots
    with Http(timeout=5) as http:
        assert newest_snapshot(pin(server.archive, tmp=tmp_path), http, now=NOW).fields == {"snapshot": FIRST}
        publish(root, SECOND, b"Origin: Debian\nDate: Fri, 02 Jan 2026 00:00:00 UTC\n")
        assert newest_snapshot(pin(server.archive, FIRST, tmp_path), http, now=NOW).fields == {
            "snapshot": SECOND
        }


def test_a_time_before_every_snapshot_is_older_than_the_service_keeps(
    snapshots: tuple[Path, SnapshotServer], tmp_path: Path
) -> None:
    _root, server = snapshots
    with Http(timeout=5) as http, pytest.raises(FetchError, match="404"):
        newest_snapshot(pin(server.archive, tmp=tmp_path), http, now=datetime(2025, 1, 1, tzinfo=UTC))


def test_a_service_that_serves_every_time_keeps_a_recorded_snapshot_of_the_same_state(tmp_path: Path) -> None:
    """snapshot.ubuntu.com's kind: any ID is served, so only a changed InRelease is a newer snapshot."""
    release = {"body": b"Origin: Ubuntu\nDate: 1\n"}  # the archive's state now

    def handle(h: BaseHTTPRequestHandler) -> None:
        old = f"/{FIRST}/" in h.path  # the state at FIRST never changes
        send(h, 200, b"Origin: Ubuntu\nDate: 1\n" if old else release["body"])

    server = LocalServer(handle)
    try:
        archive = f"{server.url}/ubuntu"
        with Http(timeout=5) as http:
            kept = newest_snapshot(pin(archive, FIRST, tmp_path), http, now=NOW)
            assert kept.fields == {"snapshot": FIRST}
            release["body"] = b"Origin: Ubuntu\nDate: 2\n"
            moved = newest_snapshot(pin(archive, FIRST, tmp_path), http, now=NOW)
            assert moved.fields == {"snapshot": "20261201T000000Z"}
    finally:
        server.close()


def test_a_redirect_to_plain_http_off_this_machine_is_refused(tmp_path: Path) -> None:
    def handle(h: BaseHTTPRequestHandler) -> None:
        send(h, 302, b"", {"Location": "http://snapshot.example.org/archive/debian/20260101T000000Z/"})

    server = LocalServer(handle)
    try:
        with Http(timeout=5) as http, pytest.raises(FetchError, match="not a loopback address"):
            newest_snapshot(pin(f"{server.url}/archive/debian", tmp=tmp_path), http, now=NOW)
    finally:
        server.close()


def test_lock_fills_the_snapshot_keeps_it_and_moves_it_only_on_upgrade(
    snapshots: tuple[Path, SnapshotServer], tmp_path: Path, amd64: ArchProfile
) -> None:
    root, server = snapshots
    path = tmp_path / "pins.toml"
    path.write_text(pins_text(server.archive))
    first = lock(options(path, amd64))
    assert first.wrote
    assert first.change("apt").status == "filled"
    assert f'snapshot = "{FIRST}"' in path.read_text()
    assert "# the apt pin alone" in path.read_text()
    written = path.read_bytes()
    publish(root, SECOND, b"Origin: Debian\nDate: Fri, 02 Jan 2026 00:00:00 UTC\n")
    again = lock(options(path, amd64))  # a complete snapshot is not asked again
    assert not again.wrote
    assert path.read_bytes() == written
    assert not lock(options(path, amd64, check=True)).stale
    outdated = lock(options(path, amd64, outdated=True))
    assert outdated.change("apt").status == "updated"
    assert not outdated.wrote
    moved = lock(options(path, amd64, upgrade_pins=("apt",)))
    assert moved.wrote
    assert f'snapshot = "{SECOND}"' in path.read_text()


def test_a_failed_snapshot_lock_leaves_pins_toml_byte_identical(tmp_path: Path, amd64: ArchProfile) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    server = start_snapshot_server(root)
    try:
        path = tmp_path / "pins.toml"
        path.write_text(pins_text(server.archive))
        before = path.read_bytes()
        with pytest.raises(LockError) as caught:
            lock(options(path, amd64))
        assert str(caught.value).startswith("[apt] ")
        assert "left untouched" in str(caught.value)
        assert path.read_bytes() == before
    finally:
        server.close()
