"""How a Charliecloud node's task ends when SLURM stops the step, played outside SLURM so that the
order in which its processes get the signal is the test's, not a race's.

SLURM's SIGTERM (scancel, the wall time, a peer's failure under --kill-on-bad-exit) reaches every
process of the step. ch-run 0.31's own process, the one serving the squashfs, answers it by
unmounting the image and exiting 0 at once, under a launcher still stopping vLLM: the head's status
was 0 or 143 by luck (a worker's crash once ended a job COMPLETED), and the teardown lost its image.
The rendered run_node starts ch-run with the signals blocked and its child unblocks them: whichever
process SLURM signals first, on the real ch-run and the sample image's squashfs, ch-run's own
process keeps the image until the launcher has ended, the launcher stops in order and says so, and
the head records 143, the launcher's own status.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sampleworld.cluster import Cluster
from tests.integration.cluster_support import JobDirs, render_job
from tests.launcher.launcher_support import alive
from tests.prerequisites import skip_or_fail

pytestmark = [pytest.mark.docker, pytest.mark.slow]

JOB_ID = "4242"
READY = "vLLM is ready on port"
STOPPING = "stopping the launcher"
STOP_GRACE_S = 3


def _children(pid: int, command: str = "") -> list[int]:
    """The processes whose parent is ``pid`` (and whose command line has ``command``)."""
    done = subprocess.run(["pgrep", "-P", str(pid), "-f", command or "."], capture_output=True, text=True, check=False)
    return [int(line) for line in done.stdout.split()]


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        children = _children(todo.pop())
        found += children
        todo += children
    return found


def _terminate(pid: int) -> None:
    """SIGTERM, as SLURM sends it: to a process that may have ended already."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)


def _wait_until(what: str, predicate: Callable[[], bool], output: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}:\n{output.read_text()}"
        time.sleep(0.1)


def _exported(definitions: Path) -> str:
    """main's `export -f ...` line: the functions the nodes' tasks get, as the job gives them."""
    (line,) = (line.strip() for line in definitions.read_text().splitlines() if line.strip().startswith("export -f "))
    return line


class Node:
    """One node's task, as `srun bash -euo pipefail -c run_node` starts it, on this host."""

    def __init__(self, definitions: Path, rank: int, dirs: JobDirs) -> None:
        self.output = dirs.root / f"node{rank}.out"
        self.seen: list[int] = []
        env = {
            **os.environ, "SLURM_JOB_ID": JOB_ID, "SLURM_NODEID": str(rank), "SLURM_NNODES": "2",
            "SLURM_JOB_NUM_NODES": "2", "MASTER_ADDR": "127.0.0.1", "IPADDRS": "127.0.0.1,127.0.0.1",
        }  # fmt: skip
        driver = f'source "$1"; {_exported(definitions)}; exec bash -euo pipefail -c run_node'
        with self.output.open("wb") as out:
            self.task = subprocess.Popen(
                ["bash", "-c", driver, "node", str(definitions)], env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def text(self) -> str:
        return self.output.read_text()

    def ch_run_and_launcher(self) -> tuple[int, int]:
        (ch_run,) = _children(self.task.pid)
        (launcher,) = _children(ch_run)
        self.seen += [ch_run, launcher]  # to stop them if they outlive the task
        return ch_run, launcher

    def stop(self) -> None:
        """SIGKILL the task and everything under it (vLLM runs in groups of its own)."""
        tops = {self.task.pid, *self.seen}
        for pid in tops | {child for top in tops for child in _descendants(top)}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.task.wait(timeout=30)


@pytest.fixture
def job(
    sample_cluster: Cluster, sample_export: Callable[[str], Path], tmp_path: Path
) -> tuple[JobDirs, Path]:
    """The sample job rendered for charliecloud; its functions without `main`, to source."""
    if subprocess.run(["sh", "-c", "command -v ch-run"], capture_output=True, check=False).returncode != 0:
        skip_or_fail("ch-run is not installed (scripts/ensure-docker.sh installs charliecloud)")
    dirs = JobDirs.create(tmp_path)
    script = render_job(
        sample_cluster, dirs, "--archive", str(sample_export("squashfs")), runtime="charliecloud",
        extra=("--benchmark-cmd", "sleep 300", "--env", f"STOP_GRACE_S={STOP_GRACE_S}"),
    )  # fmt: skip
    lines = script.read_text().splitlines(keepends=True)
    assert lines[-1] == 'main "$@"\n'
    definitions = dirs.root / "functions.sh"
    definitions.write_text("".join(lines[:-1]))
    (dirs.logs / JOB_ID).mkdir(parents=True)
    return dirs, definitions


@pytest.mark.parametrize("first", ["ch-run", "task"])
def test_the_head_stopped_by_a_signal_records_it_whoever_handles_it_first(
    job: tuple[JobDirs, Path], first: str
) -> None:
    dirs, definitions = job
    head, worker = Node(definitions, 0, dirs), Node(definitions, 1, dirs)
    try:
        _wait_until("the head to serve", lambda: READY in head.text(), head.output)
        ch_run, launcher = head.ch_run_and_launcher()
        # A vLLM slow to stop, as the real one is: the launcher's teardown lasts STOP_GRACE_S (then
        # SIGKILL), so every signal below lands while it runs.
        (vllm,) = _children(launcher, "vllm serve")
        os.kill(vllm, signal.SIGSTOP)
        if first == "ch-run":
            # ch-run's own process first: it must go on serving the image while the launcher runs.
            _terminate(ch_run)
            time.sleep(1)
            assert alive(ch_run), head.text()
            assert alive(launcher), head.text()
            _terminate(launcher)
            _terminate(head.task.pid)
        else:
            # The task first: its trap signals the launcher, then ch-run's own process gets SLURM's.
            _terminate(head.task.pid)
            _wait_until("the task's trap", lambda: STOPPING in head.text(), head.output)
            _terminate(ch_run)
            _terminate(launcher)
        head_status = head.task.wait(timeout=60)
        launcher_gone_first = not alive(launcher)
        worker_status = worker.task.wait(timeout=60)
    finally:
        head.stop()
        worker.stop()

    text = head.text()
    assert head_status == 143, text
    assert (dirs.logs / JOB_ID / "node0.exit").read_text() == "143\n"
    assert launcher_gone_first, "the task ended before the launcher's teardown"
    # The launcher's last words, written with its image still there (without it, it died unheard).
    assert f"ignored SIGTERM for {STOP_GRACE_S} s: SIGKILL" in text
    assert "serve: error: received SIGTERM: stopped" in text
    assert "ch-run exited with status 143" in text
    assert (dirs.logs / JOB_ID / ".shutdown").is_file()  # the head's teardown raised the sentinel
    # The worker saw the sentinel and stopped vLLM itself: its own status is 0.
    assert worker_status == 0, worker.text()
    assert "stopping vLLM" in worker.text()
