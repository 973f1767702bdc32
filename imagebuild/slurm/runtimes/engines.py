"""Docker and Podman: an engine that keeps the container apart from the `run` client.

Both take the same `run` options, so one template serves them; where they differ (how a container is
found and removed, the groups, the importer's --runtime, podman's refusal of --shm-size beside
--ipc host) each says it in its own words. Killing either `run` client does not stop its container
(docker's daemon, podman's conmon keep it), so every task stops and removes its container itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagebuild.slurm.job import ArchivedImage, Job, PulledImage
from imagebuild.slurm.runtimes import DOCKER_ARCHIVE, OCI_ARCHIVE, Runtime, wait_and_record
from imagebuild.slurm.shell import quote


@dataclass(frozen=True, kw_only=True)
class _Spelling:
    engine: str
    helpers: str  # remove_container() and the engine's other helpers
    helper_names: tuple[str, ...]  # the functions ``helpers`` defines, for `export -f`
    # The end of run_node's `run+=(--device /dev/kfd --device /dev/dri` line: what gives the container
    # the GPU device groups (docker's option on that line; podman's lines after it).
    groups: str
    init: str  # the run options of INIT=1
    init_check: str  # fetch_image's lines that make sure the node has the init ("" for none)
    missing_bind: str  # the comment on why an RDMA library is mounted only where it is a file
    shm: str  # the run options and comment for /dev/shm
    import_args: str  # after the importer's manifest argument
    node_image: str
    extra_args: str  # the DOCKER_ARGS expansion before the image, "" for none


def _remove_container(engine: str, exists: str) -> str:
    """remove_container(): the container is removed when ``exists`` (a shell test) says it is there."""
    return f"""\
remove_container() {{
    if {exists}; then
        {engine} rm --force "$1" >/dev/null
        say "removed container $1"
    fi
}}"""


_DOCKER = _Spelling(
    engine="docker",
    helpers=_remove_container("docker", 'docker container inspect "$1" >/dev/null 2>&1'),
    helper_names=("remove_container",),
    groups=" --group-add video)",
    init="--init",
    init_check="",
    missing_bind="""\
    # -f, never -e: docker creates a DIRECTORY at a missing bind source, and that directory then breaks
    # every later run on this node ("OCI runtime create failed: ... not a directory").""",
    shm=' --shm-size "$SHM_SIZE"',
    import_args="",
    node_image="""\
# What this node's engine calls the image: its ID, or (containerd image store) its manifest's digest.
node_image() {
    if docker image inspect "$IMAGE" >/dev/null 2>&1; then echo "$IMAGE"; else echo "$IMAGE_MANIFEST"; fi
}""",
    extra_args='"${DOCKER_ARGS[@]}" ',
)

_PODMAN_INIT = """\
# The init podman's --init runs as PID 1. Podman looks only where containers.conf's init_path says
# (/usr/libexec/podman/catatonit unless set), so a node with tini but no catatonit fails every such
# container ("container-init binary not found on the host"): the job names the init it finds.
podman_init() {
    local init found=()
    mapfile -t found < <(command -v catatonit tini-static tini || true)
    for init in /usr/libexec/podman/catatonit "${found[@]}"; do
        if [[ -x $init ]]; then
            echo "$init"
            return 0
        fi
    done
    return 1
}"""

_PODMAN = _Spelling(
    engine="podman",
    helpers=_remove_container("podman", 'podman container exists "$1"') + "\n\n" + _PODMAN_INIT,
    helper_names=("remove_container", "podman_init"),
    groups=""")
        # The task's own groups (video and render own the GPU devices) in the container: crun keeps
        # them with keep-groups; runc ignores keep-groups and starts the container with no
        # supplementary group at all, so there each is added by number (rootless podman keeps groups
        # only with crun).
        if [[ $(podman info --format '{{.Host.OCIRuntime.Name}}') == crun ]]; then
            run+=(--group-add keep-groups)
        else
            local gid
            for gid in $(id -G); do run+=(--group-add "$gid"); done
        fi""",
    init='--init --init-path "$(podman_init)"',
    init_check="""
    if ((INIT)) && ! podman_init >/dev/null; then
        say "podman has no init on ${SLURMD_NODENAME:-$(hostname)} (no catatonit or tini): install catatonit, or render with --no-init"
        return 127
    fi""",
    missing_bind="""\
    # -f, never -e: a missing bind source fails `podman run` ("no such file or directory"), and a
    # directory there would be mounted over the library.""",
    shm="",
    import_args=" --runtime podman",
    node_image="""\
# What podman calls the image once loaded or pulled: its ID.
node_image() { echo "$IMAGE"; }""",
    extra_args="",
)


_WAIT = wait_and_record("$CONTAINER", "the trap has stopped the container, so the client ends too.")


def _run_node(s: _Spelling) -> str:
    shm_note = (
        ""
        if s.shm
        else "\n    # No --shm-size: podman refuses one beside --ipc host, where /dev/shm is the host's anyway."
    )
    return f"""\
# Step 2, on every node: one container that runs the launcher.
run_node() {{
    settings
    CONTAINER=$(container_name)
    # Host networking: vLLM's rendezvous, the API and the barrier use the nodes' own addresses.
    # Host IPC: vLLM's processes share memory.{shm_note}
    local run=({s.engine} run --name "$CONTAINER" --network host --ipc host{s.shm})
    # As the reference runs it: for profilers and ROCm's debugging tools.
    run+=(--cap-add SYS_PTRACE --security-opt seccomp=unconfined)
    local limit lib var status=0 client image
    image=$(node_image)
    for limit in "${{ULIMITS[@]}}"; do run+=(--ulimit "$limit"); done
    if ((INIT)); then run+=({s.init}); fi
    if [[ -n $JIT_CACHE ]]; then
        jit_cache_dirs
        run+=(--volume "$JIT_CACHE/vllm_cache:@VLLM_CACHE_MOUNT@" --volume "$JIT_CACHE/mori:@MORI_JIT_MOUNT@")
    fi
    if ((GPU_DEVICES)); then
        run+=(--device /dev/kfd --device /dev/dri{s.groups}
        if [[ -e /dev/infiniband ]]; then run+=(--device /dev/infiniband); fi
    fi
{s.missing_bind}
    for lib in "${{RDMA_LIBS[@]}}"; do
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
    for var in "${{EXTRA_ENV[@]}}"; do run+=(--env "$var"); done
    # `--env NAME` without a value: {s.engine} copies it from this task's environment.
    for var in "${{PASS_ENV[@]}}"; do run+=(--env "$var"); done
    run+=({s.extra_args}"$image" python3 @LAUNCHER@)

    # A leftover of an earlier attempt of this job (a requeue) would make `{s.engine} run` fail on the name.
    remove_container "$CONTAINER"
    # Killing the `{s.engine} run` client does not stop its container, so this task does. SIGTERM comes from
    # SLURM (a peer failed under --kill-on-bad-exit, scancel, the wall time): `{s.engine} stop` lets the
    # launcher raise the sentinel and stop vLLM in order. On exit, the container is removed.
    trap 'remove_container "$CONTAINER"' EXIT
    trap 'say "stopping $CONTAINER"; {s.engine} stop --time "$STOP_TIMEOUT_S" "$CONTAINER" >/dev/null 2>&1 || true' TERM INT
    say "starting $CONTAINER: node $SLURM_NODEID of $SLURM_NNODES, head $MASTER_ADDR"
{_WAIT}"""


_CLEANUP = """\
# Step 3, on every node: remove this job's container, whatever happened (a task that SLURM killed with
# SIGKILL after KillWait had no chance to).
cleanup_node() {
    settings
    remove_container "$(container_name)"
}"""
_RUN_STEP = '"${step[@]}" --kill-on-bad-exit=1 --label bash -euo pipefail -c run_node || status=$?'
_CLEANUP_STEP = (
    '"${step[@]}" --label bash -euo pipefail -c cleanup_node || say "the cleanup step failed: '
    'look for containers named colocated_${RECIPE}_${SLURM_JOB_ID}_node*"'
)


def _image_settings(engine: str, job: Job) -> str:
    if isinstance(job.image, PulledImage):
        return (
            f"    # The image by digest: {engine} checks the digest on pull, and every node runs the same bits.\n"
            f"    IMAGE={quote(job.image.reference)}"
        )
    store = (
        "    # The image the manifest records: its ID on graph-driver stores, and on the containerd image\n"
        "    # store (which names images by their manifest) its manifest's digest.\n"
        f"    IMAGE={quote(job.image.image_id)}\n"
        f"    IMAGE_MANIFEST={quote(job.image.manifest_digest or job.image.image_id)}"
        if engine == "docker"
        else f"    # The image the manifest records: its ID, which `podman image inspect` must report.\n"
        f"    IMAGE={quote(job.image.image_id)}"
    )
    return (
        "    # The archive on shared storage: its manifest, and the importer `imagebuild export` wrote beside\n"
        f"    # it (the nodes need only python3 and {engine}).\n"
        f"    ARCHIVE_MANIFEST={quote(job.image.manifest)}\n"
        f"    ARCHIVE_IMPORTER={quote(job.image.importer)}\n" + store
    )


def _fetch(s: _Spelling, job: Job) -> str:
    engine = s.engine
    need = (
        ""
        if engine == "docker"
        else f"""
    if ! command -v {engine} >/dev/null; then
        say "{engine} is not installed on ${{SLURMD_NODENAME:-$(hostname)}}: this job needs it on every node (or use another --runtime)"
        return 127
    fi{s.init_check}"""
    )
    if isinstance(job.image, PulledImage):
        return f"""\
# Step 1, on every node: pull the image by digest.
fetch_image() {{
    settings{need}
    say "pulling $IMAGE"
    {engine} pull --quiet "$IMAGE" >/dev/null
    say "image present: $({engine} image inspect --format '{{{{.Id}}}}' "$IMAGE")"
}}

node_image() {{ echo "$IMAGE"; }}"""
    assert isinstance(job.image, ArchivedImage)
    return f"""\
# Step 1, on every node: import the archive. The importer checks its size and sha256 while loading it,
# refuses an image whose ID differs from the manifest's, and returns at once when the image is present.
fetch_image() {{
    settings{need}
    say "importing $ARCHIVE_MANIFEST"
    python3 "$ARCHIVE_IMPORTER" "$ARCHIVE_MANIFEST"{s.import_args} >/dev/null
    say "image present: $(node_image)"
}}

{s.node_image}"""


def _source(job: Job) -> str:
    if isinstance(job.image, PulledImage):
        return "pulls the image by digest"
    return "imports the image from the archive on shared storage, verified"


def _engine(s: _Spelling, notes: dict[str, str | None]) -> Runtime:
    def tools(job: Job) -> str:
        return s.engine if isinstance(job.image, PulledImage) else f"{s.engine} and python3 (the importer)"

    return Runtime(
        name=s.engine,
        kinds=(DOCKER_ARCHIVE, OCI_ARCHIVE),
        pulls=True,
        tools=tools,
        source=_source,
        image_settings=lambda job: _image_settings(s.engine, job),
        settings_notes=notes,
        fetch=lambda job: _fetch(s, job),
        helpers=s.helpers,
        run_node=_run_node(s),
        cleanup=_CLEANUP,
        functions=(
            *s.helper_names,
            "node_address",
            "fetch_image",
            "node_image",
            "run_node",
            "cleanup_node",
        ),
        run_step=_RUN_STEP,
        cleanup_step=_CLEANUP_STEP,
    )


DOCKER = _engine(_DOCKER, {})
PODMAN = _engine(
    _PODMAN,
    {
        "STOP_TIMEOUT_S": "    # What `podman stop` gives the launcher (sentinel, then vLLM) before SIGKILL; below SLURM's KillWait.",
        "INIT": "    # 1: podman's init (catatonit) is the container's PID 1, so a SIGTERM that comes before the launcher\n"
        "    # has set its handlers is still delivered, and the job ends in seconds, not after STOP_TIMEOUT_S.",
        "DEVICES": "    # 1: the ROCm devices (/dev/kfd, /dev/dri, and /dev/infiniband where present) and the task's groups.",
        "NO_DEVICES": "    # 0 (rendered with --no-devices, for machines without GPUs); 1: the ROCm devices and the task's groups.",
        "SHM_SIZE": None,  # podman refuses --shm-size beside --ipc host ("cannot set shmsize ...")
        "DOCKER_ARGS": None,
    },
)
