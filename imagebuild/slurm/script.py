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

from imagebuild.inputs.layout import (
    IMAGE_HOME,
    LAUNCHER,
    LOG_MOUNT,
    MODEL_MOUNT,
    MORI_JIT_MOUNT,
    VLLM_CACHE_MOUNT,
)
from imagebuild.launcher.sentinel import SENTINEL_NAME
from imagebuild.slurm.job import DEFAULT_JIT_CACHE_ROOT, Job
from imagebuild.slurm.recipe import Topology
from imagebuild.slurm.runtimes import Runtime, runtime
from imagebuild.slurm.shell import array as _array
from imagebuild.slurm.shell import quote as _q

DEFAULT_LOG_DIR = '"${SLURM_SUBMIT_DIR}/imagebuild-logs"'
MIN_BASH = (4, 4)  # "${array[@]}" of an empty array under `set -u`


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


_NOTES = {
    "STOP_TIMEOUT_S": "    # What `docker stop` gives the launcher (sentinel, then vLLM) before SIGKILL; below SLURM's KillWait.",
    "INIT": "    # 1: docker's init is the container's PID 1, so a SIGTERM that comes before the launcher has set its\n"
    "    # handlers is still delivered, and the job ends in seconds, not after STOP_TIMEOUT_S and a SIGKILL.",
    "DEVICES": "    # 1: the ROCm devices (/dev/kfd, /dev/dri, and /dev/infiniband where present) and the video group.",
    "NO_DEVICES": "    # 0 (rendered with --no-devices, for machines without GPUs); 1: the ROCm devices and the video group.",
    "SHM_SIZE": "    # vLLM's shared memory. With --ipc host (below) /dev/shm is the host's; this applies only without.",
    "ULIMITS": "    # Open files for vLLM's sockets and shards; locked memory for RDMA registration (-1: unlimited).",
    "DOCKER_ARGS": "    # More `docker run` options.",
}


def _setting(rt: Runtime, key: str, value: str) -> str:
    """The setting's comment (the runtime's wording, else docker's) and its line; "" when it has none."""
    note = rt.settings_notes.get(key, _NOTES[key])
    return "" if note is None else f"{note}\n{value}\n"


def _settings(job: Job, rt: Runtime) -> str:
    log_dir = DEFAULT_LOG_DIR if job.log_dir is None else _q(job.log_dir)
    devices = _setting(
        rt, "DEVICES" if job.gpu_devices else "NO_DEVICES", f"    GPU_DEVICES={int(job.gpu_devices)}"
    )
    ulimits = _array("ULIMITS", (f"{name}={value}" for name, value in job.ulimits))
    return f"""\
settings() {{
{rt.image_settings(job)}
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
{_setting(rt, "STOP_TIMEOUT_S", f"    STOP_TIMEOUT_S={job.stop_timeout_s}")}\
{_setting(rt, "INIT", f"    INIT={int(job.init)}")}\
    # Each node's host directory for the JIT caches (AITER, vLLM, Triton, COMGR under {VLLM_CACHE_MOUNT};
    # MoRI under {MORI_JIT_MOUNT}), the user's own and keyed by the image: a job reuses the kernels the
    # user's earlier jobs compiled, and the launcher's stale-lock cleanup works on it. Empty: the
    # image's own, thrown away with the container.
    JIT_CACHE={_jit_cache(job)}
{devices}\
{_setting(rt, "SHM_SIZE", f"    SHM_SIZE={_q(job.shm_size)}")}\
{_setting(rt, "ULIMITS", ulimits)}\
    # More environment for the launcher and vLLM: a recipe's env knob given here wins over the recipe.
{_array("EXTRA_ENV", (f"{name}={value}" for name, value in job.env))}
    # Copied from the job's environment when it runs (sbatch passes the submitter's): secrets stay out
    # of this file.
{_array("PASS_ENV", job.pass_env)}
{_setting(rt, "DOCKER_ARGS", _array("DOCKER_ARGS", job.docker_args))}\
    # Host RDMA userspace libraries, mounted over the image's copies so they match the host's driver;
    # only those that are regular files on the node (see run_node).
{_array("RDMA_LIBS", job.rdma_libs)}
}}"""


def _header(job: Job, topology: Topology, version: str, rt: Runtime) -> str:
    nodes = f"{job.nodes} node" + ("s" if job.nodes != 1 else "")
    source, tools = rt.source(job), rt.tools(job)
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

# The host JIT cache's directories on this node. The default is the user's own under /var/tmp, where
# anyone may make a directory first: made 0700, and refused when it is not the user's.
jit_cache_dirs() {
    settings
    local own="@JIT_CACHE_ROOT@"
    if [[ $JIT_CACHE == "$own"/* ]]; then
        mkdir -m 0700 "$own" 2>/dev/null || true  # there already, or made by this job's other task here
        if [[ -L $own || ! -d $own || ! -O $own ]]; then
            say "$own is not yours (another user made it): remove it, or give --jit-cache or --no-jit-cache"
            return 1
        fi
    fi
    mkdir -p "$JIT_CACHE/vllm_cache" "$JIT_CACHE/mori"
}

@HELPERS@

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

@RUN_NODE@

@CLEANUP@main() {
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
    export -f settings say container_name jit_cache_dirs @FUNCTIONS@
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
    @RUN_STEP@
@CLEANUP_STEP@
    # The job's status is the head's: it served the model and ran the benchmark. A worker's status after
    # the head's sentinel does not count; the step's does if the head left none (it was killed).
    head=$(cat "$job_dir/node0.exit" 2>/dev/null) || head=$status
    say "head exit status $head (run step status $status)"
    exit "$head"
}

main "$@"
"""


def _jit_cache(job: Job) -> str:
    """The default in double quotes, so that bash gives its ``$UID`` on the node; any other path quoted."""
    if job.jit_cache == f"{DEFAULT_JIT_CACHE_ROOT}/{job.image_key}":
        return f'"{job.jit_cache}"'  # a constant and 12 hex digits
    return _q(job.jit_cache)


def render_script(job: Job, topology: Topology, *, version: str) -> str:
    rt = runtime(job.runtime)
    body = (
        _BODY.replace("@HELPERS@\n\n", f"{rt.helpers}\n\n" if rt.helpers else "")
        .replace("@FETCH_IMAGE@", rt.fetch(job))
        .replace("@RUN_NODE@", rt.run_node)
        .replace("@CLEANUP@", f"{rt.cleanup}\n\n" if rt.cleanup else "")
        .replace("@FUNCTIONS@", " ".join(rt.functions))
        .replace("@RUN_STEP@", rt.run_step)
        .replace("@CLEANUP_STEP@\n", f"    {rt.cleanup_step}\n" if rt.cleanup_step else "")
        .replace("@LOG_MOUNT@", LOG_MOUNT)
        .replace("@MODEL_MOUNT@", MODEL_MOUNT)
        .replace("@VLLM_CACHE_MOUNT@", VLLM_CACHE_MOUNT)
        .replace("@MORI_JIT_MOUNT@", MORI_JIT_MOUNT)
        .replace("@IMAGE_HOME@", IMAGE_HOME)
        .replace("@SERVED_NAME@", _q(topology.served_name))
        .replace("@LAUNCHER@", LAUNCHER)
        .replace("@SENTINEL@", SENTINEL_NAME)
        .replace("@MIN_BASH@", str(MIN_BASH[0] * 100 + MIN_BASH[1]))
        .replace("@MIN_BASH_TEXT@", f"{MIN_BASH[0]}.{MIN_BASH[1]}")
        .replace("@JIT_CACHE_ROOT@", DEFAULT_JIT_CACHE_ROOT)
    )
    return "\n\n".join(
        (
            _header(job, topology, version, rt) + _sbatch_lines(job, topology),
            "# The node functions run through `srun bash -c NAME`, which shellcheck cannot follow.\n"
            "# shellcheck disable=SC2329\n"
            "set -euo pipefail",
            "# ---- settings: read by the batch script and by every node's task -----------------------------\n"
            + _settings(job, rt),
            body,
        )
    )
