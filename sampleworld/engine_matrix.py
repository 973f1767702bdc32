"""The engine matrix: the machine's main Docker engine plus two Docker 26 engines, for tests across engines.

  main                 the machine's engine (bookworm's docker.io 20.10, overlay2): never started or stopped here
  docker26-overlay2    Debian trixie's dockerd 26.1.5, graph driver overlay2 (the classic image store)
  docker26-containerd  the same dockerd with `{"features": {"containerd-snapshotter": true}}`: the
                       containerd image store (driver-type io.containerd.snapshotter.v1), the default of
                       fresh Docker Engine 29 installs; there an image's ID is its manifest digest

The Docker 26 binaries come from trixie's `docker.io` and `containerd` packages, fetched with apt through a
temporary sources list into the state dir (nothing is configured or installed on the host), each .deb
checked here against the sha256 trixie's Packages index lists, and unpacked with `dpkg -x`. Their dockerd and
containerd run on bookworm's glibc; trixie's runc needs glibc 2.38, so the private bin dir, first on the
dockerd process's PATH, holds no runc and the shims find bookworm's /usr/sbin/runc.

Each Docker 26 engine is a NodeEngine (sampleworld/engines.py): its own data root, exec root, pid file,
socket and bridge, and the containerd its dockerd starts keeps its state, root and socket under those.
`up` starts only what does not answer yet, `down` stops only what this state dir started.

For tests: `matrix()` is the list of engines (name, DOCKER_HOST, kind), started when needed, e.g.

    @pytest.fixture(params=ENGINE_NAMES)
    def engine(request): return next(e for e in matrix() if e.name == request.param)
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
import tomllib
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sampleworld import log, proc
from sampleworld.engines import (
    RUN_ROOT,
    NodeEngine,
    api_get,
    api_post,
    ensure_engine,
    leftover_pids,
    ping,
    running_pid,
    stop_engine,
)
from sampleworld.errors import SampleWorldError
from sampleworld.layout import DEFAULT_STATE_DIR, StateDir

SUITE = "trixie"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("docker.io", "containerd")
ARCH = "amd64"
# What the private bin dir links, from the unpacked packages. Deliberately no runc (see the module doc).
BINARIES = {
    "dockerd": "usr/sbin/dockerd",
    "docker-proxy": "usr/sbin/docker-proxy",
    "containerd": "usr/bin/containerd",
    "containerd-shim-runc-v2": "usr/bin/containerd-shim-runc-v2",
    "ctr": "usr/bin/ctr",
}
MAIN_SOCKET = Path("/var/run/docker.sock")


@dataclass(frozen=True)
class Docker26:
    name: str
    storage_driver: str  # "" for none: the containerd image store chooses its snapshotter
    daemon_config: dict[str, Any]


DOCKER26 = (
    Docker26("docker26-overlay2", "overlay2", {}),
    Docker26("docker26-containerd", "", {"features": {"containerd-snapshotter": True}}),
)
ENGINE_NAMES = ("main", *(spec.name for spec in DOCKER26))


@dataclass(frozen=True, kw_only=True)
class MatrixEngine:
    """One engine of the matrix, as a test or script needs it."""

    name: str  # "main", "docker26-overlay2", "docker26-containerd"
    docker_host: str  # what DOCKER_HOST takes
    kind: str  # "classic" (graph driver image store) or "containerd" (containerd image store)
    managed: bool  # started and stopped by the matrix (False for the main engine)
    pid: int | None = None
    version: str | None = None  # the engine's version, when it answers
    storage_driver: str | None = None  # `docker info` .Driver
    driver_type: str | None = None  # `docker info` DriverStatus driver-type (containerd store only)

    @property
    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.docker_host}

    def to_dict(self) -> dict[str, Any]:
        return {"DOCKER_HOST": self.docker_host, **asdict(self)}


def _state(state_dir: Path | None) -> StateDir:
    return StateDir((state_dir or DEFAULT_STATE_DIR).resolve())


def engines_root(state: StateDir) -> Path:
    return state.root / "engines"


def dist_dir(state: StateDir) -> Path:
    """Where the trixie packages are fetched and unpacked (shared by both Docker 26 engines)."""
    return engines_root(state) / f"dist-{SUITE}"


def docker26_engine(state: StateDir, spec: Docker26) -> NodeEngine:
    key = hashlib.sha256(f"{state.root}\0{spec.name}".encode()).hexdigest()[:12]
    bin_dir = dist_dir(state) / "bin"
    return NodeEngine(
        name=spec.name,
        root=engines_root(state) / spec.name,
        run_dir=RUN_ROOT / key,
        dockerd=str(bin_dir / "dockerd"),
        path_prefix=bin_dir,
        daemon_config=json.dumps(spec.daemon_config, indent=2, sort_keys=True) + "\n",
        storage_driver=spec.storage_driver,
    )


@contextmanager
def engines_lock(state: StateDir) -> Iterator[None]:
    """One engines up/down at a time per state dir (not the world's lock: the world may be busy)."""
    engines_root(state).mkdir(parents=True, exist_ok=True)
    with (engines_root(state) / "lock").open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info(
                f"waiting for another sampleworld engines command holding {engines_root(state) / 'lock'}"
            )
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


# --- fetching trixie's packages -------------------------------------------------------------------------


def _apt_options(dist: Path) -> list[str]:
    apt = dist / "apt"
    return [
        "-o",
        f"Dir::Etc::sourcelist={apt / 'sources.list'}",
        "-o",
        "Dir::Etc::sourceparts=-",
        "-o",
        f"Dir::State::Lists={apt / 'lists'}",
        "-o",
        f"Dir::Cache={apt / 'cache'}",  # not the host's pkgcache.bin
        "-o",
        "APT::Sandbox::User=root",  # the downloads land in a root-owned dir
        "-q",
    ]


def parse_packages(text: str, wanted: tuple[str, ...], arch: str = ARCH) -> dict[str, dict[str, str]]:
    """Package name -> its stanza's fields (Version, Filename, SHA256, Size, ...) in a Packages index."""
    found: dict[str, dict[str, str]] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t"):
                if key:
                    fields[key] += "\n" + line.strip()
                continue
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        name = fields.get("Package")
        if name in wanted and fields.get("Architecture") in (arch, "all"):
            found[name] = fields
    missing = [name for name in wanted if name not in found]
    if missing:
        msg = f"trixie's Packages index lists no {', '.join(missing)} for {arch}"
        raise SampleWorldError(msg)
    return found


def _packages_index(dist: Path) -> str:
    lists = dist / "apt" / "lists"
    found = sorted(lists.glob(f"*_dists_{SUITE}_main_binary-{ARCH}_Packages*"))
    if not found:
        msg = f"apt-get update left no {SUITE} main {ARCH} Packages index in {lists}"
        raise SampleWorldError(msg)
    # apt keeps the index compressed (.lz4, .gz, ...); its helper decompresses any of them.
    return proc.run(["/usr/lib/apt/apt-helper", "cat-file", str(found[0])], timeout=120)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _marker(dist: Path) -> Path:
    return dist / "root" / ".fetched.json"


def fetched(state: StateDir) -> dict[str, dict[str, str]] | None:
    """What the last fetch unpacked (package -> version, sha256, filename), when it is all there."""
    dist = dist_dir(state)
    try:
        record: dict[str, dict[str, str]] = json.loads(_marker(dist).read_text())
    except (OSError, ValueError):
        return None
    links_ok = all((dist / "bin" / name).resolve().is_file() for name in BINARIES)
    return record if links_ok and set(record) == set(PACKAGES) else None


def fetch(state: StateDir) -> dict[str, dict[str, str]]:
    """trixie's docker.io and containerd, verified and unpacked into the state dir (once)."""
    record = fetched(state)
    if record is not None:
        return record
    dist = dist_dir(state)
    apt = dist / "apt"
    for path in (apt / "lists" / "partial", apt / "cache" / "archives" / "partial", dist / "debs"):
        path.mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb {MIRROR} {SUITE} main\n")
    options = _apt_options(dist)
    with log.step(f"engines: apt-get update ({SUITE} main, private lists)"):
        proc.run(["apt-get", *options, "update"], timeout=600)
    index = parse_packages(_packages_index(dist), PACKAGES)
    with log.step(f"engines: apt-get download {' '.join(f'{p}/{SUITE}' for p in PACKAGES)}"):
        proc.run(["apt-get", *options, "download", *(f"{p}/{SUITE}" for p in PACKAGES)], cwd=dist / "debs")
    record = {}
    for name, fields in index.items():
        deb = dist / "debs" / Path(fields["Filename"]).name
        if not deb.is_file():
            msg = f"apt-get download left no {deb.name} in {deb.parent}"
            raise SampleWorldError(msg)
        actual = _sha256(deb)
        if actual != fields["SHA256"]:
            deb.unlink()
            msg = f"{deb.name}: sha256 {actual}, but trixie's Packages index lists {fields['SHA256']}"
            raise SampleWorldError(msg)
        record[name] = {"version": fields["Version"], "sha256": actual, "filename": deb.name}
    root = dist / "root"
    staging = dist / "root.partial"
    for path in (root, staging):
        if path.exists():
            shutil.rmtree(path)
    with log.step("engines: dpkg -x (not installed)"):
        for fields in record.values():
            proc.run(["dpkg", "-x", str(dist / "debs" / fields["filename"]), str(staging)], timeout=300)
    staging.rename(root)
    bin_dir = dist / "bin"
    if bin_dir.exists():
        shutil.rmtree(bin_dir)
    bin_dir.mkdir()
    for name, relative in BINARIES.items():
        (bin_dir / name).symlink_to(root / relative)
    _marker(dist).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    for fields in record.values():  # the unpacked tree is what runs; the .debs are not needed again
        (dist / "debs" / fields["filename"]).unlink()
    return record


# --- the engines ----------------------------------------------------------------------------------------


def _describe(engine: NodeEngine, kind: str, *, managed: bool, pid: int | None) -> MatrixEngine:
    version = driver = driver_type = None
    if ping(engine):
        version = str(api_get(engine, "/version").get("Version"))
        info = api_get(engine, "/info")
        driver = str(info.get("Driver"))
        status = {str(k): str(v) for k, v in (info.get("DriverStatus") or [])}
        driver_type = status.get("driver-type")
    return MatrixEngine(
        name=engine.name,
        docker_host=engine.host,
        kind=kind,
        managed=managed,
        pid=pid,
        version=version,
        storage_driver=driver,
        driver_type=driver_type,
    )


def _main() -> NodeEngine:
    # Only for its socket: the main engine is never started or stopped here.
    return NodeEngine(name="main", root=Path("/var/lib/docker"), run_dir=MAIN_SOCKET.parent)


def _main_host() -> str:
    return f"unix://{MAIN_SOCKET}"


def _kind(spec: Docker26) -> str:
    return "containerd" if spec.daemon_config.get("features", {}).get("containerd-snapshotter") else "classic"


def status(state_dir: Path | None = None) -> list[MatrixEngine]:
    """Every engine of the matrix as it is now (nothing started)."""
    state = _state(state_dir)
    main = _main()
    rows = [
        _describe(main, "classic", managed=False, pid=None)
        if ping(main)
        else MatrixEngine(name="main", docker_host=_main_host(), kind="classic", managed=False)
    ]
    for spec in DOCKER26:
        engine = docker26_engine(state, spec)
        pid = running_pid(engine)
        rows.append(_describe(engine, _kind(spec), managed=True, pid=pid))
    return rows


def up(state_dir: Path | None = None) -> tuple[list[MatrixEngine], list[str]]:
    """Fetch the Docker 26 packages if needed and start both engines unless ours answer.

    Returns the matrix and the names of the engines this call started."""
    state = _state(state_dir)
    started: list[str] = []
    began = time.monotonic()
    with engines_lock(state):
        fetch(state)
        for spec in DOCKER26:
            engine = docker26_engine(state, spec)
            if ensure_engine(engine):
                started.append(spec.name)
    log.info(f"engines up in {time.monotonic() - began:.1f}s (started: {', '.join(started) or 'none'})")
    return status(state.root), started


def down(state_dir: Path | None = None, *, only: list[str] | None = None) -> list[str]:
    """Stop the Docker 26 engines this state dir started (all, or those in `only`); never the main one."""
    state = _state(state_dir)
    stopped: list[str] = []
    with engines_lock(state):
        for spec in DOCKER26:
            if only is not None and spec.name not in only:
                continue
            engine = docker26_engine(state, spec)
            if stop_engine(engine):
                stopped.append(spec.name)
            left = leftover_pids(engine)
            if left:
                msg = f"engine {spec.name}: still running after down: pids {left}"
                raise SampleWorldError(msg)
    return stopped


def matrix(state_dir: Path | None = None, *, start: bool = True) -> list[MatrixEngine]:
    """The engines tests run against: main first, then the Docker 26 engines (started when `start`).

    Skips nothing silently: an engine that is down (and not started) has version None."""
    return up(state_dir)[0] if start else status(state_dir)


def disk_usage(state_dir: Path | None = None) -> dict[str, int]:
    """Bytes under the fetched packages and each engine's root (data root, config, log)."""
    state = _state(state_dir)
    paths = {"dist": dist_dir(state), **{s.name: engines_root(state) / s.name for s in DOCKER26}}
    return {name: _du(path) for name, path in paths.items()}


def _du(path: Path) -> int:
    if not path.exists():
        return 0
    out = proc.run(["du", "-sb", "--one-file-system", str(path)], timeout=300)
    return int(out.split()[0])


def pull_pinned_images(state_dir: Path | None, name: str, pins: Path) -> list[str]:
    """Pull every image pin of `pins` that names a digest into the Docker 26 engine `name`, by digest.

    The stand-ins live in the sample registry (sampleworld.world pushes them once); an engine gets them
    by pulling, so they are the same bytes on every engine. Returns the references pulled."""
    state = _state(state_dir)
    spec = next((s for s in DOCKER26 if s.name == name), None)
    if spec is None:
        msg = f"no Docker 26 engine named {name!r}; the matrix has {', '.join(s.name for s in DOCKER26)}"
        raise SampleWorldError(msg)
    engine = docker26_engine(state, spec)
    pulled: list[str] = []
    for pin in tomllib.loads(pins.read_text()).values():
        if not isinstance(pin, dict) or pin.get("kind") != "image" or not pin.get("digest"):
            continue
        query = urllib.parse.urlencode({"fromImage": pin["image"], "tag": pin["digest"]})
        api_post(engine, f"/images/create?{query}")
        pulled.append(f"{pin['image']}@{pin['digest']}")
    return pulled


def env_for(engine: MatrixEngine) -> dict[str, str]:
    """os.environ with DOCKER_HOST set to this engine, for a subprocess."""
    return {**os.environ, "DOCKER_HOST": engine.docker_host}
