"""The python lock: stage declarations, pylock.toml round trip, and the conservative lock flow.

The resolver is a fake behind the same interface as uv's (tests/lock/test_uv.py runs the real one).
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.errors import ConfigError, LockError
from imagebuild.inputs.python_lock import (
    LockedPackage,
    PythonLock,
    parse_python_lock,
    read_python_lock,
    render_python_lock,
)
from imagebuild.inputs.stages import load_stages
from imagebuild.lock.python import PythonLockOptions, declared_groups, lock_python
from imagebuild.lock.uv import Resolution, Resolver, ResolveRequest, explain
from imagebuild.project import find_project
from tests import REPO

SHA_A, SHA_B, SHA_C = "a" * 64, "b" * 64, "c" * 64


def pkg(name: str, version: str, sha: str = SHA_A, groups: tuple[str, ...] = ("04-mori",)) -> LockedPackage:
    filename = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    return LockedPackage(
        name=name,
        version=version,
        groups=groups,
        filename=filename,
        url=f"https://files.example/{filename}",
        size=10,
        sha256=sha,
    )


class FakeResolver(Resolver):
    """Answers with fixed packages, keeping a previous version unless upgraded, as uv does."""

    def __init__(self, *packages: LockedPackage) -> None:
        self.packages = packages
        self.requests: list[ResolveRequest] = []

    def resolve(self, request: ResolveRequest) -> Resolution:
        self.requests.append(request)
        kept = []
        for p in self.packages:
            before = request.previous.get(p.name) if request.previous else None
            upgraded = request.upgrade or p.name in request.upgrade_packages
            kept.append(before if before and not upgraded and before.version != p.version else p)
        return Resolution(packages=tuple(kept), resolver="fake 1.0")


# --- declarations in the stage files ---------------------------------------------------------------


def test_checkout_declares_step_groups_and_build_and_guard() -> None:
    groups = load_stages(REPO / "stages").lock_groups()
    assert groups["04-mori"] == ("meson==0.64.0", "pybind11[global]", "tqdm", "prettytable")
    assert groups["15-flydsl-repin"] == ("flydsl",)
    # MoRI's build-system.requires (the constraint probe needs only setuptools).
    assert groups["build"] == (
        "setuptools",
        "setuptools_scm[toml]",
        "wheel",
        "ninja",
        "cmake",
        "pybind11",
        "Cython",
    )
    assert groups["guard"] == ("setuptools",)


def test_pypi_pin_supplies_the_version(project: Path) -> None:
    inputs = find_project(project).load("gfx942")
    assert declared_groups(inputs.definition, inputs.pins)["15-flydsl-repin"] == ("flydsl==0.2.4",)


def test_pypi_pin_with_a_version_in_the_stage_is_refused(project: Path) -> None:
    step = project / "stages" / "15-flydsl-repin.toml"
    step.write_text(
        step.read_text().replace('python_packages = ["flydsl"]', 'python_packages = ["flydsl==0.2.2"]')
    )
    inputs = find_project(project).load("gfx942")
    with pytest.raises(
        ConfigError, match=r"15-flydsl-repin.toml: 'flydsl==0.2.2' gives a version.*\[flydsl\]"
    ):
        declared_groups(inputs.definition, inputs.pins)


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ('"meson=0.64"', "is not a requirement"),
        ('"meson @ https://x/meson.whl"', "URL or marker"),
        ("\"tqdm; python_version < '3'\"", "URL or marker"),
        ('"tqdm", "TQDM"', "names 'TQDM' twice"),
    ],
)
def test_bad_python_packages_name_the_file(project: Path, entry: str, error: str) -> None:
    step = project / "stages" / "04-mori.toml"
    declared = 'python_packages = ["meson==0.64.0", "pybind11[global]", "tqdm", "prettytable"]'
    step.write_text(step.read_text().replace(declared, f"python_packages = [{entry}]"))
    with pytest.raises(ConfigError, match=f"04-mori.toml.*{error}"):
        load_stages(project / "stages")


def test_unknown_python_key_in_image_toml(project: Path) -> None:
    spec = project / "stages" / "image.toml"
    spec.write_text(spec.read_text().replace("guard_requires =", "guard_require ="))
    with pytest.raises(ConfigError, match=r"\[python\]: unknown key 'guard_require'.*'guard_requires'"):
        load_stages(project / "stages")


# --- pylock.toml ------------------------------------------------------------------------------------


def sample_lock(*packages: LockedPackage) -> PythonLock:
    return PythonLock(
        index="https://pypi.org/simple/",
        python="3.12",
        platform="x86_64-manylinux_2_28",
        resolver="fake 1.0",
        groups=("04-mori", "build"),
        packages=packages
        or (pkg("meson", "0.64.0"), pkg("setuptools", "79.0.1", SHA_B, ("04-mori", "build"))),
    )


def test_render_is_pep751_and_round_trips(tmp_path: Path) -> None:
    lock = sample_lock()
    text = render_python_lock(lock)
    data = tomllib.loads(text)
    assert data["lock-version"] == "1.0"
    assert data["dependency-groups"] == ["04-mori", "build"]
    setuptools = data["packages"][1]
    assert setuptools["marker"] == "'04-mori' in dependency_groups or 'build' in dependency_groups"
    assert setuptools["wheels"][0]["hashes"] == {"sha256": SHA_B}
    path = tmp_path / "pylock.toml"
    path.write_text(text)
    assert read_python_lock(path) == lock
    assert lock.group("build") == (lock.packages[1],)
    assert lock.packages[1].requirement == f"setuptools==79.0.1 --hash=sha256:{SHA_B}"


def test_missing_lock_reads_as_none(tmp_path: Path) -> None:
    assert read_python_lock(tmp_path / "pylock.toml") is None


@pytest.mark.parametrize(
    ("old", "new", "error"),
    [
        (f'sha256 = "{SHA_A}"', 'sha256 = "abc"', "is not 64 lowercase hex"),
        (
            "'04-mori' in dependency_groups\"",
            "'05-x' in dependency_groups\"",
            "not a list of the lock's dependency groups",
        ),
        ('name = "meson"', 'name = "Meson"', "is not normalised"),
        ('lock-version = "1.0"', 'lock-version = "2.0"', "lock-version '2.0'"),
        ("[[packages]]", "[[packages]", r"invalid TOML: .*; regenerate it with `imagebuild lock`"),
    ],
)
def test_damaged_lock_is_refused_naming_the_file(tmp_path: Path, old: str, new: str, error: str) -> None:
    text = render_python_lock(sample_lock()).replace(old, new, 1)
    path = tmp_path / "pylock.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"pylock.toml.*{error}"):
        read_python_lock(path)


def test_unsorted_packages_are_refused() -> None:
    data = tomllib.loads(render_python_lock(sample_lock()))
    data["packages"].reverse()
    with pytest.raises(ConfigError, match="sorted by name"):
        parse_python_lock(data, Path("pylock.toml"))


# --- the lock flow ------------------------------------------------------------------------------------


@pytest.fixture
def options(project: Path) -> PythonLockOptions:
    (project / "pylock.toml").unlink()  # the flow starts without a lock
    found = find_project(project)
    inputs = found.load("gfx942")
    return PythonLockOptions(
        lock_path=found.python_lock_path,
        definition=inputs.definition,
        pins=inputs.pins,
        arch=inputs.arch,
        constraints=inputs.constraints,
    )


def test_first_lock_writes_and_asks_for_the_base_python_and_pin_index(options: PythonLockOptions) -> None:
    resolver = FakeResolver(pkg("meson", "0.64.0"), pkg("tqdm", "4.70.1"))
    result = lock_python(options, resolver)
    assert result.wrote
    assert not result.stale
    assert [c.status for c in result.changes] == ["added", "added"]
    request = resolver.requests[0]
    assert (request.python, request.machine, request.index) == ("3.12", "x86_64", "https://pypi.org/simple/")
    assert request.platform == "x86_64-manylinux_2_28"
    assert "setuptools<80" in request.constraints
    lock = read_python_lock(options.lock_path)
    assert lock is not None
    assert lock.names() == ["meson", "tqdm"]


def test_relock_keeps_versions_and_writes_nothing(options: PythonLockOptions) -> None:
    lock_python(options, FakeResolver(pkg("tqdm", "4.70.1")))
    before = options.lock_path.read_bytes()
    again = lock_python(options, FakeResolver(pkg("tqdm", "4.71.0", SHA_B)))
    assert not again.wrote
    assert not again.stale
    assert again.changes[0].status == "unchanged"
    assert options.lock_path.read_bytes() == before


def test_upgrade_pin_moves_one_package(options: PythonLockOptions) -> None:
    lock_python(options, FakeResolver(pkg("tqdm", "4.70.1"), pkg("meson", "0.64.0")))
    newer = FakeResolver(pkg("tqdm", "4.71.0", SHA_B), pkg("meson", "0.65.0", SHA_B))
    result = lock_python(replace(options, upgrade_packages=("tqdm",)), newer)
    assert {c.name: c.status for c in result.changes} == {"meson": "unchanged", "tqdm": "updated"}
    lock = read_python_lock(options.lock_path)
    assert lock is not None
    assert [(p.name, p.version) for p in lock.packages] == [("meson", "0.64.0"), ("tqdm", "4.71.0")]


def test_moved_wheel_is_kept_until_accepted(options: PythonLockOptions) -> None:
    lock_python(options, FakeResolver(pkg("tqdm", "4.70.1", SHA_A)))
    recorded = options.lock_path.read_bytes()
    moved = FakeResolver(pkg("tqdm", "4.70.1", SHA_C))
    result = lock_python(options, moved)
    assert result.changes[0].status == "moved"
    assert not result.changes[0].applied
    assert result.stale
    assert "MOVED" in result.format_table()
    assert options.lock_path.read_bytes() == recorded
    accepted = lock_python(replace(options, upgrade_packages=("tqdm",)), moved)
    assert accepted.wrote
    assert not accepted.stale
    lock = read_python_lock(options.lock_path)
    assert lock is not None
    assert lock.packages[0].sha256 == SHA_C


def test_dry_run_and_check_write_nothing(options: PythonLockOptions) -> None:
    resolver = FakeResolver(pkg("tqdm", "4.70.1"))
    dry = lock_python(replace(options, mode="dry-run"), resolver)
    assert not dry.wrote
    assert dry.stale
    assert "dry run" in dry.summary()
    check = lock_python(replace(options, mode="check"), resolver)
    assert check.stale
    assert not options.lock_path.exists()
    lock_python(options, resolver)
    assert not lock_python(replace(options, mode="check"), resolver).stale


def test_removed_declaration_drops_the_package(options: PythonLockOptions) -> None:
    lock_python(options, FakeResolver(pkg("tqdm", "4.70.1"), pkg("meson", "0.64.0")))
    result = lock_python(options, FakeResolver(pkg("meson", "0.64.0")))
    assert {c.name: c.status for c in result.changes} == {"meson": "unchanged", "tqdm": "removed"}
    lock = read_python_lock(options.lock_path)
    assert lock is not None
    assert lock.names() == ["meson"]


def test_unknown_upgrade_name_is_refused_before_resolving(options: PythonLockOptions) -> None:
    resolver = FakeResolver(pkg("tqdm", "4.70.1"))
    with pytest.raises(
        ConfigError, match=r"--upgrade-pin tqmd: neither a pin nor a locked python package.*'tqdm'"
    ):
        lock_python(replace(options, upgrade_packages=("tqmd",)), resolver)
    assert resolver.requests == []


def test_lock_disagreeing_with_the_pypi_pin_fails(options: PythonLockOptions) -> None:
    flydsl = pkg("flydsl", "0.2.4", SHA_C, ("15-flydsl-repin",))
    with pytest.raises(LockError, match=r"\[flydsl\] names flydsl-0.2.4-cp312.*--upgrade-pin flydsl"):
        lock_python(options, FakeResolver(flydsl))
    assert not options.lock_path.exists()


def test_uv_explanation_becomes_one_line() -> None:
    stderr = (
        "  \u00d7 No solution found when resolving dependencies:\n"
        "  \u2570\u2500\u25b6 Because there is no version of tqdm==9.9 and you require tqdm==9.9, we can "
        "conclude that your requirements are unsatisfiable.\n"
    )
    assert explain(stderr) == (
        "No solution found when resolving dependencies: Because there is no version of tqdm==9.9 and you "
        "require tqdm==9.9, we can conclude that your requirements are unsatisfiable."
    )
