"""Fixtures for the serve launcher's tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from imagebuild.testing import free_port
from tests.launcher.launcher_support import STUB_DIR, BarrierPeer, k3_env, start_launcher


@pytest.fixture
def node_env(tmp_path: Path) -> dict[str, str]:
    """Environment for a launcher subprocess that serves with the stand-in vllm, fast timeouts."""
    model = tmp_path / "model"
    model.mkdir()
    # The stub's `#!/usr/bin/env python3` must find this interpreter.
    path = os.pathsep.join([str(STUB_DIR), str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    return k3_env(
        PATH=path,
        HOME=str(tmp_path),
        MODEL_PATH=str(model),
        MASTER_ADDR="127.0.0.1",
        LOG_ROOT=str(tmp_path / "run_logs"),
        # A free port: a real server on 8000 answering /health would fake readiness.
        SERVE_PORT=str(free_port()),
        LOG_WAIT_TIMEOUT_SECONDS="10",
        STOP_GRACE_S="2",
        # A port of its own, so tests can run in parallel with each other and other worktrees.
        CONTAINER_BARRIER_PORT=str(free_port()),
        BARRIER_TIMEOUT_S="10",
        AITER_JIT_DIR=str(tmp_path / "aiter_jit"),
        STUB_VLLM_RECORD=str(tmp_path / "stub.json"),
    )


@pytest.fixture
def launched() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """start_launcher, with a guarantee that nothing it started outlives a failing test."""
    started: list[tuple[subprocess.Popen[str], dict[str, str]]] = []

    def launch(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
        proc = start_launcher(env, *args)
        started.append((proc, env))
        return proc

    yield launch
    for proc, env in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        record = Path(env.get("STUB_VLLM_RECORD", "/nonexistent"))
        if record.exists():
            for pid in json.loads(record.read_text())["pids"]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def barrier_peer() -> Iterator[Callable[[dict[str, str], int], BarrierPeer]]:
    """The other node of a 2-node job at the container barrier, in a thread of the test: lets one
    launcher process get past the barrier through the real protocol."""
    peers: list[BarrierPeer] = []

    def start(env: dict[str, str], rank: int) -> BarrierPeer:
        peer = BarrierPeer(env, rank)
        peers.append(peer)
        return peer

    yield start
    for peer in peers:
        peer.thread.join(timeout=15)
