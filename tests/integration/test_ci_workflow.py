"""The GitHub workflow `imagebuild init --ci github` writes, its steps run as a script against the sample world.

The same commands in the same order with the same variables as GitHub would run them (tests.ci_steps
reads them out of the file), in a project `init --ci github` wrote holding the sample world's locked
pins. Two things differ, each set through the workflow's own variables or PATH, not by editing a step:
the build network is host (the sample world is on loopback) and PUBLISH_REPOSITORY is the sample
registry. The install step is skipped: `imagebuild` on PATH is this checkout's. The image is the
session's `sample_image`, so the build is cached (no cold build) and its last step, the checkout's
labels, is the only one built again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.scaffold.ci import CI_FILES
from sampleworld.world import World
from tests import REPO
from tests.ci_steps import github_script

pytestmark = pytest.mark.docker

STEP_TIMEOUT_S = 1800


def test_the_github_workflows_steps_lock_build_verify_and_publish(
    sample_image: dict[str, object], locked_pins: Path, world: World, tmp_path: Path
) -> None:
    # Per checkout, as the session image's tag is (checkouts share one engine).
    checkout = str(sample_image["tag"]).rsplit("-", 1)[-1]
    project = tmp_path / "team-image"
    assert main(["init", str(project), "--ci", "github"]) == 0
    for name in ("pins.toml", "pylock.toml", "apt.lock.toml"):
        shutil.copy(locked_pins.with_name(name), project / name)
    script = github_script(project / CI_FILES["github"], "image")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "imagebuild").write_text(f'#!/bin/sh\nexec {sys.executable} -m imagebuild "$@"\n')
    (shim / "imagebuild").chmod(0o755)
    env = {
        **os.environ,
        **script.env,
        "IMAGE_TAG": f"imagebuild-test/ci:gfx942-{checkout}",
        "BUILD_NETWORK": "host",
        "PUBLISH_REPOSITORY": f"{world.registry}/imagebuild-test/ci-{checkout}",
        "BASE_CACHE": str(tmp_path / "cache"),
        "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
    }
    assert not [k for k, v in env.items() if "${{" in v], "a GitHub expression left in the env"
    result = subprocess.run(
        ["bash", "-c", script.bash(skip=frozenset({"install imagebuild"}))],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    # Every step ran, in the workflow's order.
    ran = re.findall(r"^== (.+)$", result.stdout, re.MULTILINE)
    assert ran == [s.name for s in script.steps if s.name != "install imagebuild"]
    # verify wrote the JUnit the report step publishes, with every check passed.
    suite = ET.parse(project / "verify.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite is not None
    assert int(suite.get("tests", "0")) > 0
    assert suite.get("failures") == "0"
    assert suite.get("errors") == "0"
    # The build was the session image's, cached up to the checkout's labels.
    steps = json.loads((project / "build" / "gfx942.build.json").read_text())["steps"]
    assert sum(step["cached"] for step in steps) >= len(steps) - 1
    # publish printed the reference nodes pull by digest.
    assert re.search(
        rf"^{re.escape(env['PUBLISH_REPOSITORY'])}@sha256:[0-9a-f]{{64}}$", result.stdout, re.MULTILINE
    )
    # The cache: the pinned base image saved, and the load step loads it back.
    cached = tmp_path / "cache" / "base.tar"
    assert cached.stat().st_size > 0
    (load,) = [s for s in script.steps if s.name == "load the cached base image"]
    loaded = subprocess.run(
        ["bash", "-ec", load.command], env=env, capture_output=True, text=True, check=False
    )
    assert loaded.returncode == 0, loaded.stderr
    assert "Loaded image" in loaded.stdout
