"""Extra Docker engines (sampleworld/engines.py): separate image stores, and the host left as it was."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sampleworld.engines import NodeEngine, ping, stop_engine
from sampleworld.world import World

pytestmark = pytest.mark.docker


def _docker(engine: NodeEngine | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
    if engine is not None:
        env["DOCKER_HOST"] = engine.host
    return subprocess.run(
        ["docker", *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_an_image_in_the_main_engine_is_absent_from_a_node_engine_until_pulled(
    world: World, node_engines: Callable[[str], NodeEngine]
) -> None:
    engine = node_engines("engine-test")
    assert _docker(None, "image", "inspect", world.donor_image).returncode == 0
    _docker(engine, "image", "rm", "--force", world.donor_image)
    assert _docker(engine, "image", "inspect", world.donor_image).returncode != 0
    assert _docker(engine, "pull", "--quiet", world.donor_image).returncode == 0
    main_id = _docker(None, "image", "inspect", "--format", "{{.Id}}", world.donor_image).stdout
    node_id = _docker(engine, "image", "inspect", "--format", "{{.Id}}", world.donor_image).stdout
    assert node_id == main_id


def test_a_node_engine_leaves_the_main_engines_bridge_alone(
    world: World, node_engines: Callable[[str], NodeEngine]
) -> None:
    engine = node_engines("engine-test")
    assert Path("/sys/class/net/docker0").exists(), "a node engine deleted the main engine's docker0"
    assert Path(f"/sys/class/net/{engine.bridge}").exists()
    stop_engine(engine)
    assert not ping(engine)
    assert not Path(f"/sys/class/net/{engine.bridge}").exists()
    assert not [line for line in Path("/proc/mounts").read_text().splitlines() if str(engine.run_dir) in line]
    assert Path("/sys/class/net/docker0").exists()
