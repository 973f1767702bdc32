"""The sample cluster (sampleworld/cluster.py): a real SLURM with two nodes, each with its own engine."""

from __future__ import annotations

import os
import subprocess

import pytest

from sampleworld import cluster
from sampleworld.cluster import Cluster
from sampleworld.pytest_plugin import sample_world_state_dir
from tests.integration.cluster_support import docker_on

pytestmark = pytest.mark.docker


def _slurm(sample_cluster: Cluster, *argv: str) -> str:
    env = {**os.environ, **sample_cluster.env}
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=120, check=True).stdout


def test_up_is_idempotent_and_both_nodes_take_jobs(sample_cluster: Cluster) -> None:
    again = cluster.up(sample_world_state_dir())
    assert again.started == ()
    assert again.conf == sample_cluster.conf
    states = _slurm(sample_cluster, "sinfo", "--noheader", "--Node", "--format=%N %T").split("\n")
    assert sorted(line for line in states if line) == ["node1 idle", "node2 idle"]
    assert all(pid for pid in cluster.status(sample_world_state_dir()).values())


def test_each_task_talks_to_its_own_nodes_engine(sample_cluster: Cluster) -> None:
    out = _slurm(
        sample_cluster,
        "srun", "--nodes=2", "--ntasks-per-node=1", "--label",
        "bash", "-c", 'echo "$SLURM_NODEID $SLURMD_NODENAME $DOCKER_HOST $(docker info --format {{.DockerRootDir}})"',
    )  # fmt: skip
    rows = sorted(line.split(": ", 1)[1].split() for line in out.splitlines())
    assert [row[:3] for row in rows] == [
        ["0", "node1", sample_cluster.engines["node1"]],
        ["1", "node2", sample_cluster.engines["node2"]],
    ]
    roots = {row[3] for row in rows}
    assert len(roots) == 2, "both nodes answered from one engine"
    for node in sample_cluster.nodes:
        info = docker_on(sample_cluster, node, "info", "--format", "{{.DockerRootDir}}", check=True)
        assert info.stdout.strip() in roots
