"""Wheels the sample index serves: pinned real wheels from PyPI, and stand-in wheels built here.

The PyPI wheels are pinned by sha256 and cached per user, so a second `up` needs no network. The stand-in
wheels are zipped with fixed timestamps, modes and order, so their sha256 is the same on every machine.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import requests

from sampleworld import log
from sampleworld.errors import SampleWorldError
from sampleworld.index_server import PACKAGES
from sampleworld.layout import AITER_ASSET_PATH, SOURCES_DIR, StateDir, cache_dir

_FILES = "https://files.pythonhosted.org/packages"


@dataclass(frozen=True, kw_only=True)
class PypiWheel:
    filename: str
    url: str
    sha256: str


# What the build installs from an index: the step-4 tools, MoRI's build dependencies with setuptools on
# both sides of the MoRI break, and the pip versions whose build-constraint behaviour differs (see
# shared/domain.md "Build constraints").
PYPI_WHEELS: tuple[PypiWheel, ...] = tuple(
    PypiWheel(filename=url.rsplit("/", 1)[1], url=f"{_FILES}/{url}", sha256=sha)
    for url, sha in (
        (
            "0d/6d/b4752b044bf94cb802d88a888dc7d288baaf77d7910b7dedda74b5ceea0c/setuptools-79.0.1-py3-none-any.whl",
            "e147c0549f27767ba362f9da434eab9c5dc0045d5304feb602a0af001089fc51",
        ),
        (
            "a3/dc/17031897dae0efacfea57dfd3a82fdd2a2aeb58e0ff71b77b87e44edc772/setuptools-80.9.0-py3-none-any.whl",
            "062d34222ad13e0cc312a4c02d73f059e86a4acbfbdea8f8f76b28c99f306922",
        ),
        (
            "2e/29/69cfbb602cd91690c55d38ba9fe53e6a7e76a6fa647bf38f19c138d25449/wheel-0.48.0-py3-none-any.whl",
            "3217dcc807155e45db462d7ef2431f5ddda0d7273b700d05a67b271ceb1287ab",
        ),
        (
            # wheel >= 0.46 needs packaging; without it every isolated setuptools build fails to set up.
            "ba/7b/5504f91c9c2733f693d7759e50ede5d27119d4da7e5836c46d3b5ff81d56/packaging-26.4-py3-none-any.whl",
            "81383611a09c1bc0b08b76e0fd5829d7c6824c65b27a6aee339da133f4233ea2",
        ),
        # The rest of MoRI's build-system.requires, at the versions pylock.toml locks (the build group):
        # the sample MoRI's isolated build installs and runs each of them, as the real one does.
        (
            "da/f5/54538a1f17ea753c42b0928dc2e62986d463f8c393340b9a1e602f2d4dd9/setuptools_scm-10.3.4-py3-none-any.whl",
            "82f34c3e3084fc2b57d397200637cc13f2338004052d2fee47baa5f0e902464e",
        ),
        (
            # setuptools_scm >= 10 does its version control work through vcs-versioning.
            "73/1d/ad4064bf12f4503bf61e65d74c93c523672776d25ee0a06aaf42ae09ef3f/vcs_versioning-2.6.0-py3-none-any.whl",
            "f8bebd1302ebc12e67ceb30fc7dd698ec969414b6fa43b30c3f14ac9b1e72c41",
        ),
        (
            "6e/53/ebfed7b689c338dd8ebeec9c0730c8d56821292f14e2536e5f3ef1a05744/ninja-1.13.2-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
            "65a24341b5ac09fcadcc37082660be40a94174e51a937fabf6e2cae26225fa2c",
        ),
        (
            # 30 MB, the largest file of the index: fetched once into the per-user cache.
            "61/e3/0d24bb452ebc819ab03bbc01b1f4d92863e5c106a93755a4eb38761495da/cmake-4.4.5-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
            "85625a9b6d5e88ff99c7eb79123d85570844e77ac076366cf75c609cc0b1b579",
        ),
        (
            # For the sample base's python 3.11 (the real lock takes the cp312 wheel of the same release).
            "5f/78/1e8562e6dc57f6b9398bc754dcaf574f71762a5a637bb6525ae06cdc7f91/cython-3.3.1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl",
            "26a28e0ca5dffe9c7d69d1e3a0f78cb74f41b2b6b40771f620262a5d04862a00",
        ),
        (
            "bd/9c/c1669f9d4f0765e497dba04648ee0c4a15995a69d9920945e7f3ee613ac9/meson-0.64.0-py3-none-any.whl",
            "556226cc3c279416fa59169b715cbc89d47fdd768d4c58e62d5dbc458cd298f5",
        ),
        (
            "33/fd/8762f7ee3e4e4be6d1d846cffb4916dd9bb02b2f800d3603718a0efe494c/pybind11-3.1.0-py3-none-any.whl",
            "b8488090f8acffbcb6b5d6a85571a6827a0a2981ffb75e5a0b27b87c4a6b7dd0",
        ),
        (
            "23/6c/092eb2f7f85f39fe8b89ff79dd145ee08dc12680dceb1d5dbe07c335b330/pybind11_global-3.1.0-py3-none-any.whl",
            "ae4ce119e9f0d7a2ef2372a6bd70d7906073a67a7d7c759023601a629c4bbd36",
        ),
        (
            "a7/03/921a3d3c75785aca9ebfbfcabfbc3a1be12e2ab5265deb026d55a5a3f83e/tqdm-4.70.1-py3-none-any.whl",
            "c293e525e6fef9c20e8728fd4612df02a0aa31bb5fe91ecd93e123b1b7bffa73",
        ),
        (
            "fe/be/2e6798ace5cc036f5d05d36b7b2fd85346f1a708c87060890b070d0ec607/prettytable-3.18.0-py3-none-any.whl",
            "b3346e0e6f79180833aebaac088ae926340586cf6d7d991b9eb125b65f72313a",
        ),
        (
            "6f/0c/309b1813b230d1dbbd6f2c2ab2bb21ef68992358977605d9ef289bbfedcc/wcwidth-0.9.4-py3-none-any.whl",
            "901eace6d2dd25ebb917d0ce5db18e5c537e1504c905cf32f0d006c12098b05d",
        ),
        (
            "07/51/2c0959c5adf988c44d9e1e0d940f5b074516ecc87e96b1af25f59de9ba38/pip-23.0.1-py3-none-any.whl",
            "236bcb61156d76c4b8a05821b988c7b8c35bf0da28a4b614e8d6ab5212c25c6f",
        ),
        (
            "44/3c/d717024885424591d5376220b5e836c2d5293ce2011523c9de23ff7bf068/pip-25.3-py3-none-any.whl",
            "9655943313a94722b7774661c21049070f6bbb0a1516bf02f7c8d5d9201514cd",
        ),
        (
            "07/25/ee8c38ae72d66b844ce8eb9711ba905dba21ca1a8a0c960057c41cd23337/pip-26.3-py3-none-any.whl",
            "f3b60b20ffaadd4415ed7957212a38ac63fa4c5fa375bd0f4a797777940fad13",
        ),
    )
)


@dataclass(frozen=True, kw_only=True)
class StandInWheel:
    project: str
    version: str
    source: str  # directory under sampleworld/sources/
    top_level: tuple[str, ...]  # package directories of `source` that go into the wheel

    @property
    def filename(self) -> str:
        return f"{self.project.replace('-', '_')}-{self.version}-py3-none-any.whl"


STAND_IN_WHEELS: tuple[StandInWheel, ...] = (
    StandInWheel(project="flydsl", version="0.2.4", source="wheels/flydsl-0.2.4", top_level=("flydsl",)),
    # The same code the donor image ships, so a `pip install flydsl==0.2.2` matches it file for file.
    StandInWheel(project="flydsl", version="0.2.2", source="donor", top_level=("flydsl",)),
    StandInWheel(
        project="amd-aiter",
        version="0.1.19",
        source="wheels/amd_aiter-0.1.19",
        top_level=("aiter", "aiter_meta"),
    ),
)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _download(wheel: PypiWheel, target: Path) -> None:
    partial = target.with_name(target.name + ".part")
    try:
        with requests.get(wheel.url, stream=True, timeout=60) as response:
            response.raise_for_status()
            with partial.open("wb") as fh:
                for chunk in response.iter_content(1 << 20):
                    fh.write(chunk)
    except requests.RequestException as e:
        msg = f"download of {wheel.url} failed: {e}; PyPI must be reachable for a first `up`"
        raise SampleWorldError(msg) from e
    got = sha256_file(partial)
    if got != wheel.sha256:
        partial.unlink()
        msg = f"{wheel.url} has sha256 {got}, pinned {wheel.sha256}; refusing it"
        raise SampleWorldError(msg)
    partial.replace(target)


def fetch_pypi_wheels() -> list[Path]:
    """The pinned PyPI wheels, from the per-user cache, downloading only the missing or damaged ones."""
    cache = cache_dir() / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    paths = []
    for wheel in PYPI_WHEELS:
        path = cache / wheel.filename
        if not path.is_file() or sha256_file(path) != wheel.sha256:
            with log.step(f"index: downloading {wheel.filename}"):
                _download(wheel, path)
        paths.append(path)
    return paths


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_bytes(wheel: StandInWheel) -> dict[str, bytes]:
    """Every member of the stand-in wheel, RECORD included, in archive order."""
    root = SOURCES_DIR / wheel.source
    members: dict[str, bytes] = {}
    for top in wheel.top_level:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                members[path.relative_to(root).as_posix()] = path.read_bytes()
    dist_info = f"{wheel.project.replace('-', '_')}-{wheel.version}.dist-info"
    members[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {wheel.project}\nVersion: {wheel.version}\n"
        "Summary: Sample stand-in for imagebuild's sample world (not the real project)\n"
        "Requires-Python: >=3.9\n"
    ).encode()
    members[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: sampleworld\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    members[f"{dist_info}/top_level.txt"] = "".join(f"{t}\n" for t in wheel.top_level).encode()
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in members.items())
    members[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    return members


def build_stand_in(wheel: StandInWheel, dest: Path) -> Path:
    """Write the wheel into dest, byte-identical on every run (stored, fixed time, fixed mode)."""
    target = dest / wheel.filename
    partial = dest / (wheel.filename + ".part")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in wheel_bytes(wheel).items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.create_system = 3  # unix, so the mode below is honoured
            info.external_attr = 0o100644 << 16
            archive.writestr(info, data)
    if target.is_file() and target.read_bytes() == partial.read_bytes():
        partial.unlink()  # unchanged: keep the old file (and the index server's cached hash)
    else:
        partial.replace(target)
    return target


def _place(source: Path, target: Path) -> None:
    if (
        target.is_file()
        and target.stat().st_size == source.stat().st_size
        and sha256_file(target) == sha256_file(source)
    ):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:  # cache on another file system
        shutil.copyfile(source, target)


def populate_index(state: StateDir) -> dict[str, str]:
    """Fill the index root; returns {filename: sha256} of the stand-in wheels."""
    packages = state.index / PACKAGES
    packages.mkdir(parents=True, exist_ok=True)
    for path in fetch_pypi_wheels():
        _place(path, packages / path.name)
    built: dict[str, str] = {}
    for wheel in STAND_IN_WHEELS:
        path = build_stand_in(wheel, packages)
        built[wheel.filename] = sha256_file(path)
    aiter = next(w for w in STAND_IN_WHEELS if w.project == "amd-aiter")
    _place(packages / aiter.filename, state.index / AITER_ASSET_PATH)
    return built
