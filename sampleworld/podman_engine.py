"""Podman as an engine for tests: bookworm's podman 4.3.1 answering the Docker API on a socket of its own.

`podman system service` serves Docker's API (1.41) in front of containers/storage; imagebuild talks to
it as to any engine, through DOCKER_HOST. Everything it keeps is ours: its graph root in the state dir,
its run root, socket and pid file under /run (unix socket paths are limited to about 100 bytes), and its
own containers.conf, registries.conf and storage.conf (CONTAINERS_CONF, CONTAINERS_REGISTRIES_CONF,
CONTAINERS_STORAGE_CONF), so the host's podman and docker share nothing with it.

Measured on this machine: bookworm's crun refuses this host's cgroups, so containers.conf names runc;
without explicit `default_ulimits` a container's start fails raising RLIMIT_NOFILE past the hard limit
podman inherits (20000 open files in this sandbox) or RLIMIT_NPROC, so they are set lower; the sample registry on loopback is plain http, which podman must be told is allowed.

`ensure_podman` starts it unless ours answers; `stop_podman` stops only the pid this state dir recorded
(checked against its command line), then what it left running that names our directories (conmon),
and unmounts the bind mount of its own storage that podman leaves behind.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from sampleworld import log, proc
from sampleworld.engines import RUN_ROOT, NodeEngine, pids_naming, ping
from sampleworld.errors import SampleWorldError
from sampleworld.layout import REGISTRY, StateDir

NAME = "podman"
START_TIMEOUT_S = 60
LEFTOVER_PROCESSES = ("conmon", "podman", "runc")
LEFTOVER_GRACE_S = 2.0
NOFILE, NPROC = 65536, 4096  # per container: plenty for verify and the tests' containers

CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
# Not /run/libpod, every other podman's on this host.
tmp_dir = "{tmp_dir}"
"""


@dataclass(frozen=True, kw_only=True)
class PodmanEngine:
    root: Path  # persistent: graph root, config files, log
    run_dir: Path  # short path: run root, socket, pid file

    @property
    def socket(self) -> Path:
        return self.as_node_engine().socket  # where sampleworld.engines' API helpers look

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "podman.pid"

    @property
    def log_file(self) -> Path:
        return self.root / "podman.log"

    @property
    def graph_root(self) -> Path:
        return self.root / "storage"

    def env(self) -> dict[str, str]:
        return {**os.environ, **config_env(self.root)}

    def argv(self) -> tuple[str, ...]:
        return (
            "podman", "--root", str(self.graph_root), "--runroot", str(self.run_dir / "run"),
            "system", "service", "--time", "0", self.host,
        )  # fmt: skip

    def as_node_engine(self) -> NodeEngine:
        """For the API helpers (ping, api_get) of sampleworld.engines: they need only the socket."""
        return NodeEngine(name=NAME, root=self.root, run_dir=self.run_dir)


def podman_engine(state: StateDir) -> PodmanEngine:
    key = hashlib.sha256(f"{state.root}\0{NAME}".encode()).hexdigest()[:12]
    return PodmanEngine(root=state.root / "engines" / NAME, run_dir=RUN_ROOT / key)


def config_env(root: Path) -> dict[str, str]:
    """The variables that point podman at the configuration ``write_config`` wrote under ``root``."""
    return {
        "CONTAINERS_CONF": str(root / "containers.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(root / "registries.conf"),
        "CONTAINERS_STORAGE_CONF": str(root / "storage.conf"),
    }


def write_config(root: Path, *, graph_root: Path, run_dir: Path) -> None:
    """A podman configuration of its own under ``root``: storage in ``graph_root``, run root and tmp
    dir under ``run_dir`` (short: podman refuses a run root over 50 characters)."""
    root.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    # Podman asks for 1048576 open files unless told, and no container may exceed the service's hard
    # limits (the service lowers its own RLIMIT_NPROC to 32768 here): ask for less, which is always allowed.
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], NOFILE)
    conf = CONTAINERS_CONF.format(nofile=nofile, nproc=NPROC, tmp_dir=run_dir / "tmp")
    (root / "containers.conf").write_text(conf)
    (root / "registries.conf").write_text(
        f'unqualified-search-registries = []\n\n[[registry]]\nlocation = "{REGISTRY}"\ninsecure = true\n'
    )
    (root / "storage.conf").write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{graph_root}"\nrunroot = "{run_dir / "run"}"\n'
    )


def running_pid(engine: PodmanEngine) -> int | None:
    try:
        pid = int(engine.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if proc.pid_alive(pid) and str(engine.socket) in proc.cmdline(pid):
        return pid
    return None


def ensure_podman(state: StateDir) -> bool:
    """Start Podman's API service unless ours answers; True when this call started it."""
    engine = podman_engine(state)
    node = engine.as_node_engine()
    if running_pid(engine) is not None and ping(node):
        return False
    if shutil.which("podman") is None:
        msg = "podman is not installed: scripts/ensure-docker.sh installs it (Debian's podman package)"
        raise SampleWorldError(msg)
    if running_pid(engine) is None:
        write_config(engine.root, graph_root=engine.graph_root, run_dir=engine.run_dir)
        engine.socket.unlink(missing_ok=True)
        pid = proc.spawn(engine.argv(), log_path=engine.log_file, env=engine.env())
        engine.pid_file.write_text(f"{pid}\n")
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ping(node):
        if time.monotonic() > deadline:
            msg = f"podman does not answer on {engine.socket} after {START_TIMEOUT_S}s; see {engine.log_file}"
            raise SampleWorldError(msg)
        time.sleep(0.2)
    log.info(f"engine {NAME}: pid {running_pid(engine)} answering at {engine.host}")
    return True


def stop_podman(state: StateDir) -> bool:
    """Stop the Podman service this state dir started (and what it left running); True when one was."""
    engine = podman_engine(state)
    pid = running_pid(engine)
    if pid is None:
        return False
    proc.stop_pid(pid, timeout=30)
    left = leftover_pids(engine)
    for helper in left:
        log.info(f"engine {NAME}: stopping pid {helper} it left running: {proc.cmdline(helper)[:200]}")
    # Mostly the conmons of finished exec sessions (verify's, the tests'): each keeps its session's exit
    # code for podman's exit_command_delay (300 s) before its clean-up, and SIGTERM does not end it
    # meanwhile (measured), so a long grace only delays the SIGKILL: 15 s each at a session's end.
    proc.stop_pids(left, timeout=LEFTOVER_GRACE_S)
    engine.pid_file.unlink(missing_ok=True)
    release_storage_mount(engine.graph_root)
    log.info(f"engine {NAME}: stopped pid {pid}")
    return True


def release_storage_mount(graph_root: Path) -> None:
    """Podman's overlay driver bind-mounts its own ``<graph root>/overlay`` and leaves it mounted when
    it stops (and a container's root under it, when its podman was killed); left there, the state
    dir cannot be removed ("Device or resource busy")."""
    overlay = graph_root / "overlay"
    # Not os.path.ismount: a bind mount from the same file system has the same st_dev as its parent.
    mount_points = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mount_points if m == str(overlay) or m.startswith(f"{overlay}/")), reverse=True):
        proc.run(["umount", mount], timeout=60)
        log.info(f"podman: unmounted {mount}")


def leftover_pids(engine: PodmanEngine) -> list[int]:
    """Podman's helpers (conmon, runc) whose command line names our run dir or graph root."""
    return pids_naming((f"{engine.run_dir}/", f"{engine.root}/"), LEFTOVER_PROCESSES)
