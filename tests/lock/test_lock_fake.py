"""lock's policy against FakeSources: no git daemon, registry or HTTP server.

What the lock keeps, writes, reports and refuses, with each source's answer scripted. The same
flows against real local servers are the integration tier (test_lock.py, test_faults.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.errors import LockError
from imagebuild.inputs.arch import ArchProfile
from imagebuild.lock import LockRequest, lock, lock_project
from imagebuild.lock.core import LoadedPins
from imagebuild.lock.http import FetchError
from imagebuild.lock.repository import Resolved
from imagebuild.pins import load_pins
from imagebuild.project import find_project
from imagebuild.testing import FakeSources
from tests import REPO
from tests.lock.servers import fingerprinted, options

OLD, NEW = "a" * 40, "b" * 40
COMMITTED = "2026-01-01T00:00:00Z"
SHA = "c" * 64


def write_pins(tmp_path: Path, *, commit: str = OLD, wheel_sha: str = SHA) -> Path:
    path = tmp_path / "pins.toml"
    path.write_text(
        "# pins of the fake world\n"
        f'[mori]\nkind = "git"\nurl = "https://git.example/mori.git"\ntag = "v1"\n'
        f'commit = "{commit}"\ncommitted = "{COMMITTED}"\n\n'
        f'[aiter]\nkind = "wheel"\nurl = "https://files.example/aiter-1.0-py3-none-any.whl"\n'
        f'version = "1.0"\nsha256 = "{wheel_sha}"\nsize = {10 if wheel_sha else 0}\n',
        encoding="utf-8",
    )
    return fingerprinted(path)


def tag_at(commit: str) -> Resolved:
    return Resolved(fields={"commit": commit, "committed": COMMITTED}, detail="refs/tags/v1")


WHEEL = Resolved(fields={"sha256": SHA, "size": 10})


def test_an_unchanged_lock_asks_only_the_tags_and_writes_nothing(tmp_path: Path, amd64: ArchProfile) -> None:
    path = write_pins(tmp_path)
    before = path.stat()
    sources = FakeSources({"mori": tag_at(OLD), "aiter": WHEEL})
    result = lock(options(path, amd64), open_sources=sources.open)
    assert sources.asked == ["mori"]  # a recorded wheel is not re-hashed without an upgrade
    assert sources.closed
    assert (result.wrote, result.stale, result.diff) == (False, False, "")
    assert [c.status for c in result.changes] == ["unchanged", "unchanged"]
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not even rewritten


def test_a_moved_tag_is_kept_and_reported_without_P(tmp_path: Path, amd64: ArchProfile) -> None:
    path = write_pins(tmp_path)
    before = path.read_bytes()
    result = lock(options(path, amd64), open_sources=FakeSources({"mori": tag_at(NEW)}).open)
    moved = result.change("mori")
    assert (moved.status, moved.applied, moved.old, moved.new) == ("moved", False, OLD, NEW)
    assert (result.wrote, result.stale) == (False, True)
    assert path.read_bytes() == before
    table = result.format_table()
    assert f"!! MOVED: [mori] tag v1 was {OLD} and is now {NEW}" in table
    assert "with `imagebuild lock -P mori`" in table
    assert "STALE: mori changed upstream and stay as recorded" in result.summary()


def test_P_accepts_the_moved_tag_and_the_result_holds_the_pins_as_written(
    tmp_path: Path, amd64: ArchProfile
) -> None:
    path = write_pins(tmp_path)
    result = lock(
        options(path, amd64, upgrade_pins=("mori",)), open_sources=FakeSources({"mori": tag_at(NEW)}).open
    )
    assert (result.change("mori").status, result.change("mori").applied) == ("moved", True)
    assert (result.wrote, result.stale) == (True, False)
    text = path.read_text(encoding="utf-8")
    assert f'commit = "{NEW}"' in text
    assert text.startswith("# pins of the fake world\n")  # comments survive the rewrite
    assert result.pins == load_pins(path)  # the lock's own updated pins, as parsing the file gives them


def test_check_reports_stale_and_writes_nothing(tmp_path: Path, amd64: ArchProfile) -> None:
    path = write_pins(tmp_path, wheel_sha="")
    before = path.read_bytes()
    result = lock(
        options(path, amd64, check=True), open_sources=FakeSources({"mori": tag_at(OLD), "aiter": WHEEL}).open
    )
    assert (result.mode, result.wrote, result.stale) == ("check", False, True)
    assert result.change("aiter").status == "filled"
    assert path.read_bytes() == before
    assert f"check: {path} is STALE" in result.summary()


def test_check_of_a_checkout_names_the_stale_file_the_cli_exits_on(tmp_path: Path) -> None:
    path = write_pins(tmp_path)
    request = LockRequest(arch="gfx942", only="pins", mode="check", jobs=2, timeout=5.0, deadline=30.0)
    sources = FakeSources({"mori": tag_at(NEW)})
    result = lock_project(find_project(REPO, path), request, open_sources=sources.open)
    assert result.python is None
    assert result.stale_paths == (path,)
    assert result.to_json()["stale"] is True
    assert result.format_tables().endswith(
        f"check: {path} is STALE; STALE: mori changed upstream and stay as recorded (accept with `imagebuild lock -P NAME`)\n"
    )


def test_dry_run_shows_the_diff_and_writes_nothing(tmp_path: Path, amd64: ArchProfile) -> None:
    path = write_pins(tmp_path, wheel_sha="")
    before = path.read_bytes()
    result = lock(
        options(path, amd64, dry_run=True),
        open_sources=FakeSources({"mori": tag_at(OLD), "aiter": WHEEL}).open,
    )
    assert (result.mode, result.wrote, result.stale) == ("dry-run", False, True)  # stale until written
    assert f'+sha256 = "{SHA}"' in result.diff.splitlines()
    assert path.read_bytes() == before
    assert result.pins == load_pins(path)  # nothing written: the pins as they are


def test_a_source_failure_leaves_pins_toml_unchanged(tmp_path: Path, amd64: ArchProfile) -> None:
    path = write_pins(tmp_path, wheel_sha="")
    before = path.read_bytes()
    sources = FakeSources(
        {
            "mori": tag_at(NEW),
            "aiter": FetchError(
                "https://files.example/aiter.whl", "HTTP 404 Not Found", "Not found: check the URL"
            ),
        }
    )
    with pytest.raises(LockError) as e:
        lock(options(path, amd64, upgrade=True), open_sources=sources.open)
    assert str(e.value) == (
        f"[aiter] https://files.example/aiter.whl: HTTP 404 Not Found. Not found: check the URL; "
        f"{path} was left untouched"
    )
    assert path.read_bytes() == before  # the answer for mori that would have been written is dropped
    assert sources.closed


def test_the_sources_are_opened_for_the_run(tmp_path: Path, amd64: ArchProfile) -> None:
    path = write_pins(tmp_path)
    sources = FakeSources({"mori": tag_at(OLD)})
    lock(options(path, amd64, timeout=7.0), open_sources=sources.open)
    assert sources.settings is not None
    assert (sources.settings.arch, sources.settings.timeout) == (amd64, 7.0)
    assert sources.settings.python is None  # no image pin 'base': only PyPI pins would need it
    assert sources.settings.registries == frozenset()


def test_the_callers_pins_are_used_while_the_file_holds_the_bytes_they_were_parsed_from(
    tmp_path: Path, amd64: ArchProfile
) -> None:
    path = write_pins(tmp_path)
    parsed = load_pins(path)
    sources = FakeSources({"mori": tag_at(OLD)})
    path.write_text(
        path.read_text(encoding="utf-8").replace('tag = "v1"', 'branch = "main"'), encoding="utf-8"
    )
    outdated = LoadedPins(pins=parsed, source=b"# what the file held when the caller parsed it\n")
    result = lock(options(path, amd64), loaded=outdated, open_sources=sources.open)
    assert result.change("mori").tracked == "branch main"  # the file changed since: parsed again
    current = LoadedPins(pins=parsed, source=path.read_bytes())
    assert (
        lock(options(path, amd64), loaded=current, open_sources=sources.open).change("mori").tracked
        == "tag v1"
    )


# --- the input file is the user's intent ---------------------------------------------------------


def test_an_edited_ref_is_resolved_by_a_plain_lock(tmp_path: Path, amd64: ArchProfile) -> None:
    path = write_pins(tmp_path)
    path.write_text(
        path.read_text(encoding="utf-8").replace('tag = "v1"', 'branch = "main"'), encoding="utf-8"
    )
    before = path.read_bytes()
    sources = FakeSources(
        {"mori": Resolved(fields={"commit": NEW, "committed": COMMITTED}, detail="refs/heads/main")}
    )
    check = lock(options(path, amd64, check=True), open_sources=sources.open)
    assert (check.stale, path.read_bytes()) == (True, before)
    assert "pins.toml changed: mori now tracks branch main; run `imagebuild lock`" in check.summary()
    assert "changed upstream" not in check.summary()
    result = lock(options(path, amd64), open_sources=sources.open)  # no -P
    assert (result.change("mori").status, result.wrote, result.stale) == ("updated", True, False)
    assert result.pins.get("mori").locked
    assert f'commit = "{NEW}"' in path.read_text(encoding="utf-8")
    assert lock(options(path, amd64, check=True), open_sources=sources.open).stale is False
