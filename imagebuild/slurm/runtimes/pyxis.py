"""enroot through pyxis: srun itself starts the container (`--container-image=SQUASHFS`).

pyxis runs the squashfs where it lies (no import, no pull), with the host's network and IPC and every
device, as enroot does; like ch-run it makes no PID namespace and keeps no daemon. Its options are
srun's, decided once in the batch script, so the run step is built there (pyxis_options).
"""

from __future__ import annotations

from imagebuild.slurm.runtimes import squashfs as sq

_RUN_NODE = """\
# Where `enroot create` unpacks the squashfs on this node (pyxis runs it, and enroot checks no room
# first): its ENROOT_DATA_PATH as enroot itself reads it, by running the configuration block of its
# own script (enroot.conf with its expansions, the environment, the defaults) in a bash of its own,
# in the job's environment less the paths pyxis keeps from enroot. mkdir is a no-op there: nothing is
# made. Empty, and said, where enroot is no script with that block, it fails, or the path is relative.
enroot_data_path() {
    local enroot block into
    enroot=$(command -v enroot)
    block=$(sed -n '/^# ---- BEGIN CONFIG ----$/,/^# ----- END CONFIG -----$/p' "$enroot" 2>/dev/null) || block=
    if [[ $block != *'# ----- END CONFIG -----' ]]; then
        say "room to unpack not checked: $enroot has no configuration block to read ENROOT_DATA_PATH from"
        return 0
    fi
    into=$(bash -c 'set -euo pipefail; shopt -s lastpipe; mkdir() { :; }
        unset ENROOT_LIBRARY_PATH ENROOT_SYSCONF_PATH ENROOT_RUNTIME_PATH ENROOT_CACHE_PATH ENROOT_DATA_PATH ENROOT_TEMP_PATH
        eval "$1" >/dev/null 2>&1
        printf "%s" "${ENROOT_DATA_PATH-}"' enroot-config "$block") || into=
    if [[ $into != /* ]]; then
        say "room to unpack not checked: enroot's configuration gave no absolute ENROOT_DATA_PATH (${into:-none})"
        return 0
    fi
    printf '%s\\n' "$into"
}

# Step 2's options: srun starts the container on every node, so they are decided here, once. enroot
# has the host's network, IPC and /dev and the task's groups (docker's --network host, --ipc host,
# --device, --group-add), and no PID namespace: the launcher is not PID 1, and a SIGTERM before its
# handlers are set still ends it (docker's --init). No --ulimit either: the container has the task's
# limits, which SLURM propagates from the submitter (PropagateResourceLimits) and the site may cap.
pyxis_options() {
    local mounts="$LOG_DIR:@LOG_MOUNT@,$MODEL_PATH:$MODEL_PATH:ro" lib var
    local names=(NNODES MASTER_ADDR IPADDRS LOG_ROOT MODEL_PATH RECIPE VARIANT BENCHMARK_CMD SERVE_PORT)
    names+=(MASTER_PORT CONTAINER_BARRIER_PORT BARRIER_TIMEOUT_S)
    if [[ -n $JIT_CACHE ]]; then
        mounts+=",$JIT_CACHE/vllm_cache:@VLLM_CACHE_MOUNT@,$JIT_CACHE/mori:@MORI_JIT_MOUNT@"
    fi
    # Looked for on this (the batch) host: the options are the same on every node, so the nodes must
    # be alike. -f, never -e: a directory over a library would hide it.
    for lib in "${RDMA_LIBS[@]}"; do
        if [[ -f $lib ]]; then mounts+=",$lib:$lib:ro"; fi
    done
    # The launcher's inputs, exported here and named in --container-env so that they win over the
    # image's environment; NODE_RANK is each node's, set in the container (run_node).
    export NNODES=$SLURM_JOB_NUM_NODES LOG_ROOT=@LOG_MOUNT@ MODEL_PATH RECIPE VARIANT BENCHMARK_CMD
    export SERVE_PORT MASTER_PORT CONTAINER_BARRIER_PORT=$BARRIER_PORT BARRIER_TIMEOUT_S
    for var in "${EXTRA_ENV[@]}"; do
        export "${var?}"
        names+=("${var%%=*}")
    done
    for var in "${PASS_ENV[@]}"; do names+=("$var"); done
    local IFS=,
    PYXIS=(
        --container-image="$SQUASHFS" --container-name="colocated_${RECIPE}_${SLURM_JOB_ID}"
        --container-mounts="$mounts" --container-env="${names[*]}" --no-container-mount-home
    )
}

# Step 2, in the container on every node: this node's rank, the launcher, and its exit status where
# the batch script reads the head's. HOME is the image's, as docker's, not the task's home, which is
# not mounted: MoRI keeps its JIT under HOME, where the host JIT cache is mounted. The image's files
# are the user's under enroot (unsquashfs, or squashfuse -o uid=: read in its runtime.sh, not run).
run_node() {
    local status=0
    export NODE_RANK=$SLURM_NODEID HOME=@IMAGE_HOME@
    python3 @LAUNCHER@ || status=$?
    echo "$status" >"@LOG_MOUNT@/$SLURM_JOB_ID/node$SLURM_NODEID.exit"
    return "$status"
}"""

# pyxis removes a named container when the job ends (its container_scope=job default), and an unnamed
# one when the step does: there is nothing for a cleanup step to do.
_RUN_STEP = """\
# The image's bash runs run_node (exported, it reaches the container in srun's environment).
    # SIGTERM from SLURM reaches the launcher itself. pyxis removes the named container at the job's end.
    if [[ -n $JIT_CACHE ]]; then "${step[@]}" bash -euo pipefail -c jit_cache_dirs; fi
    local PYXIS
    pyxis_options
    "${step[@]}" --kill-on-bad-exit=1 --label "${PYXIS[@]}" bash -euo pipefail -c run_node || status=$?"""

PYXIS = sq.squashfs_runtime(
    name="pyxis",
    binary="enroot",
    needs="enroot with the pyxis SPANK plugin",
    ulimits_note=None,  # no --ulimit: the task's limits (see pyxis_options)
    run_node=_RUN_NODE,
    functions=("enroot_data_path", "pyxis_options", "run_node"),
    run_step=_RUN_STEP,
    unpack_into="enroot_data_path",
    no_room_hint=(
        "$into is enroot's data directory on this node (ENROOT_DATA_PATH, from its enroot.conf): remove the "
        "containers earlier jobs left there (enroot list; enroot remove NAME), or ask the site for more room there"
    ),
)
