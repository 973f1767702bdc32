"""The sample image built on the engine matrix's other engines, each by `imagebuild build` in a process of its own.

The builds take minutes (the containerd store's commit of each step costs seconds) and share nothing
with the tests that run meanwhile but the sample world and the host's compile-cache address, so the
session starts them in the background with its first integration test (conftest's ``matrix_builds``)
and the engine-identity tests collect their records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sampleworld.engine_matrix import MatrixEngine
from tests import REPO
from tests.integration.image_support import CHECKOUT

TAG = f"imagebuild-test/engines:gfx942-{CHECKOUT}"  # per checkout: several share the main engine


def start_build(engine: MatrixEngine, pins: Path, where: Path) -> subprocess.Popen[bytes]:
    """`imagebuild build` against ``engine`` in a process of its own, so the engines build side by side."""
    record, iidfile, log = (where / f"{engine.name}.{kind}" for kind in ("build.json", "iid", "log"))
    argv = [sys.executable, "-m", "imagebuild", "build", "--pins", str(pins), "--network", "host", "--tag", TAG]
    env = {**os.environ, "DOCKER_HOST": engine.docker_host}
    with log.open("wb") as out:
        return subprocess.Popen(
            [*argv, "--record", str(record), "--iidfile", str(iidfile)], cwd=REPO, env=env, stdout=out, stderr=out
        )


def finish_build(engine: MatrixEngine, build: subprocess.Popen[bytes], where: Path) -> dict[str, object]:
    code = build.wait(timeout=1800)
    log = (where / f"{engine.name}.log").read_text(errors="replace")
    assert code == 0, f"build on {engine.name} exited {code}:\n{log[-3000:]}"
    result: dict[str, object] = json.loads((where / f"{engine.name}.build.json").read_text())
    # --iidfile holds the identity, not the engine's ID
    assert (where / f"{engine.name}.iid").read_text() == result["image_id"]
    return result


def session_uses(request: pytest.FixtureRequest, fixture: str) -> bool:
    """Whether a test the session runs asks for ``fixture``."""
    return any(fixture in item.fixturenames for item in request.session.items)


class MatrixBuilds:
    """The builds on every engine of the matrix but the main one, started at once."""

    def __init__(self, engines: list[MatrixEngine], pins: Path, where: Path) -> None:
        self._where = where
        self._running = [(engine, start_build(engine, pins, where)) for engine in engines if engine.name != "main"]
        self._records: dict[str, dict[str, object]] | None = None

    def wait(self) -> None:
        """Until every build has ended, however it ended (its test reports a failure)."""
        for _, build in self._running:
            build.wait(timeout=1800)

    def records(self) -> dict[str, dict[str, object]]:
        """Each engine's build record, once every build has ended: an assertion names a build that failed."""
        if self._records is None:
            self._records = {engine.name: finish_build(engine, build, self._where) for engine, build in self._running}
        return self._records

    def stop(self) -> None:
        """Kill what still runs: the session ends (or failed) before a test collected them."""
        for _, build in self._running:
            if build.poll() is None:
                build.kill()
                build.wait()
