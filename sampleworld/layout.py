"""Fixed names of the sample world: ports, image references, repositories, paths.

The ports are fixed because sampleworld/pins.toml points at them (a pin is a URL, not a lookup).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Bump when a stand-in changes in a way the content hashes below cannot see (the base image label and the
# git fingerprint both include it), so every cache built by an older version is rebuilt.
WORLD_VERSION = "1"

HOST = "127.0.0.1"


@dataclass(frozen=True, kw_only=True)
class Ports:
    registry: int = 55000
    git: int = 55418
    index: int = 55080


PORTS = Ports()
REGISTRY = f"{HOST}:{PORTS.registry}"
GIT_BASE_URL = f"git://{HOST}:{PORTS.git}"
INDEX_URL = f"http://{HOST}:{PORTS.index}"
SIMPLE_URL = f"{INDEX_URL}/simple/"

BASE_REPOSITORY = f"{REGISTRY}/rocm/vllm-dev"
BASE_TAG = "ci_base-0fcd9b99cc9d63202da4c858d8ebc6582c9e2491"
DONOR_REPOSITORY = f"{REGISTRY}/amdsiloai/vllm"
DONOR_TAG = "kimi-k3-mi325x-release-v2"

PYTHON = "3.11"
SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"

# The AITER wheel as a plain release-asset URL, the way the real pin names it (path mirrors GitHub's).
AITER_ASSET_PATH = "ROCm/aiter/releases/download/v0.1.19/amd_aiter-0.1.19-py3-none-any.whl"
AITER_URL = f"{INDEX_URL}/files/{AITER_ASSET_PATH}"

# A well-formed commit id that exists in no repository: for tests that must fail on a missing commit.
BAD_SHA = "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef"

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
SOURCES_DIR = PACKAGE_DIR / "sources"
PINS_PATH = PACKAGE_DIR / "pins.toml"
DEFAULT_STATE_DIR = REPO_ROOT / ".sampleworld"
ENSURE_DOCKER = REPO_ROOT / "scripts" / "ensure-docker.sh"


def cache_dir() -> Path:
    """Per-user download cache that outlives state dirs, so a second `up` needs no network."""
    override = os.environ.get("IMAGEBUILD_SAMPLEWORLD_CACHE")
    if override:
        return Path(override)
    return Path.home() / ".cache" / "imagebuild-sampleworld"


@dataclass(frozen=True)
class StateDir:
    """Where one world keeps its data, pid files and logs."""

    root: Path

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def registry(self) -> Path:
        return self.root / "registry"

    @property
    def git(self) -> Path:
        return self.root / "git"

    @property
    def index(self) -> Path:
        return self.root / "index"

    @property
    def build(self) -> Path:
        return self.root / "build"

    @property
    def world_file(self) -> Path:
        return self.root / "world.json"

    @property
    def lock_file(self) -> Path:
        return self.root / "lock"

    def create(self) -> None:
        for path in (self.run, self.logs, self.registry, self.git, self.index, self.build):
            path.mkdir(parents=True, exist_ok=True)
