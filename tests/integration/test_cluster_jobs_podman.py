"""The sbatch job of `imagebuild slurm --runtime podman`, run for real on the sample cluster: two SLURM
nodes on this host, each with a podman storage of its own (sampleworld/node_podman.py, chosen per node
by the TaskProlog), so an image pulled or loaded on node1 is absent on node2 until node2 gets it.

The same cases as docker's (test_cluster_jobs.py): the registry path (every node pulls by digest), the
registry-less path with node2 lacking the image (the OCI archive, loaded by the shipped importer's
`--runtime podman`), a corrupted or truncated archive that only the node lacking the image reads,
an archive whose image differs from its manifest's, a worker that dies, scancel, and a node without
podman. Each job prints what it took: docs/measured.md has the numbers of one run.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from imagebuild.cli import main
from sampleworld.cluster import Cluster, node_without
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
    docker_on,
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
PODMAN = "podman"


@pytest.fixture(scope="module", autouse=True)
def _node_storages_emptied_at_the_end(sample_cluster: Cluster) -> Iterator[None]:
    """The jobs leave the sample image (1 GB) in each node's podman storage; no later module reads
    them, so they are emptied rather than kept to the docker tier's end (its disk peak)."""
    yield
    for node in NODES:
        docker_on(sample_cluster, node, "image", "prune", "--all", "--force", engine=PODMAN)


def _no_job_containers(cluster: Cluster) -> None:
    for node in NODES:
        assert job_containers(cluster, node, PODMAN) == [], f"a job container was left in {node}'s podman"


def _render(cluster: Cluster, dirs: JobDirs, *source: str, extra: tuple[str, ...] = ()) -> None:
    render_job(cluster, dirs, *source, extra=extra, runtime=PODMAN)


def test_each_node_has_its_own_podman_storage(sample_cluster: Cluster) -> None:
    roots = {
        node: docker_on(sample_cluster, node, "info", "--format", "{{.Store.GraphRoot}}", check=True, engine=PODMAN)
        .stdout.strip()
        for node in NODES
    }  # fmt: skip
    assert len(set(roots.values())) == 2, roots


def test_registry_path_every_node_pulls_by_digest_serves_and_stops(
    sample_cluster: Cluster, sample_image: dict[str, object], published_sample_image: str, tmp_path: Path
) -> None:
    image_id = str(sample_image["image_id"])
    for node in NODES:
        remove_image(sample_cluster, node, image_id, PODMAN)
    dirs = JobDirs.create(tmp_path)
    _render(sample_cluster, dirs, "--image", published_sample_image)

    result = submit_and_wait(sample_cluster, dirs)
    print(f"podman registry-path job {result.job_id}: {result.state} {result.exit_code} in {result.seconds:.1f}s")

    assert (result.state, result.exit_code) == ("COMPLETED", "0:0"), result.output
    for task, node in enumerate(NODES):
        assert node_has_image(sample_cluster, node, image_id, PODMAN), node
        assert f"pulling {published_sample_image}" in "\n".join(lines_of(result, task))
    assert READY in lines_of(result, 0)
    assert benchmark_results(result)[0] == ["kimi-k3"]
    assert any("the head raised /run_logs/" in line for line in lines_of(result, 1))
    assert (result.log_dir / "node1.exit").read_text().strip() == "0"
    _no_job_containers(sample_cluster)


def test_registry_less_path_node2_loads_the_oci_archive_and_the_job_serves(
    sample_cluster: Cluster, sample_image: dict[str, object], sample_export: Callable[[str], Path], tmp_path: Path
) -> None:
    image_id = str(sample_image["image_id"])
    manifest = sample_export("oci")
    remove_image(sample_cluster, "node2", image_id, PODMAN)  # node2's podman has never seen it
    dirs = JobDirs.create(tmp_path)
    _render(sample_cluster, dirs, "--archive", str(manifest))

    result, ready = submit_until_ready(sample_cluster, dirs)
    print(
        f"podman registry-less job {result.job_id}: head ready {ready:.1f}s after sbatch; "
        f"{result.state} {result.exit_code} in {result.seconds:.1f}s"
    )

    assert (result.state, result.exit_code) == ("COMPLETED", "0:0"), result.output
    assert node_has_image(sample_cluster, "node2", image_id, PODMAN)
    node2 = "\n".join(lines_of(result, 1))
    assert f"imagebuild-import: {image_id} verified and loaded in podman" in node2
    assert benchmark_results(result)[0] == ["kimi-k3"]
    assert any("the head raised /run_logs/" in line for line in lines_of(result, 1))
    _no_job_containers(sample_cluster)


def test_a_crashing_worker_fails_the_job_with_its_log_tail_and_leaves_no_container(
    sample_cluster: Cluster, published_sample_image: str, tmp_path: Path
) -> None:
    dirs = JobDirs.create(tmp_path)
    _render(sample_cluster, dirs, "--image", published_sample_image, extra=CRASHING_WORKER)

    crashed_worker_ended_the_job("podman", *submit_until_ready(sample_cluster, dirs))
    _no_job_containers(sample_cluster)


def test_a_cancelled_job_stops_and_removes_every_nodes_container(
    sample_cluster: Cluster, published_sample_image: str, tmp_path: Path
) -> None:
    dirs = JobDirs.create(tmp_path)
    _render(sample_cluster, dirs, "--image", published_sample_image, extra=("--benchmark-cmd", "sleep 300"))

    def running() -> None:
        assert len([n for node in NODES for n in job_containers(sample_cluster, node, PODMAN)]) == 2

    result = cancel_once_serving("podman", sample_cluster, dirs, running)

    _no_job_containers(sample_cluster)
    removed_every_container(result)


@pytest.fixture(scope="module")
def donor_oci(world: World, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """The tiny donor image (FROM scratch) as an OCI archive: quick to read for jobs that must fail."""
    directory = tmp_path_factory.mktemp("donor-oci")
    assert main(["export", world.donor_image, "-o", str(directory), "--format", "oci", "--compress", "none"]) == 0
    (manifest,) = directory.glob("*.json")
    return manifest, json.loads(manifest.read_text())


# How the OCI archive is damaged -> what node2's importer says.
DAMAGE = {"corrupted": "sha256 mismatch", "truncated": "bytes, the manifest says"}


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_a_damaged_archive_fails_the_job_on_the_node_that_reads_it(
    sample_cluster: Cluster, donor_oci: tuple[Path, dict[str, object]], tmp_path: Path, how: str
) -> None:
    manifest, data = donor_oci
    image_id = str(data["image_id"])
    # node1 has the image already (loaded from the intact archive), node2 does not.
    done = subprocess.run(
        ["python3", str(manifest.parent / "imagebuild-import.pyz"), str(manifest), "--runtime", "podman"],
        env={**os.environ, **sample_cluster.podman["node1"]}, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    remove_image(sample_cluster, "node2", image_id, PODMAN)
    copy = tmp_path / "images"
    copy.mkdir()
    for path in manifest.parent.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    archive = copy / str(data["archive"])
    if how == "corrupted":
        corrupt_one_byte(archive)
    else:
        with archive.open("r+b") as f:
            f.truncate(archive.stat().st_size // 2)
    dirs = JobDirs.create(tmp_path / "job")
    _render(sample_cluster, dirs, "--archive", str(copy / manifest.name))

    result = submit_and_wait(sample_cluster, dirs)
    print(f"podman {how}-archive job {result.job_id}: {result.state} {result.exit_code} in {result.seconds:.1f}s")

    fails_before_any_container(result, "7:0")
    assert any("already present in podman" in line for line in lines_of(result, 0))
    reason = f"imagebuild-import: error: archive {archive}: "
    assert any(reason in line and DAMAGE[how] in line for line in lines_of(result, 1)), result.output
    assert not node_has_image(sample_cluster, "node2", image_id, PODMAN)
    _no_job_containers(sample_cluster)


def test_an_archive_of_another_image_than_its_manifest_says_is_refused_and_removed(
    sample_cluster: Cluster, donor_oci: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    manifest, data = donor_oci
    loaded = str(data["image_id"])
    claimed = "sha256:" + "0" * 64  # what the manifest says, and no node has
    copy = tmp_path / "images"
    copy.mkdir()
    for path in manifest.parent.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    (copy / manifest.name).write_text(json.dumps({**data, "image_id": claimed}))
    for node in NODES:
        remove_image(sample_cluster, node, loaded, PODMAN)
    dirs = JobDirs.create(tmp_path / "job")
    _render(sample_cluster, dirs, "--archive", str(copy / manifest.name))

    result = submit_and_wait(sample_cluster, dirs)
    print(f"podman other-image job {result.job_id}: {result.state} {result.exit_code} in {result.seconds:.1f}s")

    fails_before_any_container(result, "7:0")
    for task, node in enumerate(NODES):
        assert any(f"but {copy / manifest.name} says {claimed}" in line for line in lines_of(result, task)), node
        assert not node_has_image(sample_cluster, node, loaded, PODMAN), node
    _no_job_containers(sample_cluster)


def test_a_node_without_podman_fails_the_job_naming_the_node_before_any_container(
    sample_cluster: Cluster, published_sample_image: str, tmp_path: Path
) -> None:
    dirs = JobDirs.create(tmp_path)
    _render(sample_cluster, dirs, "--image", published_sample_image)
    with node_without(sample_world_state_dir(), "node2", [PODMAN]):
        result = submit_and_wait(sample_cluster, dirs)
    print(f"podman missing-binary job {result.job_id}: {result.state} {result.exit_code} in {result.seconds:.1f}s")

    fails_before_any_container(result, "127:0")
    assert "podman is not installed on node2: this job needs it on every node" in "\n".join(lines_of(result, 1))
    assert not any("is not installed" in line for line in lines_of(result, 0))
    _no_job_containers(sample_cluster)
