"""The engine matrix: the machine's main Docker engine plus three newer ones, for tests across engines.

  main                 the machine's engine (bookworm's docker.io 20.10, overlay2): never started or stopped here
  docker26-overlay2    Debian trixie's dockerd 26.1.5, graph driver overlay2 (the classic image store)
  docker26-containerd  the same dockerd with `{"features": {"containerd-snapshotter": true}}`: the
                       containerd image store (driver-type io.containerd.snapshotter.v1), the default of
                       fresh Docker Engine 29 installs; there an image's ID is its manifest digest
  forky-containerd     Debian testing's dockerd (28.5.2 on containerd 2.1 in 2026-12) on the containerd
                       image store: the newest Docker Debian has, the API that says what an image holds
                       unpacked (1.48 on), and the load that reports a failed unpack as output

The binaries are the suites' docker.io and containerd packages, fetched and unpacked into the state dir
by `debian_dist` (nothing is installed on the host).

Each managed engine is a NodeEngine (sampleworld/engines.py): its own data root, exec root, pid file,
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
import time
import tomllib
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sampleworld import log, proc
from sampleworld.debian_dist import dist_dir, fetch
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

MAIN_SOCKET = Path("/var/run/docker.sock")


@dataclass(frozen=True)
class ManagedEngine:
    name: str
    suite: str  # the Debian suite its docker.io and containerd come from (debian_dist)
    storage_driver: str  # "" for none: the containerd image store chooses its snapshotter
    daemon_config: dict[str, Any]


CONTAINERD_STORE = {"features": {"containerd-snapshotter": True}}
MANAGED = (
    ManagedEngine("docker26-overlay2", "trixie", "overlay2", {}),
    ManagedEngine("docker26-containerd", "trixie", "", CONTAINERD_STORE),
    ManagedEngine("forky-containerd", "forky", "", CONTAINERD_STORE),
)
ENGINE_NAMES = ("main", *(spec.name for spec in MANAGED))


@dataclass(frozen=True, kw_only=True)
class MatrixEngine:
    """One engine of the matrix, as a test or script needs it."""

    name: str  # "main", or one of MANAGED
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


def managed_engine(state: StateDir, spec: ManagedEngine, name: str | None = None) -> NodeEngine:
    """The matrix's engine of ``spec``, or, given another ``name``, one like it with its own data root,
    socket and bridge (a test's node whose disk has a set size)."""
    name = name or spec.name
    key = hashlib.sha256(f"{state.root}\0{name}".encode()).hexdigest()[:12]
    bin_dir = dist_dir(state, spec.suite) / "bin"
    return NodeEngine(
        name=name,
        root=state.engines / name,
        run_dir=RUN_ROOT / key,
        dockerd=str(bin_dir / "dockerd"),
        path_prefix=bin_dir,
        daemon_config=json.dumps(spec.daemon_config, indent=2, sort_keys=True) + "\n",
        storage_driver=spec.storage_driver,
    )


@contextmanager
def engines_lock(state: StateDir) -> Iterator[None]:
    """One engines up/down at a time per state dir (not the world's lock: the world may be busy)."""
    state.engines.mkdir(parents=True, exist_ok=True)
    with (state.engines / "lock").open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info(
                f"waiting for another sampleworld engines command holding {state.engines / 'lock'}"
            )
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


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


def _kind(spec: ManagedEngine) -> str:
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
    for spec in MANAGED:
        engine = managed_engine(state, spec)
        pid = running_pid(engine)
        rows.append(_describe(engine, _kind(spec), managed=True, pid=pid))
    return rows


def up(state_dir: Path | None = None) -> tuple[list[MatrixEngine], list[str]]:
    """Fetch the suites' packages if needed and start every managed engine unless ours answer.

    Returns the matrix and the names of the engines this call started."""
    state = _state(state_dir)
    started: list[str] = []
    began = time.monotonic()
    with engines_lock(state):
        for suite in dict.fromkeys(spec.suite for spec in MANAGED):
            fetch(state, suite)
        for spec in MANAGED:
            engine = managed_engine(state, spec)
            if ensure_engine(engine):
                started.append(spec.name)
    log.info(f"engines up in {time.monotonic() - began:.1f}s (started: {', '.join(started) or 'none'})")
    return status(state.root), started


def down(state_dir: Path | None = None, *, only: list[str] | None = None) -> list[str]:
    """Stop the managed engines this state dir started (all, or those in `only`); never the main one."""
    state = _state(state_dir)
    stopped: list[str] = []
    with engines_lock(state):
        for spec in MANAGED:
            if only is not None and spec.name not in only:
                continue
            engine = managed_engine(state, spec)
            if stop_engine(engine):
                stopped.append(spec.name)
            left = leftover_pids(engine)
            if left:
                msg = f"engine {spec.name}: still running after down: pids {left}"
                raise SampleWorldError(msg)
    return stopped


def matrix(state_dir: Path | None = None, *, start: bool = True) -> list[MatrixEngine]:
    """The engines tests run against: main first, then the managed engines (started when `start`).

    Skips nothing silently: an engine that is down (and not started) has version None."""
    return up(state_dir)[0] if start else status(state_dir)


# Every image, not only dangling ones; the engine's API takes the filter as JSON.
_ALL_IMAGES = urllib.parse.urlencode({"filters": json.dumps({"dangling": ["false"]})})


def empty(state_dir: Path | None = None) -> None:
    """Remove every container, image and build cache entry of the running managed engines: what a
    test session built or pulled there, which the next one builds or pulls again."""
    state = _state(state_dir)
    for spec in MANAGED:
        engine = managed_engine(state, spec)
        if not ping(engine):
            continue
        for path in ("/containers/prune", f"/images/prune?{_ALL_IMAGES}", "/build/prune?all=true"):
            api_post(engine, path)


def disk_usage(state_dir: Path | None = None) -> dict[str, int]:
    """Bytes under the fetched packages and each engine's root (data root, config, log)."""
    state = _state(state_dir)
    suites = dict.fromkeys(spec.suite for spec in MANAGED)
    paths = {
        **{f"dist-{suite}": dist_dir(state, suite) for suite in suites},
        **{spec.name: state.engines / spec.name for spec in MANAGED},
    }
    return {name: _du(path) for name, path in paths.items()}


def _du(path: Path) -> int:
    if not path.exists():
        return 0
    out = proc.run(["du", "-sb", "--one-file-system", str(path)], timeout=300)
    return int(out.split()[0])


def pull_pinned_images(state_dir: Path | None, name: str, pins: Path) -> list[str]:
    """Pull every image pin of `pins` that names a digest into the managed engine `name`, by digest.

    The stand-ins live in the sample registry (sampleworld.world pushes them once); an engine gets them
    by pulling, so they are the same bytes on every engine. Returns the references pulled."""
    state = _state(state_dir)
    spec = next((s for s in MANAGED if s.name == name), None)
    if spec is None:
        msg = f"no managed engine named {name!r}; the matrix has {', '.join(s.name for s in MANAGED)}"
        raise SampleWorldError(msg)
    engine = managed_engine(state, spec)
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
