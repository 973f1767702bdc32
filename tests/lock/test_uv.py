"""uv resolves the python lock for a target that is not this machine, from a local index.

Tiny wheels are written here and served by the sample world's index server on a free loopback port,
so the real resolver runs without the internet.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.errors import LockError
from imagebuild.lock.uv import ResolveRequest, UvResolver
from sampleworld.index_server import IndexServer, start_index_server


def write_wheel(
    packages: Path, name: str, version: str, tag: str = "py3-none-any", requires: tuple[str, ...] = ()
) -> str:
    dist = f"{name.replace('-', '_')}-{version}"
    path = packages / f"{dist}-{tag}.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{dist}.dist-info/METADATA", metadata)
        archive.writestr(
            f"{dist}.dist-info/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n"
        )
        archive.writestr(f"{dist}.dist-info/RECORD", "")
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def index(tmp_path: Path) -> Iterator[IndexServer]:
    packages = tmp_path / "index" / "packages"
    packages.mkdir(parents=True)
    write_wheel(packages, "tool", "1.0", requires=("helper",))
    write_wheel(packages, "helper", "1.0")
    write_wheel(packages, "helper", "2.0")
    write_wheel(packages, "builder", "79.0")
    write_wheel(packages, "builder", "80.0")
    # Two wheels of one release: the target (cp312 manylinux x86_64) must get the binary one.
    write_wheel(packages, "fast", "1.0")
    write_wheel(packages, "fast", "1.0", tag="cp312-cp312-manylinux_2_17_x86_64")
    write_wheel(packages, "fast", "1.0", tag="cp312-cp312-macosx_11_0_arm64")
    write_wheel(packages, "sdistonly", "1.0", tag="cp399-cp399-manylinux_2_17_x86_64")
    with start_index_server(tmp_path / "index") as server:
        yield server


def request(index: IndexServer, **kw: object) -> ResolveRequest:
    defaults: dict[str, object] = {
        "groups": {"04-mori": ("tool", "fast"), "build": ("builder",)},
        "constraints": "builder<80\n",
        "index": index.simple_url,
        "python": "3.12",
        "machine": "x86_64",
        "previous": None,
        "timeout": 60.0,
    }
    return ResolveRequest(**{**defaults, **kw})  # type: ignore[arg-type]


def test_resolves_groups_under_constraints_for_the_target(index: IndexServer) -> None:
    resolution = UvResolver().resolve(request(index))
    found = {p.name: p for p in resolution.packages}
    assert {n: (p.version, p.groups) for n, p in found.items()} == {
        "builder": ("79.0", ("build",)),
        "fast": ("1.0", ("04-mori",)),
        "helper": ("2.0", ("04-mori",)),
        "tool": ("1.0", ("04-mori",)),
    }
    assert found["fast"].filename == "fast-1.0-cp312-cp312-manylinux_2_17_x86_64.whl"
    served = index.root / "packages" / found["fast"].filename
    assert found["fast"].sha256 == hashlib.sha256(served.read_bytes()).hexdigest()
    assert found["fast"].url.startswith(index.url)
    assert resolution.resolver.startswith("uv ")


def test_previous_lock_is_kept_unless_upgraded(index: IndexServer) -> None:
    from imagebuild.inputs.python_lock import PythonLock

    first = UvResolver().resolve(request(index))
    older = tuple(
        p
        if p.name != "helper"
        else type(p)(**{**p.__dict__, "version": "1.0", "filename": "helper-1.0-py3-none-any.whl"})
        for p in first.packages
    )
    previous = PythonLock(
        index=index.simple_url,
        python="3.12",
        platform="x86_64-manylinux_2_28",
        resolver="uv",
        groups=("04-mori", "build"),
        packages=older,
    )
    kept = UvResolver().resolve(request(index, previous=previous))
    assert next(p for p in kept.packages if p.name == "helper").version == "1.0"
    upgraded = UvResolver().resolve(request(index, previous=previous, upgrade_packages=("helper",)))
    assert next(p for p in upgraded.packages if p.name == "helper").version == "2.0"


def test_unsatisfiable_declaration_fails_in_one_line(index: IndexServer) -> None:
    with pytest.raises(LockError) as failure:
        UvResolver().resolve(request(index, groups={"04-mori": ("tool==9.9",)}))
    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith("uv could not resolve the image's python packages:")
    assert "tool==9.9" in message


def test_package_without_a_wheel_for_the_target_fails(index: IndexServer) -> None:
    with pytest.raises(LockError, match="sdistonly"):
        UvResolver().resolve(request(index, groups={"04-mori": ("sdistonly",)}))
