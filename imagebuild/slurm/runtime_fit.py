"""Whether a job's request fits its runtime: the runtime is known, the image is of a kind it runs, and
no option is given that means nothing to it. Checked before anything is written (ConfigError, exit 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from imagebuild.errors import ConfigError
from imagebuild.inputs.values import shown
from imagebuild.slurm.runtimes import RUNTIME_NAMES, SQUASHFS, runtime

if TYPE_CHECKING:
    from imagebuild.slurm.job import JobRequest

# Where the container is the runtime's own process tree: no daemon to stop it, no PID namespace.
_NO_ENGINE = ("pyxis", "charliecloud")
_NAMED = {"docker-archive": "a docker archive", "oci-archive": "an OCI archive", SQUASHFS: "a squashfs"}
_MAKE = {
    "engine": "`imagebuild export` writes a docker archive, `--format oci` an OCI one",
    SQUASHFS: "`imagebuild export --format squashfs` writes one",
}


def check_runtime(request: JobRequest) -> None:
    """Raises ConfigError naming the first option that does not fit ``request.runtime``."""
    problem = _problem(request)
    if problem is not None:
        raise ConfigError(problem)


def _problem(request: JobRequest) -> str | None:
    from imagebuild.slurm.job import (
        DEFAULT_SHM_SIZE,
        DEFAULT_STOP_TIMEOUT_S,
        ArchivedImage,
        PulledImage,
    )

    name = request.runtime
    if name not in RUNTIME_NAMES:
        return f"--runtime {shown(name)}: expected one of {', '.join(RUNTIME_NAMES)}"
    rt = runtime(name)
    if isinstance(request.image, PulledImage) and not rt.pulls:
        return (
            f"--image: --runtime {name} runs a squashfs from shared storage, not a registry reference; "
            f"give --archive MANIFEST of one ({_MAKE[SQUASHFS]})"
        )
    if isinstance(request.image, ArchivedImage) and request.image.kind not in rt.kinds:
        wanted = " or ".join(_NAMED[kind] for kind in rt.kinds)
        how = _MAKE[SQUASHFS if SQUASHFS in rt.kinds else "engine"]
        return (
            f"--archive {request.image.manifest}: {_NAMED[request.image.kind]}, which --runtime {name} "
            f"does not run (it runs {wanted}; {how})"
        )
    if request.docker_args and name != "docker":
        return (
            f"--docker-arg {shown(request.docker_args[0])}: only --runtime docker takes `docker run` "
            f"arguments; edit the {name} command in the script's run_node instead"
        )
    if name != "docker" and request.shm_size != DEFAULT_SHM_SIZE:
        return (
            f"--shm-size {shown(request.shm_size)}: means nothing to --runtime {name} (its container uses "
            "the host's /dev/shm, and podman refuses a size beside --ipc host); leave it out"
        )
    if name not in _NO_ENGINE:
        return None
    why = f"{'enroot' if name == 'pyxis' else 'ch-run'} starts no PID namespace and no daemon"
    if not request.init:
        return f"--no-init: --runtime {name} has no init to leave out ({why}: the launcher is not PID 1)"
    if request.stop_timeout_s != DEFAULT_STOP_TIMEOUT_S:
        return (
            f"--stop-timeout {request.stop_timeout_s}: means nothing to --runtime {name} ({why}: the "
            "launcher gets SLURM's SIGTERM itself, and SLURM's KillWait is its time); leave it out"
        )
    return None
