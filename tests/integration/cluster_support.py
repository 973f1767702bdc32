"""Driving the sample cluster from tests: render a job with `imagebuild slurm`, sbatch it, wait, inspect."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import resource
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from imagebuild.cli import main
from sampleworld.cluster import Cluster
from sampleworld.world import World

READY = "INFO:     Application startup complete."  # the head's vLLM serves
FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")
JOB_TIMEOUT_S = 600
CONTAINER_PREFIX = "colocated_"
# Run by the launcher on the head once vLLM is ready: asks the API for its models and writes the
# results file the launcher expects (perf.csv in the job's log dir), so a test can see the benchmark
# ran against the served model; it also notes which paths of EXPECT_FILES (':'-separated) are regular
# files inside the container.
BENCHMARK = json.dumps(
    [
        "python3",
        "-c",
        # One line: the launcher refuses control characters, newlines included, in BENCHMARK_CMD.
        "import csv, json, os, urllib.request; "
        "port, job = os.environ['SERVE_PORT'], os.environ['SLURM_JOB_ID']; "
        "models = json.load(urllib.request.urlopen(f'http://127.0.0.1:{port}/v1/models')); "
        "rows = [('served_model', m['id']) for m in models['data']]; "
        "rows += [('is_file', p, int(os.path.isfile(p))) for p in os.environ.get('EXPECT_FILES', '').split(':') if p]; "
        "out = open(f'/run_logs/{job}/perf.csv', 'w', newline=''); csv.writer(out).writerows(rows); out.close(); "
        "print('benchmark: served', [m['id'] for m in models['data']])",
    ]
)


def benchmark_results(result: JobResult) -> tuple[list[str], dict[str, bool]]:
    """What the benchmark wrote: the served model names, and path -> regular file in the container."""
    with (result.log_dir / "perf.csv").open(newline="") as results:
        rows = list(csv.reader(results))
    models = [row[1] for row in rows if row[0] == "served_model"]
    return models, {row[1]: row[2] == "1" for row in rows if row[0] == "is_file"}


@dataclass(frozen=True, kw_only=True)
class JobResult:
    job_id: str
    state: str
    exit_code: str  # SLURM's "status:signal"
    output: str  # the job's stdout and stderr (sbatch --output)
    log_dir: Path  # LOG_DIR/<job id>
    seconds: float


@dataclass(frozen=True, kw_only=True)
class JobDirs:
    root: Path

    @property
    def model(self) -> Path:
        return self.root / "models" / "kimi-k3"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def script(self) -> Path:
        return self.root / "job.sbatch"

    @classmethod
    def create(cls, root: Path) -> JobDirs:
        dirs = cls(root=root)
        dirs.model.mkdir(parents=True)
        (dirs.model / "config.json").write_text('{"model_type": "kimi_k3"}\n')
        dirs.logs.mkdir()
        return dirs


def host_ulimits() -> list[str]:
    """The reference's ulimits exceed what this (containerised) host lets runc set: ask for the hard limits."""
    args = []
    for name, limit in (("nofile", resource.RLIMIT_NOFILE), ("memlock", resource.RLIMIT_MEMLOCK)):
        hard = resource.getrlimit(limit)[1]
        value = "-1" if hard == resource.RLIM_INFINITY else str(hard)
        args += ["--ulimit", f"{name}={value}:{value}"]
    return args


def publish_sample(world: World, image_id: str, *extra: str) -> str:
    """`imagebuild publish` of an image to the sample registry (imagebuild-test/kimi-k3): the reference it prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["publish", image_id, "-t", f"{world.registry}/imagebuild-test/kimi-k3", *extra])
    assert code == 0
    return out.getvalue().strip()


def podman_ulimits() -> list[str]:
    """host_ulimits, and processes: rootful podman gives a container 1048576 unless told (a --ulimit
    replaces containers.conf's default_ulimits), which this host refuses ("error setting rlimit type 6").
    Measured here: conmon, which starts the container, runs with a hard limit of kernel.pid_max."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    value = pid_max if hard == resource.RLIM_INFINITY else min(hard, pid_max)
    return [*host_ulimits(), "--ulimit", f"nproc={value}:{value}"]


def render_job(
    cluster: Cluster,
    dirs: JobDirs,
    *source: str,
    extra: tuple[str, ...] = (),
    nodes: int = 2,
    variant: str = "pp2xtp8",
    runtime: str = "docker",
) -> Path:
    """`imagebuild slurm` for the sample cluster: no GPUs, its partition, its ports."""
    ulimits = podman_ulimits() if runtime == "podman" else host_ulimits()
    argv = [
        "slurm", "--nodes", str(nodes), "--variant", variant, "--model-path", str(dirs.model), *source,
        "--partition", cluster.partition, "--time", "10", "--log-dir", str(dirs.logs), "--runtime", runtime,
        "--no-devices", *ulimits, "--serve-port", str(cluster.serve_port),
        "--master-port", str(cluster.master_port), "--barrier-port", str(cluster.barrier_port),
        "--barrier-timeout", "120", "--benchmark-cmd", BENCHMARK, "-o", str(dirs.script), *extra,
    ]  # fmt: skip
    assert main(argv) == 0
    return dirs.script


def submit(cluster: Cluster, dirs: JobDirs) -> str:
    """sbatch the rendered script; its output goes to dirs.root/job-<id>.out. Returns the job id."""
    done = subprocess.run(
        ["sbatch", "--parsable", f"--output={dirs.root}/job-%j.out", str(dirs.script)],
        env={**os.environ, **cluster.env}, cwd=dirs.root, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.strip().split(";")[0]


def job_output(dirs: JobDirs, job_id: str) -> str:
    path = dirs.root / f"job-{job_id}.out"
    return path.read_text() if path.is_file() else ""


def wait_for_output(cluster: Cluster, dirs: JobDirs, job_id: str, text: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while text not in job_output(dirs, job_id):
        state = job_fields(cluster, job_id)["JobState"]
        assert state not in FINAL_STATES, (
            f"job {job_id} ended {state} before {text!r}:\n{job_output(dirs, job_id)}"
        )
        assert time.monotonic() < deadline, f"no {text!r} in job {job_id}'s output after {timeout}s"
        time.sleep(0.5)


def wait(cluster: Cluster, dirs: JobDirs, job_id: str, *, began: float) -> JobResult:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while True:
        fields = job_fields(cluster, job_id)
        if fields["JobState"] in FINAL_STATES:
            break
        assert time.monotonic() < deadline, f"job {job_id} still {fields['JobState']} after {JOB_TIMEOUT_S}s"
        time.sleep(0.5)
    return JobResult(
        job_id=job_id,
        state=fields["JobState"],
        exit_code=fields["ExitCode"],
        output=job_output(dirs, job_id),
        log_dir=dirs.logs / job_id,
        seconds=time.monotonic() - began,
    )


def submit_until_ready(cluster: Cluster, dirs: JobDirs) -> tuple[JobResult, float]:
    """sbatch, wait until the head serves, then until the job ends: (its result, seconds from sbatch
    to the head's readiness line in the output, polled every 0.5 s)."""
    began = time.monotonic()
    job_id = submit(cluster, dirs)
    wait_for_output(cluster, dirs, job_id, READY)
    ready = time.monotonic() - began
    return wait(cluster, dirs, job_id, began=began), ready


def crash_seconds(result: JobResult, ready: float) -> float:
    """For a job whose worker crashes 3 s after joining (SAMPLE_VLLM_CRASH_AFTER_S=3), which is when
    the head becomes ready: the seconds from the crash to the job's end. (The crash line itself shows
    in the output only once the step's output is flushed, often when the job has already ended.)"""
    return result.seconds - ready - 3


# The stand-in vLLM's fault knob: the worker dies 3 s after joining, while the benchmark runs.
CRASHING_WORKER = ("--env", "SAMPLE_VLLM_CRASH_AFTER_S=3", "--benchmark-cmd", "sleep 300")


def crashed_worker_ended_the_job(label: str, result: JobResult, ready: float) -> None:
    """A job rendered with CRASHING_WORKER: the worker's task failed the step at once (not after the
    wall time), saying why, and the job's status is the head's, non-zero. Prints how long it took."""
    print(
        f"{label} worker-crash job {result.job_id}: {result.state} {result.exit_code} in {result.seconds:.1f}s, "
        f"{crash_seconds(result, ready):.1f}s after the worker's crash"
    )
    assert result.state == "FAILED", result.output
    assert result.exit_code != "0:0"
    worker = lines_of(result, 1)
    assert any("RuntimeError: sample vLLM worker rank 1 crashed" in line for line in worker), result.output
    assert any(line.startswith("serve: error: vLLM exited with code 1") for line in worker), result.output
    assert result.seconds < 120, result.output
    assert (result.log_dir / "node0.exit").read_text().strip() != "0"


def cancel_once_serving(
    label: str, cluster: Cluster, dirs: JobDirs, running: Callable[[], None] = lambda: None
) -> JobResult:
    """sbatch, wait until the head serves, call ``running`` (checks on the running job), scancel and
    wait: the job ended CANCELLED. Prints how long it took to end after scancel."""
    began = time.monotonic()
    job_id = submit(cluster, dirs)
    wait_for_output(cluster, dirs, job_id, READY)
    running()
    cancelled = time.monotonic()
    subprocess.run(["scancel", job_id], env={**os.environ, **cluster.env}, check=True, timeout=60)
    result = wait(cluster, dirs, job_id, began=began)
    print(f"{label} cancelled job {job_id}: {result.state} {began + result.seconds - cancelled:.1f}s after scancel")
    assert result.state == "CANCELLED", result.output
    return result


def removed_every_container(result: JobResult) -> None:
    """Each node's task said it removed its container."""
    for task in (0, 1):
        name = f"colocated_kimi-k3_{result.job_id}_node{task}"
        assert any(line.endswith(f"removed container {name}") for line in lines_of(result, task)), result.output


def corrupt_one_byte(path: Path) -> None:
    """Flip one bit of the byte in the middle of the file."""
    with path.open("r+b") as f:
        f.seek(path.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x01]))


def fails_before_any_container(result: JobResult, exit_code: str) -> None:
    """Step 1 failed on some node: the job's status is that node's, and step 2 started nowhere."""
    assert (result.state, result.exit_code) == ("FAILED", exit_code), result.output
    assert "no container was started" in result.output
    assert "starting colocated_" not in result.output
    assert "starting ch-run" not in result.output


def submit_and_wait(cluster: Cluster, dirs: JobDirs) -> JobResult:
    began = time.monotonic()
    return wait(cluster, dirs, submit(cluster, dirs), began=began)


def job_fields(cluster: Cluster, job_id: str) -> dict[str, str]:
    """`scontrol show job` as a dict (the cluster keeps finished jobs for an hour; there is no sacct)."""
    done = subprocess.run(
        ["scontrol", "--oneliner", "show", "job", job_id],
        env={**os.environ, **cluster.env}, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return dict(re.findall(r"(\w+)=(\S*)", done.stdout))


def docker_on(
    cluster: Cluster, node: str, *args: str, check: bool = False, engine: str = "docker"
) -> subprocess.CompletedProcess[str]:
    """The docker (or podman) CLI against one node's engine (or podman storage), as its tasks see it."""
    node_env = {"DOCKER_HOST": cluster.engines[node]} if engine == "docker" else cluster.podman[node]
    return subprocess.run(
        [engine, *args], env={**os.environ, **node_env}, capture_output=True, text=True, timeout=300, check=check
    )


def node_has_image(cluster: Cluster, node: str, image_id: str, engine: str = "docker") -> bool:
    return docker_on(cluster, node, "image", "inspect", image_id, engine=engine).returncode == 0


def remove_image(cluster: Cluster, node: str, image_id: str, engine: str = "docker") -> None:
    if node_has_image(cluster, node, image_id, engine):
        docker_on(cluster, node, "image", "rm", "--force", image_id, check=True, engine=engine)
    assert not node_has_image(cluster, node, image_id, engine)


def job_containers(cluster: Cluster, node: str, engine: str = "docker") -> list[str]:
    """Every container of a job on the node's engine (or podman storage), running or not."""
    done = docker_on(cluster, node, "ps", "--all", "--format", "{{.Names}}", check=True, engine=engine)
    return [name for name in done.stdout.split() if name.startswith(CONTAINER_PREFIX)]


def lines_of(result: JobResult, task: int) -> list[str]:
    """The job output lines of one node's task (srun --label prefixes them with its number)."""
    prefix = f"{task}: "
    return [line[len(prefix) :] for line in result.output.splitlines() if line.startswith(prefix)]


def job_processes(cluster: Cluster, job_id: str) -> list[int]:
    """Processes of one job of this cluster still running on the host (a runtime without a daemon,
    ch-run, leaves its processes in the job's tree): those whose environment names the job and the
    cluster's SLURM_CONF (other clusters' jobs on this host have the same job ids)."""
    marks = (f"SLURM_JOB_ID={job_id}".encode(), f"SLURM_CONF={cluster.conf}".encode())
    found = []
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if all(mark in environ for mark in marks) and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def wait_until_gone(cluster: Cluster, job_id: str, timeout: float = 35) -> list[int]:
    """The job's processes left after ``timeout`` (SLURM's KillWait, 30 s, at most): [] when none."""
    deadline = time.monotonic() + timeout
    while (left := job_processes(cluster, job_id)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left
