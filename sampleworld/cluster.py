"""The sample cluster: a real SLURM (Debian's slurmctld, slurmd, munge) with two nodes on this host.

`up` starts, unless ours already run: one Docker engine per node (sampleworld/engines.py), our own
munged (private key and socket), slurmctld, and one `slurmd -N nodeX` per node on its own port, all from
one slurm.conf in the state dir (sampleworld/cluster_conf.py); it writes each node's podman
configuration (sampleworld/node_podman.py: a storage of its own per node, nothing to start). It waits until both nodes are idle and
returns a Cluster; clients (sbatch, srun, scontrol) need SLURM_CONF=Cluster.conf (`Cluster.env`).
`down` cancels the cluster's jobs and stops only the daemons this state dir recorded, by pid, then
removes what jobs left in the nodes' podman storage. Ports come
from the world's port base (layout.Ports), so every checkout runs a cluster of its own.

The packages come from scripts/ensure-slurm.sh; the sample world's registry, index and git daemon are
reachable from the node engines' containers with host networking, as from the main engine's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sampleworld import log, proc, services
from sampleworld.cluster_conf import PARTITION, ClusterLayout, render_slurm_conf, render_task_prolog
from sampleworld.engines import ensure_engine, node_engine, running_pid, stop_engine
from sampleworld.errors import SampleWorldError
from sampleworld.layout import CLUSTER_NODES, DEFAULT_STATE_DIR, PORTS, REPO_ROOT, StateDir
from sampleworld.node_podman import node_podman, prepare, release
from sampleworld.world import state_lock

NODES = CLUSTER_NODES
RUN_ROOT = Path("/run/imagebuild-cluster")
ENSURE_SLURM = REPO_ROOT / "scripts" / "ensure-slurm.sh"
TOOLS = ("munged", "slurmctld", "slurmd", "sinfo", "scontrol", "scancel", "squeue", "sbatch", "srun")
READY_TIMEOUT_S = 60
# sinfo's long state names that take jobs (a trailing * means "not responding" and is stripped first).
USABLE_STATES = ("idle", "mixed", "allocated", "completing")


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """A running sample cluster; `started` names what this `up` started."""

    conf: Path  # SLURM_CONF for every client command
    partition: str
    nodes: tuple[str, ...]
    engines: dict[str, str]  # node -> DOCKER_HOST of its engine (what its tasks get)
    podman: dict[str, dict[str, str]]  # node -> the CONTAINERS_* variables of its podman storage
    jobcomp: Path  # one line per finished job: JobState=..., ExitCode=...
    # What the sample jobs bind on the shared host network (see layout.Ports).
    serve_port: int
    master_port: int
    barrier_port: int
    started: tuple[str, ...] = field(default=())

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def to_json(self) -> str:
        data = asdict(self)
        data["conf"] = str(self.conf)
        data["jobcomp"] = str(self.jobcomp)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"


def cluster_layout(state: StateDir) -> ClusterLayout:
    key = hashlib.sha256(str(state.root).encode()).hexdigest()[:12]
    return ClusterLayout(
        root=state.root / "cluster",
        run_dir=RUN_ROOT / key,
        ctld_port=PORTS.slurmctld,
        first_slurmd_port=PORTS.slurmd,
        nodes=NODES,
    )


def _munged(layout: ClusterLayout) -> services.Service:
    socket = layout.munge_socket
    return services.Service(
        name="munged",
        port=None,
        unix_socket=socket,
        argv=(
            "munged",
            "--foreground",  # so the pid we record is the daemon's
            f"--socket={socket}",
            f"--key-file={layout.munge_key}",
            f"--pid-file={layout.run_dir}/munged.pid",
            f"--seed-file={layout.key_dir}/munged.seed",
            f"--log-file={layout.logs}/munged.log",
        ),
        marker=f"--socket={socket}",
    )


def _slurmctld(layout: ClusterLayout) -> services.Service:
    return services.Service(
        name="slurmctld",
        port=layout.ctld_port,
        argv=("slurmctld", "-D", "-f", str(layout.conf)),
        marker=f"slurmctld -D -f {layout.conf}",
    )


def _slurmd(layout: ClusterLayout, node: str) -> services.Service:
    return services.Service(
        name=f"slurmd-{node}",
        port=layout.slurmd_port(node),
        argv=("slurmd", "-D", "-f", str(layout.conf), "-N", node),
        marker=f"slurmd -D -f {layout.conf} -N {node}",
    )


def _daemons(state: StateDir, layout: ClusterLayout) -> list[services.Service]:
    """In start order; stopped in reverse."""
    return [_munged(layout), _slurmctld(layout), *(_slurmd(layout, node) for node in layout.nodes)]


def _state(state_dir: Path | None) -> StateDir:
    return StateDir((state_dir or DEFAULT_STATE_DIR).resolve())


def _check_tools() -> None:
    for tool in TOOLS:
        if shutil.which(tool) is None:
            msg = f"`{tool}` is not installed; run {ENSURE_SLURM.relative_to(REPO_ROOT)} (it installs SLURM and MUNGE)"
            raise SampleWorldError(msg)


def _write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    if path.is_file() and path.read_text() == text:
        return False
    path.write_text(text)
    path.chmod(mode)
    return True


def _prepare(layout: ClusterLayout, engine_hosts: dict[str, str], podman_env: dict[str, dict[str, str]]) -> bool:
    """Directories, the munge key and the config files; True when the config changed."""
    for path in (layout.root, layout.ctld_state, layout.logs, layout.pids, layout.run_dir):
        path.mkdir(parents=True, exist_ok=True)
    for node in layout.nodes:
        (layout.spool / node).mkdir(parents=True, exist_ok=True)
    # munged refuses a socket directory others cannot traverse, and a key others can read.
    layout.run_dir.chmod(0o755)
    layout.key_dir.mkdir(mode=0o700, exist_ok=True)
    layout.key_dir.chmod(0o700)
    if not layout.munge_key.is_file():
        fd = os.open(layout.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as key:
            key.write(os.urandom(1024))
    changed = _write_if_changed(layout.conf, render_slurm_conf(layout, cpus=os.cpu_count() or 1))
    prolog = render_task_prolog(layout, engine_hosts, podman_env)
    return _write_if_changed(layout.task_prolog, prolog, 0o755) or changed


def _sinfo_states(conf: Path) -> dict[str, str]:
    out = proc.run(
        ["sinfo", "--noheader", "--Node", "--format=%N %T"], env={"SLURM_CONF": str(conf)}, timeout=30
    )
    return {node: state.rstrip("*~#!%$@^-") for node, state in (line.split() for line in out.splitlines())}


def _wait_for_nodes(layout: ClusterLayout) -> None:
    """Until every node takes jobs; a node left DOWN by an unclean stop is resumed (it is ours)."""
    env = {"SLURM_CONF": str(layout.conf)}
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        states = _sinfo_states(layout.conf)
        waiting = {node: states.get(node, "missing") for node in layout.nodes}
        waiting = {node: state for node, state in waiting.items() if state not in USABLE_STATES}
        if not waiting:
            return
        for node, state in waiting.items():
            if state.startswith(("down", "drain")):
                proc.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=env, timeout=30)
        if time.monotonic() > deadline:
            msg = f"sample cluster nodes not idle after {READY_TIMEOUT_S}s: {waiting}; see {layout.logs}"
            raise SampleWorldError(msg)
        time.sleep(0.5)


def up(state_dir: Path | None = None) -> Cluster:
    """Start whatever of the cluster is not running (idempotent) and wait until both nodes take jobs."""
    began = time.monotonic()
    _check_tools()
    state = _state(state_dir)
    layout = cluster_layout(state)
    started: list[str] = []
    with state_lock(state):
        state.create()
        engines = {node: node_engine(state, node) for node in layout.nodes}
        for node, engine in engines.items():
            if ensure_engine(engine):
                started.append(f"engine-{node}")
        stores = {node: node_podman(state, node) for node in layout.nodes}
        for store in stores.values():
            prepare(store)
        podman_env = {node: store.env() for node, store in stores.items()}
        if _prepare(layout, {node: engine.host for node, engine in engines.items()}, podman_env):
            # A new slurm.conf (first start, or a new port base): daemons of ours still on the old one go.
            for daemon in reversed(_daemons(state, layout)):
                services.stop(state, daemon)
        for daemon in _daemons(state, layout):
            if services.ensure_running(state, daemon):
                started.append(daemon.name)
        _wait_for_nodes(layout)
        cluster = Cluster(
            conf=layout.conf,
            partition=PARTITION,
            nodes=layout.nodes,
            engines={node: engine.host for node, engine in engines.items()},
            podman=podman_env,
            jobcomp=layout.jobcomp,
            serve_port=PORTS.job_serve,
            master_port=PORTS.job_master,
            barrier_port=PORTS.job_barrier,
            started=tuple(started),
        )
        (layout.root / "cluster.json").write_text(cluster.to_json())
    log.info(f"sample cluster up in {time.monotonic() - began:.1f}s: export SLURM_CONF={layout.conf}")
    return cluster


def _cancel_jobs(layout: ClusterLayout) -> None:
    """Every job of this cluster is ours: cancel them so no task outlives its slurmd."""
    env = {"SLURM_CONF": str(layout.conf)}
    try:
        proc.run(["scancel", f"--partition={PARTITION}"], env=env, timeout=30)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while proc.run(["squeue", "--noheader", "--format=%i"], env=env, timeout=30).strip():
            if time.monotonic() > deadline:
                log.info(f"WARNING: jobs of the sample cluster still listed after {READY_TIMEOUT_S}s")
                return
            time.sleep(0.5)
    except SampleWorldError as e:
        log.info(f"WARNING: could not cancel the sample cluster's jobs: {e}")


def down(state_dir: Path | None = None, *, only: Iterable[str] | None = None) -> list[str]:
    """Stop what this state dir recorded (all, or the names in `only`); returns what stopped."""
    state = _state(state_dir)
    layout = cluster_layout(state)
    wanted = None if only is None else set(only)
    stopped: list[str] = []
    with state_lock(state):
        daemons = [d for d in _daemons(state, layout) if wanted is None or d.name in wanted]
        controller = _slurmctld(layout)
        if services.running_pid(state, controller) is not None and any(
            d.name.startswith("slurmd-") and services.running_pid(state, d) is not None for d in daemons
        ):
            _cancel_jobs(layout)
        for daemon in reversed(daemons):
            if services.stop(state, daemon):
                stopped.append(daemon.name)
        for node in layout.nodes:
            name = f"engine-{node}"
            if (wanted is None or name in wanted) and stop_engine(node_engine(state, node)):
                stopped.append(name)
            # What a job left in the node's podman storage goes with its slurmd.
            if (wanted is None or f"slurmd-{node}" in wanted) and release(node_podman(state, node)):
                stopped.append(f"podman-{node}")
    return stopped


def status(state_dir: Path | None = None) -> dict[str, int | None]:
    """Daemon or engine name -> pid of ours that runs, or None."""
    state = _state(state_dir)
    layout = cluster_layout(state)
    pids = {f"engine-{node}": running_pid(node_engine(state, node)) for node in layout.nodes}
    return {d.name: services.running_pid(state, d) for d in _daemons(state, layout)} | pids


def load(state_dir: Path | None = None) -> Cluster:
    """The Cluster recorded by the last `up` of this state dir."""
    path = cluster_layout(_state(state_dir)).root / "cluster.json"
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        msg = f"{path} is missing; run `python -m sampleworld cluster up` first"
        raise SampleWorldError(msg) from e
    data["conf"] = Path(data["conf"])
    data["jobcomp"] = Path(data["jobcomp"])
    data["nodes"] = tuple(data["nodes"])
    data["started"] = tuple(data["started"])
    data.setdefault("podman", {})
    return Cluster(**data)


# The directories a node's tasks find their tools in when a test changes them (node_programs).
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@contextlib.contextmanager
def node_without(state_dir: Path | None, node: str, tools: Iterable[str]) -> Iterator[None]:
    """While open, every task that starts on ``node`` has a PATH without ``tools``, as on a node where
    they are not installed."""
    with node_programs(state_dir, node, without=tools):
        yield


@contextlib.contextmanager
def node_programs(
    state_dir: Path | None, node: str, *, without: Iterable[str] = (), added: Mapping[str, Path] | None = None
) -> Iterator[None]:
    """While open, every task that starts on ``node`` has a PATH of one directory: links to every program
    of this process's PATH but those ``without`` names, and to the ``added`` ones (name -> program),
    as on a node where those are installed (a stand-in, such as sampleworld.enroot_standin's)."""
    layout = cluster_layout(_state(state_dir))
    hidden = set(without)
    bin_dir = layout.node_path(node).parent / "bin"
    shutil.rmtree(bin_dir, ignore_errors=True)
    bin_dir.mkdir(parents=True)
    for name, program in (added or {}).items():
        (bin_dir / name).symlink_to(program)
    for directory in os.environ.get("PATH", _SYSTEM_PATH).split(os.pathsep):
        with contextlib.suppress(OSError):
            for entry in sorted(Path(directory).iterdir()):
                link = bin_dir / entry.name
                if entry.name not in hidden and not link.exists() and os.access(entry, os.X_OK) and entry.is_file():
                    link.symlink_to(entry)
    layout.node_path(node).write_text(f"{bin_dir}\n")
    try:
        yield
    finally:
        layout.node_path(node).unlink(missing_ok=True)
        shutil.rmtree(bin_dir, ignore_errors=True)
