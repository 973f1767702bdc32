"""uv's and pip-tools' lock conventions: --locked, --offline, --outdated, against FakeSources.

Offline is proven by sources that fail the test on any use: the lock may not even open them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.inputs.arch import ArchProfile
from imagebuild.lock import LockRequest, lock, lock_project
from imagebuild.lock.outdated import outdated_rows
from imagebuild.lock.repository import Resolved, Sources, SourceSettings
from imagebuild.lock.uv import Resolution, Resolver, ResolveRequest
from imagebuild.project import find_project
from imagebuild.testing import FakeSources
from tests import REPO
from tests.lock.servers import fingerprinted, options

OLD, NEW = "a" * 40, "b" * 40
COMMITTED = "2026-01-01T00:00:00Z"
SHA = "c" * 64


def no_network(settings: SourceSettings) -> Sources:
    pytest.fail("an offline lock opened its sources")


class NoIndex(Resolver):
    def resolve(self, request: ResolveRequest) -> Resolution:
        pytest.fail("an offline lock ran the python resolver")


def write_pins(tmp_path: Path, *, wheel_sha: str = SHA, branch: str = "main") -> Path:
    path = tmp_path / "pins.toml"
    path.write_text(
        "# pins\n"
        f'[mori]\nkind = "git"\nurl = "https://git.example/mori.git"\ntag = "v1"\n'
        f'commit = "{OLD}"\ncommitted = "{COMMITTED}"\n\n'
        f'[vllm]\nkind = "git"\nurl = "https://git.example/vllm.git"\nbranch = "{branch}"\n'
        f'commit = "{OLD}"\ncommitted = "{COMMITTED}"\n\n'
        f'[aiter]\nkind = "wheel"\nurl = "https://files.example/aiter-1.0-py3-none-any.whl"\n'
        f'version = "1.0"\nsha256 = "{wheel_sha}"\nsize = {10 if wheel_sha else 0}\n',
        encoding="utf-8",
    )
    return fingerprinted(path)


def at(commit: str) -> Resolved:
    return Resolved(fields={"commit": commit, "committed": COMMITTED})


# --- --offline ------------------------------------------------------------------------------


def test_offline_asks_nothing_and_names_the_pins_it_cannot_check(tmp_path: Path, amd64: ArchProfile) -> None:
    path = write_pins(tmp_path, wheel_sha="")
    before = path.read_bytes()
    result = lock(options(path, amd64, offline=True, check=True), open_sources=no_network)
    assert [c.status for c in result.changes] == ["unchanged", "unchanged", "unresolved"]
    assert result.change("mori").unchecked == "not checked: offline; tag v1 is asked on every lock"
    assert result.change("aiter").detail == "its identity is incomplete (sha256, size empty)"
    assert result.stale is True
    assert path.read_bytes() == before
    summary = result.summary()
    assert "UNRESOLVED: aiter need their source (run `imagebuild lock`)" in summary
    assert "offline: not checked against their source: mori, vllm" in summary
    assert result.to_json()["offline"] is True


def test_offline_fingerprints_what_the_file_alone_vouches_for(tmp_path: Path, amd64: ArchProfile) -> None:
    path = tmp_path / "pins.toml"
    path.write_text(  # a complete wheel pin written by hand: no fingerprint yet
        '[aiter]\nkind = "wheel"\nurl = "https://files.example/a.whl"\nversion = "1.0"\n'
        f'sha256 = "{SHA}"\nsize = 10\n',
        encoding="utf-8",
    )
    result = lock(options(path, amd64, offline=True), open_sources=no_network)
    assert (result.change("aiter").status, result.wrote, result.stale) == ("filled", True, False)
    assert 'fingerprint = "' in path.read_text(encoding="utf-8")


def test_offline_over_the_checkout_reads_only_its_files(capsys: pytest.CaptureFixture[str]) -> None:
    project = find_project(REPO, REPO / "pins.toml")
    before = (project.pins_path.read_bytes(), project.python_lock_path.read_bytes())
    request = LockRequest(arch="gfx942", mode="check", offline=True, jobs=2, timeout=5.0, deadline=30.0)
    result = lock_project(project, request, resolver=NoIndex(), open_sources=no_network)
    assert result.python is not None
    assert (result.python.offline, result.python.problems, result.python.stale) == (True, (), False)
    assert result.pins is not None
    assert result.pins.change("mori").unchecked is not None  # a tag: asked on every lock, not offline
    assert (project.pins_path.read_bytes(), project.python_lock_path.read_bytes()) == before


def test_locking_one_arch_keeps_the_python_lock_of_a_pin_only_another_arch_consumes(tmp_path: Path) -> None:
    """[flydsl] is gfx942's only; the one pylock.toml still locks its group from it (its version and
    index) when gfx950 is locked: without it the lock moved every package to PyPI's index."""
    pins = tmp_path / "pins.toml"
    pins.write_bytes((REPO / "sampleworld" / "pins.toml").read_bytes())
    (tmp_path / "pylock.toml").write_bytes((REPO / "sampleworld" / "pylock.toml").read_bytes())
    project = find_project(REPO, pins)
    request = LockRequest(arch="gfx950", mode="locked", offline=True, jobs=2, timeout=5.0, deadline=30.0)
    result = lock_project(project, request, resolver=NoIndex(), open_sources=no_network)
    assert result.python is not None
    assert (result.python.problems, result.python.stale) == ((), False)
    assert not any(line.startswith("pylock.toml: ") for line in result.would_change())


def test_offline_finds_a_python_lock_that_contradicts_the_stages(tmp_path: Path) -> None:
    pins = tmp_path / "pins.toml"
    pins.write_bytes((REPO / "pins.toml").read_bytes())
    lock_file = tmp_path / "pylock.toml"
    text = (REPO / "pylock.toml").read_text(encoding="utf-8")
    lock_file.write_text(text.replace('version = "0.64.0"', 'version = "0.63.0"'), encoding="utf-8")
    project = find_project(REPO, pins)
    request = LockRequest(arch="gfx942", mode="locked", offline=True, jobs=2, timeout=5.0, deadline=30.0)
    result = lock_project(project, request, resolver=NoIndex(), open_sources=no_network)
    assert result.python is not None
    assert result.python.stale is True
    [problem] = result.python.problems
    assert "04-mori needs meson==0.64.0" in problem
    assert "locked at 0.63.0" in problem
    assert any(line.startswith("pylock.toml: ") for line in result.would_change())


# --- --locked -------------------------------------------------------------------------------


def test_locked_passes_a_lock_a_plain_lock_keeps_even_when_upstream_moved(
    tmp_path: Path, amd64: ArchProfile
) -> None:
    path = write_pins(tmp_path)
    result = lock(options(path, amd64, locked=True), open_sources=no_network)  # moved or not: kept
    assert (result.mode, result.would_change(), result.wrote) == ("locked", (), False)
    assert "locked: " in result.summary()
    assert "would not change" in result.summary()


def test_locked_names_each_pin_a_plain_lock_would_write(tmp_path: Path, amd64: ArchProfile) -> None:
    path = write_pins(tmp_path, wheel_sha="")
    text = path.read_text(encoding="utf-8").replace('branch = "main"', 'branch = "next"')
    path.write_text(text, encoding="utf-8")
    before = path.read_bytes()
    result = lock(options(path, amd64, locked=True), open_sources=no_network)
    assert result.would_change() == (
        "[vllm] pins.toml changed: vllm now tracks branch next: `imagebuild lock` would resolve it",
        "[aiter] its identity is incomplete (sha256, size empty): `imagebuild lock` would resolve it",
    )
    assert path.read_bytes() == before


def test_locked_on_the_command_line_exits_1_with_one_line_per_pin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    path = write_pins(tmp_path, wheel_sha="")
    before = path.read_bytes()
    code = main(["lock", "--only", "pins", "--locked", "--pins", str(path)])
    _, err = capsys.readouterr()
    assert code == 1
    assert (
        "--locked: pins.toml: [aiter] its identity is incomplete (sha256, size empty): "
        "`imagebuild lock` would resolve it"
    ) in err.splitlines()[-1]
    assert path.read_bytes() == before
    assert main(["lock", "--only", "pins", "--locked", "--json", "--pins", str(path)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["mode"] == "locked"
    assert len(data["would_change"]) == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--locked", "--check"], "not allowed with argument"),
        (["--outdated", "--dry-run"], "not allowed with argument"),
        (["--offline", "--outdated"], "--offline and --outdated contradict each other; drop one"),
        (["--offline", "-U"], "--offline and -U/--upgrade contradict each other; drop one"),
        (["--locked", "-P", "aiter"], "--locked and -P/--upgrade-package contradict each other; drop one"),
    ],
)
def test_contradicting_flags_are_one_line_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(REPO)
    path = write_pins(tmp_path)
    before = path.read_bytes()
    assert main(["lock", "--only", "pins", "--pins", str(path), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert path.read_bytes() == before


# --- --outdated -----------------------------------------------------------------------------


def test_outdated_reports_what_moved_upstream_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_pins(tmp_path)
    before = path.read_bytes()
    sources = FakeSources({"mori": at(NEW), "vllm": at(NEW)})
    project = find_project(REPO, path)
    request = LockRequest(arch="gfx942", only="pins", mode="outdated", jobs=2, timeout=5.0, deadline=30.0)
    result = lock_project(project, request, open_sources=sources.open)
    assert sorted(sources.asked) == ["mori", "vllm"]  # the wheel is not downloaded
    rows = {r.name: r for r in result.outdated}
    assert (rows["mori"].verdict, rows["vllm"].verdict, rows["aiter"].verdict) == (
        "moved",
        "outdated",
        "not checked",
    )
    assert (rows["vllm"].recorded, rows["vllm"].upstream) == (OLD[:12], NEW[:12])
    table = result.format_tables()
    assert "outdated: 2 of 3: mori, vllm; not checked: aiter; nothing was written" in table
    assert [row["name"] for row in result.to_json()["outdated"]] == ["mori", "vllm", "aiter"]
    assert path.read_bytes() == before


def test_outdated_reads_a_pypi_pins_newest_release(tmp_path: Path, amd64: ArchProfile) -> None:
    path = tmp_path / "pins.toml"
    path.write_text(
        '[flydsl]\nkind = "pypi"\nproject = "flydsl"\nversion = "0.2.4"\n'
        f'index = "https://pypi.example/simple/"\nfilename = "flydsl-0.2.4-py3-none-any.whl"\nsha256 = "{SHA}"\n',
        encoding="utf-8",
    )
    fingerprinted(path)
    answer = Resolved(fields={"filename": "flydsl-0.2.4-py3-none-any.whl", "sha256": SHA}, newest="0.3.0")
    result = lock(options(path, amd64, outdated=True), open_sources=FakeSources({"flydsl": answer}).open)
    [row] = outdated_rows(result, None)
    assert (row.verdict, row.recorded, row.upstream, row.note) == (
        "outdated",
        SHA[:12],
        "0.3.0",
        "newest release 0.3.0",
    )


def test_outdated_on_the_command_line_exits_0_and_says_whether_anything_moved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    path = tmp_path / "pins.toml"  # pins with nothing upstream to ask: no network
    path.write_text(
        f'[mori]\nkind = "git"\nurl = "https://git.example/mori.git"\ncommit = "{OLD}"\n'
        f'committed = "{COMMITTED}"\n\n[rust]\nkind = "toolchain"\nversion = "1.88.0"\n',
        encoding="utf-8",
    )
    fingerprinted(path)
    before = path.read_bytes()
    assert main(["lock", "--only", "pins", "--outdated", "--pins", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "outdated: none of 2; not checked: mori, rust; nothing was written"
    assert main(["lock", "--only", "pins", "--outdated", "--json", "--pins", str(path)]) == 0
    rows = json.loads(capsys.readouterr().out)["outdated"]
    assert [(r["name"], r["status"]) for r in rows] == [("mori", "not checked"), ("rust", "not checked")]
    assert path.read_bytes() == before
