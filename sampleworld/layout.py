"""Names of the sample world: ports, image references, repositories, paths.

The default ports are the ones sampleworld/pins.toml names. IMAGEBUILD_SAMPLEWORLD_PORT_BASE moves all
ports together (registry = base, git = base + 418, index = base + 80, the sample cluster's from
base + 817, its jobs' from base - 29100, the apt snapshot service = base + 90) so that several checkouts can each run a world on one machine; `up` then writes a copy of the
pins with those ports into the state dir (World.pins_path), which is what tests and scripts use.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
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
    snapshot: int = 55090  # the apt snapshot service (snapshot.debian.org's URL scheme)
    # The sample cluster (sampleworld/cluster.py): slurmctld, then one slurmd port per node from `slurmd`.
    slurmctld: int = 55817
    slurmd: int = 55818
    # What the sample cluster's jobs bind on the (shared) host network: vLLM's API, its rendezvous and
    # the launcher's container barrier. Derived like the rest, so two checkouts' jobs never collide, and
    # kept below Linux's ephemeral range (32768-60999): the kernel may hand a port there that nothing
    # listens on between jobs to any client socket as its local port (seen: a head's API port in that
    # range was "Address already in use" while no job of ours held it).
    job_serve: int = 25900
    job_master: int = 25901
    job_barrier: int = 25902


DEFAULT_PORTS = Ports()
PORT_BASE_ENV = "IMAGEBUILD_SAMPLEWORLD_PORT_BASE"
# The sample cluster's nodes; node N's slurmd listens on Ports.slurmd + N - 1.
CLUSTER_NODES = ("node1", "node2")
_HIGHEST = max(*asdict(DEFAULT_PORTS).values(), DEFAULT_PORTS.slurmd + len(CLUSTER_NODES) - 1)
MIN_PORT_BASE = 1024 + DEFAULT_PORTS.registry - min(asdict(DEFAULT_PORTS).values())
MAX_PORT_BASE = 65535 - (_HIGHEST - DEFAULT_PORTS.registry)


def ports_from_env() -> Ports:
    text = os.environ.get(PORT_BASE_ENV, "").strip()
    if not text:
        return DEFAULT_PORTS
    if not text.isdigit() or not MIN_PORT_BASE <= int(text) <= MAX_PORT_BASE:
        # Read at import, before any command runs: exit with one line rather than a traceback.
        msg = f"sampleworld: error: {PORT_BASE_ENV}={text!r}: expected a port number from {MIN_PORT_BASE} to {MAX_PORT_BASE}"
        raise SystemExit(msg)
    offset = int(text) - DEFAULT_PORTS.registry
    return Ports(**{name: port + offset for name, port in asdict(DEFAULT_PORTS).items()})


PORTS = ports_from_env()
REGISTRY = f"{HOST}:{PORTS.registry}"
GIT_BASE_URL = f"git://{HOST}:{PORTS.git}"
INDEX_URL = f"http://{HOST}:{PORTS.index}"
SIMPLE_URL = f"{INDEX_URL}/simple/"
SNAPSHOT_ARCHIVE = f"http://{HOST}:{PORTS.snapshot}/archive/debian"  # the sample apt pin's `archive`

BASE_REPOSITORY = f"{REGISTRY}/rocm/vllm-dev"
BASE_TAG = "ci_base-0fcd9b99cc9d63202da4c858d8ebc6582c9e2491"
DONOR_REPOSITORY = f"{REGISTRY}/amdsiloai/vllm"
DONOR_TAG = "kimi-k3-mi325x-release-v2"
# The MI355X (gfx950) donor, under the repository and tag the real one has (pins.toml [donor_mi355x]).
DONOR_MI355X_REPOSITORY = f"{REGISTRY}/vllm/vllm-openai-rocm"
DONOR_MI355X_TAG = "kimi-k3"

PYTHON = "3.11"
SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"

# The AITER wheel as a plain release-asset URL, the way the real pin names it (path mirrors GitHub's).
AITER_ASSET_PATH = "ROCm/aiter/releases/download/v0.1.19/amd_aiter-0.1.19-py3-none-any.whl"
AITER_URL = f"{INDEX_URL}/files/{AITER_ASSET_PATH}"
# googletest's source tarball for the NIXL layer, at the path GitHub serves the v1.14.0 archive.
GOOGLETEST_ASSET_PATH = "google/googletest/archive/refs/tags/v1.14.0.tar.gz"

# A well-formed commit id that exists in no repository: for tests that must fail on a missing commit.
BAD_SHA = "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef"

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent
SOURCES_DIR = PACKAGE_DIR / "sources"
PINS_PATH = PACKAGE_DIR / "pins.toml"  # written for DEFAULT_PORTS; World.pins_path has the live ports
PYLOCK_PATH = PACKAGE_DIR / "pylock.toml"  # the sample pins' python lock, also for DEFAULT_PORTS
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
    def engines(self) -> Path:  # the engine matrix's and Docker CE layout's engines, and trixie's packages
        return self.root / "engines"

    @property
    def pins(self) -> Path:
        return self.root / "pins.toml"

    @property
    def pylock(self) -> Path:
        return self.root / "pylock.toml"

    @property
    def world_file(self) -> Path:
        return self.root / "world.json"

    @property
    def lock_file(self) -> Path:
        return self.root / "lock"

    @property
    def ports_file(self) -> Path:  # the ports this state dir's servers were started on
        return self.root / "run" / "ports.json"

    def create(self) -> None:
        for path in (self.run, self.logs, self.registry, self.git, self.index, self.build):
            path.mkdir(parents=True, exist_ok=True)
