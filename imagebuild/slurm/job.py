"""What an sbatch job is made of, every value checked by its kind before anything is written.

A `JobRequest` holds the values as given (the CLI's strings); `make_job` checks each one and returns a
`Job`, or raises ConfigError naming the option and what to do. Everything in a Job can be written into
a shell script: control characters are refused everywhere, and values that end up in a `#SBATCH`
directive or a docker mount specification are held to the characters those formats allow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from imagebuild.errors import ConfigError
from imagebuild.secrets import secret_reason
from imagebuild.slurm.runtime_fit import check_runtime
from imagebuild.slurm.runtimes import DEFAULT_RUNTIME, DOCKER_ARCHIVE
from imagebuild.slurm.values import (
    bad_value,
    check_image,
    check_image_id,
    check_name,
    check_path,
    check_port,
    check_positive,
    check_text,
)

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# SLURM's --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
TIME_RE = re.compile(r"^(?:\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(?::\d{1,2}){0,2})$")
SHM_SIZE_RE = re.compile(r"^[1-9][0-9]*[bkmgBKMG]?$")
ULIMIT_RE = re.compile(r"^(?P<name>[a-z]+)=(?P<value>-?[0-9]+(?::-?[0-9]+)?)$")
ULIMIT_NAMES = (
    "core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc", "rss",
    "rtprio", "rttime", "sigpending", "stack",
)  # fmt: skip
# `#SBATCH` lines are not shell: sbatch splits them itself, so no quoting can protect them.
SBATCH_ARG_RE = re.compile(r"^--[a-z][a-z-]*(?:=[A-Za-z0-9._:,/%+@=-]+)?$")

DEFAULT_TIME = "04:00:00"
DEFAULT_SERVE_PORT = 8000
DEFAULT_MASTER_PORT = 29500
DEFAULT_BARRIER_PORT = 2223  # the launcher's CONTAINER_BARRIER_PORT default
DEFAULT_BARRIER_TIMEOUT_S = 1800
# Below SLURM's default KillWait (30 s): a node's `docker stop` must end before SLURM's SIGKILL.
DEFAULT_STOP_TIMEOUT_S = 20
DEFAULT_SHM_SIZE = "256g"
DEFAULT_ULIMITS = (("nofile", "524288:524288"), ("memlock", "-1:-1"))
# Each node's host directory for the JIT caches, keyed by the image (kernels built against one image's
# libraries are stale for another): mounted over the image's cache dirs so a job does not start cold.
# One per user ($UID is bash's, on the node): a directory another user made there is not writable, and
# kernels another user compiled are not to be run. The script makes it 0700 and refuses one not the user's.
DEFAULT_JIT_CACHE_ROOT = "/var/tmp/imagebuild-jit-cache-$UID"
# Host RDMA userspace libraries mounted over the image's copies so they match the host's driver
# (the reference's list): Debian/Ubuntu locations; each one is mounted only where it is a regular file.
DEFAULT_RDMA_LIBS = (
    "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
    "/usr/lib/x86_64-linux-gnu/librdmacm.so.1",
    "/usr/lib/x86_64-linux-gnu/libmlx5.so.1",
    "/usr/lib/x86_64-linux-gnu/libionic.so.1",
    "/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so",
    "/usr/lib/x86_64-linux-gnu/libibverbs/libbnxt_re-rdmav34.so",
    "/usr/lib/x86_64-linux-gnu/libibverbs/libionic-rdmav34.so",
)
# Environment the job script sets in the container itself, and the option that sets each.
RESERVED_ENV = {
    "NODE_RANK": "SLURM_NODEID", "NNODES": "SLURM_NNODES", "MASTER_ADDR": "the first node's address",
    "IPADDRS": "every node's address", "SLURM_JOB_ID": "SLURM", "LOG_ROOT": "--log-dir",
    "MODEL_PATH": "--model-path", "RECIPE": "--recipe", "VARIANT": "--variant",
    "BENCHMARK_CMD": "--benchmark-cmd", "SERVE_PORT": "--serve-port", "MASTER_PORT": "--master-port",
    "CONTAINER_BARRIER_PORT": "--barrier-port", "BARRIER_TIMEOUT_S": "--barrier-timeout",
}  # fmt: skip
# `docker run` options the script sets for a reason (see script.py); overriding them breaks the job.
MANAGED_DOCKER_OPTIONS = {
    "--name": "containers are named per job and node so every node can remove its own",
    "--rm": "the script removes the container itself, also after a failure",
    "-d": "the task must wait for its container", "--detach": "the task must wait for its container",
    "--network": "the launcher and vLLM need host networking", "--net": "the launcher and vLLM need host networking",
    "-i": "a batch task has no input", "--interactive": "a batch task has no input",
    "-t": "a batch task has no terminal", "--tty": "a batch task has no terminal",
}  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class PulledImage:
    """Every node pulls this reference; the digest makes them all run the same bits."""

    reference: str  # repository@sha256:...


@dataclass(frozen=True, kw_only=True)
class ArchivedImage:
    """Every node imports the archive from shared storage with the importer shipped beside it."""

    manifest: str  # absolute path, as the nodes see it
    importer: str  # absolute path of the importer next to the manifest
    image_id: str  # sha256:..., the identity: what graph-driver nodes run once imported
    manifest_digest: str = ""  # what nodes on the containerd image store run ("" from a version-1 manifest)
    kind: str = DOCKER_ARCHIVE  # the manifest's "kind": which runtimes can run it
    archive: str = ""  # absolute path of the archive file (a squashfs is run in place from it)


@dataclass(frozen=True, kw_only=True)
class JobRequest:
    """The values as given on the command line (strings, not yet checked)."""

    nodes: int
    recipe: str
    variant: str
    model_path: str
    image: PulledImage | ArchivedImage
    job_name: str | None = None
    partition: str | None = None
    time: str = DEFAULT_TIME
    log_dir: str | None = None
    benchmark_cmd: str = ""
    gpu_devices: bool = True
    serve_port: int = DEFAULT_SERVE_PORT
    master_port: int = DEFAULT_MASTER_PORT
    barrier_port: int = DEFAULT_BARRIER_PORT
    barrier_timeout_s: int = DEFAULT_BARRIER_TIMEOUT_S
    stop_timeout_s: int = DEFAULT_STOP_TIMEOUT_S
    shm_size: str = DEFAULT_SHM_SIZE
    ulimits: tuple[str, ...] = ()  # NAME=SOFT[:HARD], replacing the default of that name
    env: tuple[str, ...] = ()  # NAME=VALUE
    pass_env: tuple[str, ...] = ()  # NAME
    docker_args: tuple[str, ...] = ()
    rdma_libs: tuple[str, ...] = ()  # added to the defaults
    default_rdma_libs: bool = True
    sbatch_args: tuple[str, ...] = ()
    init: bool = True  # docker run --init: an init as PID 1 forwards signals and reaps
    jit_cache: str | None = None  # None: DEFAULT_JIT_CACHE_ROOT/<image>; "" : no host JIT cache
    exclusive: bool = True  # #SBATCH --exclusive: the nodes are the job's alone
    gpu_request: bool = True  # #SBATCH --gpus-per-node from the recipe, when the devices are given
    runtime: str = DEFAULT_RUNTIME  # what runs the container on the nodes (RUNTIME_NAMES)


@dataclass(frozen=True, kw_only=True)
class Job:
    """A checked job: every field is safe to write into the script (quoted where the shell reads it)."""

    nodes: int
    recipe: str
    variant: str
    model_path: str
    image: PulledImage | ArchivedImage
    job_name: str
    partition: str | None
    time: str
    log_dir: str | None  # None: $SLURM_SUBMIT_DIR/imagebuild-logs, decided when the job runs
    benchmark_cmd: str
    gpu_devices: bool
    serve_port: int
    master_port: int
    barrier_port: int
    barrier_timeout_s: int
    stop_timeout_s: int
    shm_size: str
    ulimits: tuple[tuple[str, str], ...]
    env: tuple[tuple[str, str], ...]
    pass_env: tuple[str, ...]
    docker_args: tuple[str, ...]
    rdma_libs: tuple[str, ...]
    sbatch_args: tuple[str, ...]
    init: bool
    jit_cache: str  # the host directory on every node; "" for none
    exclusive: bool
    gpu_request: bool  # request GPUs per node from SLURM (only with gpu_devices)
    runtime: str = DEFAULT_RUNTIME

    @property
    def image_key(self) -> str:
        """The image's identity in 12 hex digits: what keys its JIT cache on the nodes."""
        digest = self.image.reference if isinstance(self.image, PulledImage) else self.image.image_id
        return digest.rsplit("sha256:", 1)[-1][:12]


def _env_pair(text: str) -> tuple[str, str]:
    check_text("--env", text)
    name, sep, value = text.partition("=")
    if not sep or not ENV_NAME_RE.match(name):
        raise ConfigError(bad_value("--env", text, "expected NAME=VALUE with NAME of letters, digits and '_'"))
    if name in RESERVED_ENV:
        raise ConfigError(bad_value("--env", text, f"the job sets {name} itself (from {RESERVED_ENV[name]})"))
    reason = secret_reason(name, value)
    if reason is not None:
        why = f"{reason}; use --pass-env {name} so its value comes from the job's environment, not this file"
        raise ConfigError(bad_value("--env", f"{name}=...", why))
    return name, value


def _pass_env_name(name: str) -> str:
    check_text("--pass-env", name)
    if not ENV_NAME_RE.match(name):
        raise ConfigError(bad_value("--pass-env", name, "expected a variable name of letters, digits and '_'"))
    if name in RESERVED_ENV:
        raise ConfigError(bad_value("--pass-env", name, f"the job sets {name} itself (from {RESERVED_ENV[name]})"))
    return name


def _ulimits(given: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    limits = dict(DEFAULT_ULIMITS)
    for text in given:
        match = ULIMIT_RE.match(check_text("--ulimit", text))
        if not match or match["name"] not in ULIMIT_NAMES:
            raise ConfigError(
                bad_value(
                    "--ulimit", text, f"expected NAME=SOFT[:HARD] with NAME one of {', '.join(ULIMIT_NAMES)}"
                )
            )
        limits[match["name"]] = match["value"]
    return tuple(limits.items())


def _no_secret(option: str, value: str, name: str = "") -> None:
    reason = secret_reason(name or option, value)
    if reason is not None:
        hidden = f"{name}=..." if name else "(not shown)"
        why = f"{reason}; use --pass-env NAME so it comes from the job's environment, not this file"
        raise ConfigError(bad_value(option, hidden, why))


def _docker_args(given: tuple[str, ...]) -> tuple[str, ...]:
    for arg in given:
        check_text("--docker-arg", arg)
        option, _, value = arg.partition("=")
        # --env=NAME=VALUE here would write the value into the script like --env does: same rules.
        name = value.partition("=")[0] if option in ("-e", "--env") else ""
        _no_secret("--docker-arg", value, name)
        if option in MANAGED_DOCKER_OPTIONS:
            raise ConfigError(
                bad_value("--docker-arg", arg, f"the script decides {option}: {MANAGED_DOCKER_OPTIONS[option]}")
            )
    return given


def _sbatch_args(given: tuple[str, ...]) -> tuple[str, ...]:
    for arg in given:
        check_text("--sbatch-arg", arg)
        if not SBATCH_ARG_RE.match(arg):
            why = "expected one long option like --account=NAME or --exclusive (no spaces or quotes: #SBATCH lines are not shell)"
            raise ConfigError(bad_value("--sbatch-arg", arg, why))
        if arg.split("=", 1)[0] in ("--nodes", "--ntasks-per-node", "--time", "--job-name", "--partition"):
            raise ConfigError(
                bad_value("--sbatch-arg", arg, "has an option of its own in `imagebuild slurm`; use that")
            )
    return given


def make_job(request: JobRequest) -> Job:
    """Check every value of the request; raises ConfigError naming the first bad one."""
    rdma = (*DEFAULT_RDMA_LIBS, *request.rdma_libs) if request.default_rdma_libs else request.rdma_libs
    recipe = check_name("--recipe", request.recipe)
    variant = check_name("--variant", request.variant)
    image = _check_source(request.image)
    check_runtime(request)
    _distinct_ports(request)
    job = Job(
        nodes=check_positive("--nodes", request.nodes),
        recipe=recipe,
        variant=variant,
        model_path=check_path("--model-path", request.model_path, mounted=True),
        image=image,
        job_name=check_name("--job-name", request.job_name or f"{recipe}-{variant}"),
        partition=None if request.partition is None else check_name("--partition", request.partition),
        time=_check_time(request.time),
        log_dir=None if request.log_dir is None else check_path("--log-dir", request.log_dir, mounted=True),
        benchmark_cmd=_benchmark(request.benchmark_cmd),
        gpu_devices=request.gpu_devices,
        serve_port=check_port("--serve-port", request.serve_port),
        master_port=check_port("--master-port", request.master_port),
        barrier_port=check_port("--barrier-port", request.barrier_port),
        barrier_timeout_s=check_positive("--barrier-timeout", request.barrier_timeout_s),
        stop_timeout_s=check_positive("--stop-timeout", request.stop_timeout_s),
        shm_size=_check_shm(request.shm_size),
        ulimits=_ulimits(request.ulimits),
        env=tuple(_env_pair(text) for text in request.env),
        pass_env=tuple(_pass_env_name(name) for name in request.pass_env),
        docker_args=_docker_args(request.docker_args),
        rdma_libs=tuple(check_path("--rdma-lib", path, mounted=True) for path in rdma),
        sbatch_args=_sbatch_args(request.sbatch_args),
        init=request.init,
        jit_cache="",
        exclusive=request.exclusive,
        gpu_request=request.gpu_request and request.gpu_devices,
        runtime=request.runtime,
    )
    if request.jit_cache is None:
        return replace(job, jit_cache=f"{DEFAULT_JIT_CACHE_ROOT}/{job.image_key}")
    if request.jit_cache:
        return replace(job, jit_cache=check_path("--jit-cache", request.jit_cache, mounted=True))
    return job


def _distinct_ports(request: JobRequest) -> None:
    """The head binds all three on one host: two equal ports would fail there, after the nodes loaded."""
    ports = {
        "--serve-port": request.serve_port,
        "--master-port": request.master_port,
        "--barrier-port": request.barrier_port,
    }
    seen: dict[int, str] = {}
    for option, port in ports.items():
        if port in seen:
            raise ConfigError(
                bad_value(
                    option, port, f"is also {seen[port]}'s: the head binds every port, so each needs its own"
                )
            )
        seen[port] = option


def _check_source(image: PulledImage | ArchivedImage) -> PulledImage | ArchivedImage:
    if isinstance(image, PulledImage):
        check_image(image.reference)
    else:
        check_path("--archive", image.manifest)
        check_path("--archive", image.importer)
        check_image_id(f"--archive {image.manifest}: image_id", image.image_id)
        if image.manifest_digest:
            check_image_id(f"--archive {image.manifest}: manifest_digest", image.manifest_digest)
    return image


def _benchmark(value: str) -> str:
    check_text("--benchmark-cmd", value)
    _no_secret("--benchmark-cmd", value)
    return value


def _check_time(value: str) -> str:
    if not TIME_RE.match(check_text("--time", value)):
        raise ConfigError(
            bad_value("--time", value, "expected a SLURM time: MINUTES, HH:MM:SS, D-HH or D-HH:MM:SS")
        )
    return value


def _check_shm(value: str) -> str:
    if not SHM_SIZE_RE.match(check_text("--shm-size", value)):
        raise ConfigError(bad_value("--shm-size", value, "expected a size like 256g, 64g or 512m"))
    return value
