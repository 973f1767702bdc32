"""The sbatch job of `imagebuild slurm`, run for real on the sample cluster (two SLURM nodes on this
host, each with its own Docker engine) with the sample image, whose stand-in vLLM keeps the real
start-up contract: the head waits for its --headless worker, prints the readiness line and serves
/health and /v1/models; the worker runs until the launcher stops it. The image reaches the nodes by
`imagebuild publish` (every node pulls by digest) or `imagebuild export` (every node imports the
archive from a shared directory with the importer shipped beside it).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.cli import main
from sampleworld.cluster import Cluster
from sampleworld.world import World
from tests.integration.cluster_support import (
    CRASHING_WORKER,
    JobDirs,
    benchmark_results,
    cancel_once_serving,
    corrupt_one_byte,
    crashed_worker_ended_the_job,
    fails_before_any_container,
    job_containers,
    lines_of,
    node_has_image,
    remove_image,
    removed_every_container,
    render_job,
    submit_and_wait,
    submit_until_ready,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

NODES = ("node1", "node2")


@pytest.fixture(scope="module")
def published(published_sample_image: str) -> str:
    return published_sample_image


def _no_job_containers(cluster: Cluster) -> None:
    for node in NODES:
        assert job_containers(cluster, node) == [], f"a job container was left on {node}"


def test_registry_path_every_node_pulls_by_digest_serves_and_stops(
    sample_cluster: Cluster, sample_image: dict[str, object], published: str, tmp_path: Path
) -> None:
    image_id = str(sample_image["image_id"])
    for node in NODES:
        remove_image(sample_cluster, node, image_id)
    dirs = JobDirs.create(tmp_path)
    # A host RDMA library this "node" has, and one it lacks: only the first may be mounted, and the
    # second must not appear on the host as a directory (what docker makes of a missing bind source).
    present, missing = (
        tmp_path / "hostlibs" / "libfake.so.1",
        tmp_path / "hostlibs" / "absent" / "libgone.so.1",
    )
    present.parent.mkdir()
    present.write_bytes(b"\x7fELF stand-in")
    rdma = (
        "--rdma-lib",
        str(present),
        "--rdma-lib",
        str(missing),
        "--env",
        f"EXPECT_FILES={present}:{missing}",
    )
    # The nodes' host JIT cache, with the lock a job killed mid-compile left two hours ago: the
    # launcher's cleanup must find it there, through the mount over the image's cache dir.
    jit = tmp_path / "jit"
    stale = jit / "vllm_cache" / "aiter_jit" / "build" / "lock_module_moe"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    render_job(sample_cluster, dirs, "--image", published, extra=(*rdma, "--jit-cache", str(jit)))

    result = submit_and_wait(sample_cluster, dirs)
    print(f"registry-path job {result.job_id}: {result.state} {result.exit_code} in {result.seconds:.1f}s")

    assert (result.state, result.exit_code) == ("COMPLETED", "0:0"), result.output
    for task, node in enumerate(NODES):
        # Pulled by digest on each node's own engine: the same image ID everywhere.
        assert node_has_image(sample_cluster, node, published), node
        assert node_has_image(sample_cluster, node, image_id), node
        assert f"pulling {published}" in "\n".join(lines_of(result, task))
    head, worker = lines_of(result, 0), lines_of(result, 1)
    assert "INFO:     Application startup complete." in head
    assert any("rank 1 joined the head" in line for line in worker)
    models, files = benchmark_results(result)
    assert models == ["kimi-k3"]
    assert files == {str(present): True, str(missing): False}
    assert not missing.parent.exists(), "a missing RDMA library was bind-mounted (docker made a directory)"
    # The head's sentinel stopped the worker.
    assert (result.log_dir / ".shutdown").is_file()
    assert any("the head raised /run_logs/" in line and "stopping vLLM" in line for line in worker)
    assert (result.log_dir / "node0.exit").read_text().strip() == "0"
    assert (result.log_dir / "node1.exit").read_text().strip() == "0"
    assert not stale.exists(), "the stale lock in the host JIT cache was not cleaned up"
    assert any(f"removed a stale AITER JIT lock /opt/vllm_cache/aiter_jit/build/{stale.name}" in line for line in head + worker)
    assert (jit / "mori").is_dir()
    # The reference's log names, one per node.
    assert sorted(p.name for p in result.log_dir.glob("colocated_bench_NODE*.log")) == [
        "colocated_bench_NODE0.log", "colocated_bench_NODE1.log",
    ]  # fmt: skip
    _no_job_containers(sample_cluster)


def test_a_crashing_worker_fails_the_job_with_its_log_tail_and_leaves_no_container(
    sample_cluster: Cluster, published: str, tmp_path: Path
) -> None:
    dirs = JobDirs.create(tmp_path)
    render_job(sample_cluster, dirs, "--image", published, extra=CRASHING_WORKER)

    result, ready = submit_until_ready(sample_cluster, dirs)
    # The head did not wait for the wall time: it was stopped when the worker's task failed.
    crashed_worker_ended_the_job("docker", result, ready)
    worker = lines_of(result, 1)
    tail_start = next(
        i for i, line in enumerate(worker) if line.startswith("--- last ") and "vLLM output" in line
    )
    assert any("RuntimeError: sample vLLM worker rank 1 crashed" in line for line in worker[tail_start:])
    _no_job_containers(sample_cluster)


def test_a_cancelled_job_stops_and_removes_every_nodes_container(
    sample_cluster: Cluster, published: str, tmp_path: Path
) -> None:
    dirs = JobDirs.create(tmp_path)
    render_job(sample_cluster, dirs, "--image", published, extra=("--benchmark-cmd", "sleep 300"))

    def running() -> None:
        assert len([n for node in NODES for n in job_containers(sample_cluster, node)]) == 2

    result = cancel_once_serving("docker", sample_cluster, dirs, running)

    _no_job_containers(sample_cluster)
    removed_every_container(result)


@pytest.fixture(scope="module")
def exported(sample_export: Callable[[str], Path]) -> Path:
    """The sample image's docker archive in a directory every node sees: its manifest."""
    return sample_export("docker")


def _donor_archive(world: World, directory: Path) -> tuple[Path, dict[str, object]]:
    """The tiny donor image (FROM scratch) exported: a quick archive for jobs that must fail at import."""
    directory.mkdir()
    assert main(["export", world.donor_image, "--output", str(directory), "--compress", "none"]) == 0
    (manifest,) = directory.glob("*.json")
    return manifest, json.loads(manifest.read_text())


def test_registry_less_path_node2_imports_the_archive_and_the_job_serves(
    sample_cluster: Cluster, sample_image: dict[str, object], exported: Path, tmp_path: Path
) -> None:
    image_id = str(sample_image["image_id"])
    remove_image(sample_cluster, "node2", image_id)  # node2's engine has never seen it
    dirs = JobDirs.create(tmp_path)
    render_job(sample_cluster, dirs, "--archive", str(exported))

    result, ready = submit_until_ready(sample_cluster, dirs)
    print(
        f"registry-less job {result.job_id}: head ready {ready:.1f}s after sbatch; "
        f"{result.state} {result.exit_code} in {result.seconds:.1f}s"
    )

    assert (result.state, result.exit_code) == ("COMPLETED", "0:0"), result.output
    assert node_has_image(sample_cluster, "node2", image_id)
    node2 = "\n".join(lines_of(result, 1))
    assert f"imagebuild-import: {image_id} verified and loaded" in node2
    assert "INFO:     Application startup complete." in lines_of(result, 0)
    assert benchmark_results(result)[0] == ["kimi-k3"]
    assert any("the head raised /run_logs/" in line for line in lines_of(result, 1))
    _no_job_containers(sample_cluster)


def test_a_corrupted_archive_fails_the_job_on_the_nodes_reading_it_before_any_container_starts(
    sample_cluster: Cluster, world: World, tmp_path: Path
) -> None:
    manifest, data = _donor_archive(world, tmp_path / "images")
    archive = manifest.parent / str(data["archive"])
    corrupt_one_byte(archive)
    for node in NODES:
        remove_image(sample_cluster, node, str(data["image_id"]))
    dirs = JobDirs.create(tmp_path / "job")
    render_job(sample_cluster, dirs, "--archive", str(manifest))

    result = submit_and_wait(sample_cluster, dirs)
    print(
        f"corrupted-archive job {result.job_id}: {result.state} {result.exit_code} in {result.seconds:.1f}s"
    )

    # Each node read the archive and says why it refused it; the job's status is the importer's
    # integrity exit code; nothing was left on either engine.
    fails_before_any_container(result, "7:0")
    for task, node in enumerate(NODES):
        reason = f"imagebuild-import: error: archive {archive}: sha256 mismatch"
        assert any(reason in line for line in lines_of(result, task)), node
        assert not node_has_image(sample_cluster, node, str(data["image_id"])), node
    _no_job_containers(sample_cluster)


def test_an_archive_whose_image_id_differs_from_its_manifest_is_refused(
    sample_cluster: Cluster, world: World, tmp_path: Path
) -> None:
    manifest, data = _donor_archive(world, tmp_path / "images")
    loaded = str(data["image_id"])
    claimed = "sha256:" + "0" * 64  # what the manifest says, and no node has
    manifest.write_text(json.dumps({**data, "image_id": claimed}))
    for node in NODES:
        remove_image(sample_cluster, node, loaded)
    dirs = JobDirs.create(tmp_path / "job")
    render_job(sample_cluster, dirs, "--archive", str(manifest))

    result = submit_and_wait(sample_cluster, dirs)
    print(f"other-image-id job {result.job_id}: {result.state} {result.exit_code} in {result.seconds:.1f}s")

    fails_before_any_container(result, "7:0")
    for task, node in enumerate(NODES):
        reason = f"the engine loaded {loaded}, but {manifest} says {claimed}"
        assert any(reason in line for line in lines_of(result, task)), node
        assert not node_has_image(sample_cluster, node, loaded), node
    _no_job_containers(sample_cluster)
