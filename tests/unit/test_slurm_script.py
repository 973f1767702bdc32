"""The sbatch script `imagebuild slurm` renders: golden files, `bash -n`, shellcheck, and what it guards.

Set UPDATE_GOLDEN=1 to rewrite tests/unit/golden/slurm/*.sbatch, then review the diff by eye.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from imagebuild.slurm.job import ArchivedImage, Job, JobRequest, PulledImage, make_job
from imagebuild.slurm.recipe import check_topology
from imagebuild.slurm.script import render_script
from imagebuild.testing import dev_tool

GOLDEN_DIR = Path(__file__).parent / "golden" / "slurm"
DIGEST = "sha256:" + "0123456789abcdef" * 4
IMAGE = PulledImage(reference=f"registry.example:5000/imagebuild/kimi-k3@{DIGEST}")
ARCHIVE = ArchivedImage(
    manifest="/shared/images/kimi-k3-0123456789ab.tar.zst.json",
    importer="/shared/images/imagebuild-import.pyz",
    image_id="sha256:" + "fedcba9876543210" * 4,
)
SQUASHFS = ArchivedImage(
    manifest="/shared/images/kimi-k3-fedcba987654.sqfs.json",
    importer="/shared/images/imagebuild-import.pyz",
    image_id="sha256:" + "fedcba9876543210" * 4,
    kind="squashfs",
    archive="/shared/images/kimi-k3-fedcba987654.sqfs",
)
CASES = {
    "registry": JobRequest(
        nodes=2,
        recipe="kimi-k3",
        variant="pp2xtp8",
        model_path="/models/kimi-k3",
        image=IMAGE,
        partition="mi300x",
        time="02:30:00",
        log_dir="/shared/logs",
        benchmark_cmd="python3 /bench/run.py --model 'Kimi K3' --requests 64",
        env=("HF_HUB_OFFLINE=1",),
        pass_env=("HF_TOKEN",),
        docker_args=("--volume=/shared/cache:/root/.cache",),
        sbatch_args=("--account=llm", "--exclusive"),
    ),
    "archive-no-devices": JobRequest(
        nodes=2,
        recipe="kimi-k3",
        variant="moriep",
        model_path="/models/kimi-k3",
        image=ARCHIVE,
        gpu_devices=False,
        serve_port=18000,
        master_port=18001,
        barrier_port=18002,
        ulimits=("nofile=20000:20000", "memlock=8388608:8388608"),
        default_rdma_libs=False,
    ),
    "podman-registry": JobRequest(
        nodes=2, recipe="kimi-k3", variant="pp2xtp8", model_path="/models/kimi-k3", image=IMAGE,
        log_dir="/shared/logs", pass_env=("HF_TOKEN",), runtime="podman",
    ),
    "podman-archive": JobRequest(
        nodes=2, recipe="kimi-k3", variant="pp2xtp8", model_path="/models/kimi-k3", image=ARCHIVE,
        gpu_devices=False, runtime="podman",
    ),
    "charliecloud": JobRequest(
        nodes=2, recipe="kimi-k3", variant="pp2xtp8", model_path="/models/kimi-k3", image=SQUASHFS,
        log_dir="/shared/logs", env=("HF_HUB_OFFLINE=1",), pass_env=("HF_TOKEN",), runtime="charliecloud",
    ),
    "pyxis": JobRequest(
        nodes=2, recipe="kimi-k3", variant="pp2xtp8", model_path="/models/kimi-k3", image=SQUASHFS,
        log_dir="/shared/logs", env=("HF_HUB_OFFLINE=1",), pass_env=("HF_TOKEN",), runtime="pyxis",
    ),
}  # fmt: skip


def render(name: str) -> str:
    job = make_job(CASES[name])
    return render_script(job, check_topology(job), version="0.0.0-test")


@pytest.fixture(params=sorted(CASES))
def script(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / f"{request.param}.sbatch"
    path.write_text(render(request.param))
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_script_matches_golden(name: str) -> None:
    text = render(name)
    golden = GOLDEN_DIR / f"{name}.sbatch"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()


def test_bash_parses_the_script(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_shellcheck_is_clean(script: Path) -> None:
    shellcheck = dev_tool("shellcheck")
    done = subprocess.run(
        [shellcheck, "--shell=bash", str(script)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout


def test_sbatch_directives_come_before_the_first_command(script: Path) -> None:
    """sbatch stops reading #SBATCH lines at the first command."""
    lines = script.read_text().splitlines()
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    directives = [i for i, line in enumerate(lines) if line.startswith("#SBATCH")]
    assert directives
    assert max(directives) < first_command
    text = script.read_text()
    assert "#SBATCH --ntasks-per-node=1\n" in text
    assert re.search(r"^#SBATCH --time=\S+$", text, re.MULTILINE), "the wall time must be explicit"


def test_every_node_gets_the_image_before_any_container_starts() -> None:
    text = render("registry")
    main = text[text.index("main() {") :]
    fetch = main.index("-c fetch_image")
    run = main.index("-c run_node")
    cleanup = main.index("-c cleanup_node")
    assert fetch < run < cleanup
    # The image step fails the job by itself; the run step is never reached. Every node finishes its
    # own attempt: only the run step kills the other nodes when one fails.
    failed = main[fetch : main.index("\n    fi\n", fetch)]
    assert "if ((status != 0)); then" in failed
    assert failed.rstrip().endswith('exit "$status"')
    assert '"${step[@]}" --label bash -euo pipefail -c fetch_image' in main
    assert f"IMAGE={IMAGE.reference}" in text
    assert 'docker pull --quiet "$IMAGE"' in text


def test_archive_jobs_import_with_the_shipped_importer_and_run_the_image_id() -> None:
    text = render("archive-no-devices")
    assert f"ARCHIVE_MANIFEST={ARCHIVE.manifest}" in text
    assert f"ARCHIVE_IMPORTER={ARCHIVE.importer}" in text
    assert f"IMAGE={ARCHIVE.image_id}" in text
    assert 'python3 "$ARCHIVE_IMPORTER" "$ARCHIVE_MANIFEST"' in text
    assert "docker pull" not in text


def test_a_failed_node_ends_the_job_and_containers_go_whatever_happens() -> None:
    text = render("registry")
    assert "--kill-on-bad-exit=1 --label bash -euo pipefail -c run_node" in text
    assert "trap 'remove_container \"$CONTAINER\"' EXIT" in text
    assert 'docker stop --time "$STOP_TIMEOUT_S" "$CONTAINER"' in text
    assert '"${step[@]}" --label bash -euo pipefail -c cleanup_node' in text
    assert 'container_name() { echo "colocated_${RECIPE}_${SLURM_JOB_ID}_node${SLURM_NODEID}"; }' in text
    # The job's status is the head's.
    assert 'head=$(cat "$job_dir/node0.exit" 2>/dev/null) || head=$status' in text
    assert 'exit "$head"' in text


def test_rdma_libraries_are_mounted_only_when_regular_files() -> None:
    text = render("registry")
    assert 'if [[ -f $lib ]]; then run+=(--volume "$lib:$lib:ro"); fi' in text
    assert "-e $lib" not in text
    assert "/usr/lib/x86_64-linux-gnu/libibverbs.so.1" in text
    assert "RDMA_LIBS=()" in render("archive-no-devices")


def test_devices_and_options_of_the_reference_launcher() -> None:
    text = render("registry")
    for option in (
        "--network host",
        "--ipc host",
        '--shm-size "$SHM_SIZE"',
        "--cap-add SYS_PTRACE",
        "--security-opt seccomp=unconfined",
        "--device /dev/kfd --device /dev/dri --group-add video",
        "--device /dev/infiniband",
        '--volume "$LOG_DIR:/run_logs"',
        '--volume "$MODEL_PATH:$MODEL_PATH:ro"',
    ):
        assert option in text
    assert "GPU_DEVICES=1" in text
    assert "ULIMITS=(nofile=524288:524288 memlock=-1:-1)" in text
    assert "GPU_DEVICES=0" in render("archive-no-devices")


def test_values_are_quoted_and_secrets_stay_in_the_environment() -> None:
    text = render("registry")
    assert "BENCHMARK_CMD='python3 /bench/run.py --model '\"'\"'Kimi K3'\"'\"' --requests 64'" in text
    assert "PASS_ENV=(HF_TOKEN)" in text
    assert "EXTRA_ENV=(HF_HUB_OFFLINE=1)" in text
    assert "DOCKER_ARGS=(--volume=/shared/cache:/root/.cache)" in text


def test_the_launcher_gets_rank_shape_and_addresses_from_slurm() -> None:
    text = render("registry")
    for env in (
        '"NODE_RANK=$SLURM_NODEID"',
        '"NNODES=$SLURM_NNODES"',
        '"MASTER_ADDR=$MASTER_ADDR"',
        '"IPADDRS=$IPADDRS"',
        '"SLURM_JOB_ID=$SLURM_JOB_ID"',
        "LOG_ROOT=/run_logs",
        '"CONTAINER_BARRIER_PORT=$BARRIER_PORT"',
    ):
        assert f"--env {env}" in text
    assert "MASTER_ADDR=${IPADDRS%%,*}" in text


def test_rendering_is_pure() -> None:
    assert render("registry") == render("registry")


def _job(**changes: object) -> Job:
    values = {**CASES["registry"].__dict__, **changes}
    return make_job(JobRequest(**values))  # type: ignore[arg-type]


def test_default_log_dir_is_decided_when_the_job_runs() -> None:
    job = _job(log_dir=None)
    text = render_script(job, check_topology(job), version="x")
    assert 'LOG_DIR="${SLURM_SUBMIT_DIR}/imagebuild-logs"' in text


EXPANDING_VALUE = 'run $(touch /tmp/pwned) `id` "q" \\x ${HOME}'


def test_a_value_with_command_substitution_is_literal_and_passes_shellcheck(tmp_path: Path) -> None:
    """Single quotes around `$(` are literal but fail shellcheck (SC2016): such values are double-quoted."""
    request = CASES["registry"]
    job = make_job(
        JobRequest(
            **{**request.__dict__, "benchmark_cmd": EXPANDING_VALUE, "env": (f"NOTE={EXPANDING_VALUE}",)}
        )
    )
    path = tmp_path / "expanding.sbatch"
    path.write_text(render_script(job, check_topology(job), version="0.0.0-test"))
    done = subprocess.run(
        [dev_tool("shellcheck"), "--shell=bash", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout
    quoted = '"run \\$(touch /tmp/pwned) \\`id\\` \\"q\\" \\\\x \\${HOME}"'
    assert quoted in path.read_text()
    shown = subprocess.run(["bash", "-c", f"printf %s {quoted}"], capture_output=True, text=True, check=True)
    assert shown.stdout == EXPANDING_VALUE


def test_every_function_but_main_reaches_the_nodes(script: Path) -> None:
    """The node tasks run in a fresh bash through srun: a function not exported is 'command not found'."""
    text = script.read_text()
    defined = set(re.findall(r"^([a-z_]+)\(\) \{", text, flags=re.MULTILINE)) - {"main"}
    (exported,) = re.findall(r"^\s*export -f (.+)$", text, flags=re.MULTILINE)
    assert defined == set(exported.split())


def _jit_cache_dirs(root: Path, jit_cache: str) -> subprocess.CompletedProcess[str]:
    """The rendered script's jit_cache_dirs, its per-user root moved under ``root``, run by bash."""
    text = render("registry")
    function = text[text.index("jit_cache_dirs() {") : text.index("\n}\n", text.index("jit_cache_dirs() {")) + 3]
    function = function.replace("/var/tmp/imagebuild-jit-cache-$UID", f"{root}/jit-$UID")
    program = f'settings() {{ JIT_CACHE="{jit_cache}"; }}\nsay() {{ echo "$*"; }}\n{function}set -euo pipefail\njit_cache_dirs\n'
    return subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=False)


def test_the_default_jit_cache_is_the_users_own_and_another_users_is_refused(tmp_path: Path) -> None:
    assert 'JIT_CACHE="/var/tmp/imagebuild-jit-cache-$UID/0123456789ab"\n' in render("registry")  # bash's $UID, on the node
    own = tmp_path / f"jit-{os.getuid()}"
    done = _jit_cache_dirs(tmp_path, f"{own}/0123456789ab")
    assert done.returncode == 0, done.stderr
    assert (own.stat().st_mode & 0o777, own.stat().st_uid) == (0o700, os.getuid())
    assert (own / "0123456789ab" / "vllm_cache").is_dir()
    assert (own / "0123456789ab" / "mori").is_dir()
    if os.getuid() != 0:
        return  # only root can give the directory to another user
    os.chown(own, 65534, 65534)  # as if another user had made it first in the shared /var/tmp
    refused = _jit_cache_dirs(tmp_path, f"{own}/0123456789ab")
    assert refused.returncode == 1
    assert refused.stdout == f"{own} is not yours (another user made it): remove it, or give --jit-cache or --no-jit-cache\n"


def test_a_jit_cache_the_user_names_is_used_as_it_is(tmp_path: Path) -> None:
    shared = tmp_path / "site-cache"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    done = _jit_cache_dirs(tmp_path, str(shared))
    assert done.returncode == 0, done.stderr
    assert (shared / "vllm_cache").is_dir()
    assert shared.stat().st_mode & 0o777 == 0o777  # not made private: --jit-cache is the user's choice


def test_charliecloud_sets_size_limits_in_bytes_as_docker_s_ulimit_does() -> None:
    """bash's `ulimit -l` counts KiB: --ulimit memlock=8388608 (8 MiB, as docker reads it) is 8192 there."""
    text = render("charliecloud")
    start = text.index('    for limit in "${ULIMITS[@]}"; do')
    loop = text[start : text.index("    done\n", start) + len("    done\n")]
    program = (
        'say() { echo "$*"; }\nULIMITS=(memlock=8388608:8388608 nofile=1024:1024)\n'
        f"{loop}ulimit -S -l; ulimit -H -l; ulimit -S -n\n"
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=False)
    assert done.stdout == "8192\n8192\n1024\n", done.stdout + done.stderr
