"""Charliecloud: `ch-run SQUASHFS -- python3 LAUNCHER`, the squashfs mounted by squashfuse.

ch-run makes only user and mount namespaces: the container has the host's network, IPC, PIDs and
/dev, and the task's user and groups. It has no --device, --ipc, --ulimit or --init, because it needs
none; what that means is said in the script where docker's option would be.
"""

from __future__ import annotations

from imagebuild.slurm.runtimes import squashfs as sq
from imagebuild.slurm.runtimes import wait_and_record

_RUN_NODE = """\
# Step 2, on every node: the launcher in ch-run. ch-run makes no network, IPC or PID namespace: the
# launcher has the host's network and IPC (docker's --network host --ipc host), every device under
# /dev and the task's own groups (docker's --device and --group-add), and it is not PID 1, so a SIGTERM
# before its handlers are set still ends it (docker's --init). --private-tmp: a /tmp of its own, as in
# docker's, not the node's, where an earlier job's /tmp/mori_jit_* would be found. A squashfs is
# read-only: every bind's destination must exist in the image (ch-run cannot create it; `imagebuild
# export --format squashfs` adds
# @LOG_MOUNT@, @MODEL_MOUNT@ and the JIT cache dirs), and ch-run has no read-only bind.
run_node() {
    settings
    local run=(ch-run --private-tmp) limit lib var name soft hard flag status=0 client libs=() found mask
    # ch-run refuses to start without $USER ("$USER not set"), which a job submitted by a service or
    # cron may lack: the task's own user.
    USER=${USER:-$(id -un)}
    export USER
    # No --ulimit in ch-run: the container has this task's limits, so the task sets them first
    # (raising a hard limit needs what the site's limits allow; a refusal is said and the job goes on).
    for limit in "${ULIMITS[@]}"; do
        name=${limit%%=*} soft=${limit#*=}
        hard=${soft#*:} soft=${soft%%:*}
        if [[ $soft == -1 ]]; then soft=unlimited; fi
        if [[ $hard == -1 ]]; then hard=unlimited; fi
        case $name in
            core) flag=c ;; cpu) flag=t ;; data) flag=d ;; fsize) flag=f ;; locks) flag=x ;;
            memlock) flag=l ;; msgqueue) flag=q ;; nice) flag=e ;; nofile) flag=n ;; nproc) flag=u ;;
            rss) flag=m ;; rtprio) flag=r ;; rttime) flag=R ;; sigpending) flag=i ;; *) flag=s ;;
        esac
        # --ulimit counts sizes in bytes, as docker's does; bash's ulimit counts these in KiB.
        if [[ $flag == [cdflms] ]]; then
            if [[ $soft != unlimited ]]; then soft=$((soft / 1024)); fi
            if [[ $hard != unlimited ]]; then hard=$((hard / 1024)); fi
        fi
        # Hard first when raising, soft first when lowering: trying hard, soft, hard does either.
        ulimit -H "-$flag" "$hard" 2>/dev/null || true
        ulimit -S "-$flag" "$soft" 2>/dev/null || say "cannot set the soft $name limit to $soft here"
        ulimit -H "-$flag" "$hard" 2>/dev/null || say "cannot set the hard $name limit to $hard here"
    done
    if [[ -n $JIT_CACHE ]]; then
        jit_cache_dirs
        run+=(-b "$JIT_CACHE/vllm_cache:@VLLM_CACHE_MOUNT@" -b "$JIT_CACHE/mori:@MORI_JIT_MOUNT@")
    fi
    # GPU_DEVICES needs nothing here: /dev is the host's. -f, never -e: a directory over a library
    # would hide it. A library is bound over the image's copy only: ch-run cannot make a file in the
    # squashfs, so one the image lacks stays out (said here), and the image's own copies are asked once.
    for lib in "${RDMA_LIBS[@]}"; do
        if [[ -f $lib ]]; then libs+=("$lib"); fi
    done
    if ((${#libs[@]})); then
        # shellcheck disable=SC2016 # the image's sh expands them
        found=$("${run[@]}" "$SQUASHFS" -- sh -c 'for f; do if [ -f "$f" ]; then echo "$f"; fi; done' sh "${libs[@]}")
        for lib in "${libs[@]}"; do
            if grep -qxF -- "$lib" <<<"$found"; then
                run+=(-b "$lib:$lib")
            else
                say "not mounting $lib: the image has no file there to mount it over"
            fi
        done
    fi
    # The model at @MODEL_MOUNT@, not at its own path, which the read-only image
    # lacks; served under the name the other runtimes serve it by (its directory's, unless the recipe
    # or --env names it): with another MODEL_PATH, edit MODEL_NAME below too.
    run+=(-b "$LOG_DIR:@LOG_MOUNT@" -b "$MODEL_PATH:@MODEL_MOUNT@")
    # The image's environment (the squashfs carries it), then the launcher's inputs: this node's rank
    # and the job's shape from SLURM, the head's address and every node's, and the settings above.
    # The task's own environment passes through as ch-run does, so PASS_ENV needs no option. HOME is
    # the image's, as docker's: the task's (/home/USER) is not in the image, and MoRI keeps its JIT
    # under HOME, where the host JIT cache is mounted (squashfuse shows the image's files as the user's,
    # so the image's root-only HOME is open to any user).
    run+=(
        --set-env --set-env=HOME=@IMAGE_HOME@
        --set-env="NODE_RANK=$SLURM_NODEID" --set-env="NNODES=$SLURM_NNODES" --set-env="MASTER_ADDR=$MASTER_ADDR"
        --set-env="IPADDRS=$IPADDRS" --set-env="SLURM_JOB_ID=$SLURM_JOB_ID" --set-env=LOG_ROOT=@LOG_MOUNT@
        --set-env=MODEL_PATH=@MODEL_MOUNT@ --set-env=MODEL_NAME=@SERVED_NAME@
        --set-env="RECIPE=$RECIPE" --set-env="VARIANT=$VARIANT"
        --set-env="BENCHMARK_CMD=$BENCHMARK_CMD" --set-env="SERVE_PORT=$SERVE_PORT"
        --set-env="MASTER_PORT=$MASTER_PORT" --set-env="CONTAINER_BARRIER_PORT=$BARRIER_PORT"
        --set-env="BARRIER_TIMEOUT_S=$BARRIER_TIMEOUT_S"
    )
    for var in "${EXTRA_ENV[@]}"; do run+=(--set-env="$var"); done
    for var in "${PASS_ENV[@]}"; do export "${var?}"; done
    # ch-run is two processes: its own serves the squashfs, its child becomes the launcher; nothing is
    # left behind (the mount ends with ch-run), so there is no container to remove. SLURM's SIGTERM
    # (scancel, the wall time, a peer's failure under --kill-on-bad-exit) reaches every process of the
    # step, and ch-run's own answers it by unmounting the image and exiting 0 at once, under a launcher
    # still stopping vLLM (ch-run 0.31): the job's status became a race, and the teardown lost its
    # image. So ch-run starts with SIGTERM and SIGINT blocked (a signal mask is inherited through fork
    # and exec, and python3 sets one where bash cannot), and its child unblocks them before it runs the
    # launcher: ch-run's own process then serves the image until the launcher has ended and exits with
    # its status, while the launcher stops vLLM in order.
    mask='import os, signal, sys; signal.pthread_sigmask(getattr(signal, sys.argv[1]), {signal.SIGTERM, signal.SIGINT}); os.execvp(sys.argv[2], sys.argv[2:])'
    run+=("$SQUASHFS" -- python3 -c "$mask" SIG_UNBLOCK python3 @LAUNCHER@)

    # The trap passes the signal on to the launcher, ch-run's child (SLURM may not have: scancel
    # --signal); killing ch-run would leave the launcher running without its image.
    trap 'say "stopping the launcher"; pkill -TERM -P "$client" || true' TERM INT
    say "starting ch-run: node $SLURM_NODEID of $SLURM_NNODES, head $MASTER_ADDR"
""" + wait_and_record("ch-run", "the launcher is stopping, so wait for it.", start='python3 -c "$mask" SIG_BLOCK "${run[@]}" &')

CHARLIECLOUD = sq.squashfs_runtime(
    name="charliecloud",
    binary="ch-run",
    needs="ch-run (built with squashfuse), pkill",
    ulimits_note="    # Set by the task before ch-run (which has no --ulimit): open files; locked memory (-1: unlimited).",
    run_node=_RUN_NODE,
    functions=("run_node",),
    run_step='"${step[@]}" --kill-on-bad-exit=1 --label bash -euo pipefail -c run_node || status=$?',
)
