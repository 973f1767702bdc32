"""Extra Docker engines on this machine, one per sample cluster node.

A cluster node has its own engine: an image loaded on node1 must really be absent on node2 until node2
pulls or imports it. Each engine here is a second `dockerd` with its own data root, exec root, pid file,
socket and (empty) config file, and no iptables rules (containers use host networking, as the cluster job
runs them). The data root lives in the state dir, so an engine keeps its images between runs; the socket
and exec root live under /run, because unix socket paths are limited to about 100 bytes.

Its default bridge is a bridge of its own (`ib<key>`, created here, deleted on stop), never `--bridge=none`:
a dockerd started with `--bridge=none` DELETES the host's docker0 at start-up (moby's
removeDefaultBridgeInterface), which breaks every bridge-network container of the machine's main engine
(seen here: "could not find bridge docker0").

Lifecycle like the world's servers: `ensure_engine` starts one unless ours already answers, `stop_engine`
stops only a dockerd this state dir recorded (by pid, checked against its command line), then whatever of
it outlived it (its containerd, shims) and whose command line names the engine's own directories.

An engine need not be bookworm's dockerd: `dockerd`, `path_prefix` (a private bin dir put first on PATH
for the dockerd process, so it finds its own containerd) and `daemon_config` (daemon.json) give the
newer engines of the engine matrix (sampleworld/engine_matrix.py). The containerd a dockerd starts
keeps its state and socket under the exec root (`exec/containerd/`) and its root under the data root
(`data/containerd/daemon`): nothing is shared with the main engine's containerd.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from sampleworld import log, proc
from sampleworld.errors import SampleWorldError
from sampleworld.layout import StateDir

RUN_ROOT = Path("/run/imagebuild-engines")
START_TIMEOUT_S = 90
# What an engine runs besides dockerd (comm names are cut at 15 bytes: "containerd-shim").
ENGINE_PROCESSES = ("dockerd", "containerd", "docker-proxy")


@dataclass(frozen=True, kw_only=True)
class NodeEngine:
    name: str
    root: Path  # persistent: data root, config, log
    run_dir: Path  # short path: socket, exec root, pid file
    dockerd: str = "dockerd"  # a name looked up on our PATH, or an absolute path
    path_prefix: Path | None = None  # first on the dockerd process's PATH (its containerd, shims)
    daemon_config: str = "{}\n"  # daemon.json text
    # None: the main engine's storage driver; "": no --storage-driver (the containerd image store picks
    # its snapshotter itself)
    storage_driver: str | None = None
    tmp_dir: Path | None = None  # the dockerd's DOCKER_TMPDIR (None: its data root's tmp/)

    @property
    def bridge(self) -> str:
        return "ib" + self.run_dir.name[:12]  # interface names are limited to 15 bytes

    @property
    def socket(self) -> Path:
        return self.run_dir / "docker.sock"

    @property
    def host(self) -> str:
        """What DOCKER_HOST takes."""
        return f"unix://{self.socket}"

    @property
    def data_root(self) -> Path:
        return self.root / "data"

    @property
    def exec_root(self) -> Path:
        return self.run_dir / "exec"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "dockerd.pid"

    @property
    def config_file(self) -> Path:
        return self.root / "daemon.json"

    @property
    def log_file(self) -> Path:
        return self.root / "dockerd.log"

    def argv(self, storage_driver: str) -> tuple[str, ...]:
        return (
            self.dockerd,
            f"--config-file={self.config_file}",  # not /etc/docker/daemon.json: the main engine's
            f"--data-root={self.data_root}",
            f"--exec-root={self.exec_root}",
            f"--pidfile={self.pid_file}",
            f"--host={self.host}",
            *((f"--storage-driver={storage_driver}",) if storage_driver else ()),
            f"--bridge={self.bridge}",
            "--iptables=false",
            "--ip6tables=false",
        )

    def env(self) -> dict[str, str] | None:
        """The dockerd process's environment changes: its private bin dir first on PATH, its
        DOCKER_TMPDIR, if any."""
        changes = {}
        if self.path_prefix is not None:
            changes["PATH"] = f"{self.path_prefix}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        if self.tmp_dir is not None:
            changes["DOCKER_TMPDIR"] = str(self.tmp_dir)
        return changes or None


def node_engine(state: StateDir, name: str) -> NodeEngine:
    key = hashlib.sha256(f"{state.root}\0{name}".encode()).hexdigest()[:12]
    return NodeEngine(name=name, root=state.root / "engines" / name, run_dir=RUN_ROOT / key)


def _request(engine: NodeEngine, method: str, path: str, timeout: float) -> tuple[int, bytes]:
    """(status, body) of one API request on the engine's socket; SampleWorldError when it does not answer."""
    conn = _UnixHTTPConnection(engine.socket, timeout)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read()
    except OSError as e:
        msg = f"engine {engine.name} does not answer {method} {path} on {engine.socket}: {e}"
        raise SampleWorldError(msg) from e
    finally:
        conn.close()


def api_get(engine: NodeEngine, path: str, timeout: float = 10) -> Any:
    """GET an engine API path on the engine's socket, decoded from JSON."""
    status, body = _request(engine, "GET", path, timeout)
    if status != 200:
        msg = f"engine {engine.name}: GET {path} answered {status}: {body[:300]!r}"
        raise SampleWorldError(msg)
    return cast(Any, json.loads(body))


def api_post(engine: NodeEngine, path: str, timeout: float = 900) -> list[Any]:
    """POST to an engine API path that streams JSON lines (pull); fails on an error line."""
    status, body = _request(engine, "POST", path, timeout)
    lines = [json.loads(line) for line in body.splitlines() if line.strip()]
    errors = [line for line in lines if isinstance(line, dict) and "error" in line]
    if status != 200 or errors:
        msg = f"engine {engine.name}: POST {path} answered {status}: {errors or body[:300]!r}"
        raise SampleWorldError(msg)
    return lines


def ping(engine: NodeEngine, timeout: float = 2) -> bool:
    """True when the engine answers GET /_ping on its socket."""
    conn = _UnixHTTPConnection(engine.socket, timeout)
    try:
        conn.request("GET", "/_ping")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def running_pid(engine: NodeEngine) -> int | None:
    """The dockerd this state dir started for `engine`, while it still runs."""
    try:
        pid = int(engine.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if proc.pid_alive(pid) and f"--data-root={engine.data_root}" in proc.cmdline(pid):
        return pid
    return None


def ensure_engine(engine: NodeEngine, *, storage_driver: str | None = None) -> bool:
    """Start the engine unless ours already answers; True when this call started it."""
    if running_pid(engine) is not None and ping(engine):
        return False
    if running_pid(engine) is None:
        for path in (engine.data_root, engine.exec_root):
            path.mkdir(parents=True, exist_ok=True)
        engine.config_file.write_text(engine.daemon_config)
        engine.socket.unlink(missing_ok=True)  # a stale socket from a killed dockerd
        driver = storage_driver or engine.storage_driver
        if driver is None:
            driver = main_storage_driver()
        _ensure_bridge(engine)
        proc.spawn(engine.argv(driver), log_path=engine.log_file, env=engine.env())
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ping(engine):
        if time.monotonic() > deadline:
            msg = f"engine {engine.name} does not answer on {engine.socket} after {START_TIMEOUT_S}s; see {engine.log_file}"
            raise SampleWorldError(msg)
        time.sleep(0.2)
    log.info(f"engine {engine.name}: pid {running_pid(engine)} answering at {engine.host}")
    return True


def stop_engine(engine: NodeEngine) -> bool:
    """Stop the dockerd we started for `engine` (its containers stop with it); True when one was stopped."""
    pid = running_pid(engine)
    if pid is None:
        return False
    proc.stop_pid(pid, timeout=30)
    left = leftover_pids(engine)  # dockerd stops its containerd; a SIGKILLed one does not
    for pid_left in left:
        log.info(f"engine {engine.name}: stopping pid {pid_left} it left running: {proc.cmdline(pid_left)[:200]}")
    proc.stop_pids(left, timeout=15)  # together: a containerd and its shims need not wait in turn
    _release_host_state(engine)
    log.info(f"engine {engine.name}: stopped pid {pid}")
    return True


def leftover_pids(engine: NodeEngine) -> list[int]:
    """Processes (other than ours) whose command line names this engine's run dir or root: its
    containerd (`--config <exec root>/containerd/containerd.toml`), shims (`-address <exec root>/...`)."""
    return pids_naming((f"{engine.run_dir}/", f"{engine.root}/"), ENGINE_PROCESSES)


def pids_naming(marks: tuple[str, ...], commands: tuple[str, ...]) -> list[int]:
    """Live processes whose comm starts with one of ``commands`` and whose command line names a mark:
    never a shell or a tool that merely names the path."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if not comm.startswith(commands):
            continue
        line = proc.cmdline(int(entry.name))
        if any(mark in line for mark in marks) and proc.pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return sorted(found)


def _ensure_bridge(engine: NodeEngine) -> None:
    """The engine's own bridge with a /24 no other interface uses (dockerd needs an address on it)."""
    if Path(f"/sys/class/net/{engine.bridge}").exists():
        return
    used = proc.run(["ip", "-o", "-4", "addr", "show"])
    first = int(engine.run_dir.name[:4], 16) % 250
    for n in ((first + i) % 250 + 1 for i in range(250)):
        if f" 10.213.{n}." not in used:
            break
    else:
        msg = "no free /24 in 10.213.0.0/16 for a sample engine's bridge; stop some engines"
        raise SampleWorldError(msg)
    proc.run(["ip", "link", "add", engine.bridge, "type", "bridge"])
    proc.run(["ip", "addr", "add", f"10.213.{n}.1/24", "dev", engine.bridge])
    proc.run(["ip", "link", "set", engine.bridge, "up"])


def _release_host_state(engine: NodeEngine) -> None:
    """What a stopped dockerd leaves on the host: namespace mounts under its exec root, and our bridge."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{engine.run_dir}/")), reverse=True):
        proc.run(["umount", "-l", mount])
    if Path(f"/sys/class/net/{engine.bridge}").exists():
        proc.run(["ip", "link", "del", engine.bridge])


def main_storage_driver() -> str:
    """The storage driver of the machine's main engine, so extra engines behave (and perform) alike."""
    try:
        out = proc.run(["docker", "info", "--format", "{{json .Driver}}"], timeout=30)
        driver = json.loads(out)
    except (SampleWorldError, ValueError):
        return "overlay2"
    return driver if isinstance(driver, str) and driver else "overlay2"


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over the engine's unix socket (the standard library has no such connection class)."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(str(self._path))
        except OSError:
            sock.close()
            raise
        self.sock = sock
