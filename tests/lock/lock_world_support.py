"""The world test_lock.py locks: a pins file over the lock tier's local git daemon, registry and file
server, each test's images under a repository of its own."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from imagebuild.inputs.arch import ArchProfile
from imagebuild.lock import LockResult, lock
from imagebuild.pins.epoch import format_epoch
from tests.lock.repositories import GitDaemon, GitRepo, Registry
from tests.lock.servers import FileServer, IndexFile, fingerprinted, options, serve_index, zip_bytes

WHEEL = zip_bytes(("amd_aiter/__init__.py", b"bytes to hash\n" * 1000))
PYPI_NAMES = [
    "flydsl-0.2.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "flydsl-0.2.4-cp312-cp312-manylinux_2_27_x86_64.whl",
    "flydsl-0.2.4.tar.gz",
]


@dataclass
class World:
    path: Path
    repo: GitRepo
    registry: Registry
    files: FileServer
    tag_commit: str
    branch_commit: str
    base_index: str
    base_amd64: str
    donor_digest: str
    image_repo: str

    def lock(self, arch: ArchProfile, **kw: object) -> LockResult:
        return lock(options(self.path, arch, **kw))

    def data(self) -> dict[str, dict[str, object]]:
        return tomllib.loads(self.path.read_text(encoding="utf-8"))


_counter = [0]


def make_world(tmp_path: Path, git_daemon: GitDaemon, registry: Registry, file_server: FileServer) -> World:
    """A pins file naming a git repository, two images, a wheel and a PyPI project on this machine's
    stand-in servers, each pin as a first `imagebuild lock` finds it (identities empty but one)."""
    _counter[0] += 1
    image_repo = f"world{_counter[0]}"
    repo = git_daemon.repo("kimi")
    tag_commit = repo.tag("v1.2.2", annotated=True)
    branch_commit = repo.commit("on main")
    base_index, children = registry.push_multi(f"{image_repo}/base", "ci", ("linux/amd64", "linux/arm64/v8"))
    donor = registry.push_single(f"{image_repo}/donor", "release")
    wheel_url = file_server.add("/releases/amd_aiter-0.1.19-cp311-cp311-manylinux_2_28_x86_64.whl", WHEEL)
    index = serve_index(
        file_server, "flydsl", [IndexFile(n, n.encode() * 10) for n in PYPI_NAMES], flavour="json"
    )
    path = tmp_path / "pins.toml"
    path.write_text(
        f"""# Every source of the image, pinned.
# Regenerate identities with: imagebuild lock --upgrade

[base]
kind = "image"
# the CI base (python 3.11 in this world)
image = "{registry.host}/{image_repo}/base"
tag = "ci"
digest = ""
platform_digest = ""
python = "3.11"
site_packages = "/usr/lib/python3.11/site-packages"

[donor]
kind = "image"
image = "{registry.host}/{image_repo}/donor"
tag = "release"
digest = ""
platform_digest = ""
python = "3.11"
site_packages = "/usr/lib/python3.11/site-packages"

[mori]
kind = "git"
# a release tag
url = "{repo.url}"
tag = "v1.2.2"
commit = ""

[vllm]
kind = "git"
url = "{repo.url}"
branch = "main"  # force-pushed upstream
commit = ""

[fixed]
kind = "git"
url = "git://127.0.0.1:1/never-contacted"
commit = "{"a" * 40}"
committed = "2025-12-31T23:00:00Z"

[aiter]
kind = "wheel"
url = "{wheel_url}"
version = "0.1.19"
sha256 = ""
size = 0

[flydsl]
kind = "pypi"
project = "flydsl"
version = "0.2.4"
index = "{index}"
filename = ""
sha256 = ""

[rust]
kind = "toolchain"
version = "1.88.0"
""",
        encoding="utf-8",
    )
    fingerprinted(path)  # [fixed] as lock wrote it: its commit time needs no asking
    return World(
        path=path,
        repo=repo,
        registry=registry,
        files=file_server,
        tag_commit=tag_commit,
        branch_commit=branch_commit,
        base_index=base_index,
        base_amd64=children["linux/amd64"],
        donor_digest=donor,
        image_repo=image_repo,
    )


def committed_at(repo: GitRepo, commit: str) -> str:
    return format_epoch(int(repo.git("log", "-1", "--format=%ct", commit)))
