"""The container barrier with real processes on the loopback: every node a process of its own, the
way the nodes of a job meet. Ports come from binding port 0, so tests run in parallel anywhere."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagebuild.launcher.barrier import PROTOCOL
from imagebuild.testing import free_port

NODE = Path(__file__).parent / "barrier_node.py"
ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")  # how the nodes are named; all connect to the head


class Nodes:
    def __init__(self, port: int) -> None:
        self.port = port
        self.procs: list[subprocess.Popen[str]] = []

    def start(
        self,
        rank: int,
        *,
        nnodes: int = 3,
        timeout_s: float = 10,
        job: str = "4242",
        stop_file: Path | None = None,
    ) -> subprocess.Popen[str]:
        spec = {
            "port": self.port,
            "timeout_s": timeout_s,
            "nnodes": nnodes,
            "rank": rank,
            "head_addr": "127.0.0.1",
            "addresses": ADDRESSES[:nnodes],
            "job": job,
        }
        proc = subprocess.Popen(
            [sys.executable, str(NODE), json.dumps(spec), *([str(stop_file)] if stop_file else [])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc


@pytest.fixture
def nodes() -> Iterator[Nodes]:
    started = Nodes(free_port())
    yield started
    for proc in started.procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("serve: error:")]


def test_three_nodes_all_arrive(nodes: Nodes) -> None:
    procs = [nodes.start(rank) for rank in (1, 0, 2)]  # a worker may come before the head
    for proc in procs:
        code, out, err = finish(proc)
        assert (code, out) == (0, "proceed\n"), err
        assert "container barrier: all 3 nodes arrived" in err
    _, _, head_err = finish(procs[1])
    assert "node 1 (127.0.0.2) arrived" in head_err
    assert "node 2 (127.0.0.3) arrived" in head_err


def test_a_late_node_within_the_timeout_is_fine(nodes: Nodes) -> None:
    early = [nodes.start(0), nodes.start(1)]
    time.sleep(1.5)  # node 2's container comes up late
    late = nodes.start(2)
    for proc in (*early, late):
        code, out, err = finish(proc)
        assert (code, out) == (0, "proceed\n"), err


def test_a_node_that_never_arrives_ends_every_node_with_its_name(nodes: Nodes) -> None:
    procs = [nodes.start(0, timeout_s=2), nodes.start(1, timeout_s=2)]
    expected = "container barrier: node 2 (127.0.0.3) never arrived within 2 s"
    for proc in procs:
        code, out, err = finish(proc)
        assert code == 1
        assert out == ""
        assert len(errors(err)) == 1
        assert expected in errors(err)[0]


def test_a_worker_whose_head_never_comes_names_the_head(nodes: Nodes) -> None:
    code, _, err = finish(nodes.start(1, nnodes=2, timeout_s=1))
    assert code == 1
    assert errors(err) == [
        f"serve: error: container barrier: node 0 (127.0.0.1) never arrived within 1 s (nothing answered on "
        f"127.0.0.1:{nodes.port}): read the head's container log, or raise BARRIER_TIMEOUT_S"
    ]


def test_a_node_that_arrives_and_leaves_does_not_count(nodes: Nodes) -> None:
    head = nodes.start(0, timeout_s=3)
    deadline = time.monotonic() + 5
    while True:
        try:
            conn = socket.create_connection(("127.0.0.1", nodes.port), timeout=1)
            break
        except OSError:
            assert time.monotonic() < deadline, "the head never listened"
            time.sleep(0.1)
    with conn:
        conn.sendall(f"{PROTOCOL} job=4242 rank=1 nnodes=3\n".encode())
        time.sleep(0.5)  # node 1 arrived ... and its container died
    worker = nodes.start(2, timeout_s=3)
    code, _, err = finish(head)
    assert code == 1
    assert "node 1 (127.0.0.2) left before every node arrived" in err
    assert "node 1 (127.0.0.2) never arrived within 3 s" in errors(err)[0]
    code, _, err = finish(worker)
    assert code == 1
    assert "node 1 (127.0.0.2) never arrived within 3 s" in errors(err)[0]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rank": 1}, "node 1 already arrived: give every node its own NODE_RANK"),
        ({"job": "9999"}, "this node is in job '9999', the head in job '4242': check SLURM_JOB_ID"),
    ],
)
def test_the_head_refuses_a_node_that_does_not_belong(
    nodes: Nodes, fields: dict[str, Any], message: str
) -> None:
    head, first = nodes.start(0), nodes.start(1)
    time.sleep(1)  # the rightful node 1 arrives first
    intruder = nodes.start(**{"rank": 2, **fields})
    code, _, err = finish(intruder)
    assert code == 2
    assert errors(err) == [f"serve: error: container barrier: the head refused this node: {message}"]
    for proc in (head, first):
        proc.kill()


def test_the_heads_sentinel_ends_a_waiting_worker_at_once(nodes: Nodes, tmp_path: Path) -> None:
    sentinel = tmp_path / ".shutdown"
    worker = nodes.start(1, nnodes=2, timeout_s=60, stop_file=sentinel)
    time.sleep(0.5)
    sentinel.write_text("raised by the head\n")
    started = time.monotonic()
    code, out, err = finish(worker)
    assert (code, out) == (0, "stopped\n"), err
    assert time.monotonic() - started < 10


def test_a_busy_barrier_port_is_one_clear_line(nodes: Nodes) -> None:
    with socket.create_server(("", nodes.port)):
        code, _, err = finish(nodes.start(0, nnodes=2))
    assert code == 1
    assert len(errors(err)) == 1
    assert f"cannot listen on CONTAINER_BARRIER_PORT {nodes.port}" in errors(err)[0]
    assert "set CONTAINER_BARRIER_PORT to a free one" in errors(err)[0]
