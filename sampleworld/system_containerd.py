"""A Docker 26 engine laid out as Docker CE's packages lay it out: dockerd on a containerd of its own.

Docker CE (docker-ce with containerd.io) and Debian's docker.io run containerd as a service, with its
root in /var/lib/containerd, and dockerd uses it (it finds /run/containerd/containerd.sock as it
starts); with the containerd image store, Docker 29's default for fresh installs, the images are
then in that containerd's content store, not under dockerd's data root. The engine matrix's
docker26-containerd has dockerd start its containerd itself (its root under the data root). This one
is the other layout: trixie's containerd (the matrix's packages) started first, from a config of
its own (root under the state dir, socket and state under /run, the CRI plugin off as
containerd.io's config has it), then trixie's dockerd with `"containerd": <its socket>` and the
containerd image store. Nothing names the containerd's root to dockerd or to imagebuild: imagebuild
finds it from the running containerd's command line and config, as on a Docker CE host.

`up` starts what does not answer yet and says whether it started anything; `down` stops dockerd,
then the containerd, each by the pid this state dir recorded and checked against its command line.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from sampleworld import log, proc
from sampleworld.debian_dist import dist_dir, fetch
from sampleworld.engine_matrix import engines_lock
from sampleworld.engines import (
    RUN_ROOT,
    START_TIMEOUT_S,
    NodeEngine,
    ensure_engine,
    leftover_pids,
    stop_engine,
)
from sampleworld.errors import SampleWorldError
from sampleworld.layout import StateDir

NAME = "docker26-system-containerd"
SUITE = "trixie"  # Docker 26.1.5 and containerd 1.7.24 (debian_dist)


@dataclass(frozen=True)
class SystemContainerd:
    root: Path  # persistent: the containerd's root (its content store), config, log
    run_dir: Path  # short: socket, state, pid file

    @property
    def config(self) -> Path:
        return self.root / "config.toml"

    @property
    def content_root(self) -> Path:
        return self.root / "root"

    @property
    def socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "containerd.pid"

    @property
    def log_file(self) -> Path:
        return self.root / "containerd.log"

    def argv(self, binary: Path) -> tuple[str, ...]:
        return (str(binary), "--config", str(self.config))

    def config_text(self) -> str:
        return (
            "version = 2\n"
            f'root = "{self.content_root}"\n'
            f'state = "{self.run_dir / "state"}"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            "[grpc]\n"
            f'  address = "{self.socket}"\n'
        )


def layout(state: StateDir) -> tuple[SystemContainerd, NodeEngine]:
    """The containerd and the dockerd on it (neither started)."""
    key = hashlib.sha256(f"{state.root}\0{NAME}".encode()).hexdigest()[:12]
    root, run_dir = state.engines / NAME, RUN_ROOT / key
    containerd = SystemContainerd(root=root / "containerd", run_dir=run_dir / "c")
    bin_dir = dist_dir(state, SUITE) / "bin"
    config = {"containerd": str(containerd.socket), "features": {"containerd-snapshotter": True}}
    engine = NodeEngine(
        name=NAME,
        root=root,
        run_dir=run_dir,
        dockerd=str(bin_dir / "dockerd"),
        path_prefix=bin_dir,
        daemon_config=json.dumps(config, indent=2, sort_keys=True) + "\n",
        storage_driver="",
    )
    return containerd, engine


def up(state_dir: Path) -> tuple[NodeEngine, bool]:
    """The engine, running; True when this call started it (or its containerd)."""
    state = StateDir(state_dir.resolve())
    with engines_lock(state):  # one fetch, start or stop of the state dir's engines at a time
        fetch(state, SUITE)
        containerd, engine = layout(state)
        started = _ensure_containerd(containerd, dist_dir(state, SUITE) / "bin" / "containerd", engine.env())
        return engine, ensure_engine(engine) or started


def down(state_dir: Path) -> None:
    """Stop the dockerd, then the containerd, that this state dir started."""
    state = StateDir(state_dir.resolve())
    containerd, engine = layout(state)
    with engines_lock(state):
        stop_engine(engine)
        pid = _running(containerd)
        if pid is not None:
            proc.stop_pid(pid, timeout=30)
            log.info(f"engine {NAME}: stopped its containerd, pid {pid}")
        left = leftover_pids(engine)
    if left:
        msg = f"engine {NAME}: still running after down: pids {left}"
        raise SampleWorldError(msg)


def _running(containerd: SystemContainerd) -> int | None:
    try:
        pid = int(containerd.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if proc.pid_alive(pid) and f"--config {containerd.config}" in proc.cmdline(pid) else None


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as client:
        try:
            client.connect(str(path))
        except OSError:
            return False
    return True


def _ensure_containerd(containerd: SystemContainerd, binary: Path, env: dict[str, str] | None) -> bool:
    if _running(containerd) is not None and _answers(containerd.socket):
        return False
    if _running(containerd) is None:
        for path in (containerd.content_root, containerd.run_dir):
            path.mkdir(parents=True, exist_ok=True)
        containerd.config.write_text(containerd.config_text())
        containerd.socket.unlink(missing_ok=True)
        pid = proc.spawn(containerd.argv(binary), log_path=containerd.log_file, env=env)
        containerd.pid_file.write_text(f"{pid}\n")
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(containerd.socket):
        if time.monotonic() > deadline:
            msg = f"containerd for {NAME} does not answer on {containerd.socket}; see {containerd.log_file}"
            raise SampleWorldError(msg)
        time.sleep(0.2)
    return True

