"""The engine matrix, live: every engine answers at its DOCKER_HOST with the version and store it claims."""

from __future__ import annotations

import json
import subprocess

import pytest

from sampleworld.engine_matrix import ENGINE_NAMES, MatrixEngine

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_engine_answers_with_its_store(docker_engine_matrix: list[MatrixEngine], name: str) -> None:
    engine = next(e for e in docker_engine_matrix if e.name == name)
    out = subprocess.run(
        ["docker", "-H", engine.docker_host, "info", "--format", "{{json .}}"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    info = json.loads(out)
    assert info["ServerVersion"] == engine.version
    driver_status = dict(info.get("DriverStatus") or [])
    store = "containerd" if driver_status.get("driver-type") == "io.containerd.snapshotter.v1" else "classic"
    assert store == engine.kind
