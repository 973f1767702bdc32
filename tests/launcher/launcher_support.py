"""Helpers for the serve launcher's tests (plain functions; fixtures live in conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from imagebuild.launcher import serve
from imagebuild.launcher.barrier import BarrierSpec, wait_at_barrier

LAUNCHER = Path(serve.__file__)
STUB_DIR = Path(__file__).parent / "stub_vllm"
GOLDEN_DIR = Path(__file__).parent / "golden"
# The interpreter that runs the launcher in subprocess tests; point it at the image's python3
# (3.11 or 3.12) to test the launcher there: LAUNCHER_TEST_PYTHON=/path/to/python3.12
LAUNCHER_PYTHON = os.environ.get("LAUNCHER_TEST_PYTHON", sys.executable)


def k3_env(**overrides: str) -> dict[str, str]:
    """A two-node K3 job as the cluster scripts describe it; nothing from the test's own environment."""
    env = {
        "MODEL_PATH": "/models/moonshotai/Kimi-K3",
        "MODEL_NAME": "kimi-k3",
        "NNODES": "2",
        "MASTER_ADDR": "10.0.0.1",
        "NODE_RANK": "0",
        "SLURM_JOB_ID": "12345",
    }
    env.update(overrides)
    return env


def argv_section(text: str) -> list[str]:
    """The argv of a dry run, as the reference's tooling reads it: the lines between the markers."""
    lines = text.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("===DRYRUN "))
    return lines[start + 1 : lines.index("===END===")]


def log_dir(env: dict[str, str]) -> Path:
    return Path(env["LOG_ROOT"]) / env["SLURM_JOB_ID"]


def start_launcher(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [LAUNCHER_PYTHON, str(LAUNCHER), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            msg = f"timed out after {timeout} s waiting for {what}"
            raise AssertionError(msg)
        time.sleep(0.05)


def stub_record(env: dict[str, str]) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(Path(env["STUB_VLLM_RECORD"]).read_text())
    return record


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper that is not the launcher's business."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class BarrierPeer:
    """Runs one side of the container barrier in a thread; `outcome` is True, False or the error."""

    def __init__(self, env: dict[str, str], rank: int, *, nnodes: int = 2, timeout_s: float = 10) -> None:
        self.spec = BarrierSpec(
            port=int(env["CONTAINER_BARRIER_PORT"]),
            timeout_s=timeout_s,
            nnodes=nnodes,
            rank=rank,
            head_addr="127.0.0.1",
            addresses=tuple(f"127.0.0.{rank + 1}" for rank in range(nnodes)),
            job=env["SLURM_JOB_ID"],
        )
        self.outcome: object = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.outcome = wait_at_barrier(self.spec)
        except Exception as error:  # handed to the test, which asserts on it
            self.outcome = error
