"""Topology from the SLURM allocation: hostlist expansion, defaults for NNODES / NODE_RANK /
MASTER_ADDR, and allocations that cannot run the recipe refused before anything starts."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from imagebuild.launcher import serve
from imagebuild.launcher.messages import LauncherError
from imagebuild.launcher.slurm import expand_hostlist
from tests.launcher.launcher_support import k3_env


@pytest.mark.parametrize(
    ("hostlist", "hosts"),
    [
        # Each expected list is what `scontrol show hostnames` (Slurm 22.05) printed for the input.
        ("node[1-3,5]", "node1 node2 node3 node5"),
        ("node[01-03,5]", "node01 node02 node03 node5"),
        ("n[8-11]", "n8 n9 n10 n11"),
        ("n[099-101]", "n099 n100 n101"),
        ("n[1-02]", "n1 n2"),
        ("n[01-2]", "n01 n02"),
        ("n[5,1-2]", "n5 n1 n2"),
        ("a,b[7-9],c", "a b7 b8 b9 c"),
        ("node[1-3],login1,node[10-11]", "node1 node2 node3 login1 node10 node11"),
        ("rack[1-2]-gpu[01-02]", "rack1-gpu01 rack1-gpu02 rack2-gpu01 rack2-gpu02"),
        ("mi300x-07", "mi300x-07"),
    ],
)
def test_hostlists_expand_as_scontrol_does(hostlist: str, hosts: str) -> None:
    assert expand_hostlist(hostlist) == tuple(hosts.split())


@pytest.mark.parametrize(
    ("hostlist", "why"),
    [
        ("n[3-1]", "range 3-1 runs backwards"),
        ("n[1-2", "'[' without ']'"),
        ("n[1-2]]", "']' without '['"),
        ("n[[1]]", "nested '['"),
        ("n[a-b]", "holds 'a-b', not a number or range"),
        ("x[1-2],,y", "an empty host name"),
        ("n[1-999999]", "more than 65536 hosts"),
        ("n1 n2", "whitespace"),
    ],
)
def test_malformed_hostlists_are_refused(hostlist: str, why: str) -> None:
    with pytest.raises(LauncherError, match="is not a SLURM hostlist") as error:
        expand_hostlist(hostlist, name="SLURM_JOB_NODELIST")
    assert why in str(error.value)
    assert str(error.value).endswith(": fix SLURM_JOB_NODELIST")


def slurm_env(**overrides: str) -> dict[str, str]:
    """A node of a 2-node SLURM job that names nothing itself: no NNODES, NODE_RANK or MASTER_ADDR."""
    env = k3_env(SLURM_NNODES="2", SLURM_NODEID="1", SLURM_JOB_NODELIST="mi300x-[07-08]", HOME="/root")
    for name in ("NNODES", "NODE_RANK", "MASTER_ADDR"):
        del env[name]
    env.update(overrides)
    return env


def plan(capsys: pytest.CaptureFixture[str], env: dict[str, str]) -> dict[str, Any]:
    code = serve.main(["--json"], env)
    out, err = capsys.readouterr()
    assert code == 0, err
    document: dict[str, Any] = json.loads(out)
    return document


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_allocation_gives_nnodes_rank_and_head(capsys: pytest.CaptureFixture[str]) -> None:
    document = plan(capsys, slurm_env())
    argv = document["argv"]
    assert (flag(argv, "--nnodes"), flag(argv, "--node-rank"), flag(argv, "--master-addr")) == (
        "2",
        "1",
        "mi300x-07",
    )
    assert "--headless" in argv
    assert document["barrier"] == {
        "port": 2223,
        "timeout_s": 1800,
        "head": "mi300x-07",
        "addresses": ["mi300x-07", "mi300x-08"],
    }


def test_sbatchs_node_count_counts_when_sruns_is_absent(capsys: pytest.CaptureFixture[str]) -> None:
    env = slurm_env(SLURM_JOB_NUM_NODES="2")
    del env["SLURM_NNODES"]
    assert plan(capsys, env)["nnodes"] == 2


def test_ipaddrs_name_the_nodes_and_the_head(capsys: pytest.CaptureFixture[str]) -> None:
    document = plan(capsys, slurm_env(IPADDRS="10.1.0.7, 10.1.0.8"))
    assert document["master_addr"] == "10.1.0.7"
    assert document["barrier"]["addresses"] == ["10.1.0.7", "10.1.0.8"]


def test_values_given_at_submit_time_win_over_the_allocation(capsys: pytest.CaptureFixture[str]) -> None:
    document = plan(capsys, slurm_env(NODE_RANK="0", MASTER_ADDR="10.9.9.9", IPADDRS="10.1.0.7,10.1.0.8"))
    assert (document["node_rank"], document["master_addr"], document["role"]) == (0, "10.9.9.9", "head")


def test_a_single_node_needs_no_head_address_and_no_barrier(capsys: pytest.CaptureFixture[str]) -> None:
    env = k3_env(NNODES="1", PP_SIZE="1", MASTER_ADDR="")
    document = plan(capsys, env)
    assert document["master_addr"] == "127.0.0.1"
    assert document["barrier"] is None


def real_run(env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = serve.main([], env)
    _, err = capsys.readouterr()
    return code, err.strip().splitlines()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"SLURM_NNODES": "1", "SLURM_NODEID": "0"},
         "the SLURM allocation has 1 node (SLURM_NNODES=1) but recipe kimi-k3 needs NNODES=2: submit with sbatch -N 2"),
        ({"SLURM_NNODES": "1", "SLURM_NODEID": "0", "NNODES": "2"},
         "NNODES=2 but the SLURM allocation has 1 node (SLURM_NNODES=1): submit with sbatch -N 2 or lower NNODES"),
        ({"SLURM_NNODES": "3"},
         "topology mismatch: TP_SIZE x PP_SIZE = 8 x 2 = 16 GPUs, but NNODES x GPUS_PER_NODE = 3 x 8 = 24 "
         "(NNODES from SLURM_NNODES)"),
        ({"SLURM_NODEID": "2"}, "SLURM_NODEID='2' must be an integer in 0..1"),
        ({"IPADDRS": "10.1.0.7"}, "IPADDRS has 1 addresses but NNODES=2: give one address per node"),
    ],
)  # fmt: skip
def test_an_allocation_that_cannot_run_the_recipe_is_refused_before_anything_starts(
    node_env: dict[str, str], capsys: pytest.CaptureFixture[str], overrides: dict[str, str], message: str
) -> None:
    env = {key: value for key, value in node_env.items() if key not in ("NNODES", "NODE_RANK")}
    env.update({"SLURM_NNODES": "2", "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "localhost,localhost"})
    env.update(overrides)
    code, lines = real_run(env, capsys)
    assert code == 2
    assert len(lines) == 1
    assert message in lines[0]
    assert not Path(env["STUB_VLLM_RECORD"]).exists()  # no vLLM
    with socket.create_server(("", int(env["CONTAINER_BARRIER_PORT"]))):  # no barrier listening
        pass
