"""The container runtimes a job can start the launcher with, each in its own spelling.

A `Runtime` is the runtime's part of the script: how a node gets (or checks) the image, how it runs
one container with the devices, groups, IPC, network, ulimits, RDMA libraries, log dir, model and JIT
cache mounts, environment and init, and how it tears the container down. script.py puts the parts
into the job shape every runtime shares (three srun steps; the head's status is the job's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from imagebuild.slurm.job import Job

# The archive kinds of the manifest's "kind" key (absent in older manifests: docker-archive), defined
# once, by the importer's manifest.
from imagebuild.importer.manifest import DOCKER_ARCHIVE as DOCKER_ARCHIVE
from imagebuild.importer.manifest import OCI_ARCHIVE as OCI_ARCHIVE
from imagebuild.importer.manifest import SQUASHFS as SQUASHFS

RUNTIME_NAMES = ("docker", "podman", "pyxis", "charliecloud")
DEFAULT_RUNTIME = "docker"


@dataclass(frozen=True, kw_only=True)
class Runtime:
    name: str
    kinds: tuple[str, ...]  # the archive kinds it runs
    pulls: bool  # --image (a registry reference) works with it
    tools: Callable[[Job], str]  # what the nodes need, for the header
    source: Callable[[Job], str]  # how each node gets the image, for the header
    image_settings: Callable[[Job], str]  # the image's lines of settings()
    # settings() comments this runtime words its own way: key -> the comment lines (None: the setting
    # means nothing to this runtime and is left out).
    settings_notes: Mapping[str, str | None] = field(default_factory=dict)
    fetch: Callable[[Job], str]  # fetch_image() and node_image() (step 1)
    helpers: str  # functions the steps share (e.g. remove_container), "" for none
    run_node: str  # step 2 on every node
    cleanup: str  # step 3 on every node, "" for none
    functions: tuple[str, ...]  # the runtime's functions the node tasks need (export -f)
    run_step: str  # main()'s line that runs step 2
    cleanup_step: str  # main()'s line that runs step 3, "" for none


def runtime(name: str) -> Runtime:
    """The runtime called ``name`` (one of RUNTIME_NAMES; the job has checked it)."""
    from imagebuild.slurm.runtimes import charliecloud, engines, pyxis

    table = {
        "docker": engines.DOCKER, "podman": engines.PODMAN, "pyxis": pyxis.PYXIS,
        "charliecloud": charliecloud.CHARLIECLOUD,
    }  # fmt: skip
    return table[name]


def wait_and_record(what: str, after_signal: str, start: str = '"${run[@]}" &') -> str:
    """run_node's end: ``start`` "${run[@]}" in the background (so a trapped SIGTERM runs at once), wait
    for it, and leave its status where the batch script reads the head's."""
    return f"""\
    {start}
    client=$!
    wait "$client" || status=$?
    # A trapped signal ends `wait` early; {after_signal}
    if kill -0 "$client" 2>/dev/null; then
        status=0
        wait "$client" || status=$?
    fi
    echo "$status" >"$LOG_DIR/$SLURM_JOB_ID/node$SLURM_NODEID.exit"
    say "{what} exited with status $status"
    return "$status"
}}"""
