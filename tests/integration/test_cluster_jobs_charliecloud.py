"""The sbatch job of `imagebuild slurm --runtime charliecloud`, run for real on the sample cluster: Debian's
ch-run 0.31 (squashfuse built in) runs the sample image's squashfs where it lies, on both nodes.

A node "lacking the image" is the only kind there is: nothing is imported, so every node's step 1 is
the shipped importer's --check-only reading the squashfs from shared storage. The cases: the job
serving (the model mounted at the image's mount point and served under its own name, the host JIT
cache's stale AITER and MoRI locks removed through the mount though the job was submitted from a
home the image lacks, an RDMA library the image has no file for left out, said), a worker that dies, scancel (nothing of the job left running), a squashfs that is corrupted,
truncated or another image's, and a node without ch-run. Each job prints what it took:
docs/measured.md has the numbers of one run.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.inputs.layout import MODEL_MOUNT
from sampleworld.cluster import Cluster, node_without
from sampleworld.engines import pids_naming
from sampleworld.pytest_plugin import sample_world_state_dir
from sampleworld.world import World
from tests.integration.cluster_support import (
    CRASHING_WORKER,
    READY,
    JobDirs,
    benchmark_results,
    cancel_once_serving,
    corrupt_one_byte,
    crashed_worker_ended_the_job,
    fails_before_any_container,
    lines_of,
    render_job,
    submit_and_wait,
    submit_until_ready,
    wait_until_gone,
)
from tests.prerequisites import skip_or_fail

pytestmark = [pytest.mark.docker, pytest.mark.slow]

RUNTIME = "charliecloud"


@pytest.fixture(scope="module")
def squashfs(sample_export: Callable[[str], Path]) -> Path:
    """The sample image's squashfs on "shared storage": its manifest (the session's export)."""
    for tool in ("ch-run", "tar2sqfs"):
        if shutil.which(tool) is None:
            skip_or_fail(f"{tool} is not installed (scripts/ensure-docker.sh installs charliecloud and squashfs-tools-ng)")
    return sample_export("squashfs")


def _render(cluster: Cluster, dirs: JobDirs, manifest: Path, extra: tuple[str, ...] = ()) -> None:
    render_job(cluster, dirs, "--archive", str(manifest), extra=extra, runtime=RUNTIME)


def test_the_job_checks_the_squashfs_on_every_node_serves_and_stops(
    sample_cluster: Cluster,
    sample_image: dict[str, object],
    squashfs: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dirs = JobDirs.create(tmp_path)
    # An RDMA library this node has and the image has no file for (ch-run cannot make one in the
    # read-only squashfs): left out, and said.
    lib = tmp_path / "hostlibs" / "libfake.so.1"
    lib.parent.mkdir()
    lib.write_bytes(b"\x7fELF stand-in")
    # The nodes' host JIT cache, with the locks a job killed mid-compile left two hours ago: AITER's,
    # and MoRI's, which MoRI and the launcher look for under HOME.
    jit = tmp_path / "jit"
    stale = jit / "vllm_cache" / "aiter_jit" / "build" / "lock_module_moe"
    stale_mori = jit / "mori" / "jit" / ".ep_dispatch_gfx942.hsaco.lock"
    for lock in (stale, stale_mori):
        lock.parent.mkdir(parents=True)
        lock.write_text("")
        os.utime(lock, (time.time() - 7200, time.time() - 7200))
    extra = ("--rdma-lib", str(lib), "--env", f"EXPECT_FILES={lib}:{MODEL_MOUNT}/config.json", "--jit-cache", str(jit))
    _render(sample_cluster, dirs, squashfs, extra)
    # Submitted from a home the image lacks, as any user but root is: ch-run passes the task's HOME
    # through, and MoRI's JIT must still be the one the host cache is mounted at.
    home = tmp_path / "home" / "alice"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))

    result, ready = submit_until_ready(sample_cluster, dirs)
    print(
        f"charliecloud job {result.job_id}: head ready {ready:.1f}s after sbatch; "
        f"{result.state} {result.exit_code} in {result.seconds:.1f}s"
    )

    assert (result.state, result.exit_code) == ("COMPLETED", "0:0"), result.output
    archive = squashfs.parent / str(json.loads(squashfs.read_text())["archive"])
    for task in (0, 1):
        lines = "\n".join(lines_of(result, task))
        assert f"squashfs of {sample_image['image_id']}, size and sha256 as the manifest says" in lines
        assert f"image present: {archive}" in lines
        assert f"not mounting {lib}: the image has no file there to mount it over" in lines
    assert READY in lines_of(result, 0)
    models, files = benchmark_results(result)
    assert models == ["kimi-k3"]  # the model directory's name, though mounted at MODEL_MOUNT
    assert files == {str(lib): False, f"{MODEL_MOUNT}/config.json": True}
    assert (result.log_dir / ".shutdown").is_file()
    assert any("the head raised /run_logs/" in line and "stopping vLLM" in line for line in lines_of(result, 1))
    assert [(result.log_dir / f"node{n}.exit").read_text().strip() for n in (0, 1)] == ["0", "0"]
    assert not stale.exists(), "the stale lock in the host JIT cache was not cleaned up"
    assert not stale_mori.exists(), "MoRI's JIT was not the host cache's: HOME is not the image's"
    assert sorted(p.name for p in result.log_dir.glob("colocated_bench_NODE*.log")) == [
        "colocated_bench_NODE0.log", "colocated_bench_NODE1.log",
    ]  # fmt: skip
    assert wait_until_gone(sample_cluster, result.job_id) == []


def test_a_crashing_worker_fails_the_job_at_once(sample_cluster: Cluster, squashfs: Path, tmp_path: Path) -> None:
    dirs = JobDirs.create(tmp_path)
    _render(sample_cluster, dirs, squashfs, CRASHING_WORKER)

    result, ready = submit_until_ready(sample_cluster, dirs)
    crashed_worker_ended_the_job("charliecloud", result, ready)
    assert wait_until_gone(sample_cluster, result.job_id) == []


def test_a_cancelled_job_leaves_nothing_running(sample_cluster: Cluster, squashfs: Path, tmp_path: Path) -> None:
    archive = squashfs.parent / str(json.loads(squashfs.read_text())["archive"])
    dirs = JobDirs.create(tmp_path)
    _render(sample_cluster, dirs, squashfs, ("--benchmark-cmd", "sleep 300"))

    def running() -> None:
        assert len(pids_naming((str(archive),), ("ch-run",))) == 2

    result = cancel_once_serving("charliecloud", sample_cluster, dirs, running)

    assert (result.log_dir / ".shutdown").is_file()  # the head's teardown ran
    assert wait_until_gone(sample_cluster, result.job_id) == []


@pytest.fixture(scope="module")
def donor_squashfs(world: World, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """The tiny donor image (FROM scratch) as a squashfs: quick to check for jobs that must fail."""
    directory = tmp_path_factory.mktemp("donor-squashfs")
    assert main(["export", world.donor_image, "-o", str(directory), "--format", "squashfs"]) == 0
    (manifest,) = directory.glob("*.json")
    return manifest, json.loads(manifest.read_text())


def _damaged(how: str, donor: tuple[Path, dict[str, object]], squashfs: Path, directory: Path) -> tuple[Path, Path]:
    """A copy of the donor's squashfs and manifest, the squashfs damaged ``how``: (manifest, squashfs)."""
    manifest, data = donor
    directory.mkdir()
    for path in manifest.parent.iterdir():
        shutil.copy(path, directory / path.name)
    archive = directory / str(data["archive"])
    if how == "corrupted":
        corrupt_one_byte(archive)
    elif how == "truncated":
        with archive.open("r+b") as f:
            f.truncate(archive.stat().st_size // 2)
    else:  # another image's squashfs under this manifest's name: the sample image's
        shutil.copy(squashfs.parent / str(json.loads(squashfs.read_text())["archive"]), archive)
    return directory / manifest.name, archive


# How the squashfs is damaged -> what the importer's one line says.
DAMAGE = {
    "corrupted": "sha256 mismatch",
    "truncated": "bytes, the manifest says",
    "another-image": "another archive under its name",
}


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_squashfs_fails_the_job_on_every_node_before_anything_starts(
    sample_cluster: Cluster, donor_squashfs: tuple[Path, dict[str, object]], squashfs: Path, tmp_path: Path, how: str
) -> None:
    reason = DAMAGE[how]
    manifest, archive = _damaged(how, donor_squashfs, squashfs, tmp_path / "images")
    dirs = JobDirs.create(tmp_path / "job")
    _render(sample_cluster, dirs, manifest)

    result = submit_and_wait(sample_cluster, dirs)
    print(f"charliecloud {how}-squashfs job {result.job_id}: {result.state} {result.exit_code} in {result.seconds:.1f}s")

    fails_before_any_container(result, "7:0")
    for task in (0, 1):
        errors = [line for line in lines_of(result, task) if line.startswith("imagebuild-import: error:")]
        assert len(errors) == 1, result.output
        assert f"archive {archive}: " in errors[0]
        assert reason in errors[0], errors[0]


def test_a_node_without_ch_run_fails_the_job_naming_the_node(
    sample_cluster: Cluster, squashfs: Path, tmp_path: Path
) -> None:
    dirs = JobDirs.create(tmp_path)
    _render(sample_cluster, dirs, squashfs)
    with node_without(sample_world_state_dir(), "node2", ["ch-run"]):
        result = submit_and_wait(sample_cluster, dirs)
    print(f"charliecloud missing-binary job {result.job_id}: {result.state} {result.exit_code} in {result.seconds:.1f}s")

    fails_before_any_container(result, "127:0")
    assert "ch-run is not installed on node2: this job needs it on every node" in "\n".join(lines_of(result, 1))
