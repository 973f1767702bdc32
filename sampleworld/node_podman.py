"""Podman on the sample cluster's nodes: one storage and configuration per node, as one per host.

Podman keeps no daemon: what makes a node's podman its own is where its images and containers live.
Each node gets a graph root (``<state>/engines/podman-<node>/storage``), a run root and libpod tmp dir
(under /run: podman refuses a run root longer than 50 characters) and its own containers.conf,
registries.conf (the sample registry as plain http) and storage.conf, written by
``podman_engine.write_config``. The sample cluster's TaskProlog exports CONTAINERS_CONF,
CONTAINERS_STORAGE_CONF and CONTAINERS_REGISTRIES_CONF for the node a task runs on, so `podman` in a
job uses its node's storage, and an image loaded on node1 is really absent on node2.

Nothing runs between jobs, so there is nothing to start. ``release`` (at `cluster down`) removes what
a job may have left in a node's storage and on the host: containers (`podman rm --all --force` in that
storage), the conmon and runc processes whose command line names the node's directories (by pid), and
the overlay mounts under its graph root.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from sampleworld import log, proc
from sampleworld.engines import RUN_ROOT, pids_naming
from sampleworld.errors import SampleWorldError
from sampleworld.layout import StateDir
from sampleworld.podman_engine import config_env, release_storage_mount, write_config

LEFTOVER_PROCESSES = ("conmon", "podman", "runc")


@dataclass(frozen=True, kw_only=True)
class NodePodman:
    node: str
    root: Path  # persistent: graph root and config files
    run_dir: Path  # short path: run root and libpod tmp dir

    @property
    def graph_root(self) -> Path:
        return self.root / "storage"

    def env(self) -> dict[str, str]:
        """What a task on this node gets (the TaskProlog exports them)."""
        return config_env(self.root)


def node_podman(state: StateDir, node: str) -> NodePodman:
    key = hashlib.sha256(f"{state.root}\0podman-{node}".encode()).hexdigest()[:12]
    return NodePodman(node=node, root=state.root / "engines" / f"podman-{node}", run_dir=RUN_ROOT / key)


def prepare(store: NodePodman) -> None:
    """Its directories and configuration (rewritten each time: the same text for the same state dir)."""
    write_config(store.root, graph_root=store.graph_root, run_dir=store.run_dir)


def run_podman(store: NodePodman, *args: str, timeout: float = 300) -> str:
    """The podman CLI in this node's storage, as the node's tasks run it."""
    return proc.run(["podman", *args], env=store.env(), timeout=timeout)


def release(store: NodePodman) -> bool:
    """Remove what jobs left in this node's storage and on the host; True when anything was."""
    if not (store.root / "storage.conf").is_file():
        return False
    released = False
    if (store.graph_root / "libpod").is_dir():
        try:
            if run_podman(store, "ps", "--all", "--quiet", timeout=60).strip():
                run_podman(store, "rm", "--all", "--force", "--time", "5", timeout=120)
                released = True
        except SampleWorldError as e:
            log.info(f"WARNING: podman of {store.node}: could not remove its containers: {e}")
    marks = (f"{store.run_dir}/", f"{store.root}/")
    left = [pid for pid in pids_naming(marks, LEFTOVER_PROCESSES) if pid != os.getpid()]
    for pid in left:
        log.info(f"podman of {store.node}: stopping pid {pid} left running: {proc.cmdline(pid)[:200]}")
    if left:
        proc.stop_pids(left, timeout=15)  # together, one grace period for all
        released = True
    release_storage_mount(store.graph_root)
    return released
