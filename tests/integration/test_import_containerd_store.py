"""A node on Docker's containerd image store: the import's room check, and what failed loads leave.

Its data root is a tmpfs of 1.25 times the sample image's layers, and the store needs them twice
there (each blob in the content store of the containerd its dockerd started, beside the snapshot it
unpacks). The main engine's and the matrix's containerds run beside it, their roots on another disk:
the check reads which containerd is this dockerd's, refuses at once naming its root, and leaves
nothing. With the check off, Docker 26 fails part-way ("failed to unpack loaded image") and keeps
the image whose content it stored; the import removes it, so its blobs go and, once the tmpfs is 2.5
times the layers, the next import loads the image rather than calling it present. (The layers it had
unpacked stay until containerd's next collection of snapshots: on the full disk it could not record
their removal, "snapshot garbage collection failed".)

Debian testing's Docker (28.5.2) answers the same load with HTTP 200 and a line of output, "Error
unpacking image ...": the import reads it as the load's failure and removes the image. A plain `docker
load` there exits 0 and leaves the image not unpacked, which its API (1.48 on) says; the import loads
it again, which unpacks it.

A load that breaks off (a corrupt archive) leaves the image's record with part of its content:
`docker image inspect` finds it, `docker image ls` does not, and it cannot run. A plain `docker load`
leaves one; the import loads such an image again, which completes it, and removes the one its own
failed load left.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.importer.docker_api import NOT_UNPACKED, WHOLE
from imagebuild.importer.socket_engine import SocketEngine
from sampleworld.debian_dist import fetch
from sampleworld.engine_matrix import MANAGED, ManagedEngine, managed_engine
from sampleworld.engines import NodeEngine, ensure_engine, stop_engine
from sampleworld.layout import StateDir
from sampleworld.pytest_plugin import sample_world_state_dir
from tests.integration.export_support import corrupt_copy, run_shipped_importer
from tests.integration.tmpfs import mount_tmpfs
from tests.prerequisites import skip_or_fail

pytestmark = [pytest.mark.docker]

DOCKER26_STORE, TESTING_STORE = (next(spec for spec in MANAGED if spec.name == name) for name in ("docker26-containerd", "forky-containerd"))


def _small_node(spec: ManagedEngine, name: str, sample_export: Callable[[str], Path]) -> Iterator[tuple[NodeEngine, int]]:
    """(the engine, the layers' bytes): its data root a tmpfs of 1.25 times the layers."""
    if os.geteuid() != 0:
        skip_or_fail("a tmpfs for a node's disk needs root")
    layers = sum(layer["size"] for layer in json.loads(sample_export("docker").read_text())["layers"])
    state = StateDir(sample_world_state_dir().resolve())
    fetch(state, spec.suite)
    engine = managed_engine(state, spec, name)
    stop_engine(engine)  # one a killed session left running
    engine.data_root.mkdir(parents=True, exist_ok=True)
    if not engine.data_root.is_mount():
        mount_tmpfs(engine.data_root, layers * 5 // 4)
    try:
        ensure_engine(engine)
        yield engine, layers
    finally:
        stop_engine(engine)
        subprocess.run(["umount", str(engine.data_root)], check=False)


@pytest.fixture(scope="module")
def small_node(sample_export: Callable[[str], Path]) -> Iterator[tuple[NodeEngine, int]]:
    yield from _small_node(DOCKER26_STORE, "small-containerd-node", sample_export)


@pytest.fixture(scope="module")
def small_testing_node(sample_export: Callable[[str], Path]) -> Iterator[tuple[NodeEngine, int]]:
    yield from _small_node(TESTING_STORE, "small-forky-node", sample_export)


def _import(engine: NodeEngine, manifest: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_shipped_importer(manifest, env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": engine.host, **env})


def _failed_load_leaves_nothing(engine: NodeEngine, manifest: Path, root: Path) -> str:
    """The import with the check off on the too small disk fails (exit 3) and removes the image the
    engine kept; containerd then collects its blobs. The failure's line."""
    failed = _import(engine, manifest, IMAGEBUILD_IMPORT_ROOM="off")
    assert failed.returncode == 3, failed.stderr
    engine_id = json.loads(manifest.read_text())["manifest_digest"]
    assert f"the engine kept {engine_id} of the failed load: removed, so the next import loads it again" in failed.stderr
    assert _images(engine) == ""
    blobs = root / "io.containerd.content.v1.content" / "blobs" / "sha256"
    deadline = time.monotonic() + 30  # containerd collects the blobs no image names after the removal
    while any(blobs.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(blobs.iterdir())
    return failed.stderr.splitlines()[-1]


def _images(engine: NodeEngine) -> str:
    listed = subprocess.run(
        ["docker", "--host", engine.host, "image", "ls", "--all", "--quiet"], check=True, capture_output=True, text=True
    )
    return listed.stdout


def test_the_containerd_store_s_room_is_checked_and_a_failed_load_leaves_nothing(
    sample_export: Callable[[str], Path], small_node: tuple[NodeEngine, int]
) -> None:
    engine, layers = small_node
    manifest = sample_export("docker")
    root = engine.data_root / "containerd" / "daemon"
    other_containerds = subprocess.run(["pgrep", "-c", "-x", "containerd"], capture_output=True, text=True, check=False)
    assert int(other_containerds.stdout or 0) >= 2  # this node's and at least the main engine's

    refused = _import(engine, manifest)
    assert refused.returncode == 1, refused.stderr
    (line,) = refused.stderr.splitlines()  # before "loading ...": nothing was read
    assert f"not enough disk on {os.uname().nodename} for this load: {root} has " in line
    assert f"twice in {root}: the engine's content store, and them unpacked" in line
    assert _images(engine) == ""

    assert "failed to unpack loaded image" in _failed_load_leaves_nothing(engine, manifest, root)
    engine_id = json.loads(manifest.read_text())["manifest_digest"]

    mount_tmpfs(engine.data_root, layers * 5 // 2, remount=True)
    loaded = _import(engine, manifest)
    assert loaded.returncode == 0, loaded.stderr
    assert "verified and loaded" in loaded.stdout + loaded.stderr
    assert set(_images(engine).split()) == {engine_id.removeprefix("sha256:")[:12]}  # a row per tag


def test_an_image_a_broken_off_load_left_is_loaded_again_and_one_the_import_left_is_removed(
    sample_image: dict[str, object], sample_export: Callable[[str], Path], small_node: tuple[NodeEngine, int], tmp_path: Path
) -> None:
    engine, layers = small_node
    mount_tmpfs(engine.data_root, layers * 7 // 2, remount=True)  # what the broken-off load left, and the load
    manifest = sample_export("docker")
    engine_id = json.loads(manifest.read_text())["manifest_digest"]
    docker = ["docker", "--host", engine.host]
    subprocess.run([*docker, "image", "rm", "--force", engine_id], check=False, capture_output=True)
    # Uncompressed, so that the flipped byte is in a layer, the tar whole: which blob a byte of a zstd
    # stream lands in, and whether it breaks the stream there, depends on the image.
    exported = _plain_export(sample_image, tmp_path / "export")
    (tmp_path / "copy").mkdir()
    corrupt = corrupt_copy(exported, tmp_path / "copy", in_largest_file=True)
    archive = corrupt.parent / json.loads(corrupt.read_text())["archive"]

    plain = subprocess.run([*docker, "load", "--input", str(archive)], capture_output=True, text=True, check=False)
    assert plain.returncode != 0
    assert _inspects(engine, engine_id)  # the record plain docker load left...
    assert _images(engine) == ""  # ... which the image list leaves out
    loaded = _import(engine, manifest)
    assert loaded.returncode == 0, loaded.stderr
    assert f"the engine holds {engine_id} with part of its content missing (a load that broke off): loading it again" in loaded.stderr
    assert set(_images(engine).split()) == {engine_id.removeprefix("sha256:")[:12]}
    ran = subprocess.run([*docker, "run", "--rm", "--network", "host", engine_id, "true"], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr

    subprocess.run([*docker, "image", "rm", "--force", engine_id], check=True, capture_output=True)
    refused = _import(engine, corrupt)
    assert refused.returncode == 7, refused.stderr
    assert f"the engine kept {engine_id} of the failed load: removed, so the next import loads it again" in refused.stderr
    assert "sha256 mismatch" in refused.stderr.splitlines()[-1]
    assert not _inspects(engine, engine_id)


def _plain_export(sample_image: dict[str, object], where: Path) -> Path:
    """The sample image exported uncompressed (an archive `docker load` reads as it is): its manifest."""
    assert main(["export", str(sample_image["image_id"]), "-o", str(where), "--compress", "none"]) == 0
    (exported,) = where.glob("*.json")
    return exported


def _inspects(engine: NodeEngine, image_id: str) -> bool:
    done = subprocess.run(["docker", "--host", engine.host, "image", "inspect", image_id], capture_output=True, check=False)
    return done.returncode == 0




def test_testing_s_docker_says_a_failed_unpack_in_its_output_and_an_image_left_not_unpacked_is_loaded_again(
    sample_image: dict[str, object], sample_export: Callable[[str], Path], small_testing_node: tuple[NodeEngine, int], tmp_path: Path
) -> None:
    engine, layers = small_testing_node
    manifest = sample_export("docker")
    engine_id = json.loads(manifest.read_text())["manifest_digest"]
    root = engine.data_root / "containerd" / "daemon"

    last = _failed_load_leaves_nothing(engine, manifest, root)
    assert f"refused to load the archive: Error unpacking image {engine_id}: " in last
    assert "no space left on device" in last

    exported = _plain_export(sample_image, tmp_path / "export")
    archive = exported.parent / json.loads(exported.read_text())["archive"]
    # Room for the content beside the layers the failed load had unpacked (kept until the next image
    # removal: containerd could not record theirs on the full disk), not to unpack it all again.
    mount_tmpfs(engine.data_root, layers * 3 // 2, remount=True)
    plain = subprocess.run(["docker", "--host", engine.host, "load", "--input", str(archive)], capture_output=True, text=True, check=False)
    assert plain.returncode == 0, plain.stderr  # the engine's answer was a success...
    assert f"Error unpacking image {engine_id}" in plain.stdout + plain.stderr  # ... with this line in it
    assert SocketEngine(engine.host).image_state(engine_id) == NOT_UNPACKED

    mount_tmpfs(engine.data_root, layers * 3, remount=True)
    loaded = _import(engine, manifest)
    assert loaded.returncode == 0, loaded.stderr
    assert f"the engine holds {engine_id} not unpacked (an unpack that failed): loading it again, which unpacks it" in loaded.stderr
    assert SocketEngine(engine.host).image_state(engine_id) == WHOLE
    ran = subprocess.run(["docker", "--host", engine.host, "run", "--rm", "--network", "host", engine_id, "true"], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr
