"""A node engine started with DOCKER_TMPDIR on a disk of its own, where its copy of a load goes: the
import's room check, which reads the dockerd's DOCKER_TMPDIR, asks each disk for what goes there.

Its data root and its DOCKER_TMPDIR are each a tmpfs of 1.25 times the sample image's layers: the
load fits (once in each), and the check lets it through; asked twice in the data root, as before it
read DOCKER_TMPDIR, it refused. With the DOCKER_TMPDIR tmpfs shrunk to half the layers, the check
refuses in one line naming that directory, before a byte is read.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sampleworld import engines
from sampleworld.engines import NodeEngine, ensure_engine, stop_engine
from sampleworld.layout import StateDir
from sampleworld.pytest_plugin import sample_world_state_dir
from tests.integration.export_support import run_shipped_importer
from tests.integration.tmpfs import mount_tmpfs
from tests.prerequisites import skip_or_fail

pytestmark = [pytest.mark.docker]


@pytest.fixture(scope="module")
def tmpdir_node(sample_export: Callable[[str], Path]) -> Iterator[tuple[NodeEngine, Path, int]]:
    """(the engine, its DOCKER_TMPDIR, the layers' bytes): both disks a tmpfs of 1.25 times the layers."""
    if os.geteuid() != 0:
        skip_or_fail("a tmpfs for a node's disks needs root")
    layers = sum(layer["size"] for layer in json.loads(sample_export("docker").read_text())["layers"])
    node = engines.node_engine(StateDir(sample_world_state_dir().resolve()), "tmpdir-node")
    engine = dataclasses.replace(node, tmp_dir=node.root / "docker-tmp")
    stop_engine(engine)  # one a killed session left running
    mounted = []
    for point in (engine.data_root, engine.tmp_dir):
        assert point is not None
        point.mkdir(parents=True, exist_ok=True)
        if not point.is_mount():
            mount_tmpfs(point, layers * 5 // 4)
        mounted.append(point)
    try:
        ensure_engine(engine)
        yield engine, mounted[1], layers
    finally:
        stop_engine(engine)
        for point in mounted:
            subprocess.run(["umount", str(point)], check=False)


def _import(engine: NodeEngine, manifest: Path) -> subprocess.CompletedProcess[str]:
    return run_shipped_importer(manifest, env={"PATH": "/usr/bin:/bin", "DOCKER_HOST": engine.host})


def test_the_room_check_asks_docker_tmpdir_for_the_engine_s_copy(
    sample_export: Callable[[str], Path], tmpdir_node: tuple[NodeEngine, Path, int]
) -> None:
    engine, tmp_dir, layers = tmpdir_node
    manifest = sample_export("docker")
    loaded = _import(engine, manifest)
    assert loaded.returncode == 0, loaded.stderr
    assert "not enough disk" not in loaded.stderr
    image_id = json.loads(manifest.read_text())["image_id"]
    docker = ["docker", "--host", engine.host]
    subprocess.run([*docker, "image", "rm", "--force", image_id], check=True, capture_output=True)

    mount_tmpfs(tmp_dir, layers // 2, remount=True)
    refused = _import(engine, manifest)
    assert refused.returncode == 1, refused.stderr
    (line,) = refused.stderr.splitlines()  # refused before "loading ...": nothing was read
    assert f"{tmp_dir} has 0.5" in line
    assert f"once in {tmp_dir}: the engine's copy while it loads them (its DOCKER_TMPDIR)" in line
    assert "(the load's temporary copies alone go there: make room on that disk)" in line
    listed = subprocess.run([*docker, "image", "ls", "--all", "--quiet"], check=True, capture_output=True, text=True)
    assert listed.stdout == ""
