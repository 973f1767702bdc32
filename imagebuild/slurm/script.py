"""Render the sbatch script of a checked Job. Pure: the same Job gives the same text.

The script is meant to be read and edited by the people who submit it: the settings sit in one
function at the top, each line of the job says why it is there, and it passes `bash -n` and shellcheck.
Its shape, and what each part guards against (see /work/shared/domain.md, "The reference's multi-node
job"):

- three `srun` steps, one task per node: get the image on every node; run one container per node;
  remove the containers on every node. A node that cannot get the image fails the job before any
  container starts anywhere.
- the node tasks are exported shell functions (`export -f`), so one file is the whole job and
  shellcheck sees all of it; `settings` is a function too, because arrays do not cross `srun`.
- a node whose container fails ends the job (`--kill-on-bad-exit`) rather than leaving its peers at
  the barrier; the job's exit status is the head's.
- killing a `docker run` client does not stop its container: each task stops and removes its
  container on SIGTERM and on exit, and the last step removes whatever is left.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from imagebuild.inputs.layout import LAUNCHER
from imagebuild.launcher.sentinel import SENTINEL_NAME
from imagebuild.slurm.job import ArchivedImage, Job, PulledImage
from imagebuild.slurm.recipe import Topology

# Where the job mounts its log dir in the container: the launcher's LOG_ROOT default.
LOG_MOUNT = "/run_logs"
DEFAULT_LOG_DIR = '"${SLURM_SUBMIT_DIR}/imagebuild-logs"'
MIN_BASH = (4, 4)  # "${array[@]}" of an empty array under `set -u`


_EXPANDING = re.compile(r"[$`]")
_DOUBLE_QUOTED_SPECIAL = re.compile(r'([\\$`"])')


def _q(value: str | int) -> str:
    """``value`` as one literal shell word. shlex.quote's single quotes are literal too, but around a
    `$(` or a backtick shellcheck reads them as a mistake (SC2016, "expressions don't expand in
    single quotes"), and the script must pass it: such a value goes in double quotes, each of
    backslash, dollar, backtick and double quote escaped, which is the same literal."""
    text = str(value)
    if _EXPANDING.search(text):
        return '"' + _DOUBLE_QUOTED_SPECIAL.sub(r"\\\1", text) + '"'
    return shlex.quote(text)


def _array(name: str, values: Iterable[str], indent: str = "    ") -> str:
    items = [_q(value) for value in values]
    if not items:
        return f"{indent}{name}=()"
    if sum(len(item) + 1 for item in items) + len(indent) + len(name) < 100:
        return f"{indent}{name}=({' '.join(items)})"
    body = "\n".join(f"{indent}    {item}" for item in items)
    return f"{indent}{name}=(\n{body}\n{indent})"


def _sbatch_lines(job: Job, topology: Topology) -> str:
    lines = [
        "# One task per node: the launcher in its container is the only thing the job runs on a node.",
        f"#SBATCH --job-name={job.job_name}",
        f"#SBATCH --nodes={job.nodes}",
        "#SBATCH --ntasks-per-node=1",
        "# An explicit wall time: a job asking more than the account may have is parked PENDING, silently.",
        f"#SBATCH --time={job.time}",
    ]
    if job.exclusive and "--exclusive" not in job.sbatch_args:
        lines += [
            "# The nodes are the job's alone: another job's vLLM on them would take the GPUs, the memory",
            "# and the ports this one binds (rendered without it by --no-exclusive).",
            "#SBATCH --exclusive",
        ]
    if job.gpu_request:
        lines += [
            "# Every GPU of a node, as the recipe's TP x PP needs (--no-gpu-request for sites that name GPUs",
            "# another way: give theirs with --sbatch-arg).",
            f"#SBATCH --gpus-per-node={topology.gpus_per_node}",
        ]
    if job.partition is not None:
        lines.append(f"#SBATCH --partition={job.partition}")
    lines += [f"#SBATCH {arg}" for arg in job.sbatch_args]
    return "\n".join(lines)


def _image_settings(job: Job) -> str:
    if isinstance(job.image, PulledImage):
        return (
            "    # The image by digest: docker checks the digest on pull, and every node runs the same bits.\n"
            f"    IMAGE={_q(job.image.reference)}"
        )
    return (
        "    # The archive on shared storage: its manifest, and the importer `imagebuild export` wrote beside\n"
        "    # it (the nodes need only python3 and docker).\n"
        f"    ARCHIVE_MANIFEST={_q(job.image.manifest)}\n"
        f"    ARCHIVE_IMPORTER={_q(job.image.importer)}\n"
        "    # The image the manifest records: its ID on graph-driver stores, and on the containerd image\n"
        "    # store (which names images by their manifest) its manifest's digest.\n"
        f"    IMAGE={_q(job.image.image_id)}\n"
        f"    IMAGE_MANIFEST={_q(job.image.manifest_digest or job.image.image_id)}"
    )


def _settings(job: Job) -> str:
    log_dir = DEFAULT_LOG_DIR if job.log_dir is None else _q(job.log_dir)
    devices = (
        "    # 1: the ROCm devices (/dev/kfd, /dev/dri, and /dev/infiniband where present) and the video group."
        if job.gpu_devices
        else "    # 0 (rendered with --no-devices, for machines without GPUs); 1: the ROCm devices and the video group."
    )
    return f"""\
settings() {{
{_image_settings(job)}
    RECIPE={_q(job.recipe)}
    VARIANT={_q(job.variant)}
    # The model on every node (shared storage), mounted read-only at the same path.
    MODEL_PATH={_q(job.model_path)}
    # Shared by every node, mounted at {LOG_MOUNT} (the launcher's LOG_ROOT): LOG_DIR/<job id>/ gets each
    # node's vLLM log, each node's exit status and the head's shutdown sentinel.
    LOG_DIR={log_dir}
    # Run on the head once vLLM is ready (shell words or a JSON array); empty: serve until the wall time.
    BENCHMARK_CMD={_q(job.benchmark_cmd)}
    # Only the head binds ports (API, rendezvous, barrier), so workers sharing its host do not collide.
    SERVE_PORT={job.serve_port}
    MASTER_PORT={job.master_port}
    # The launcher's container barrier: no node starts vLLM until every node's container is up, and a
    # node still missing after BARRIER_TIMEOUT_S seconds ends the job, named, instead of a hang.
    BARRIER_PORT={job.barrier_port}
    BARRIER_TIMEOUT_S={job.barrier_timeout_s}
    # What `docker stop` gives the launcher (sentinel, then vLLM) before SIGKILL; below SLURM's KillWait.
    STOP_TIMEOUT_S={job.stop_timeout_s}
    # 1: docker's init is the container's PID 1, so a SIGTERM that comes before the launcher has set its
    # handlers is still delivered, and the job ends in seconds, not after STOP_TIMEOUT_S and a SIGKILL.
    INIT={int(job.init)}
    # Each node's host directory for the JIT caches (AITER, vLLM, Triton, COMGR under /opt/vllm_cache;
    # MoRI under /root/.mori), keyed by the image: a job reuses the kernels earlier jobs compiled, and
    # the launcher's stale-lock cleanup works on it. Empty: the image's own, thrown away with the container.
    JIT_CACHE={_q(job.jit_cache)}
{devices}
    GPU_DEVICES={int(job.gpu_devices)}
    # vLLM's shared memory. With --ipc host (below) /dev/shm is the host's; this applies only without.
    SHM_SIZE={_q(job.shm_size)}
    # Open files for vLLM's sockets and shards; locked memory for RDMA registration (-1: unlimited).
{_array("ULIMITS", (f"{name}={value}" for name, value in job.ulimits))}
    # More environment for the launcher and vLLM: a recipe's env knob given here wins over the recipe.
{_array("EXTRA_ENV", (f"{name}={value}" for name, value in job.env))}
    # Copied from the job's environment when it runs (sbatch passes the submitter's): secrets stay out
    # of this file.
{_array("PASS_ENV", job.pass_env)}
    # More `docker run` options.
{_array("DOCKER_ARGS", job.docker_args)}
    # Host RDMA userspace libraries, mounted over the image's copies so they match the host's driver;
    # only those that are regular files on the node (see run_node).
{_array("RDMA_LIBS", job.rdma_libs)}
}}"""


def _fetch_image(job: Job) -> str:
    if isinstance(job.image, PulledImage):
        return """\
# Step 1, on every node: pull the image by digest.
fetch_image() {
    settings
    say "pulling $IMAGE"
    docker pull --quiet "$IMAGE" >/dev/null
    say "image present: $(docker image inspect --format '{{.Id}}' "$IMAGE")"
}

node_image() { echo "$IMAGE"; }"""
    assert isinstance(job.image, ArchivedImage)
    return """\
# Step 1, on every node: import the archive. The importer checks its size and sha256 while loading it,
# refuses an image whose ID differs from the manifest's, and returns at once when the image is present.
fetch_image() {
    settings
    say "importing $ARCHIVE_MANIFEST"
    python3 "$ARCHIVE_IMPORTER" "$ARCHIVE_MANIFEST" >/dev/null
    say "image present: $(node_image)"
}

# What this node's engine calls the image: its ID, or (containerd image store) its manifest's digest.
node_image() {
    if docker image inspect "$IMAGE" >/dev/null 2>&1; then echo "$IMAGE"; else echo "$IMAGE_MANIFEST"; fi
}"""


def _header(job: Job, topology: Topology, version: str) -> str:
    nodes = f"{job.nodes} node" + ("s" if job.nodes != 1 else "")
    if isinstance(job.image, PulledImage):
        source, tools = "pulls the image by digest", "docker"
    else:
        source = "imports the image from the archive on shared storage, verified"
        tools = "docker and python3 (the importer)"
    return f"""\
#!/bin/bash
# Serve recipe {job.recipe}, variant {job.variant}, on {nodes} (TP {topology.tp_size} x PP {topology.pp_size}, \
{topology.gpus_per_node} GPUs per node), model "{topology.served_name}".
# Each node first {source};
# then it runs one container with the launcher the image carries ({LAUNCHER}):
# node 0 serves the API and runs the benchmark, the others run vLLM --headless until the head's
# shutdown sentinel appears.
#
# Written by `imagebuild slurm` (imagebuild {version}). Submit with `sbatch FILE`; the job's output goes
# where sbatch puts it (slurm-<job id>.out in the submit directory unless --output says otherwise).
# Edit freely: the settings are in settings() below.
# The nodes need bash >= {MIN_BASH[0]}.{MIN_BASH[1]}, srun and {tools}.
"""


_BODY = """\
say() { echo "[job ${SLURM_JOB_ID} node ${SLURM_NODEID:-batch} $(date +%H:%M:%S)] $*" >&2; }

# Named per job and node: a rerun never meets another job's container, and two nodes of one job may
# share a host. The same name on every step lets each node find its own container.
container_name() { echo "colocated_${RECIPE}_${SLURM_JOB_ID}_node${SLURM_NODEID}"; }

remove_container() {
    if docker container inspect "$1" >/dev/null 2>&1; then
        docker rm --force "$1" >/dev/null
        say "removed container $1"
    fi
}

# This node's address as the reference finds it (the first of `hostname -I`), after its node index.
node_address() {
    local address
    address=$(hostname -I | cut -d' ' -f1)
    if [[ -z $address ]]; then
        say "hostname -I gives no address on $(hostname)"
        return 1
    fi
    echo "$SLURM_NODEID $address"
}

@FETCH_IMAGE@

# Step 2, on every node: one container that runs the launcher.
run_node() {
    settings
    CONTAINER=$(container_name)
    # Host networking: vLLM's rendezvous, the API and the barrier use the nodes' own addresses.
    # Host IPC: vLLM's processes share memory.
    local run=(docker run --name "$CONTAINER" --network host --ipc host --shm-size "$SHM_SIZE")
    # As the reference runs it: for profilers and ROCm's debugging tools.
    run+=(--cap-add SYS_PTRACE --security-opt seccomp=unconfined)
    local limit lib var status=0 client image
    image=$(node_image)
    for limit in "${ULIMITS[@]}"; do run+=(--ulimit "$limit"); done
    if ((INIT)); then run+=(--init); fi
    if [[ -n $JIT_CACHE ]]; then
        mkdir -p "$JIT_CACHE/vllm_cache" "$JIT_CACHE/mori"
        run+=(--volume "$JIT_CACHE/vllm_cache:/opt/vllm_cache" --volume "$JIT_CACHE/mori:/root/.mori")
    fi
    if ((GPU_DEVICES)); then
        run+=(--device /dev/kfd --device /dev/dri --group-add video)
        if [[ -e /dev/infiniband ]]; then run+=(--device /dev/infiniband); fi
    fi
    # -f, never -e: docker creates a DIRECTORY at a missing bind source, and that directory then breaks
    # every later run on this node ("OCI runtime create failed: ... not a directory").
    for lib in "${RDMA_LIBS[@]}"; do
        if [[ -f $lib ]]; then run+=(--volume "$lib:$lib:ro"); fi
    done
    run+=(--volume "$LOG_DIR:@LOG_MOUNT@" --volume "$MODEL_PATH:$MODEL_PATH:ro")
    # The launcher's inputs: this node's rank and the job's shape from SLURM, the head's address and
    # every node's (rank order) for the barrier, and the settings above.
    run+=(
        --env "NODE_RANK=$SLURM_NODEID" --env "NNODES=$SLURM_NNODES" --env "MASTER_ADDR=$MASTER_ADDR"
        --env "IPADDRS=$IPADDRS" --env "SLURM_JOB_ID=$SLURM_JOB_ID" --env LOG_ROOT=@LOG_MOUNT@
        --env "MODEL_PATH=$MODEL_PATH" --env "RECIPE=$RECIPE" --env "VARIANT=$VARIANT"
        --env "BENCHMARK_CMD=$BENCHMARK_CMD" --env "SERVE_PORT=$SERVE_PORT" --env "MASTER_PORT=$MASTER_PORT"
        --env "CONTAINER_BARRIER_PORT=$BARRIER_PORT" --env "BARRIER_TIMEOUT_S=$BARRIER_TIMEOUT_S"
    )
    for var in "${EXTRA_ENV[@]}"; do run+=(--env "$var"); done
    # `--env NAME` without a value: docker copies it from this task's environment.
    for var in "${PASS_ENV[@]}"; do run+=(--env "$var"); done
    run+=("${DOCKER_ARGS[@]}" "$image" python3 @LAUNCHER@)

    # A leftover of an earlier attempt of this job (a requeue) would make `docker run` fail on the name.
    remove_container "$CONTAINER"
    # Killing the `docker run` client does not stop its container, so this task does. SIGTERM comes from
    # SLURM (a peer failed under --kill-on-bad-exit, scancel, the wall time): `docker stop` lets the
    # launcher raise the sentinel and stop vLLM in order. On exit, the container is removed.
    trap 'remove_container "$CONTAINER"' EXIT
    trap 'say "stopping $CONTAINER"; docker stop --time "$STOP_TIMEOUT_S" "$CONTAINER" >/dev/null 2>&1 || true' TERM INT
    say "starting $CONTAINER: node $SLURM_NODEID of $SLURM_NNODES, head $MASTER_ADDR"
    "${run[@]}" &
    client=$!
    wait "$client" || status=$?
    # A trapped signal ends `wait` early; the trap has stopped the container, so the client ends too.
    if kill -0 "$client" 2>/dev/null; then
        status=0
        wait "$client" || status=$?
    fi
    echo "$status" >"$LOG_DIR/$SLURM_JOB_ID/node$SLURM_NODEID.exit"
    say "$CONTAINER exited with status $status"
    return "$status"
}

# Step 3, on every node: remove this job's container, whatever happened (a task that SLURM killed with
# SIGKILL after KillWait had no chance to).
cleanup_node() {
    settings
    remove_container "$(container_name)"
}

main() {
    settings
    if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < @MIN_BASH@)); then
        echo "this job needs bash >= @MIN_BASH_TEXT@ (it has $BASH_VERSION)" >&2
        exit 2
    fi
    local job_dir="$LOG_DIR/$SLURM_JOB_ID" status=0 head
    mkdir -p "$job_dir"
    # A requeued job keeps its id: the last attempt's sentinel or exit status must not end this one.
    rm -f "$job_dir/@SENTINEL@" "$job_dir"/node*.exit
    local nodes="$SLURM_JOB_NUM_NODES nodes"
    if ((SLURM_JOB_NUM_NODES == 1)); then nodes="1 node"; fi
    say "$RECIPE/$VARIANT on $nodes ($SLURM_JOB_NODELIST); logs in $job_dir"
    # The tasks run these functions: they reach every node through srun's environment.
    export -f settings say container_name remove_container node_address fetch_image node_image run_node cleanup_node
    local step=(srun --export=ALL --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1)

    # Every node's address in node order; the first (SLURM_NODEID 0, the first host of
    # SLURM_JOB_NODELIST) is the head's.
    IPADDRS=$("${step[@]}" bash -euo pipefail -c node_address | sort -n | cut -d' ' -f2 | paste -sd, -)
    MASTER_ADDR=${IPADDRS%%,*}
    export IPADDRS MASTER_ADDR
    say "node addresses: $IPADDRS"

    # Step 1 on every node before step 2 anywhere: a node that cannot get the image fails the job here,
    # before any container starts and before its peers spend time loading the model. No
    # --kill-on-bad-exit: every node finishes its own pull or import, so each one that fails says why,
    # none is left with a half-imported image, and those that succeeded keep the image for the next try.
    "${step[@]}" --label bash -euo pipefail -c fetch_image || status=$?
    if ((status != 0)); then
        say "the image is not present on every node (reason above); no container was started"
        exit "$status"
    fi
    # Step 2. --kill-on-bad-exit: a node whose container fails ends the step on every node, instead of
    # its peers waiting for it at the barrier or in vLLM until the wall time.
    "${step[@]}" --kill-on-bad-exit=1 --label bash -euo pipefail -c run_node || status=$?
    "${step[@]}" --label bash -euo pipefail -c cleanup_node || say "the cleanup step failed: look for containers named colocated_${RECIPE}_${SLURM_JOB_ID}_node*"
    # The job's status is the head's: it served the model and ran the benchmark. A worker's status after
    # the head's sentinel does not count; the step's does if the head left none (it was killed).
    head=$(cat "$job_dir/node0.exit" 2>/dev/null) || head=$status
    say "head exit status $head (run step status $status)"
    exit "$head"
}

main "$@"
"""


def render_script(job: Job, topology: Topology, *, version: str) -> str:
    body = (
        _BODY.replace("@FETCH_IMAGE@", _fetch_image(job))
        .replace("@LOG_MOUNT@", LOG_MOUNT)
        .replace("@LAUNCHER@", LAUNCHER)
        .replace("@SENTINEL@", SENTINEL_NAME)
        .replace("@MIN_BASH@", str(MIN_BASH[0] * 100 + MIN_BASH[1]))
        .replace("@MIN_BASH_TEXT@", f"{MIN_BASH[0]}.{MIN_BASH[1]}")
    )
    return "\n\n".join(
        (
            _header(job, topology, version) + _sbatch_lines(job, topology),
            "# The node functions run through `srun bash -c NAME`, which shellcheck cannot follow.\n"
            "# shellcheck disable=SC2329\n"
            "set -euo pipefail",
            "# ---- settings: read by the batch script and by every node's task -----------------------------\n"
            + _settings(job),
            body,
        )
    )
