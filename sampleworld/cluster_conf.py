"""The sample cluster's files, rendered from its layout: slurm.conf and the task prolog. Pure.

Two nodes on this one host (two `slurmd -N nodeX` on their own ports, both `NodeHostname=localhost`),
each with its own Docker engine and its own podman storage. A job script cannot know which engine or
storage is its node's, and must not: on a real cluster every node simply has `docker` and `podman`.
So the task prolog, which slurmstepd runs before every task (the batch script included), prints
`export DOCKER_HOST=...` and podman's `export CONTAINERS_*=...` for the node the task runs on; SLURM
applies such lines to the task's environment (slurm.conf(5), TaskProlog). A node may also be given a
PATH of its own (``ClusterLayout.node_path``), so that a test can take a tool away from one node.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PARTITION = "sample"


@dataclass(frozen=True, kw_only=True)
class ClusterLayout:
    """Where one sample cluster keeps everything, and its ports."""

    root: Path  # persistent: conf, key, controller state, spool, logs
    run_dir: Path  # short path (unix sockets are limited to ~100 bytes): munge socket, daemon pid files
    ctld_port: int
    first_slurmd_port: int
    nodes: tuple[str, ...]

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def task_prolog(self) -> Path:
        return self.root / "task-prolog.sh"

    @property
    def key_dir(self) -> Path:
        return self.root / "keys"

    @property
    def munge_key(self) -> Path:
        return self.key_dir / "munge.key"

    @property
    def munge_socket(self) -> Path:
        return self.run_dir / "munge.sock"

    @property
    def ctld_state(self) -> Path:
        return self.root / "ctld-state"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        """Pid files of the daemons we started (our record, not the daemons' own)."""
        return self.root / "pids"

    @property
    def jobcomp(self) -> Path:
        return self.logs / "jobcomp.txt"

    def node_path(self, node: str) -> Path:
        """A file that, while it exists, holds the PATH every task on ``node`` gets."""
        return self.root / "nodes" / node / "PATH"

    def slurmd_port(self, node: str) -> int:
        return self.first_slurmd_port + self.nodes.index(node)


def render_slurm_conf(layout: ClusterLayout, *, cpus: int) -> str:
    nodes = "\n".join(
        f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 Port={layout.slurmd_port(node)} "
        f"CPUs={cpus} State=UNKNOWN"
        for node in layout.nodes
    )
    return f"""\
# The sample cluster of imagebuild's sample world (sampleworld/cluster.py writes this file; edits are lost).
# Clients need SLURM_CONF={layout.conf}
ClusterName=sample
SlurmctldHost=localhost(127.0.0.1)
# Private ports derived from the sample world's port base, never the system's 6817/6818.
SlurmctldPort={layout.ctld_port}
SlurmdPort={layout.first_slurmd_port}
# Our own munged: its socket and key, not the system's /run/munge.
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={layout.munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={layout.ctld_state}
# %n: each slurmd of this host gets a spool, pid file and log of its own.
SlurmdSpoolDir={layout.spool}/%n
SlurmctldPidFile={layout.run_dir}/slurmctld.pid
SlurmdPidFile={layout.run_dir}/slurmd-%n.pid
SlurmctldLogFile={layout.logs}/slurmctld.log
SlurmdLogFile={layout.logs}/slurmd-%n.log
# No cgroups needed (nor always available in a container): track processes by parentage.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Both nodes declare the host's CPUs; trust the declaration instead of draining a node over it.
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
# No slurmdbd, so no sacct: finished jobs stay in `scontrol show job` for an hour, and every job's
# final state and exit code is appended to the completion log.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={layout.jobcomp}
MinJobAge=3600
# Points each task at its node's Docker engine (see the file).
TaskProlog={layout.task_prolog}
{nodes}
PartitionName={PARTITION} Nodes={",".join(layout.nodes)} Default=YES MaxTime=INFINITE State=UP
"""


def render_task_prolog(
    layout: ClusterLayout, engine_hosts: Mapping[str, str], podman_env: Mapping[str, Mapping[str, str]]
) -> str:
    def exports(node: str) -> str:
        env = {"DOCKER_HOST": engine_hosts[node], **podman_env[node]}
        lines = [f"echo {shlex.quote(f'export {name}={value}')}" for name, value in env.items()]
        path = shlex.quote(str(layout.node_path(node)))
        lines.append(f'if [ -f {path} ]; then echo "export PATH=$(cat {path})"; fi')
        return "\n".join(f"        {line}" for line in lines)

    cases = "\n".join(f"    {node})\n{exports(node)}\n        ;;" for node in layout.nodes)
    return f"""\
#!/bin/sh
# TaskProlog of the sample cluster (sampleworld/cluster.py writes this file).
# Both sample nodes run on one host, each with its own Docker engine and podman storage. SLURM runs
# this before every task and applies each `export NAME=value` line it prints to the task's
# environment, so `docker` and `podman` in a job use the node the task runs on, as on a real cluster.
# A node's PATH file (written by a test, sampleworld.cluster.node_without) takes tools away from it.
case "$SLURMD_NODENAME" in
{cases}
esac
"""
