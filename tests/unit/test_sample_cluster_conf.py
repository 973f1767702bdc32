"""The sample cluster's slurm.conf and task prolog (sampleworld/cluster_conf.py): pure rendering."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from imagebuild.testing import dev_tool
from sampleworld.cluster_conf import ClusterLayout, render_slurm_conf, render_task_prolog

LAYOUT = ClusterLayout(
    root=Path("/state/cluster"),
    run_dir=Path("/run/imagebuild-cluster/abc"),
    ctld_port=57817,
    first_slurmd_port=57818,
    nodes=("node1", "node2"),
)
ENGINES = {"node1": "unix:///run/e1/docker.sock", "node2": "unix:///run/e2/docker.sock"}


def test_slurm_conf_uses_private_ports_munge_and_state() -> None:
    conf = render_slurm_conf(LAYOUT, cpus=2)
    settings = dict(
        line.split("=", 1)
        for line in conf.splitlines()
        if line and not line.startswith(("#", "NodeName", "PartitionName"))
    )
    assert settings["SlurmctldPort"] == "57817"
    assert settings["AuthInfo"] == "socket=/run/imagebuild-cluster/abc/munge.sock"
    assert settings["StateSaveLocation"] == "/state/cluster/ctld-state"
    assert settings["SlurmdSpoolDir"] == "/state/cluster/spool/%n"
    assert settings["ProctrackType"] == "proctrack/linuxproc"
    assert settings["TaskPlugin"] == "task/none"
    assert settings["SelectType"] == "select/cons_tres"
    assert settings["TaskProlog"] == "/state/cluster/task-prolog.sh"
    assert not re.search(r"Port=681[78]\b", conf), "the system's SLURM ports"
    nodes = [line for line in conf.splitlines() if line.startswith("NodeName=")]
    assert nodes == [
        "NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=57818 CPUs=2 State=UNKNOWN",
        "NodeName=node2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=57819 CPUs=2 State=UNKNOWN",
    ]
    assert "PartitionName=sample Nodes=node1,node2 Default=YES" in conf


def test_task_prolog_points_each_node_at_its_engine_and_podman_storage(tmp_path: Path) -> None:
    layout = ClusterLayout(
        root=tmp_path / "cluster", run_dir=LAYOUT.run_dir, ctld_port=1, first_slurmd_port=2, nodes=LAYOUT.nodes
    )
    podman = {node: {"CONTAINERS_STORAGE_CONF": f"/state/engines/podman-{node}/storage.conf"} for node in ENGINES}
    prolog = tmp_path / "task-prolog.sh"
    prolog.write_text(render_task_prolog(layout, ENGINES, podman))
    for node, host in ENGINES.items():
        env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": node}
        done = subprocess.run(["sh", str(prolog)], env=env, capture_output=True, text=True, check=True)
        assert done.stdout == (
            f"export DOCKER_HOST={host}\nexport CONTAINERS_STORAGE_CONF=/state/engines/podman-{node}/storage.conf\n"
        )
    # A node given a PATH of its own (sampleworld.cluster.node_without) gets it; the other does not.
    layout.node_path("node2").parent.mkdir(parents=True)
    layout.node_path("node2").write_text("/state/cluster/nodes/node2/bin\n")
    for node, path in (("node1", ""), ("node2", "export PATH=/state/cluster/nodes/node2/bin\n")):
        env = {"PATH": os.environ["PATH"], "SLURMD_NODENAME": node}
        done = subprocess.run(["sh", str(prolog)], env=env, capture_output=True, text=True, check=True)
        assert done.stdout.endswith(f"storage.conf\n{path}")
    other = subprocess.run(
        ["sh", str(prolog)], env={"SLURMD_NODENAME": "node9"}, capture_output=True, text=True, check=True
    )
    assert other.stdout == ""
    shellcheck = dev_tool("shellcheck")
    assert subprocess.run([shellcheck, str(prolog)], capture_output=True, check=False).returncode == 0
